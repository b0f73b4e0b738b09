"""A CPU-only pod on a node whose whole-GPU count went negative.

KAI compares a regular pod's whole request vector with the node's, the GPU entry too: a CPU-only pod asks for
0 GPUs, and ``0 <= idle`` fails on a node whose idle GPUs KAI's own accounting drove to -1 (a gpu-memory pod
that opens a new shared GPU where no GPU was idle, as seen on h100-10 of kai_diff_gen seed 5070). KAI then
pipelines the pod onto the releasing GPU's share instead of binding it, and refuses the node where idle +
releasing is negative too (``node_info.go`` ``lessEqualTaskToNodeResources``; KAI at d5bc503 pipelines
team-b/job-053's three CPU-only pods on h100-10 in every run of seed 5070)."""

import time

import numpy as np

from scheduler.engine import run_session
from scheduler.fairshare import compute_fair_share
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task
from scheduler.session import Session
from scheduler.session.nodes import GPU


def _session() -> tuple[Session, int, int]:
    nodes = [Node(name="n1", gpus=8, gpu_memory_mib=81920, cpu_millis=192000, memory_bytes=2**41)]
    jobs = [Job(name="run", queue="a", creation_time=1, tasks=[
                Task("run-0", gpu=1, cpu_millis=8000, memory_bytes=2**34, status="running", node="n1",
                     gpu_indices=[0])]),
            Job(name="cpu", queue="a", creation_time=2, tasks=[Task("cpu-0", cpu_millis=500, memory_bytes=2**33)])]
    snap = Snapshot(nodes=nodes, queues=[Queue("a", creation_time=1, gpu=QueueResource(8, -1, 1))], jobs=jobs,
                    time=100)
    s = Session(snap, compute_fair_share(snap))
    return s, s.task_index["cpu-0"], 0


def _set_gpus(s: Session, n: int, idle: float, releasing: float) -> None:
    ns = s.nodes
    idle_arr, rel_arr = ns.idle, ns.rel   # read first: bulk edits need written arrays (NodeState.refresh)
    idle_arr[n, GPU] = idle
    rel_arr[n, GPU] = releasing
    ns.refresh()


def test_negative_idle_gpus_leave_a_cpu_only_pod_only_the_releasing_share():
    s, i, n = _session()
    fit = s.fit(i)
    assert fit.fits[n] and fit.idle_fit[n]            # the usual case: bound on idle resources
    _set_gpus(s, n, idle=-1.0, releasing=1.0)
    fit = s.fit(i)
    assert fit.fits[n] and not fit.idle_fit[n]        # KAI: 0 <= -1 fails on idle, 0 <= 0 holds with releasing
    fits, idle, _ = s._eval_node(i, n)
    assert (fits, idle) == (True, False)              # the per-node hot path agrees


def test_negative_free_gpus_refuse_a_cpu_only_pod():
    s, i, n = _session()
    _set_gpus(s, n, idle=-1.0, releasing=0.0)
    fit = s.fit(i)
    assert not fit.fits[n] and not fit.idle_fit[n]
    assert not fit.parts["GPU"][n]                    # the fit error names the GPUs
    assert s._eval_node(i, n)[:2] == (False, False)


def test_seed_5070_cpu_only_gang_is_pipelined_as_kai_does():
    from bench.kai_diff import DEFAULT_ACTIONS, write_zip
    from bench.kai_diff_gen import generate_document
    from scheduler.sources.kai_snapshot import import_kai_snapshot
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        z = Path(d) / "s5070.zip"
        write_zip(generate_document(5070, time.time(), DEFAULT_ACTIONS), z)
        snap = import_kai_snapshot(str(z)).snapshot
    result = run_session(snap)
    gang = {name: t for name, t in result.tasks.items() if name.startswith("team-b/job-053-")}
    assert len(gang) == 3
    assert {(t.status, t.node) for t in gang.values()} == {("pipelined", "h100-10")}
    # the gpu-memory pod placed before them drove h100-10's idle GPUs to -1, as in KAI's log
    sess = Session(result.snapshot, compute_fair_share(result.snapshot))
    assert float(np.asarray(sess.nodes.idle)[sess.nodes.index["h100-10"], GPU]) < 0


def test_the_fit_error_of_a_cpu_only_pod_refused_for_gpus_has_numbers():
    # held-out MIG seed 7032: a CPU-only pod refused by a node whose whole GPUs went to -1 made the why-pending
    # message read the pod's GPU memory (NaN: it asks for none) and the whole session failed
    s, i, n = _session()
    _set_gpus(s, n, idle=-1.0, releasing=0.0)
    message, details = s.fit_error(i)
    assert message == "0/1 nodes fit: 1 insufficient GPU (need 0, max free -1)"
    assert details["GPU_need"] == 0.0 and details["GPU_max_free"] == -1.0
