"""Which running jobs to release so that a waiting job's pods fit, on the nodes those pods can use.

The why-pending explainer (:mod:`scheduler.explain`) asks "which jobs of an over-fair-share queue would have to
go for this gang to start?". Releasing jobs in KAI's victim order frees GPUs wherever those jobs happen to run,
so the answer grew to a dozen jobs on nodes the gang cannot use or whose other GPUs stay taken. This module
proposes a small set aimed at the right nodes with a device-level model: every GPU device's used fraction, the
devices each candidate job holds, and the nodes each pending pod may use (Ready, schedulable, its node selector /
affinity, tolerated taints, enough GPUs and GPU memory). The proposal is a guess; the explainer only reports it
after an engine re-run showed the job start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .model import ALLOCATED_STATUSES, Job, Node, Snapshot, Task
from .session.predicates import matches_node, untolerated_taints

EPS = 1e-9
SINGLE_TRIES = 12
"""Single jobs (fewest GPUs first) tried as a one-job alternative to the greedy set."""

Holdings = dict[str, dict[int, float]]
"""One job's GPU use: ``{node: {device index: used fraction}}``."""


@dataclass
class PodDemand:
    """One pending pod's GPU need: ``devices`` devices with ``share`` of each free, on one of ``shares``' nodes
    (``{node: share}``: a ``gpu-memory`` request is a different fraction on nodes with different GPU memory)."""

    name: str
    devices: int
    shares: dict[str, float]

    def size(self) -> float:
        return self.devices * max(self.shares.values(), default=0.0)


def pod_demand(task: Task, nodes: list[Node]) -> Optional[PodDemand]:
    """The GPU need of a pending pod and the nodes it could use; None for a pod without GPUs."""
    if not task.is_gpu or task.is_dra:
        return None
    c = task.constraints
    devices = int(math.ceil(task.gpu)) if not task.is_fractional else max(1, task.gpu_devices)
    shares = {}
    for n in nodes:
        if not (n.ready and n.schedulable and n.gpus >= devices and matches_node(c, n) and not untolerated_taints(n, c)):
            continue
        if task.gpu_memory_mib is not None and task.gpu_memory_mib > n.gpu_memory_mib:
            continue
        shares[n.name] = task.device_share(n.gpu_memory_mib)
    return PodDemand(task.name, devices, shares)


def job_holdings(job: Job, nodes: dict[str, Node]) -> Holdings:
    """The devices ``job``'s allocated pods use (a pod with no recorded devices: its first devices)."""
    out: Holdings = {}
    for t in job.tasks:
        node = nodes.get(t.node or "")
        if node is None or t.status not in ALLOCATED_STATUSES or not t.is_gpu or not node.gpus:
            continue
        per = t.device_share(node.gpu_memory_mib)
        want = t.devices_held
        idx = [i for i in t.gpu_indices if 0 <= i < node.gpus][:want]
        idx += [i for i in range(node.gpus) if i not in idx][:want - len(idx)]
        devices = out.setdefault(node.name, {})
        for i in idx:
            devices[i] = devices.get(i, 0.0) + per
    return out


def _fitting(occ: list[float], share: float) -> int:
    return sum(1 for u in occ if u + share <= 1.0 + EPS)


def _without(occ: list[float], held: dict[int, float]) -> list[float]:
    out = list(occ)
    for i, used in held.items():
        out[i] = max(0.0, out[i] - used)
    return out


def _take(occ: list[float], devices: int, share: float) -> None:
    """Place a pod: whole devices on the free ones in order, a share on the fullest device it fits (bin-pack)."""
    fits = sorted((i for i, u in enumerate(occ) if u + share <= 1.0 + EPS), key=lambda i: (-occ[i], i))
    for i in fits[:devices]:
        occ[i] = min(1.0, occ[i] + share)


def targeted_release(snapshot: Snapshot, demands: list[PodDemand], candidates: list[Job]) -> Optional[list[Job]]:
    """A small set of ``candidates`` (running jobs one may release) whose release lets every pod of ``demands``
    fit by the device model of ``snapshot`` (the state after the session: its binds hold their devices).

    Greedy, largest pod first: for each pod, on every node it may use, candidate jobs on that node are released
    until the pod fits (the smallest that alone completes the room, else the one holding the most there); the node needing the fewest
    released GPUs (then jobs) wins, its jobs are released (freeing their devices on every node) and the pod takes
    its devices, so a second pod sees what the first one left. One candidate alone that makes room for every pod
    (a gang spread over the nodes the pods need) replaces that set when it frees no more GPUs. Candidates in the
    returned list keep their order in ``candidates``. ``[]`` when the pods fit already; None when releasing candidates cannot make room for them.
    """
    if not demands or any(not d.shares for d in demands):
        return None
    from .whatif import gpu_occupancy

    nodes = snapshot.node_map()
    occ = {name: list(devs) for name, devs in gpu_occupancy(snapshot).items()}
    for n in snapshot.nodes:           # other schedulers' GPUs: taken
        for _ in range(min(len(occ.get(n.name, [])), math.ceil(n.external.gpus - EPS))):
            devs = occ[n.name]
            devs[min(range(len(devs)), key=lambda i: devs[i])] = 1.0
    holdings = {j.key: job_holdings(j, nodes) for j in candidates}
    totals = {k: sum(sum(d.values()) for d in h.values()) for k, h in holdings.items()}
    greedy = _greedy(occ, holdings, totals, demands)
    if greedy is None or len(greedy) > 1:
        # one job alone that makes room for every pod (a gang spread over the nodes), if it frees no more GPUs:
        # it must free at least what the pods need beyond the free room of the nodes they may use
        usable = set().union(*(d.shares for d in demands))
        short = sum(d.size() for d in demands) - sum(1.0 - u for n in usable for u in occ.get(n, []))
        singles = sorted((k for k in holdings if totals[k] >= short - EPS and set(holdings[k]) & usable),
                         key=lambda k: (totals[k], k))
        for key in singles[:SINGLE_TRIES]:
            if greedy is not None and (totals[key], 1) >= (sum(totals[k] for k in greedy), len(greedy)):
                break
            if _greedy(occ, {key: holdings[key]}, totals, demands, released={key}) is not None:
                greedy = {key}
                break
    return None if greedy is None else [j for j in candidates if j.key in greedy]


def _greedy(occ: dict[str, list[float]], holdings: dict[str, Holdings], totals: dict[str, float],
            demands: list[PodDemand], released: Optional[set[str]] = None) -> Optional[set[str]]:
    """The greedy pass of :func:`targeted_release` on a copy of ``occ``; ``released`` jobs are freed first."""
    occ = {name: list(devs) for name, devs in occ.items()}
    released = set(released or ())
    on_node: dict[str, list[str]] = {}
    for key, h in holdings.items():
        for name in h:
            on_node.setdefault(name, []).append(key)

    def release(key: str, where: dict[str, list[float]]) -> None:
        for name, devs in holdings[key].items():
            where[name] = _without(where[name], devs)

    for key in released:
        release(key, occ)
    for d in sorted(demands, key=lambda d: (-d.size(), d.name)):
        best = None
        for name, share in sorted(d.shares.items()):
            trial = list(occ.get(name, []))
            chosen: list[str] = []
            options = sorted((k for k in on_node.get(name, []) if k not in released),
                             key=lambda k: (-sum(holdings[k][name].values()), totals[k], k))
            while _fitting(trial, share) < d.devices and options:
                # the smallest job that alone completes the room, else the one holding the most here
                key = next((k for k in reversed(options)
                            if _fitting(_without(trial, holdings[k][name]), share) >= d.devices), options[0])
                options.remove(key)
                chosen.append(key)
                trial = _without(trial, holdings[key][name])
            if _fitting(trial, share) < d.devices:
                continue
            cost = (sum(totals[k] for k in chosen), len(chosen), name)
            if best is None or cost < best[0]:
                best = (cost, name, share, chosen)
        if best is None:
            return None
        _, name, share, chosen = best
        for key in chosen:
            release(key, occ)
            released.add(key)
        _take(occ[name], d.devices, share)
    return released


__all__ = ["PodDemand", "job_holdings", "pod_demand", "targeted_release"]
