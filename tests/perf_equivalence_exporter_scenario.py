"""A fixed scenario for the simulated exporter's before/after equivalence test.

``tests/fixtures/perf_equivalence/exporter/*.txt`` were written by :func:`write_fixtures` with the per-GPU
Python exporter (commit 95ec3ba, before vectorisation) and must never be regenerated from the new code: they
are the "before" the vectorised exporter is compared with. The scenario covers every rule of the exporter:
whole-GPU holders (credited to themselves), shared GPUs (credited to KAI's reservation pod, group from the first
holder that has one, else the GPU's UUID), a fractional task placed by group only (device resolved through
another task), multi-device fractions, gpu-memory requests, two holders on one whole GPU, mixed whole and
fractional holders, tasks without usage, usage over capacity (capped), utilisation over 1 (capped), a node with
less memory than the reserve, a node without a GPU model, escaped label values, non-holding statuses
(pending, pipelined, failed, succeeded), a task on an unknown node, an out-of-range device index, a whole
multi-GPU task with fewer indices than devices, ``ns/pod`` task names, and per-GPU overrides (sentinels,
``None``, a key for a GPU that does not exist).

    python -m tests.perf_equivalence_exporter_scenario   # only ever run on the "before" code
"""

from __future__ import annotations

from pathlib import Path

from scheduler.metrics import variants as V
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task, TaskUsage

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "perf_equivalence" / "exporter"


def scenario() -> Snapshot:
    snap = Snapshot(queues=[Queue(name="q", gpu=QueueResource(quota=-1))])
    snap.nodes = [
        Node(name="h100-a", gpus=8, gpu_memory_mib=81920, gpu_model="H100 80GB HBM3", cpu_millis=192000),
        Node(name="l4-b", gpus=4, gpu_memory_mib=23000, gpu_model="L4", cpu_millis=64000),
        Node(name="tiny-c", gpus=2, gpu_memory_mib=400, gpu_model=None, cpu_millis=8000),
        Node(name="cpu-d", gpus=0, cpu_millis=64000),
        Node(name='odd"node\\e', gpus=3, gpu_memory_mib=40960, gpu_model='A100 "SXM"\nx', cpu_millis=8000),
        Node(name="t4-f", gpus=1, gpu_memory_mib=15360, gpu_model="Tesla T4", cpu_millis=8000),
    ]
    u = TaskUsage
    snap.jobs = [
        Job(name="train", queue="q", namespace="team-a", tasks=[
            Task(name="team-a/train-0", gpu=2, status="running", node="h100-a", gpu_indices=[0, 1],
                 usage=u(60000, 0.9)),
            Task(name="team-a/train-1", gpu=1, status="binding", node="h100-a", gpu_indices=[2]),
            Task(name="train-2", gpu=1, status="releasing", node="h100-a", gpu_indices=[3], usage=u(90000, 0.7)),
            Task(name="train-3", gpu=1, status="pipelined", node="h100-a", gpu_indices=[4], usage=u(1, 1)),
            Task(name="train-4", gpu=1, status="pending", usage=u(5, 0.5)),
            Task(name="train-5", gpu=2, status="running", node="h100-a", gpu_indices=[5], usage=u(100, 0.05)),
            Task(name="train-6", gpu=1, status="failed", node="h100-a", gpu_indices=[6], usage=u(7, 0.5)),
            Task(name="train-7", gpu=1, status="succeeded", node="h100-a", gpu_indices=[7], usage=u(7, 0.5)),
        ]),
        Job(name="double", queue="q", tasks=[  # two whole holders on one device: credited to the first
            Task(name="dbl-0", gpu=1, status="running", node="h100-a", gpu_indices=[7], usage=u(1000, 0.6)),
            Task(name="dbl-1", gpu=1, status="running", node="h100-a", gpu_indices=[7], usage=u(2000, 0.7)),
        ]),
        Job(name="serve", queue="q", namespace="inference", tasks=[
            Task(name="chat-0", gpu=0.5, status="running", node="l4-b", gpu_groups=["g1"], gpu_indices=[1],
                 usage=u(13000, 0.3)),
            Task(name="emb-0", gpu_memory_mib=8000, status="running", node="l4-b", gpu_groups=["g1"],
                 usage=u(7000, 0.2)),
            Task(name="multi-0", gpu=0.25, gpu_devices=2, status="running", node="l4-b",
                 gpu_groups=["g2", "g3"], gpu_indices=[2, 3], usage=u(2000, 0.1)),
            Task(name="nogroup-0", gpu=0.3, status="running", node="l4-b", gpu_indices=[0], usage=u(100, 0.9)),
            Task(name="grouped-late", gpu=0.3, status="binding", node="l4-b", gpu_groups=["g0"],
                 gpu_indices=[0], usage=u(200, 0.4)),
            Task(name="lost-0", gpu=0.2, status="running", node="l4-b", gpu_groups=["g-unknown"],
                 usage=u(5000, 0.5)),
            Task(name="ghost-0", gpu=0.5, status="running", node="no-such-node", gpu_groups=["gx"],
                 gpu_indices=[0], usage=u(1, 0.1)),
            Task(name="far-0", gpu=1, status="running", node="l4-b", gpu_indices=[9], usage=u(1, 0.1)),
        ]),
        Job(name="small", queue="q", tasks=[
            Task(name="tiny-0", gpu=1, status="running", node="tiny-c", gpu_indices=[0], usage=u(5000, 0.5)),
            Task(name="tiny-1", gpu=0.5, status="running", node="tiny-c", gpu_groups=["tg"], gpu_indices=[1],
                 usage=u(50, 0.8)),
            Task(name="tiny-2", gpu=1, status="running", node="tiny-c", gpu_groups=["tg"], gpu_indices=[1],
                 usage=u(60, 0.8)),
            Task(name="cpu-0", status="running", node="cpu-d", cpu_millis=1000, usage=u(0, 0)),
            Task(name="odd-0", gpu=3, status="running", node='odd"node\\e', gpu_indices=[0, 1, 2],
                 usage=u(12345.678, 0.333333)),
            Task(name='odd/"pod"\\x', gpu=0.5, status="running", node='odd"node\\e', gpu_groups=['G"1'],
                 gpu_indices=[2], usage=u(1.5, 0.125)),
            Task(name="t4-0", gpu_memory_mib=4000, gpu_devices=1, status="running", node="t4-f",
                 gpu_groups=["t"], gpu_indices=[0]),
        ]),
    ]
    return snap


def overrides() -> dict:
    return {
        ("h100-a", 0): {V.TEMP: V.NOT_SUPPORTED_INT64, V.POWER: V.BLANK_FP64},
        ("h100-a", 1): {V.XID: 43.0, V.DRAM_ACTIVE: None},
        ("l4-b", 1): {V.FB_USED: 1234.4, V.GPU_UTIL: 0.4567},
        ("l4-b", 3): {V.FB_TOTAL: None, V.TEMP: 2147483634.0},
        ("nope", 0): {V.TEMP: 99.0},
        ("t4-f", 0): {"custom_field": 1.0},
    }


def cases():
    """``(fixture name, (variant, per_pod, with overrides))`` for every rendering compared."""
    for variant in V.EXPORTER_VARIANTS:
        for per_pod in (False, True):
            for with_overrides in (False, True):
                name = f"{variant}-{'perpod' if per_pod else 'exclusive'}-{'ovr' if with_overrides else 'plain'}"
                yield name, (variant, per_pod, with_overrides)


def gpus_repr(gpus) -> str:
    """Every simulated GPU's dataclass repr, one a line (values, credited pod and sharers included)."""
    return "\n".join(repr(g) for g in gpus) + "\n"


def write_fixtures() -> None:
    from scheduler.metrics.exporter import render_exposition, simulate_gpus

    FIXTURES.mkdir(parents=True, exist_ok=True)
    snap = scenario()
    for name, (variant, per_pod, with_overrides) in cases():
        gpus = simulate_gpus(snap, overrides() if with_overrides else None)
        (FIXTURES / f"{name}.txt").write_text(render_exposition(gpus, variant, per_pod=per_pod))
    (FIXTURES / "gpus-plain.repr").write_text(gpus_repr(simulate_gpus(snap)))
    (FIXTURES / "gpus-ovr.repr").write_text(gpus_repr(simulate_gpus(snap, overrides())))


if __name__ == "__main__":
    write_fixtures()
