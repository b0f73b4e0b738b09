"""Kubernetes → snapshot conversion benchmark: initial conversion, a watch event, and snapshot validation.

    python -m bench.source_convert                       # 4,000 nodes, 140,000 KAI pods
    python -m bench.source_convert --nodes 500 --pods 17500 --repeat 5

The cluster is raw API JSON as a list/watch delivers it (seeded): nodes labelled by GPU feature discovery,
60 queues under 10 departments, KAI's priority classes, one PodGroup per job (most jobs one pod, some 4-pod
gangs), running pods on nodes (whole GPUs, and gpu-fraction pods sharing a GPU with their reservation pod),
pending pods, in-flight BindRequests, and a daemonset pod of another scheduler on every node.

Stages (medians of ``--repeat``, process CPU and wall ms):

- ``convert (one-shot)``: :func:`scheduler.sources.k8s_convert.convert` on the whole cluster (what
  ``kaidash snapshot capture`` and a fresh :class:`KubeSource` do first).
- ``incremental: initial``: a new :class:`~scheduler.sources.k8s_convert.IncrementalConverter` over the same
  objects (the live source's first snapshot).
- ``incremental: pod event`` / ``node event`` / ``podgroup event``: one object replaced by a new version
  (a watch MODIFIED event), then the next snapshot, with per-resource change counters as
  :class:`~scheduler.sources.kube.KubeSource` passes them (the copy of the changed cache is not timed).
- ``validate (round trip)`` / ``validate (direct)``: :func:`scheduler.snapshot_io.validate_roundtrip` and
  :func:`scheduler.snapshot_io.validate` on the converted snapshot.
"""

from __future__ import annotations

import argparse
import copy
import gc
import random
import statistics
import time

T0 = "2026-01-01T00:00:00Z"


class _Versions:
    def __init__(self) -> None:
        self.n = 1000

    def next(self) -> str:
        self.n += 1
        return str(self.n)


def _meta(rv: _Versions, name: str, namespace=None, labels=None, annotations=None) -> dict:
    meta = {"name": name, "uid": f"uid-{namespace}-{name}", "resourceVersion": rv.next(), "creationTimestamp": T0}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return meta


def make_cluster(nodes: int = 4000, pods: int = 140_000, seed: int = 7) -> dict[str, dict[str, dict]]:
    """``{resource: {namespace/name: object}}`` as a watch cache holds it."""
    rng = random.Random(seed)
    rv = _Versions()
    out: dict[str, dict[str, dict]] = {r: {} for r in ("nodes", "pods", "priorityclasses", "queues", "podgroups",
                                                       "bindrequests")}
    for name, value in (("train", 50), ("build-preemptible", 75), ("build", 100), ("inference", 125)):
        out["priorityclasses"][f"/{name}"] = {"metadata": _meta(rv, name), "value": value}
    leaves = []
    for d in range(10):
        out["queues"][f"/dept-{d}"] = {"metadata": _meta(rv, f"dept-{d}"), "spec": {"resources": {
            "gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}}}
        for t in range(5):
            name = f"dept-{d}-team-{t}"
            leaves.append(name)
            out["queues"][f"/{name}"] = {"metadata": _meta(rv, name), "spec": {"parentQueue": f"dept-{d}", "resources": {
                "gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1 + t % 3},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}
    node_names = [f"node-{i:05d}" for i in range(nodes)]
    for name in node_names:
        labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "feature.node.kubernetes.io/x": "y"}
        out["nodes"][f"/{name}"] = {"metadata": _meta(rv, name, labels=labels), "status": {
            "allocatable": {"cpu": "191500m", "memory": "2113158772Ki", "pods": "250", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]}}
        ds = f"node-exporter-{name}"
        out["pods"][f"monitoring/{ds}"] = {
            "metadata": _meta(rv, ds, "monitoring", labels={"app": "node-exporter"}),
            "spec": {"schedulerName": "default-scheduler", "nodeName": name, "containers": [
                {"name": "x", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
            "status": {"phase": "Running"}}

    def add_pod(ns, name, queue, group, node=None, gpu=1, fraction=None, gpu_group=None, cpu="4", memory="32Gi"):
        labels = {"app": "train", "kai.scheduler/queue": queue}
        ann = {"pod-group-name": group}
        requests = {"cpu": cpu, "memory": memory}
        if fraction:
            ann["gpu-fraction"] = fraction
            if gpu_group:
                labels["runai-gpu-group"] = gpu_group
        elif gpu:
            requests["nvidia.com/gpu"] = str(gpu)
        spec = {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "resources": {"requests": requests}}]}
        if node:
            spec["nodeName"] = node
        out["pods"][f"{ns}/{name}"] = {"metadata": _meta(rv, name, ns, labels=labels, annotations=ann), "spec": spec,
                                       "status": {"phase": "Running" if node else "Pending"}}

    def add_group(ns, name, queue, members, pc="train"):
        out["podgroups"][f"{ns}/{name}"] = {"metadata": _meta(rv, name, ns), "spec": {
            "queue": queue, "minMember": members, "priorityClassName": pc}}

    k = 0
    running = int(pods * 0.93)
    per_node = max(1, running // max(nodes, 1))
    for n, node in enumerate(node_names):
        whole = 6
        for g in range(whole):
            if k >= running:
                break
            ns, queue = f"ns-{k % 50}", leaves[k % len(leaves)]
            add_group(ns, f"job-{k}", queue, 1)
            add_pod(ns, f"job-{k}-0", queue, f"job-{k}", node=node, gpu=1, cpu="1", memory="8Gi")
            k += 1
        group = f"{node}-shared"
        res = f"gpu-reservation-{node}"
        out["pods"][f"kai-resource-reservation/{res}"] = {
            "metadata": _meta(rv, res, "kai-resource-reservation", labels={
                "app": "kai-resource-reservation", "runai-gpu-group": group},
                annotations={"run.ai/reserve_for_gpu_index": "6"}),
            "spec": {"nodeName": node, "containers": [{"name": "r", "resources": {"requests": {"cpu": "2m"}}}]},
            "status": {"phase": "Running"}}
        for f in range(2):
            ns, queue = f"ns-{k % 50}", leaves[k % len(leaves)]
            add_group(ns, f"job-{k}", queue, 1, "inference")
            add_pod(ns, f"job-{k}-0", queue, f"job-{k}", node=node, fraction="0.5", gpu_group=group, cpu="1",
                    memory="8Gi")
            k += 1
        for c in range(per_node - whole - 2):  # CPU pods
            if k >= running:
                break
            ns, queue = f"ns-{k % 50}", leaves[k % len(leaves)]
            add_group(ns, f"job-{k}", queue, 1)
            add_pod(ns, f"job-{k}-0", queue, f"job-{k}", node=node, gpu=0, cpu="500m", memory="2Gi")
            k += 1
    j = 0
    while k < pods:
        ns, queue = f"ns-{j % 50}", leaves[j % len(leaves)]
        size = 4 if rng.random() < 0.1 else 1
        add_group(ns, f"pend-{j}", queue, size)
        for i in range(size):
            add_pod(ns, f"pend-{j}-{i}", queue, f"pend-{j}", gpu=1)
            k += 1
        j += 1
    for b in range(50):  # in-flight binds of pending pods
        ns, pod = f"ns-{b % 50}", f"pend-{b}-0"
        if f"{ns}/{pod}" in out["pods"]:
            out["bindrequests"][f"{ns}/{pod}-bind"] = {
                "metadata": _meta(rv, f"{pod}-bind", ns),
                "spec": {"podName": pod, "selectedNode": node_names[b % nodes]}, "status": {"phase": "Pending"}}
    return out


def _measure(fn, repeat: int):
    cpus, walls, result = [], [], None
    for _ in range(repeat):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        cpus.append((time.process_time() - c0) * 1e3)
        walls.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(cpus), statistics.median(walls), result


def _modified(obj: dict, rv: int, change) -> dict:
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = str(rv)
    change(new)
    return new


def main(argv=None) -> None:
    from scheduler import snapshot_io
    from scheduler.sources import k8s_convert as kc

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--pods", type=int, default=140_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-one-shot", action="store_true", help="skip the slow one-shot/round-trip stages")
    args = parser.parse_args(argv)
    cache = make_cluster(args.nodes, args.pods)
    raw = kc.RawObjects(**{r: list(objs.values()) for r, objs in cache.items()})
    print(f"{args.nodes} nodes, {len(cache['pods'])} pod objects, {len(cache['podgroups'])} podgroups; "
          f"median of {args.repeat} (cpu / wall ms)")

    def row(name, cpu, wall):
        print(f"  {name:<34} {cpu:9.1f} cpu {wall:9.1f} wall")

    conv = None
    if not args.skip_one_shot:
        cpu, wall, conv = _measure(lambda: kc.convert(raw), args.repeat)
        row("convert (one-shot)", cpu, wall)
    incremental = getattr(kc, "IncrementalConverter", None)
    if incremental is not None:
        cpu, wall, conv = _measure(lambda: incremental().convert(cache), args.repeat)
        row("incremental: initial", cpu, wall)
        conv_state = incremental()
        versions = {r: 0 for r in cache}  # change counters, as the live source's watchers keep them
        conv = conv_state.convert(cache, versions=versions)
        rv = 10**7
        pod_keys = [k for k in cache["pods"] if k.startswith("ns-")]
        node_keys = list(cache["nodes"])
        pg_keys = list(cache["podgroups"])
        for name, resource, keys, change in (
                ("incremental: pod event", "pods", pod_keys,
                 lambda o: o["metadata"].setdefault("labels", {}).update(touched="1")),
                ("incremental: node event", "nodes", node_keys,
                 lambda o: o["metadata"]["labels"].update({"nvidia.com/gpu.count": "8"})),
                ("incremental: podgroup event", "podgroups", pg_keys,
                 lambda o: o["spec"].update(minMember=1))):
            samples = []
            for i in range(args.repeat):
                key = keys[(i * 7919) % len(keys)]
                rv += 1
                cache[resource] = dict(cache[resource])  # the source hands over a copy of the changed cache
                cache[resource][key] = _modified(cache[resource][key], rv, change)
                versions[resource] += 1
                samples.append(_measure(lambda: conv_state.convert(cache, versions=versions), 1)[:2])
            row(name, statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))
        conv = conv_state.convert(cache, versions=versions)
    snap = (conv or kc.convert(raw)).snapshot
    if not args.skip_one_shot and hasattr(snapshot_io, "validate_roundtrip"):
        cpu, wall, _ = _measure(lambda: snapshot_io.validate_roundtrip(snap), args.repeat)
        row("validate (round trip)", cpu, wall)
    cpu, wall, _ = _measure(lambda: snapshot_io.validate(snap), args.repeat)
    row("validate" + (" (direct)" if hasattr(snapshot_io, "validate_roundtrip") else ""), cpu, wall)


if __name__ == "__main__":
    main()
