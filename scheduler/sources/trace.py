"""Alibaba ``cluster-trace-gpu-v2023`` (the FGD / "openb" trace): loader, inflation, snapshot conversion.

The trace is a node list (``openb_node_list_*.csv``) and several pod lists (``openb_pod_list_<variant>.csv``),
see ``anchors-performance.md`` §1. Where the CSVs live:

1. the ``trace_dir`` argument, else
2. the ``KAIDASH_TRACE_DIR`` environment variable, else
3. ``../shared/data/alibaba-gpu-v2023/csv`` next to the repository (CI clones the repo beside ``shared/``).

Bad files raise :class:`scheduler.errors.SourceError` naming the file, and the row and column where known.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from scheduler.errors import SourceError

TRACE_DIR_ENV = "KAIDASH_TRACE_DIR"
NODE_LIST_DEFAULT = "gpu_node"
"""``openb_node_list_gpu_node.csv``: the 1,213-node GPU cluster of the FGD paper."""

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_COLUMNS_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")

MILLI = 1000

GPU_MEMORY_MIB = {
    # Per-device memory by GPU model. Public models: vendor specs; G1/G2/G3 are Alibaba-internal codes with
    # the sizes the FGD simulator assumes for them.
    "P4": 7611, "T4": 15109, "V100M16": 16160, "P100": 16280, "A10": 22731, "V100M32": 32510,
    "A100": 81251, "G1": 10000, "G2": 20000, "G3": 30000,
}


def default_trace_dir() -> Path:
    """The directory the trace is read from when none is given (env var, else ``../shared/...``)."""
    env = os.environ.get(TRACE_DIR_ENV)
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    return repo.parent / "shared" / "data" / "alibaba-gpu-v2023" / "csv"


def _dir(trace_dir) -> Path:
    d = Path(trace_dir) if trace_dir is not None else default_trace_dir()
    if not d.is_dir():
        raise SourceError(f"trace directory {d} does not exist (set {TRACE_DIR_ENV} or pass trace_dir)")
    return d


def list_pod_variants(trace_dir=None) -> list[str]:
    """Names of the pod-list variants present, e.g. ``["cpu050", ..., "default", "gpushare40", ...]``."""
    d = _dir(trace_dir)
    return sorted(p.name[len("openb_pod_list_"):-len(".csv")] for p in d.glob("openb_pod_list_*.csv"))


def list_node_lists(trace_dir=None) -> list[str]:
    """Names of the node lists present, e.g. ``["all_node", "gpu_node"]``."""
    d = _dir(trace_dir)
    return sorted(p.name[len("openb_node_list_"):-len(".csv")] for p in d.glob("openb_node_list_*.csv"))


def _read_csv(path: Path, required: tuple[str, ...], dtypes: dict) -> pd.DataFrame:
    if not path.is_file():
        raise SourceError(f"{path}: file not found")
    try:
        df = pd.read_csv(path, dtype={c: "string" for c in ("name", "sn", "model", "gpu_spec", "qos", "pod_phase")})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot parse CSV: {exc}") from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)} (have: {', '.join(map(str, df.columns))})")
    for col, kind in dtypes.items():
        if col not in df.columns:
            continue
        num = pd.to_numeric(df[col], errors="coerce")
        # Integer columns must be filled; float columns (times) may be empty but not text.
        bad = num.isna() if kind == "int" else (num.isna() & df[col].notna())
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise SourceError(f"{path}: row {row + 2} column {col}: not a number: {df[col].iloc[row]!r}")
        if kind == "int":
            if (num < 0).any():
                row = int(np.flatnonzero((num < 0).to_numpy())[0])
                raise SourceError(f"{path}: row {row + 2} column {col}: negative value {num.iloc[row]}")
            if (num != np.floor(num)).any():
                row = int(np.flatnonzero((num != np.floor(num)).to_numpy())[0])
                raise SourceError(f"{path}: row {row + 2} column {col}: not an integer: {num.iloc[row]}")
            df[col] = num.astype(np.int64)
        else:
            df[col] = num.astype(float)
    return df


def load_nodes(which: str = NODE_LIST_DEFAULT, trace_dir=None) -> pd.DataFrame:
    """The node list ``openb_node_list_<which>.csv``: columns ``sn, cpu_milli, memory_mib, gpu, model``.

    ``model`` is ``""`` for CPU-only nodes. Raises :class:`SourceError` on a missing or malformed file.
    """
    path = _dir(trace_dir) / f"openb_node_list_{which}.csv"
    df = _read_csv(path, NODE_COLUMNS, {"cpu_milli": "int", "memory_mib": "int", "gpu": "int"})
    df["model"] = df["model"].fillna("").astype(str)
    if df["sn"].isna().any():
        row = int(np.flatnonzero(df["sn"].isna().to_numpy())[0])
        raise SourceError(f"{path}: row {row + 2} column sn: empty node name")
    if df["sn"].duplicated().any():
        row = int(np.flatnonzero(df["sn"].duplicated().to_numpy())[0])
        raise SourceError(f"{path}: row {row + 2} column sn: duplicate node name {df['sn'].iloc[row]!r}")
    no_model = (df["gpu"] > 0) & (df["model"] == "")
    if no_model.any():
        row = int(np.flatnonzero(no_model.to_numpy())[0])
        raise SourceError(f"{path}: row {row + 2} column model: GPU node without a GPU model")
    df["sn"] = df["sn"].astype(str)
    return df[list(NODE_COLUMNS)].reset_index(drop=True)


def load_pods(variant: str = "default", trace_dir=None) -> pd.DataFrame:
    """The pod list ``openb_pod_list_<variant>.csv``.

    Always has ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec`` (``gpu_spec`` ``""`` when the
    variant has none; ``|``-separated allowed models otherwise); other trace columns are kept when present.
    ``gpu_milli`` is the share of each of ``num_gpu`` GPUs (1000 = whole GPU). Raises :class:`SourceError`.
    """
    path = _dir(trace_dir) / f"openb_pod_list_{variant}.csv"
    df = _read_csv(path, POD_COLUMNS_REQUIRED,
                   {"cpu_milli": "int", "memory_mib": "int", "num_gpu": "int", "gpu_milli": "int",
                    "creation_time": "float", "deletion_time": "float", "scheduled_time": "float"})
    if "gpu_spec" not in df.columns:
        df["gpu_spec"] = ""
    df["gpu_spec"] = df["gpu_spec"].fillna("").astype(str)
    df["name"] = df["name"].astype(str)
    checks = [
        ("gpu_milli", df["gpu_milli"] > MILLI, "gpu_milli above 1000"),
        ("gpu_milli", (df["num_gpu"] > 0) & (df["gpu_milli"] == 0), "GPU pod with gpu_milli 0"),
        ("gpu_milli", (df["num_gpu"] > 1) & (df["gpu_milli"] < MILLI), "fraction of several GPUs"),
        ("name", df["name"].duplicated(), "duplicate pod name"),
    ]
    for col, bad, what in checks:
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise SourceError(f"{path}: row {row + 2} column {col}: {what} ({df[col].iloc[row]!r})")
    # Pods asking for no GPU carry gpu_milli 0 in the trace; normalise any stray value.
    df.loc[df["num_gpu"] == 0, "gpu_milli"] = 0
    return df.reset_index(drop=True)


def gpu_milli_total(pods: pd.DataFrame) -> int:
    """Total GPU requested by ``pods`` in milli-GPU (Σ num_gpu × gpu_milli)."""
    return int((pods["num_gpu"].to_numpy(np.int64) * pods["gpu_milli"].to_numpy(np.int64)).sum())


def inflate(pods: pd.DataFrame, capacity_milli: int, ratio: float = 1.3, seed: int = 42,
            shuffle: bool = True) -> pd.DataFrame:
    """FGD's workload "tuning" (anchors §2.1): the arrival sequence of one replay.

    1. The trace pods are sorted by name and, if ``shuffle``, shuffled with ``seed``.
    2. If their total GPU request is below ``ratio × capacity_milli``, pods drawn uniformly *with replacement*
       from the trace (sorted by name) are appended, named ``<name>-tuned-<i>``, until the next draw would
       pass the target; if above, random pods are removed until it no longer exceeds the target.

    The same ``seed`` gives the same sequence. Returns a new frame with a fresh index and an ``origin``
    column (index of the source row in ``pods``).
    """
    rng = np.random.default_rng(seed)
    base = pods.sort_values("name", kind="stable").reset_index().rename(columns={"index": "origin"})
    if shuffle:
        base = base.iloc[rng.permutation(len(base))].reset_index(drop=True)
    target = ratio * capacity_milli
    demand = (base["num_gpu"].to_numpy(np.int64) * base["gpu_milli"].to_numpy(np.int64))
    total = int(demand.sum())
    if total > target:
        keep = np.ones(len(base), bool)
        while total > target:
            alive = np.flatnonzero(keep)
            i = alive[rng.integers(len(alive))]
            keep[i] = False
            total -= int(demand[i])
        return base[keep].reset_index(drop=True)
    sorted_pods = pods.sort_values("name", kind="stable").reset_index().rename(columns={"index": "origin"})
    sdemand = (sorted_pods["num_gpu"].to_numpy(np.int64) * sorted_pods["gpu_milli"].to_numpy(np.int64))
    picks: list[int] = []
    # Draw in blocks (vectorised) and stop at the first pod that would pass the target, as FGD does.
    while True:
        block = rng.integers(len(sorted_pods), size=1024)
        cum = total + np.cumsum(sdemand[block])
        over = np.flatnonzero(cum > target)
        if over.size:
            picks.extend(block[: over[0]].tolist())
            break
        picks.extend(block.tolist())
        total = int(cum[-1])
    extra = sorted_pods.iloc[picks].copy()
    extra["name"] = [f"{n}-tuned-{i}" for i, n in enumerate(extra["name"])]
    return pd.concat([base, extra], ignore_index=True)


def cluster_gpu_milli(nodes: pd.DataFrame) -> int:
    """GPU capacity of ``nodes`` in milli-GPU."""
    return int(nodes["gpu"].sum()) * MILLI


def iter_arrivals(pods: pd.DataFrame) -> Iterator[tuple[int, dict]]:
    """Arrival sequence for the simulator: ``(position, pod row as dict)`` in replay order.

    FGD-protocol replays have no departures and no times: each pod arrives after the previous one.
    """
    for i, row in enumerate(pods.to_dict("records")):
        yield i, row


def trace_to_snapshot(nodes: pd.DataFrame, pods: Optional[pd.DataFrame] = None, n_pods: Optional[int] = None,
                      queue: str = "trace", status: str = "pending"):
    """A kaidash :class:`~scheduler.model.Snapshot` from a node list and (a prefix of) a pod list.

    Nodes keep their trace name, GPU count and model; ``gpu_memory_mib`` comes from the model
    (:data:`GPU_MEMORY_MIB`), memory is converted MiB → bytes. Each pod becomes a single-task job in
    ``queue`` asking ``num_gpu × gpu_milli / 1000`` GPUs (a fraction when ``gpu_milli < 1000``), with
    ``creation_time`` = its position so that arrival order is kept. GPU-type constraints (``gpu_spec``) are
    not carried: the snapshot format has no per-task node selector.
    """
    from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task

    snap_nodes = []
    for r in nodes.itertuples(index=False):
        model = r.model or None
        snap_nodes.append(Node(name=str(r.sn), gpus=int(r.gpu), gpu_model=model,
                               gpu_memory_mib=float(GPU_MEMORY_MIB.get(model, 0)) if model else 0.0,
                               cpu_millis=float(r.cpu_milli), memory_bytes=float(r.memory_mib) * 2**20,
                               pods=1001))
    jobs = []
    if pods is not None:
        sel = pods if n_pods is None else pods.iloc[:n_pods]
        for i, r in enumerate(sel.itertuples(index=False)):
            gpu = int(r.num_gpu) * int(r.gpu_milli) / MILLI
            task = Task(name=f"{r.name}-0", gpu=gpu, cpu_millis=float(r.cpu_milli),
                        memory_bytes=float(r.memory_mib) * 2**20, status=status)
            jobs.append(Job(name=str(r.name), queue=queue, creation_time=float(i), tasks=[task]))
    queues = [Queue(name=queue, gpu=QueueResource(quota=-1), cpu=QueueResource(quota=-1),
                    memory=QueueResource(quota=-1))]
    return Snapshot(nodes=snap_nodes, queues=queues, jobs=jobs)
