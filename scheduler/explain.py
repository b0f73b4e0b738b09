"""Why-pending: for each job a session left waiting, the reason, the numbers behind it and a counterfactual.

Counterfactuals are computed by the engine itself: the session is re-run on a modified copy of the snapshot
(a raised limit or quota, jobs of the most over-fair-share queue released, a consolidation pass) and the
explanation only claims what that re-run showed (``Counterfactual.verified``). Cheap checks come first (queue
limit and quota arithmetic, the shape of the request against node sizes and free GPU blocks); engine searches
are bounded by a per-job time budget.

The engine is never modified and never sees a mutated input: probes are shallow copies that share unchanged
nodes, queues and jobs (the engine does not mutate its input).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from .decisions import NON_PREEMPTIBLE_OVER_QUOTA, OVER_LIMIT, PIPELINED, ScheduleResult, eviction_notes
from .session.predicates import matches_node, untolerated_taints
from .fairshare import compute_fair_share
from .model import ACTIVE_ALLOCATED_STATUSES, ALLOCATED_STATUSES, ExternalUsage, Job, Node, Snapshot, Task
from .release_targets import pod_demand, targeted_release

WAITING_STATUSES = frozenset({"pending", "pipelined"})
STARTED_STATUSES = frozenset({"running", "binding", "pipelined"})
UNITS = {"gpu": "GPUs", "cpu": "millicores", "memory": "bytes"}
TARGET_ROUNDS = 8
"""Engine re-runs the node-targeted release search spends learning which waiting jobs take freed room first."""
NOT_PROVEN_MINIMAL = "not proven the smallest set: the search stopped at its time budget"
"""Said of a verified release set the budget left unminimised: some of its jobs may be unnecessary."""


@dataclass
class Counterfactual:
    """A change that would let the job start.

    ``kind``: ``raise_limit`` | ``raise_quota`` | ``release`` | ``consolidate`` | ``add_nodes`` |
    ``larger_node`` | ``fragmented`` | ``constraints`` (no node passes the pod's node constraints) |
    ``pod_grouper`` (KAI does not consider the pods yet) | ``topology`` (no domain of the gang's required
    topology level holds it) | ``none``. ``verified`` is True when an engine re-run on
    a modified copy showed the job start.
    """

    kind: str
    message: str
    queue: Optional[str] = None
    node: Optional[str] = None
    resource: str = "gpu"
    amount: Optional[float] = None
    verified: bool = False
    jobs: list[str] = field(default_factory=list)
    moves: list[tuple[str, Optional[str]]] = field(default_factory=list)
    minimal: Optional[bool] = None
    """For a release: True when no job of ``jobs`` could be kept (each was tried without it), False when the
    budget ran out first; None for other kinds."""


@dataclass
class PendingExplanation:
    """Why one job waits: reason code (KAI's names), a message with numbers, and a counterfactual."""

    job: str
    queue: str
    reason: Optional[str]
    message: str
    numbers: dict[str, Any] = field(default_factory=dict)
    counterfactual: Optional[Counterfactual] = None
    search_ms: float = 0.0
    eviction: str = ""
    """The eviction scenarios behind the job's outcome (:func:`~scheduler.decisions.eviction_notes`): the victims
    it evicts or moves and why that set, or why its victim searches found none."""

    def to_dict(self) -> dict[str, Any]:
        cf = self.counterfactual
        return {"job": self.job, "queue": self.queue, "reason": self.reason, "message": self.message,
                "numbers": self.numbers, "search_ms": round(self.search_ms, 3), "eviction": self.eviction,
                "counterfactual": None if cf is None else {
                    "kind": cf.kind, "message": cf.message, "queue": cf.queue, "node": cf.node,
                    "resource": cf.resource, "amount": cf.amount, "verified": cf.verified, "jobs": cf.jobs,
                    "moves": [list(m) for m in cf.moves], "minimal": cf.minimal}}


# ---------------------------------------------------------------------------------------------- helpers

def _fmt(x: float, resource: str = "gpu") -> str:
    if resource == "memory":
        return f"{x / 2**30:.3g} GiB"
    if resource == "cpu":
        return f"{x / 1000:g} cores"
    r = round(x, 6)
    return f"{int(r)} GPU{'s' if r != 1 else ''}" if r == int(r) else f"{r:g} GPUs"


def _task_order(t: Task):
    return (t.creation_time if t.creation_time is not None else 0.0, t.name)


def tasks_to_place(job: Job) -> list[Task]:
    """The pending tasks the job needs next: enough to reach ``min_available`` (its gang), else one more."""
    active = sum(1 for t in job.tasks if t.status in ACTIVE_ALLOCATED_STATUSES)
    pending = sorted((t for t in job.tasks if t.status == "pending"), key=_task_order)
    need = max(1, job.min_available - active)
    return pending[:need]


def _task_gpus(t: Task, gpu_mem: Optional[float]) -> float:
    if not t.is_gpu:
        return 0.0
    return t.gpus_on(gpu_mem or 0.0) if t.gpu_memory_mib is not None else t.gpus_on(0.0)


def _free_whole_gpus(snap: Snapshot) -> dict[str, int]:
    """Fully free devices per Ready GPU node: running, binding and releasing tasks occupy theirs (pipelined
    tasks wait on releasing ones), other schedulers' GPUs are taken off."""
    from .whatif import gpu_occupancy

    occ = gpu_occupancy(snap)
    out = {}
    for n in snap.nodes:
        if n.ready and n.gpus > 0:
            free = sum(1 for u in occ[n.name] if u <= 1e-9) - math.ceil(n.external.gpus)
            out[n.name] = max(0, int(free))
    return out


def _started(result: ScheduleResult, key: str) -> bool:
    jd = result.jobs.get(key)
    if jd is not None:
        return jd.status in STARTED_STATUSES
    return False


# ---------------------------------------------------------------------------------------------- snapshot edits

def _with_queue_resource(snap: Snapshot, queue: str, resource: str, **values: float) -> Snapshot:
    queues = []
    for q in snap.queues:
        if q.name == queue:
            q = replace(q, **{resource: replace(q.resource(resource), **values)})
        queues.append(q)
    return replace(snap, queues=queues)


def _without_jobs(snap: Snapshot, keys: set[str]) -> Snapshot:
    return replace(snap, jobs=[j for j in snap.jobs if j.key not in keys])


def _with_actions(snap: Snapshot, actions: list[str]) -> Snapshot:
    return replace(snap, config=replace(snap.config, actions=list(actions)))


# ---------------------------------------------------------------------------------------------- explainer

class _Explainer:
    def __init__(self, snapshot: Snapshot, result: ScheduleResult, run: Callable[[Snapshot], ScheduleResult],
                 budget_ms: float, clock: Callable[[], float] = time.perf_counter):
        self.snapshot = snapshot
        self.clock = clock
        self.result = result
        self.after = result.snapshot or snapshot
        self.run = run
        self.budget_s = budget_ms / 1000.0
        self.jobs = snapshot.job_map()
        self.nodes = [n for n in snapshot.nodes if n.ready]
        self.max_gpu_mem = max((n.gpu_memory_mib for n in self.nodes if n.gpus), default=0.0)
        self.shares = compute_fair_share(snapshot)
        self._free_whole: Optional[dict[str, int]] = None
        self.deadline = 0.0
        self.probe_s = 0.0
        self.cache: dict[tuple, ScheduleResult] = {}
        self.budget_hit = False
        self.eviction_notes = eviction_notes(result)

    def free_whole(self) -> dict[str, int]:
        if self._free_whole is None:
            self._free_whole = _free_whole_gpus(self.after)
        return self._free_whole

    def probe(self, change: tuple, build: Callable[[], Snapshot]) -> Optional[ScheduleResult]:
        """The engine's result on the snapshot ``build()`` makes, ``change`` naming the modification.

        Results are cached by ``change``: one probe answers for every waiting job (releasing a queue's jobs or
        adding nodes is the same experiment whichever job asks). A new probe runs only if it is expected to
        end within the budget (the slowest probe so far is the estimate); otherwise None.
        """
        if change in self.cache:
            return self.cache[change]
        start = self.clock()
        if start + self.probe_s > self.deadline:
            self.budget_hit = True
            return None
        result = self.run(build())
        self.probe_s = max(self.probe_s, self.clock() - start)
        self.cache[change] = result
        return result

    # ------------------------------------------------------------------ one job

    def explain(self, key: str) -> PendingExplanation:
        t0 = self.clock()
        self.deadline = t0 + self.budget_s
        self.budget_hit = False
        decision = self.result.jobs[key]
        job = self.jobs.get(key)
        queue = job.queue if job else decision.details.get("queue", "?")
        exp = PendingExplanation(job=key, queue=queue, reason=decision.reason,
                                 message=decision.message or (decision.reason or "waiting"),
                                 numbers=dict(decision.details), eviction=self.eviction_notes.get(key, ""))
        if job is None:
            return exp
        tasks = tasks_to_place(job)
        request = {"gpu": sum(_task_gpus(t, self.max_gpu_mem) for t in tasks),
                   "cpu": sum(t.cpu_millis for t in tasks), "memory": sum(t.memory_bytes for t in tasks)}
        exp.numbers.setdefault("job_requested", request)
        exp.numbers.setdefault("tasks_to_place", len(tasks))
        share = self.shares.get(job.queue, {}).get("gpu")
        if share is not None and request["gpu"] > 0 and share.allocated >= share.fair_share and share.allocated > 0:
            exp.numbers["queue_gpu_allocated"], exp.numbers["queue_gpu_fair_share"] = share.allocated, share.fair_share
            exp.message += (f" [queue {job.queue} holds {_fmt(share.allocated)} against a fair share of "
                            f"{_fmt(share.fair_share)}: its jobs go after queues below their share and it cannot "
                            f"reclaim]")
        blocked, counts = self.constraints_block(job, tasks) if tasks and not job.waiting_for else (None, {})
        if job.waiting_for:
            exp.counterfactual = _waiting(job)
        elif decision.status == "pipelined" or decision.reason == PIPELINED:
            exp.counterfactual = Counterfactual("none", "placed on resources that are being released; it starts "
                                                "when they are freed (no change needed)")
        elif blocked is not None:
            exp.counterfactual = blocked
            exp.numbers["nodes_failing_constraints"] = counts
        elif decision.reason == OVER_LIMIT:
            exp.counterfactual = self.over_limit(job, decision.details, request)
        elif decision.reason == NON_PREEMPTIBLE_OVER_QUOTA:
            exp.counterfactual = self.over_quota(job, decision.details, request)
        elif "largest_free_gpus" in decision.details:  # no domain of the required topology level holds the gang
            exp.counterfactual = topology_counterfactual(decision.details)
            exp.message = f"{exp.counterfactual.message} ({exp.message})"
        elif tasks:
            exp.counterfactual = self.capacity(job, tasks, request)
        cf = exp.counterfactual
        if cf is not None and not cf.verified and self.budget_hit and self.budget_s > 0:
            cf.message += " (the search for a verified change stopped at its time budget)"
        exp.search_ms = (self.clock() - t0) * 1000
        return exp

    def constraints_block(self, job: Job, tasks: list[Task]) -> tuple[Optional[Counterfactual], dict[str, int]]:
        """When no schedulable node passes a task's node constraints (taints, node selector / affinity, missing
        ConfigMaps), say which and on how many nodes (``{check: nodes}``): no queue or capacity change can
        help."""
        nodes = [n for n in self.nodes if n.schedulable]
        for t in tasks:
            c = t.constraints
            missing = [] if c is None or self.snapshot.config_maps is None else [
                m for m in c.config_maps if f"{job.namespace or 'default'}/{m}" not in self.snapshot.config_maps]
            if missing:
                return Counterfactual("constraints", f"pod {t.name} mounts ConfigMap(s) that do not exist "
                                      f"({', '.join(missing)}): KAI schedules it nowhere until they are created"), \
                    {"missing ConfigMaps": len(nodes)}
            tainted = [n for n in nodes if untolerated_taints(n, c)]
            unmatched = [n for n in nodes if not matches_node(c, n)]
            passing = [n for n in nodes if n not in tainted and n not in unmatched]
            if passing or not nodes:
                continue
            counts: dict[str, int] = {}
            parts = []
            if unmatched:
                counts["node affinity/selector"] = len(unmatched)
                parts.append(f"{len(unmatched)} of {len(nodes)} nodes do not match its node selector / affinity")
            if tainted:
                common: dict[str, int] = {}
                for n in tainted:
                    for taint in untolerated_taints(n, c):
                        label = f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
                        common[label] = common.get(label, 0) + 1
                top = sorted(common.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
                counts["taints"] = len(tainted)
                parts.append(f"{len(tainted)} have taints it does not tolerate (most often {top})")
            return Counterfactual("constraints", f"no node passes pod {t.name}'s constraints: " + "; ".join(parts)
                                  + ": add a toleration or change the selector, or label / untaint nodes"), counts
        return None, {}

    # ------------------------------------------------------------------ queue limit / quota

    def _limit_numbers(self, job: Job, details: dict, request: dict, field_name: str) -> tuple[str, str, float, float, float]:
        queue = details.get("queue") or job.queue
        resource = details.get("resource") or "gpu"
        req = float(details.get("job_requested", request).get(resource, request[resource]))
        share = self.shares.get(queue, {}).get(resource)
        value = details.get(f"queue_{field_name}", {}).get(resource)
        if value is None and share is not None:
            value = share.limit if field_name == "limit" else share.deserved
        alloc_key = "queue_allocated" if field_name == "limit" else "queue_allocated_non_preemptible"
        allocated = details.get(alloc_key, {}).get(resource)
        if allocated is None and share is not None:
            allocated = share.allocated if field_name == "limit" else share.allocated_non_preemptible
        return queue, resource, req, float(value or 0.0), float(allocated or 0.0)

    def over_limit(self, job: Job, details: dict, request: dict) -> Counterfactual:
        queue, resource, req, limit, allocated = self._limit_numbers(job, details, request, "limit")
        over = allocated + req - limit
        msg = (f"over the queue limit by {_fmt(over, resource)}: queue {queue} {resource} limit {_fmt(limit, resource)}, "
               f"{_fmt(allocated, resource)} allocated, job needs {_fmt(req, resource)}")
        cf = Counterfactual("raise_limit", msg, queue=queue, resource=resource, amount=over)
        probe = self.probe(("limit", queue, resource, allocated + req),
                           lambda: _with_queue_resource(self.snapshot, queue, resource, limit=allocated + req))
        return self._verify(cf, probe, job, f"; with the limit raised to {_fmt(allocated + req, resource)} it would start")

    def over_quota(self, job: Job, details: dict, request: dict) -> Counterfactual:
        queue, resource, req, deserved, allocated_np = self._limit_numbers(job, details, request, "deserved")
        over = allocated_np + req - deserved
        msg = (f"non-preemptible job over quota by {_fmt(over, resource)}: queue {queue} {resource} quota "
               f"{_fmt(deserved, resource)}, {_fmt(allocated_np, resource)} held by non-preemptible jobs, job needs "
               f"{_fmt(req, resource)}; non-preemptible jobs never go over quota")
        cf = Counterfactual("raise_quota", msg, queue=queue, resource=resource, amount=over)
        probe = self.probe(("quota", queue, resource, allocated_np + req),
                           lambda: _with_queue_resource(self.snapshot, queue, resource, quota=allocated_np + req))
        return self._verify(cf, probe, job, f"; with the quota raised to {_fmt(allocated_np + req, resource)} it would start")

    def _verify(self, cf: Counterfactual, probe: Optional[ScheduleResult], job: Job, suffix: str) -> Counterfactual:
        if probe is None:
            return cf
        if _started(probe, job.key):
            cf.verified = True
            cf.message += suffix
        else:
            then = probe.jobs.get(job.key)
            if then is not None and then.reason:
                cf.message += f"; even then it would wait: {then.reason}" + (f" ({then.message})" if then.message else "")
        return cf

    # ------------------------------------------------------------------ capacity

    def capacity(self, job: Job, tasks: list[Task], request: dict) -> Counterfactual:
        whole = [t for t in tasks if t.is_gpu and t.gpu_memory_mib is None and t.gpu >= 1]
        biggest = max((int(math.ceil(t.gpu)) for t in whole), default=0)
        if biggest:
            largest_node = max(self.nodes, key=lambda n: (n.gpus, n.name), default=None)
            if largest_node is None or largest_node.gpus < biggest:
                have = largest_node.gpus if largest_node else 0
                return Counterfactual("larger_node", f"needs {biggest} whole GPUs on one node; the largest Ready node "
                                      f"has {have} GPUs: no change of queues or placement can help",
                                      amount=float(biggest))
        cf = self.release(job, tasks)
        if cf is not None and cf.verified:
            return cf
        frag = self.fragmented(job, whole, biggest, request)
        consolidated = self.consolidate(job) if frag is not None else None
        if consolidated is not None:
            return consolidated
        grown = self.add_nodes(job, biggest, request)
        if frag is not None and grown is not None:
            frag.message += "; " + grown.message
            frag.verified = grown.verified
            return frag
        return cf or frag or grown or Counterfactual("none", "no single change found within the search budget")

    def add_nodes(self, job: Job, biggest: int, request: dict) -> Optional[Counterfactual]:
        """Fewest extra nodes (clones of a pool's first node) with which the job would start."""
        pools: dict[str, Node] = {}
        for n in sorted(self.nodes, key=lambda n: n.name):
            pools.setdefault(n.pool, n)
        candidates = [n for n in pools.values() if n.gpus >= max(biggest, 1 if request["gpu"] > 0 else 0)]
        candidates.sort(key=lambda n: (-n.gpus, n.pool))
        tried_all = False
        for template in candidates[:2]:
            lo, hi, k = 0, None, 1
            while k <= 16:
                probe = self.probe(("grow", template.name, k), lambda: self._grown(template, k))
                if probe is None:
                    return None
                if _started(probe, job.key):
                    hi = k
                    break
                lo, k = k, k * 2
            if hi is None:
                tried_all = k > 16
                continue
            while hi - lo > 1:  # smallest k in (lo, hi] that works
                mid = (lo + hi) // 2
                probe = self.probe(("grow", template.name, mid), lambda: self._grown(template, mid))
                if probe is None:
                    break
                if _started(probe, job.key):
                    hi = mid
                else:
                    lo = mid
            return Counterfactual("add_nodes", f"would start with {hi} more node{'s' if hi != 1 else ''} like "
                                  f"{template.name} in pool {template.pool} (+{hi * template.gpus} GPUs)",
                                  node=template.name, amount=float(hi), verified=True)
        if tried_all:
            return Counterfactual("add_nodes", "even 16 more nodes of the largest pool would not start it: "
                                  "jobs ahead of it in queue order take the new capacity first")
        return None

    def _grown(self, template: Node, k: int) -> Snapshot:
        taken = {n.name for n in self.snapshot.nodes}
        extra = []
        i = 0
        while len(extra) < k:
            i += 1
            name = f"{template.pool}-whatif-{i}"
            if name not in taken:
                extra.append(replace(template, name=name, external=ExternalUsage(), ready=True))
        return _with_actions(replace(self.snapshot, nodes=list(self.snapshot.nodes) + extra), ["allocate"])

    def fragmented(self, job: Job, whole: list[Task], biggest: int, request: dict) -> Optional[Counterfactual]:
        """Enough free GPUs in total but no node has a big enough free block."""
        if not biggest:
            return None
        free = self.free_whole()
        if not free:
            return None
        best_node, best = min(free.items(), key=lambda kv: (-kv[1], kv[0]))
        total_free = sum(free.values())
        need_total = sum(int(math.ceil(t.gpu)) for t in whole)
        if best >= biggest or total_free < need_total:
            return None  # a big enough block exists, or the cluster is simply full: not fragmentation
        msg = (f"needs {biggest} whole GPUs on one node; largest free block is {best} on node {best_node} "
               f"({total_free} whole GPUs free in total, the job needs {need_total})")
        return Counterfactual("fragmented", msg, node=best_node, amount=float(biggest - best))

    def consolidate(self, job: Job) -> Optional[Counterfactual]:
        """Re-run a consolidation pass on the after-session state with only this job waiting."""
        after = self.after
        target = after.job_map().get(job.key)
        if target is None:
            return None
        jobs = []
        for j in after.jobs:
            if j.key == job.key:
                j = replace(j, preemptible=True)  # consolidation only serves preemptible jobs (KAI)
            elif not any(t.status not in ("pending",) for t in j.tasks):
                continue  # other waiting jobs are left out: the question is about this job only
            jobs.append(j)
        probe = self.probe(("consolidate", job.key), lambda: _with_actions(replace(after, jobs=jobs), ["consolidation"]))
        if probe is None or not _started(probe, job.key):
            return None
        placed = [(name, d.node) for name, d in probe.tasks.items()
                  if any(t.name == name for t in target.tasks) and d.node]
        moves = [(e.task, e.moved_to) for e in probe.evicted]
        node = placed[0][1] if placed else None
        msg = (f"fits on node {node} after consolidation: moving {len(moves)} preemptible task"
               f"{'s' if len(moves) != 1 else ''} (" + ", ".join(f"{t} -> {n}" for t, n in moves) + ")")
        return Counterfactual("consolidate", msg, node=node, verified=True, moves=moves)

    def release(self, job: Job, tasks: list[Task]) -> Optional[Counterfactual]:
        """A small set of the most over-fair-share queue's running jobs whose release lets the job start.

        First the jobs on the nodes the job's pods can use (:func:`~scheduler.release_targets.targeted_release`),
        verified by an engine re-run; if that set does not start it (jobs ahead of it take the room, CPU or
        memory run out), the smallest prefix of the queue's jobs, the targeted ones first, then KAI's victim
        order. Either set is then minimised while the budget lasts; the message says when it is not proven
        minimal (no single job of it can be kept) because the budget ran out.
        """
        donors = []
        for name, per in self.shares.items():
            s = per["gpu"]
            if name == job.queue or s.allocated <= s.fair_share + 1e-9 or s.allocated <= 0:
                continue
            ratio = s.allocated / s.fair_share if s.fair_share > 0 else math.inf
            donors.append((ratio, name))
        leaves = {q.name for q in self.snapshot.leaf_queues()}
        donors = [d for d in sorted(donors, key=lambda d: (-d[0], d[1])) if d[1] in leaves]
        demands = [d for d in (pod_demand(t, self.nodes) for t in tasks) if d is not None]
        for _, donor in donors[:2]:
            victims = self._victims(donor)
            if not victims:
                continue
            found = self._targeted(job.key, demands, victims)
            if found is None:
                return None
            targeted, verified = found
            chosen = minimal = None
            if verified:
                chosen, minimal = self._minimise(targeted, job.key)
            else:
                order = targeted + [v for v in victims if v not in targeted]
                found = self._smallest_prefix(order, job.key)
                if found is None:
                    return None
                hi, exact = found
                if not hi:
                    continue
                chosen, minimal = self._minimise(order[:hi], job.key)
                minimal = minimal and exact
            ahead = self._served_first(chosen, job.key)
            gpus = sum(self._job_gpus(v) for v in chosen)
            share = self.shares[donor]["gpu"]
            names = [j.key for j in chosen]
            listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more jobs" if len(names) > 5 else "")
            msg = (f"would start if queue {donor} released {_fmt(gpus)} ({listed}); {donor} holds {_fmt(share.allocated)} "
                   f"against a fair share of {_fmt(share.fair_share)}")
            if ahead:
                whom = ", ".join(ahead[:3]) + (f" and {len(ahead) - 3} more" if len(ahead) > 3 else "")
                msg += f"; part of the room goes to {whom}, waiting ahead of it"
            if not minimal:
                msg += f"; {NOT_PROVEN_MINIMAL}"
            return Counterfactual("release", msg, queue=donor, amount=gpus, verified=True, jobs=names,
                                  minimal=minimal)
        return None

    def _targeted(self, key: str, demands: list, victims: list[Job]) -> Optional[tuple[list[Job], bool]]:
        """``(jobs, verified)``: the node-targeted release set and whether an engine re-run showed ``key`` start;
        None when the budget ran out.

        When the re-run starts other waiting jobs instead (jobs ahead of it in queue order take freed GPUs first),
        their pods are added to the demand and the set is proposed again, while the budget lasts (at most
        :data:`TARGET_ROUNDS` re-runs)."""
        waiting = {k for k, d in self.result.jobs.items() if d.status in WAITING_STATUSES and k != key}
        seen: set[str] = set()
        extra: list = []
        targeted: list[Job] = []
        for _ in range(TARGET_ROUNDS):
            targeted = targeted_release(self.after, extra + demands, victims) or []
            if not targeted:
                return [], False
            probe = self._release_probe({v.key for v in targeted})
            if probe is None:
                return None
            if _started(probe, key):
                return targeted, True
            took = sorted(k for k in waiting - seen if _started(probe, k) and k in self.jobs)
            if not took:
                break
            seen.update(took)
            extra += [d for k in took for d in (pod_demand(t, self.nodes) for t in tasks_to_place(self.jobs[k]))
                      if d is not None]
        return targeted, False

    def _served_first(self, released: list[Job], key: str) -> list[str]:
        """The waiting jobs the re-run with ``released`` gone starts besides ``key`` (they take part of the room)."""
        probe = self.cache.get(("release", frozenset(j.key for j in released)))
        if probe is None:
            return []
        return sorted(k for k, d in self.result.jobs.items()
                      if k != key and d.status in WAITING_STATUSES and _started(probe, k))

    def _smallest_prefix(self, order: list[Job], key: str) -> Optional[tuple[int, bool]]:
        """``(n, exact)``: the fewest first jobs of ``order`` whose release starts ``key`` (0: even all of them
        do not), ``exact`` False when the budget cut the bisection short; None when not even releasing all was
        tried within the budget."""
        full = self._release_probe({v.key for v in order})
        if full is None:
            return None
        if not _started(full, key):
            return 0, True
        lo, hi = 1, len(order)  # smallest prefix length that works lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            probe = self._release_probe({v.key for v in order[:mid]})
            if probe is None:
                return hi, False
            if _started(probe, key):
                hi = mid
            else:
                lo = mid + 1
        return hi, True

    def _release_probe(self, keys: set[str]) -> Optional[ScheduleResult]:
        return self.probe(("release", frozenset(keys)), lambda: self._released(keys))

    def _released(self, keys: set[str]) -> Snapshot:
        """The input with those jobs gone; only allocate runs: the question is whether the freed resources
        let the job be allocated, and evictions elsewhere would only blur the answer."""
        return _with_actions(_without_jobs(self.snapshot, keys), ["allocate"])

    def _minimise(self, chosen: list[Job], key: str) -> tuple[list[Job], bool]:
        """Drop released jobs that turn out unnecessary (in order), while the budget lasts: ``(kept, minimal)``,
        ``minimal`` True when every job left was tried and found needed (the budget did not cut the pass)."""
        kept = list(chosen)
        for candidate in list(chosen):
            trial = [j for j in kept if j is not candidate]
            if not trial:
                break
            probe = self._release_probe({j.key for j in trial})
            if probe is None:
                return kept, False
            if _started(probe, key):
                kept = trial
        return kept, True

    def _job_gpus(self, job: Job) -> float:
        mem = {n.name: n.gpu_memory_mib for n in self.snapshot.nodes}
        return sum(t.gpus_on(mem.get(t.node, 0.0)) for t in job.tasks if t.status in ALLOCATED_STATUSES and t.is_gpu)

    def _victims(self, queue: str) -> list[Job]:
        """Running jobs of ``queue`` holding GPUs, in KAI's victim order: lower priority, then younger first."""
        jobs = [j for j in self.snapshot.jobs if j.queue == queue and self._job_gpus(j) > 0]
        return sorted(jobs, key=lambda j: (j.priority, -(j.last_start_time or j.creation_time), j.key))


def topology_counterfactual(details: dict) -> Counterfactual:
    """Why-pending for a gang no domain of its required topology level can hold: "no rack with 16 free GPUs;
    largest 12 (zone-a.rack-3)" (GPUs when the gang asks for GPUs, else its pods)."""
    level = details.get("level") or "domain"
    where = f" ({details['largest_domain']})" if details.get("largest_domain") else ""
    need, best = details.get("need_gpus", 0.0), details.get("largest_free_gpus", 0.0)
    if need > 0:
        msg = f"no {level} with {need:g} free GPUs; largest {best:g}{where}"
        if best >= need:  # enough GPUs, but not in pieces the pods fit (per-node fragmentation, CPU, memory)
            msg += (f", where only {details.get('largest_allocatable_pods', 0)} of the {details.get('pods', 0)} "
                    f"pods fit")
        return Counterfactual("topology", msg, amount=float(need - best) if need > best else None)
    pods = details.get("largest_allocatable_pods", 0)
    return Counterfactual("topology", f"no {level} can hold all {details.get('pods', 0)} pods; at most {pods} "
                                      f"fit in one{where}")


def _waiting(job: Job) -> Counterfactual:
    if job.waiting_for == "pod-grouper":
        return Counterfactual("pod_grouper", "waiting for the pod-grouper: the pod is in no PodGroup yet, so KAI "
                              "neither schedules it nor counts it in fair share; it is considered once the "
                              "pod-grouper creates its PodGroup (check that KAI's pod-grouper runs and that the "
                              "pod's owner kind is supported)", queue=job.queue)
    return Counterfactual("none", f"queue {job.queue!r} does not exist: KAI does not schedule the job or count it "
                          "in fair share until the queue is created or the job is moved", queue=job.queue)


def explain_pending(snapshot: Snapshot, result: ScheduleResult, *, budget_ms_per_job: float = 200.0,
                    jobs: Optional[list[str]] = None, search_jobs: Optional[int] = None,
                    run: Optional[Callable[[Snapshot], ScheduleResult]] = None,
                    clock: Callable[[], float] = time.perf_counter) -> list[PendingExplanation]:
    """Explain every job ``result`` left waiting (or only ``jobs``), ordered by queue then job key.

    ``result`` must come from running the engine on ``snapshot``. Counterfactual searches re-run the engine
    (``run``, default :func:`scheduler.engine.run_session`) on modified copies within ``budget_ms_per_job``
    per job (a probe starts only if the slowest probe so far would still end in time). ``search_jobs`` caps how
    many jobs (in output order) get engine searches; the others get the cheap checks only (a view can explain
    one job on demand with ``jobs=[key]``). ``clock`` (seconds) measures the budget. ``snapshot`` is not
    modified.
    """
    if run is None:
        from .engine import run_session as run
    explainer = _Explainer(snapshot, result, run, budget_ms_per_job, clock)
    keys = [k for k, d in result.jobs.items() if d.status in WAITING_STATUSES]
    if jobs is not None:
        wanted = set(jobs)
        keys = [k for k in keys if k in wanted]
    job_map = explainer.jobs
    keys.sort(key=lambda k: (job_map[k].queue if k in job_map else "", k))
    out = []
    for n, k in enumerate(keys):
        explainer.budget_s = budget_ms_per_job / 1000.0 if search_jobs is None or n < search_jobs else 0.0
        out.append(explainer.explain(k))
    return out
