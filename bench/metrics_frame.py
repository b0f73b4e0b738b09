"""GPU-metrics benchmark: simulated exporter exposition and the per-GPU frame on a large cluster.

    python -m bench.metrics_frame                   # 4,000 nodes x 8 GPUs
    python -m bench.metrics_frame --nodes 500 --repeat 5
    python -m bench.metrics_frame --observed        # as the kube source sees it: whole-GPU pods without devices
    python -m bench.metrics_frame --mig 4           # every 4th node MIG-sliced: per-instance series

The cluster: every node's GPUs 0-5 held whole by 1-GPU pods, GPU 6 shared by three fractional pods
(0.5 + 0.25 + 0.25), GPU 7 free; every pod has usage. Stages: ``update`` (``ExporterState.update``, the
exporter's whole tick: values and exposition text; wall and process CPU time), ``simulate`` (``simulate_gpus``: a SimGpu per GPU),
``render`` (exposition text from those), ``samples`` (a Prometheus instant-vector built from the text -> samples, what the reader
does with a query result), ``frame`` (build_gpu_frame). Medians over ``--repeat`` runs. With ``--observed`` the
frame is built on a copy whose whole-GPU pods carry no device index (Kubernetes never says which GPU they
hold), so every one is joined to its devices through dcgm-exporter's pod labels. With ``--mig N`` every N-th node
is an A100 sliced into 7 ``1g.10gb`` instances (cells 0-6, one pod each) and one whole GPU (cell 7, free): its
series are per MIG instance (``GPU_I_PROFILE``/``GPU_I_ID``), as dcgm-exporter prints them.
"""

from __future__ import annotations

import argparse
import statistics
import time

from prometheus_client.parser import text_string_to_metric_families

from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import build_gpu_frame, samples_from_vector
from scheduler.metrics.exporter import ExporterState, render_exposition, simulate_gpus
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task, TaskUsage


def cluster(nodes: int) -> Snapshot:
    snap = Snapshot(queues=[Queue(name="q", gpu=QueueResource(quota=-1))])
    for n in range(nodes):
        name = f"node-{n:05d}"
        snap.nodes.append(Node(name=name, gpus=8, gpu_memory_mib=81920, gpu_model="H100", cpu_millis=192000,
                               memory_bytes=2**41))
        tasks = [Task(name=f"{name}-w{i}", gpu=1, status="running", node=name, gpu_indices=[i],
                      usage=TaskUsage(40000 + i, 0.5)) for i in range(6)]
        tasks += [Task(name=f"{name}-f{k}", gpu=share, status="running", node=name, gpu_groups=[f"{name}-g6"],
                       gpu_indices=[6], usage=TaskUsage(10000, 0.2)) for k, share in enumerate((0.5, 0.25, 0.25))]
        snap.jobs.append(Job(name=f"job-{name}", queue="q", tasks=tasks))
    return snap


def with_mig(snap: Snapshot, every: int) -> Snapshot:
    """Every ``every``-th node MIG-sliced (7 x 1g.10gb, one pod each, cell 7 free); ``every`` 0: unchanged."""
    if every <= 0:
        return snap
    jobs = {j.name: j for j in snap.jobs}
    for node in snap.nodes[::every]:
        node.mig = {"1g.10gb": 7}
        jobs[f"job-{node.name}"].tasks = [
            Task(name=f"{node.name}-m{i}", gpu=1, mig={"1g.10gb": 1}, status="running", node=node.name,
                 gpu_indices=[i], usage=TaskUsage(5000 + i, 0.3)) for i in range(7)]
    return snap


def observed(snap: Snapshot) -> Snapshot:
    """``snap`` as the kube source sees it: no device index on whole-GPU pods."""
    out = snap.copy()
    for _, t in out.iter_tasks():
        if not t.is_fractional:
            t.gpu_indices = []
    return out


def run(nodes: int, repeat: int, as_observed: bool = False, mig_every: int = 0) -> None:
    snap = with_mig(cluster(nodes), mig_every)
    seen = observed(snap) if as_observed else snap
    variant = V.EXPORTER_VARIANTS["classic"]
    detected = V.variant_for_exporter(variant)
    timings: dict[str, list[float]] = {"update": [], "update cpu": [], "simulate": [], "render": [], "samples": [],
                                       "frame": []}
    state = ExporterState(variant="classic")
    for _ in range(repeat):
        tu, cu = time.perf_counter(), time.process_time()
        state.update(snap)
        timings["update"].append(time.perf_counter() - tu)
        timings["update cpu"].append(time.process_time() - cu)
        t0 = time.perf_counter()
        gpus = simulate_gpus(snap)
        t1 = time.perf_counter()
        text = render_exposition(gpus, variant)
        t2 = time.perf_counter()
        vector = [{"metric": {"__name__": s.name, **s.labels}, "value": [0, repr(s.value)]}
                  for f in text_string_to_metric_families(text) for s in f.samples]
        t3 = time.perf_counter()
        samples = samples_from_vector(vector, detected)
        t4 = time.perf_counter()
        frame = build_gpu_frame(seen, samples)
        t5 = time.perf_counter()
        for key, dt in zip(("simulate", "render", "samples", "frame"), (t1 - t0, t2 - t1, t4 - t3, t5 - t4)):
            timings[key].append(dt)
    print(f"{nodes} nodes x 8 GPUs, {len(samples)} series, {len(frame)} frame rows, "
          f"{len(text) / 1e6:.1f} MB exposition (parse into a vector not timed)")
    for key, values in timings.items():
        print(f"  {key:9s} median {statistics.median(values) * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--observed", action="store_true", help="whole-GPU pods without device indices")
    parser.add_argument("--mig", type=int, default=0, metavar="N", help="every N-th node MIG-sliced")
    args = parser.parse_args()
    run(args.nodes, args.repeat, args.observed, args.mig)


if __name__ == "__main__":
    main()
