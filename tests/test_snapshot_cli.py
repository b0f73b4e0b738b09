"""``kaidash snapshot import | capture | validate | generate`` end to end (capture against the local fake API)."""

import pytest

from kai_objects import kai_snapshot_doc, kai_zip_bytes, pod, small_cluster
from kube_fake_server import FakeKubeServer
from scheduler.cli import main
from scheduler.snapshot_io import load_snapshot


@pytest.fixture
def kai_zip(tmp_path):
    objs = small_cluster()
    objs["pods"].append(pod("bad-0", "vision", queue="vision", annotations={"gpu-fraction": "banana"}))
    path = tmp_path / "kai.zip"
    path.write_bytes(kai_zip_bytes(kai_snapshot_doc(objs)))
    return path


def test_import_writes_our_format_and_lists_warnings(kai_zip, tmp_path, capsys):
    out = tmp_path / "cluster.yaml"
    assert main(["snapshot", "import", str(kai_zip), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "4 nodes, 4 queues, 4 jobs (1 warning)" in captured.out
    assert "warning: Pod vision/bad-0 field metadata.annotations.gpu-fraction" in captured.err
    snap = load_snapshot(out)
    assert len(snap.jobs) == 4 and snap.config.max_consolidation_preemptees == 16


def test_import_to_stdout_as_yaml(kai_zip, capsys):
    assert main(["snapshot", "import", str(kai_zip), "-o", "-"]) == 0
    # an import carries v1.1 fields (pod UIDs, tolerations, the ConfigMaps that exist) and, for its pods without a
    # PriorityClass, the 1.2 field priority_class: "" (KAI's scheduling signature hashes the class name)
    out = capsys.readouterr().out
    assert out.startswith("version: 1.2\n") and "priority_class: ''" in out


def test_validate_ok_and_problems(tmp_path, capsys, kai_zip):
    good = tmp_path / "good.yaml"
    good.write_text("nodes: [{name: n1, gpus: 1, gpu_memory_mib: 81920, cpu_millis: 1000, memory_bytes: 1Gi}]\n"
                    "queues: [{name: q}]\n"
                    "jobs: [{name: j, queue: q, tasks: [{name: t, gpu: 1}]}]\n")
    assert main(["snapshot", "validate", str(good)]) == 0
    assert capsys.readouterr().out.strip() == "ok: 1 nodes, 1 queues, 1 jobs"
    bad = tmp_path / "bad.yaml"
    bad.write_text("queues: [{name: q}]\njobs: [{name: j, queue: nope, tasks: [{name: t, gpu: -1}]}]\n")
    assert main(["snapshot", "validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "jobs[j].tasks[t].gpu" in err and "jobs[j].queue" in err
    assert main(["snapshot", "validate", str(kai_zip)]) == 0
    assert "ok: 4 nodes, 4 queues, 4 jobs (1 object skipped or adjusted" in capsys.readouterr().out


def test_truncated_zip_is_a_clear_cli_error(tmp_path, capsys):
    path = tmp_path / "cut.zip"
    path.write_bytes(kai_zip_bytes(kai_snapshot_doc(small_cluster()))[:200])
    assert main(["snapshot", "import", str(path), "-o", str(tmp_path / "x.yaml")]) == 1
    assert "truncated" in capsys.readouterr().err


def test_generate_is_reproducible(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["snapshot", "generate", "--seed", "1", "--nodes", "16", "-o", str(a)]) == 0
    assert main(["snapshot", "generate", "--seed", "1", "--nodes", "16", "-o", str(b)]) == 0
    assert a.read_text() == b.read_text()
    assert len(load_snapshot(a).nodes) == 16


def test_capture_from_kubeconfig_context(tmp_path, capsys):
    with FakeKubeServer() as server:
        server.load(small_cluster())
        server.fail("podgroups", 403)
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", context="lab")
        out = tmp_path / "cluster.yaml"
        code = main(["snapshot", "capture", "--kubeconfig", str(kubeconfig), "--context", "lab", "-o", str(out)])
        assert code == 0
        captured = capsys.readouterr()
        assert "forbidden: cannot list podgroups.scheduling.run.ai" in captured.err
        assert len(load_snapshot(out).nodes) == 4
        assert server.methods() == {"GET"} and server.count("pods", watch=True) == 0


def test_capture_unknown_context_fails_clearly(tmp_path, capsys):
    with FakeKubeServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", context="lab")
        assert main(["snapshot", "capture", "--kubeconfig", str(kubeconfig), "--context", "prod", "-o", "-"]) == 1
    assert "context 'prod'" in capsys.readouterr().err
