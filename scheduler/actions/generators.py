"""KAI's scenario generators: which victim sets the solver simulates for one probe, and in what order
(``actions/common/solvers/pod_scenario_builder.go``, ``sub_scenario_emitter.go``,
``plugins/nodelocalgreedy/generator.go``, ``plugins/multinodegang/generator.go``).

Both generators grow the same **accumulated scenario** (:class:`Accumulator`): victim batches popped from the
victim queue (:class:`~.victims.VictimQueue`) one after the other, on top of the *recorded* victims (those of
the last successful probe, part of every scenario). An accumulation is only considered once it passes the
accumulated filters: the preemptor's GPU requests (largest first) must fit greedily on the nodes with the
most idle + releasing GPUs once the accumulated victims are gone (``AccumulatedIdleGpus``; every node, ready
or not), and each pending task with a node selector or required node affinity must match one of the feasible
nodes or the victims' nodes (``AccumulatedNodeAffinities``). From each accumulation that passes:

- **NodeLocalGreedy** emits, for every node of the job just added (by node name), the accumulated victims on
  that node — every batch of every job with a victim there, so gangs stay whole; sets already emitted for this
  accumulation are skipped. Victims on one node only are tried before anything spans nodes.
- **MultiNodeGang** emits sub-scenarios by node: nodes holding victims, sorted by the GPUs they would offer
  (idle + releasing + recorded and accumulated victims on the node), ascending, ties by first appearance, nodes
  that could not hold the smallest pending task left out; the first sub-scenario takes the shortest prefix whose
  capacity covers the demand the other feasible nodes cannot, later ones grow it by 1, 2, 4, … nodes. A picked
  node takes every batch with a task on it, whole.

A scenario with recorded victims and no new ones comes first when the accumulation without new victims passes
the filters (MultiNodeGang emits it even with no victims at all; it then fails without simulating).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .budgets import MULTI_NODE_GANG, NODE_LOCAL_GREEDY
from .victims import SKIPPED, Batch, VictimQueue


@dataclass(eq=False)
class Scenario:
    """One victim set to simulate for a (partial) preemptor."""

    generator: str
    pending: tuple           # the probe's tasks of the preemptor
    recorded: list           # Batch: victims of the last successful probe
    potential: list          # Batch: new victims, in the order they were taken

    def batches(self) -> list[Batch]:
        return list(self.recorded) + list(self.potential)

    def victim_tasks(self) -> list[int]:
        """Recorded then new victims, each once (NodeLocalGreedy may list a recorded task as new again). Kept
        (the scenario's batches do not change once it is emitted); do not modify."""
        out = self.__dict__.get("_victims")
        if out is None:
            out = [i for b in self.recorded for i in b.tasks] + [i for b in self.potential for i in b.tasks]
            if self.recorded:
                out = list(dict.fromkeys(out))
            self._victims = out
        return out

    def fingerprint(self) -> tuple:
        """KAI ``fingerprintScenario`` (the preemptor is the same for a whole search)."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            fp = self._fp = (frozenset(self.pending), frozenset(i for b in self.recorded for i in b.tasks),
                             frozenset(i for b in self.potential for i in b.tasks))
        return fp


@dataclass
class ProbeContext:
    """What a generator needs for one probe of one preemptor."""

    session: object
    j: int
    pending: tuple                  # tasks of the probe (the first k of the chunk)
    recorded: list                  # Batch
    feasible: np.ndarray            # bool per node: the solver's feasible nodes and the recorded victims' nodes
    victims: VictimQueue            # a fresh victim queue
    raw_capacity: np.ndarray        # idle + releasing GPUs per node at the probe's start, every node
                                    # (KAI nodeIdleOrReleasingGpus)
    gpu_quota: list = field(default_factory=list)   # GPUs each pending task requests (gpu-memory: 0)
    raw_max: Optional[float] = None  # raw_capacity.max() when known (nodes exist)


class Accumulator:
    """KAI ``PodAccumulatedScenarioBuilder``: the accumulated victims and their filters."""

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        s = ctx.session
        self.potential: list[Batch] = []
        self.recorded_tasks = frozenset(i for b in ctx.recorded for i in b.tasks)
        self.capacity = ctx.raw_capacity       # copied before the first change
        self._own = False
        # capacity.max(), kept as capacities only grow: a single pending task's filter reads nothing else
        self.capacity_max = ctx.raw_max
        node, accepted = s.node, s.accepted
        for i in self.recorded_tasks:
            if node[i] >= 0:
                self._capacity_add(node[i], accepted[i])
        self.required = sorted(ctx.gpu_quota, reverse=True)
        self.popped = 0
        # AccumulatedNodeAffinities: pending tasks with a node selector or required node affinity need a
        # matching node among the feasible nodes and the victims' nodes.
        self.affinity = _affinity_masks(s, ctx.pending)
        self.covered = None
        if self.affinity:
            self.covered = ctx.feasible.copy()
            for i in self.recorded_tasks:
                if node[i] >= 0:
                    self.covered[node[i]] = True

    def _capacity_add(self, n: int, gpus: float) -> None:
        if not self._own:
            self.capacity = self.capacity.copy()
            self._own = True
        self.capacity[n] += gpus
        if self.capacity_max is not None:
            if gpus < 0:
                self.capacity_max = None
            elif self.capacity[n] > self.capacity_max:
                self.capacity_max = float(self.capacity[n])

    def _add(self, batch: Batch) -> None:
        node, accepted = self.ctx.session.node, self.ctx.session.accepted
        for i in batch.tasks:
            n = node[i]
            if n >= 0:
                self._capacity_add(n, accepted[i])
                if self.covered is not None:
                    self.covered[n] = True
        self.potential.append(batch)

    def valid(self) -> bool:
        """The accumulated filters: ``AccumulatedNodeAffinities``, then ``AccumulatedIdleGpus``."""
        if self.affinity and not all(bool((m & self.covered).any()) for m in self.affinity):
            return False
        return greedy_fits(self.required, self.capacity, self.capacity_max)

    def next_valid(self, advance_first: bool) -> bool:
        """KAI ``iterateAccumulated``: advance (pop one more victim batch) until the accumulation passes the
        filters; False when the victim queue runs out."""
        advance = advance_first
        while True:
            if advance:
                batch = self.ctx.victims.pop(self.recorded_tasks)
                if batch is None:
                    return False
                self.popped += 1
                if batch is SKIPPED:
                    continue
                self._add(batch)
            advance = True
            if self.valid():
                return True

    def scenario(self, generator: str, potential: list) -> Scenario:
        return Scenario(generator, self.ctx.pending, self.ctx.recorded, potential)


class NodeLocalGreedy:
    """KAI's ``NodeLocalGreedy`` generator (plugin ``sg-nodelocalgreedy``)."""

    name = NODE_LOCAL_GREEDY

    def __init__(self, ctx: ProbeContext):
        self.acc = Accumulator(ctx)
        self._queue: list[Scenario] = []
        self._started = False
        # the accumulation's batches per job (recorded first) and its jobs per node, kept up to date with the
        # batches the accumulation has added since the last call (it only grows)
        self._by_job: dict[int, list[Batch]] = {}
        for b in ctx.recorded:
            self._by_job.setdefault(b.job, []).append(b)
        self._on_node: dict[int, list[int]] = {}
        self._seen = 0

    def next(self) -> Optional[Scenario]:
        while True:
            if self._queue:
                return self._queue.pop(0)
            if not self.acc.next_valid(advance_first=self._started):
                return None
            self._started = True
            self._queue = self._node_local()

    def _node_local(self) -> list[Scenario]:
        acc = self.acc
        if not acc.potential:
            return [acc.scenario(self.name, [])] if acc.ctx.recorded else []
        s = acc.ctx.session
        node = s.node
        latest = acc.potential[-1].job
        names = s.nodes.names
        tasks = s.jobs[latest].tasks
        if len(tasks) == 1:   # (the same list without the set and the sort)
            n = _task_node(s, tasks[0])
            nodes = [n] if n >= 0 else []
        else:
            nodes = sorted({_task_node(s, i) for i in tasks} - {-1}, key=lambda n: names[n])
        # A job's victims in the scenario include its recorded ones: KAI's VictimsTasksFromNodes returns every
        # task group of a job with a potential victim on the node, and the recorded jobs' groups are among them
        # (BaseScenario.victimsJobsTaskGroups), so a recorded task is then also a potential victim.
        by_job, on_node = self._by_job, self._on_node
        for b in acc.potential[self._seen:]:
            by_job.setdefault(b.job, []).append(b)
            for i in b.tasks:
                n = node[i]
                if n >= 0:
                    jobs = on_node.setdefault(n, [])
                    if b.job not in jobs:
                        jobs.append(b.job)
        self._seen = len(acc.potential)
        out, seen = [], set()
        several = len(nodes) > 1   # (one node: no set to compare)
        for n in nodes:
            jobs = on_node.get(n)
            if not jobs:
                continue
            chosen = [Batch(job=jj, tasks=[i for b in by_job[jj] for i in b.tasks], elastic=by_job[jj][0].elastic)
                      for jj in jobs]
            if several:
                key = frozenset(i for b in chosen for i in b.tasks)
                if key in seen:
                    continue
                seen.add(key)
            out.append(acc.scenario(self.name, chosen))
        return out


def _affinity_masks(session, tasks) -> list:
    """Per pending task with a node selector or required node affinity, the nodes it matches (distinct)."""
    out, seen = [], set()
    for i in tasks:
        c = session.task_objs[i].constraints
        if c is None or not (c.node_selector or c.node_affinity):
            continue
        mask = session.predicates.static(i)[1].get("node affinity/selector")
        if mask is not None and id(mask) not in seen:
            seen.add(id(mask))
            out.append(mask)
    return out


def _task_node(session, i: int) -> int:
    """The node a task is on, for every task KAI gives a node name (occupying ones, and finished pods)."""
    n = session.node[i]
    if n >= 0:
        return n
    name = session.task_objs[i].node
    if name is None or session.status[i] not in ("failed", "succeeded"):
        return -1
    return session.nodes.index.get(name, -1)


class MultiNodeGang:
    """KAI's ``MultiNodeGang`` generator (plugin ``sg-multinodegang``): accumulation plus sub-scenarios."""

    name = MULTI_NODE_GANG

    def __init__(self, ctx: ProbeContext):
        self.acc = Accumulator(ctx)
        self._started = False
        self._subs: Optional[_SubScenarios] = None

    def next(self) -> Optional[Scenario]:
        acc = self.acc
        while True:
            if self._subs is not None:
                picked = self._subs.next()
                if picked is not None:
                    return acc.scenario(self.name, picked)
                self._subs = None
            if not acc.next_valid(advance_first=self._started):
                return None
            self._started = True
            if not acc.potential:
                return acc.scenario(self.name, [])
            self._subs = _SubScenarios(acc)


class _SubScenarios:
    """KAI ``subScenarioEmitter`` over one accumulation."""

    def __init__(self, acc: Accumulator):
        ctx = acc.ctx
        s = ctx.session
        node, accepted = s.node, s.accepted
        self.batches = list(acc.potential)
        # The nodes' idle + releasing GPUs as the probe found them (ProbeContext.raw_capacity), drift left by earlier
        # probes' rolled-back scenarios included. KAI's emitter reads them live when it is built
        # (sub_scenario_emitter.go nodeCapacities, baselineCapacity); kaidash's counts drift apart from KAI's within
        # a probe where KAI regroups shared pods (ConsolidateSharedPodInfoToDifferentGPU, a deviation: docs/engine.md),
        # and the probe's start values follow KAI's scenarios further (docs/actions.md, *Node counts*).
        raw = ctx.raw_capacity
        recorded_freed, feasible_offer = _probe_offers(ctx)
        node_batches: dict[int, list[int]] = {}
        first_seen: dict[int, int] = {}
        freed: dict[tuple, float] = {}   # (node, batch) -> GPUs the batch's tasks there hold, summed in task order
        idx = 0
        for bi, b in enumerate(self.batches):
            for i in b.tasks:
                n = node[i]
                if n >= 0:
                    if n not in first_seen:
                        first_seen[n] = idx
                    lst = node_batches.get(n)
                    if lst is None:
                        node_batches[n] = [bi]
                    elif lst[-1] != bi:   # batches are walked in order: bi can only be the last one listed
                        lst.append(bi)
                    nb = (n, bi)
                    freed[nb] = freed.get(nb, 0) + accepted[i]
                idx += 1
        cap = {}
        for n, bis in node_batches.items():
            c = recorded_freed.get(n, 0.0) + float(raw[n])
            for bi in bis:
                c += freed[(n, bi)]
            cap[n] = c
        quota = ctx.gpu_quota
        demand = sum(quota)
        min_task = min(quota) if quota else -1.0
        nodes = [n for n in node_batches if not (min_task > 0 and cap[n] < min_task)]
        nodes.sort(key=lambda n: (cap[n], first_seen[n]))
        baseline = 0.0
        for n, offer in feasible_offer:
            if n not in node_batches:
                baseline += offer
        remaining = max(0.0, demand - baseline)
        k = 0
        if remaining > 0:
            acc_cap, k = 0.0, len(nodes) + 1
            for pos, n in enumerate(nodes):
                acc_cap += cap[n]
                if acc_cap >= remaining:
                    k = pos + 1
                    break
        self.nodes, self.node_batches = nodes, node_batches
        self.k, self.dk = k, 1

    def next(self) -> Optional[list[Batch]]:
        k, nodes = self.k, self.nodes
        if k < 0 or k > len(nodes):
            return None
        picked: dict[int, None] = {}
        for n in nodes[:k]:
            for bi in self.node_batches[n]:
                picked[bi] = None
        if k >= len(nodes):
            self.k = len(nodes) + 1
        else:
            self.k = min(k + self.dk, len(nodes))
            self.dk *= 2
        return [self.batches[bi] for bi in sorted(picked)]


def _probe_offers(ctx: ProbeContext) -> tuple[dict, list]:
    """Per probe (kept on its context): GPUs the recorded victims free per node, and ``(node, idle + releasing
    GPUs at the probe's start + recorded victims' GPUs)`` of every feasible node in node order (what
    :class:`_SubScenarios` sums)."""
    hit = ctx.__dict__.get("_offers")
    if hit is None:
        node, accepted = ctx.session.node, ctx.session.accepted
        recorded_freed: dict[int, float] = {}
        for b in ctx.recorded:
            for i in b.tasks:
                if node[i] >= 0:
                    recorded_freed[node[i]] = recorded_freed.get(node[i], 0.0) + accepted[i]
        raw = ctx.raw_capacity
        offers = [(n, float(raw[n]) + recorded_freed.get(n, 0.0)) for n in np.nonzero(ctx.feasible)[0].tolist()]
        hit = ctx._offers = (recorded_freed, offers)
    return hit


def greedy_fits(req: list[float], cap: np.ndarray, cap_max: Optional[float] = None) -> bool:
    """KAI's ``AccumulatedIdleGpus`` check: the GPU requests (sorted largest first) fit greedily on the
    ``len(req)`` nodes with the most capacity; a request of 0 ends the check (it fits anywhere). ``cap_max``:
    ``cap.max()`` when the caller knows it."""
    if not req or req[0] <= 0:
        return True
    if cap_max is not None and len(req) == 1:   # (what the loop below does with one holder)
        return cap_max >= req[0]
    k = min(len(req), cap.size)
    if k == 0:
        return False
    if k == 1:
        holders = [float(cap.max()) if cap_max is None else cap_max]
    else:
        top = np.argpartition(-cap, k - 1)[:k]
        holders = sorted(cap[top].tolist(), reverse=True)
    used = [0.0] * len(holders)
    for r in req:
        if r <= 0:
            return True
        matched = False
        for h, total in enumerate(holders):
            if total < r:
                break
            if total - used[h] >= r:
                used[h] += r
                matched = True
                break
        if not matched:
            return False
    return True


GENERATOR_CLASSES = (NodeLocalGreedy, MultiNodeGang)

__all__ = ["Scenario", "ProbeContext", "Accumulator", "NodeLocalGreedy", "MultiNodeGang", "GENERATOR_CLASSES",
           "greedy_fits"]
