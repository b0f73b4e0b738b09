"""Alibaba GPU trace loader: files, errors, FGD inflation protocol, snapshot conversion."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.errors import SourceError
from scheduler.sources import trace

NODES = """sn,cpu_milli,memory_mib,gpu,model
n-0,32000,131072,2,T4
n-1,64000,262144,8,G2
n-2,16000,65536,0,
"""

PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-0,4000,8192,1,500,,LS,Running,0,10,0
p-1,8000,16384,2,1000,T4|G2,BE,Running,1,20,1
p-2,2000,4096,0,0,,BE,Pending,2,,
p-3,6000,8192,1,1000,,LS,Running,3,30,3
"""


@pytest.fixture
def tdir(tmp_path):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_default.csv").write_text(PODS)
    (tmp_path / "openb_pod_list_multigpu20.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq-0,1000,1024,4,1000\n")
    return tmp_path


def test_lists_variants_and_loads(tdir):
    assert trace.list_pod_variants(tdir) == ["default", "multigpu20"]
    assert trace.list_node_lists(tdir) == ["gpu_node"]
    nodes = trace.load_nodes(trace_dir=tdir)
    assert list(nodes.columns) == ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
    assert nodes["model"].tolist() == ["T4", "G2", ""]
    pods = trace.load_pods("default", tdir)
    assert pods["gpu_spec"].tolist() == ["", "T4|G2", "", ""]
    assert trace.gpu_milli_total(pods) == 500 + 2000 + 1000
    short = trace.load_pods("multigpu20", tdir)        # 5-column schema gets an empty gpu_spec
    assert short["gpu_spec"].tolist() == [""]


def test_env_var_sets_default_dir(tdir, monkeypatch):
    monkeypatch.setenv(trace.TRACE_DIR_ENV, str(tdir))
    assert trace.default_trace_dir() == tdir
    assert len(trace.load_nodes()) == 3


def test_missing_dir_and_file(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        trace.load_nodes(trace_dir=tmp_path / "nope")
    with pytest.raises(SourceError, match=r"openb_pod_list_default\.csv: file not found"):
        trace.load_pods("default", tmp_path)


@pytest.mark.parametrize("text, match", [
    ("sn,cpu_milli,gpu,model\nn-0,1,1,T4\n", r"missing column\(s\) memory_mib"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn-0,lots,1,1,T4\n", r"row 2 column cpu_milli: not a number: 'lots'"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,1,T4\nn-1,1,1,-2,T4\n", r"row 3 column gpu: negative"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,2,\n", r"row 2 column model: GPU node without a GPU model"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,1,T4\nn-0,1,1,1,T4\n", r"row 3 column sn: duplicate"),
])
def test_malformed_node_list(tmp_path, text, match):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(text)
    with pytest.raises(SourceError, match=match) as err:
        trace.load_nodes(trace_dir=tmp_path)
    assert "openb_node_list_gpu_node.csv" in str(err.value)


@pytest.mark.parametrize("row, match", [
    ("p-9,1,1,1,1200", r"column gpu_milli: gpu_milli above 1000"),
    ("p-9,1,1,2,500", r"column gpu_milli: fraction of several GPUs"),
    ("p-9,1,1,1,0", r"column gpu_milli: GPU pod with gpu_milli 0"),
    ("p-9,1,1,1.5,1000", r"column num_gpu: not an integer"),
    ("p-9,1,,1,1000", r"column memory_mib: not a number"),
])
def test_malformed_pod_list(tmp_path, row, match):
    (tmp_path / "openb_pod_list_bad.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + row + "\n")
    with pytest.raises(SourceError, match=match) as err:
        trace.load_pods("bad", tmp_path)
    assert "openb_pod_list_bad.csv: row 2" in str(err.value)


def _pods(n=200, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.choice([0, 1, 1, 1, 2, 8], size=n)
    d = np.where(k == 1, rng.choice([250, 500, 1000], size=n), np.where(k > 1, 1000, 0))
    return pd.DataFrame({"name": [f"p-{i:04d}" for i in range(n)], "cpu_milli": 1000, "memory_mib": 1024,
                         "num_gpu": k, "gpu_milli": d, "gpu_spec": ""})


def test_inflate_reaches_target_without_passing_it():
    pods = _pods()
    cap = trace.gpu_milli_total(pods)            # trace asks 100% of capacity
    seq = trace.inflate(pods, cap, ratio=1.3, seed=42)
    total = trace.gpu_milli_total(seq)
    assert total <= 1.3 * cap
    assert total > 1.3 * cap - 8000              # stopped at the first draw that would pass the target
    # every trace pod appears once, in a shuffled order, followed by resampled clones
    assert sorted(seq["name"].iloc[: len(pods)]) == sorted(pods["name"])
    assert seq["name"].iloc[: len(pods)].tolist() != sorted(pods["name"])
    assert all("-tuned-" in n for n in seq["name"].iloc[len(pods):])
    assert seq["name"].is_unique


def test_inflate_is_deterministic_per_seed():
    pods = _pods()
    cap = trace.gpu_milli_total(pods)
    a, b = trace.inflate(pods, cap, seed=42), trace.inflate(pods, cap, seed=42)
    c = trace.inflate(pods, cap, seed=43)
    pd.testing.assert_frame_equal(a, b)
    assert a["name"].tolist() != c["name"].tolist()


def test_inflate_without_shuffle_keeps_name_order_and_tunes_down():
    pods = _pods().iloc[::-1]
    cap = trace.gpu_milli_total(pods)
    seq = trace.inflate(pods, cap, ratio=1.3, seed=1, shuffle=False)
    assert seq["name"].iloc[: len(pods)].tolist() == sorted(pods["name"])
    down = trace.inflate(pods, cap, ratio=0.5, seed=1)
    assert trace.gpu_milli_total(down) <= 0.5 * cap
    assert len(down) < len(pods)


def test_trace_to_snapshot(tdir):
    nodes, pods = trace.load_nodes(trace_dir=tdir), trace.load_pods("default", tdir)
    snap = trace.trace_to_snapshot(nodes, pods, n_pods=3)
    t4 = snap.node_map()["n-0"]
    assert (t4.gpus, t4.gpu_model, t4.gpu_memory_mib, t4.cpu_millis) == (2, "T4", 15109, 32000)
    assert t4.memory_bytes == 131072 * 2**20
    assert snap.node_map()["n-2"].gpu_model is None
    assert [j.name for j in snap.jobs] == ["p-0", "p-1", "p-2"]
    gpus = [j.tasks[0].gpu for j in snap.jobs]
    assert gpus == [0.5, 2.0, 0.0]
    assert snap.jobs[0].tasks[0].is_fractional and not snap.jobs[1].tasks[0].is_fractional


def test_real_trace_shape():
    try:
        nodes = trace.load_nodes()
        pods = trace.load_pods("default")
    except SourceError:
        pytest.skip("shared trace data not present")
    assert len(nodes) == 1213 and nodes["gpu"].sum() == 6212
    assert len(pods) == 8152 and trace.gpu_milli_total(pods) == 6_086_800
    assert "gpushare40" in trace.list_pod_variants()
