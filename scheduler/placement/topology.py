"""KAI's topology plugin: a gang with a topology constraint is placed inside one domain.

Facts from KAI (``pkg/scheduler/plugins/topology/``, commit d5bc503), paraphrased:

- A ``Topology`` lists node labels from the widest level to the narrowest. A node belongs to it only when it has
  every level's label; a domain at level ``l`` is the nodes sharing the values of levels ``0..l`` (its id is
  those values joined by ``.``); ``root`` holds every member node.
- For the chunk of tasks to place, the plugin starts at the lowest domain common to all member nodes (never
  below the preferred level). If that domain cannot hold the chunk the job fails there ("not enough resources
  in the cluster").
- Fit of a domain: when the tasks are homogeneous (all ask for GPUs or none do) KAI counts how many copies of
  the largest task every node can hold (``min`` over resources of ``floor(idle+releasing / request)``) and
  sums them ("node-group X can allocate only N of M required pods"); otherwise the sum of the requests must fit
  the domain's idle + releasing resources.
- The relevant levels run from the preferred level (or the required one) up to the required level (or root
  without one). Free resources and allocatable pods are summed only inside the lowest common domain's subtree,
  so a domain above it (the required zone when every member node is in one rack) holds no chunk that requests
  anything. Every domain of those levels that fits is a candidate; when the job already has active pods
  and a required level, only the required-level domains holding one of them (and their sub-domains) count.
- Candidates are tried in turn, narrowest level first; inside a level in the order of the tree sorted for
  bin-packing: children by the chunk's dominant-resource ratio to their free resources, highest first (the
  fullest domain that still fits), then by id. The first domain where every task fits wins.
- With a preferred level every node gets ``floor((k + 1) / D * 10) * 100000`` in node order, ``k`` being its
  preferred-level domain's position among the ``D`` such domains in that sorted order.

:func:`plan` returns the candidate node sets (and node scores) for one chunk, or why there is none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..model import Topology, TopologyConstraint
from ..session.core import ACTIVE_ALLOCATED, KIND_MEMORY
from . import scores

ROOT = "root"
NOT_IN_DOMAIN_RATIO = 1000.0  # KAI requiredResourceNotInDomainRatio
_RES = 3  # GPU, CPU, memory columns of the node arrays take part in the ratio (pods do not)


@dataclass
class Plan:
    """Where a chunk may go: candidate domains ``(level, domain index)`` in the order to try (:meth:`mask` gives a
    candidate's nodes), a per-node score to add (preferred level), or ``failure`` = ``(message, details)`` when
    no domain fits."""

    tree: Optional["TopologyTree"] = None
    candidates: list[tuple[int, int]] = field(default_factory=list)
    within: Optional[np.ndarray] = None
    failure: Optional[tuple[str, dict]] = None
    preferred_level: Optional[int] = None
    scores: Optional[Callable[[], np.ndarray]] = None  # the preferred level's node scores, computed on demand
    _bonus: Optional[np.ndarray] = None

    def mask(self, k: int) -> np.ndarray:
        """Nodes of candidate ``k`` (bool over the session's nodes)."""
        lvl, d = self.candidates[k]
        rows = self.tree.member if lvl < 0 else self.tree.node_domain[lvl] == d
        return rows & self.within

    def subset(self, k: int) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Candidate ``k``'s nodes and the node scores to add there: none inside one preferred-level domain
        (its nodes all score the same), the preferred level's order above it."""
        lvl = self.candidates[k][0]
        if self.scores is None or lvl == self.preferred_level:
            return self.mask(k), None
        if self._bonus is None:
            self._bonus = self.scores()
        return self.mask(k), self._bonus

    @property
    def domains(self) -> list[str]:
        """Ids of the candidate domains, in order."""
        return [ROOT if lvl < 0 else self.tree.names[lvl][d] for lvl, d in self.candidates]


class TopologyTree:
    """The domains of one :class:`~scheduler.model.Topology` over a session's nodes (index order)."""

    def __init__(self, topology: Topology, node_labels: list[dict]):
        self.topology = topology
        self.labels = [lv.node_label for lv in topology.levels]
        n = len(node_labels)
        self.member = np.array([all(k in lab for k in self.labels) for lab in node_labels], dtype=bool)
        self.node_domain: list[np.ndarray] = []  # per level: domain index of each node (-1 = not a member)
        self.names: list[list[str]] = []          # per level: domain ids ("zone-a.rack-1")
        self.parent: list[np.ndarray] = []        # per level: parent domain index (level 0: 0 = root)
        self.name_rank: list[np.ndarray] = []     # per level: rank of each domain's id (KAI's tie-break)
        self.member_domain: list[np.ndarray] = []  # per level: domain of each member node, in member order
        prefix = [""] * n
        for lvl, key in enumerate(self.labels):
            index: dict[str, int] = {}
            dom = np.full(n, -1, dtype=np.int64)
            par: list[int] = []
            for k in np.nonzero(self.member)[0].tolist():
                ident = node_labels[k][key] if lvl == 0 else f"{prefix[k]}.{node_labels[k][key]}"
                d = index.get(ident)
                if d is None:
                    d = index[ident] = len(index)
                    par.append(0 if lvl == 0 else int(self.node_domain[lvl - 1][k]))
                dom[k] = d
                prefix[k] = ident
            names = list(index)
            rank = np.empty(len(names), dtype=np.int64)
            rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
            self.node_domain.append(dom)
            self.names.append(names)
            self.parent.append(np.array(par, dtype=np.int64))
            self.name_rank.append(rank)
            self.member_domain.append(dom[self.member])
        # the lowest domain common to every member node, per deepest level allowed (static: membership is)
        self.common: list[tuple[int, int]] = []
        lvl_c, dom_c = -1, 0
        for lvl in range(len(self.labels)):
            doms = self.member_domain[lvl]
            if lvl_c == lvl - 1 and doms.size and (doms == doms[0]).all():
                lvl_c, dom_c = lvl, int(doms[0])
            self.common.append((lvl_c, dom_c))
        # every domain in one table: row 0 = root, then level 0's domains, level 1's, ...
        self.offset = {-1: 0}
        rows = 1
        for lvl in range(len(self.labels)):
            self.offset[lvl] = rows
            rows += len(self.names[lvl])
        self.table_rows = rows
        self.rows_of = np.zeros((n, len(self.labels) + 1), dtype=np.int64)  # per node: its rows (members only)
        for lvl in range(len(self.labels)):
            self.rows_of[:, lvl + 1] = self.offset[lvl] + np.maximum(self.node_domain[lvl], 0)
        self._within: dict[tuple[int, int], np.ndarray] = {}
        self._present: dict[tuple[int, int, int], np.ndarray] = {}

    def common_domain(self, deepest: int) -> tuple[int, int]:
        """``(level, domain)`` of the lowest domain holding every member node, not below ``deepest``."""
        return self.common[deepest] if deepest >= 0 and self.member.any() else (-1, 0)

    def within(self, lvl: int, d: int) -> np.ndarray:
        """Nodes of domain ``d`` of ``lvl`` (-1: every node), cached."""
        key = (lvl, d)
        if key not in self._within:
            self._within[key] = np.ones(len(self.member), dtype=bool) if lvl < 0 else self.node_domain[lvl] == d
        return self._within[key]

    def present(self, lvl: int, common: tuple[int, int]) -> np.ndarray:
        """Domains of ``lvl`` with a member node inside the common domain, cached."""
        key = (lvl, *common)
        if key not in self._present:
            out = np.zeros(len(self.names[lvl]), dtype=bool)
            out[self.node_domain[lvl][self.member & self.within(*common)]] = True
            self._present[key] = out
        return self._present[key]

    def level_index(self, label: Optional[str]) -> Optional[int]:
        return self.labels.index(label) if label in self.labels else None

    def display(self, lvl: int) -> str:
        """A level's name for people: its alias, else its label."""
        if lvl < 0:
            return ROOT
        return self.topology.levels[lvl].alias or self.labels[lvl]

    def sums(self, lvl: int, values: np.ndarray) -> np.ndarray:
        """Per domain of ``lvl`` (-1: root) the sum of ``values`` (one row per node, any columns) over its nodes."""
        v = values[self.member]
        if lvl < 0:
            return v.sum(axis=0, keepdims=True)
        d = len(self.names[lvl])
        if v.ndim == 1:
            return np.bincount(self.member_domain[lvl], weights=v, minlength=d)
        cols = v.shape[1]
        flat = (self.member_domain[lvl][:, None] * cols + np.arange(cols)[None, :]).ravel()
        return np.bincount(flat, weights=v.ravel(), minlength=d * cols).reshape(d, cols)


class _Tracked:
    """Per-node values (a few columns) and their sums over every domain (one table, see
    ``TopologyTree.offset``), kept in step with the session's node changes (``NodeState.change_log``): after a
    placement only the nodes it touched are recomputed and their difference added to their domains (values are
    counts and requests, so the sums stay exact)."""

    def __init__(self, tree: TopologyTree, compute, compute_one=None):
        self.tree, self.compute = tree, compute  # compute(rows) -> (rows, columns)
        self.compute_one = compute_one  # optional: compute(one node) -> list of columns, in plain Python
        self.pos = -1
        self.values: Optional[np.ndarray] = None
        self.table: Optional[np.ndarray] = None

    def get(self, nodes) -> np.ndarray:
        """The sums table for the nodes' state now (do not modify)."""
        log, tree = nodes.change_log, self.tree
        if self.pos < 0 or len(log) - self.pos > 16:
            self.values = np.array(self.compute(slice(None)), dtype=float)
            table = np.zeros((tree.table_rows, self.values.shape[1]))
            table[0] = self.values[tree.member].sum(axis=0)
            for lvl in range(len(tree.labels)):
                off = tree.offset[lvl]
                table[off:off + len(tree.names[lvl])] = tree.sums(lvl, self.values)
            self.table = table
        elif self.pos < len(log):
            member = tree.member
            rows = sorted(n for n in set(log[self.pos:]) if member[n])
            if len(rows) == 1 and self.compute_one is not None:  # the common case: one placement since
                n = rows[0]
                new_row = self.compute_one(n)
                old = self.values[n].tolist()
                delta = [a - b for a, b in zip(new_row, old)]
                if any(delta):
                    self.table[tree.rows_of[n]] += delta
                    self.values[n] = new_row
            elif rows:
                new = self.compute(np.array(rows, dtype=np.int64))
                for k, n in enumerate(rows):  # usually one node
                    self.table[tree.rows_of[n]] += new[k] - self.values[n]
                    self.values[n] = new[k]
        self.pos = len(log)
        return self.table


class TopologyIndex:
    """Every topology of a session's snapshot, built once per session, with the domain sums plans read."""

    def __init__(self, session):
        nodes = session.snapshot.node_map()
        labels = [nodes[name].labels for name in session.nodes.names]
        self.trees = {t.name: TopologyTree(t, labels) for t in session.snapshot.topologies}
        self._tracked: dict[tuple, _Tracked] = {}

    def tracked(self, key: tuple, tree: TopologyTree, compute, compute_one=None) -> _Tracked:
        """The :class:`_Tracked` sums for ``key`` (made with ``compute`` / ``compute_one`` on first use)."""
        t = self._tracked.get(key)
        if t is None:
            t = self._tracked[key] = _Tracked(tree, compute, compute_one)
        return t


def _task_requests(session, tasks: list[int]) -> np.ndarray:
    """``(tasks, 4)``: GPUs, CPU, memory, pods (1) of each task, as KAI's request vectors hold them: fractions
    as fractions, gpu-memory requests as 0 GPUs."""
    out = np.empty((len(tasks), 4))
    for r, i in enumerate(tasks):
        vec = session.task_vector(i)
        out[r, 0] = 0.0 if session.kind_list[i] == KIND_MEMORY else session.request_gpus(i, None)
        out[r, 1:] = vec[1:]
    return out


def _homogeneous(session, tasks: list[int]) -> bool:
    """KAI ``useRepresentorPodsAccounting``: every task asks for GPUs, or none does."""
    with_gpu = sum(1 for i in tasks if session.is_gpu_task(i))
    return with_gpu in (0, len(tasks))


def _node_free(session, rows, fractional: bool) -> np.ndarray:
    """Idle + releasing resources of nodes ``rows``; with ``fractional`` the free parts of shared GPUs are added
    to the whole GPUs (KAI's approximation for fractional requests)."""
    ns = session.nodes
    free = ns.free[rows]
    if not fractional:
        return free
    free = free.copy()
    gmem = ns.gpu_mem[rows]
    room = np.where(ns.sh_used[rows] > 0, np.maximum(gmem[:, None] - ns.sh_alloc[rows] + ns.sh_rel[rows], 0.0), 0.0)
    free[:, 0] += room.sum(axis=1) / np.where(gmem > 0, gmem, 1.0)
    return free


def _accommodation(biggest: np.ndarray, free: np.ndarray, count: int) -> np.ndarray:
    """KAI ``calcNodeAccommodation`` per node: copies of the largest task (``biggest``) each node holds."""
    if not (biggest[:_RES] > 0).any():
        return np.full(free.shape[0], float(count))
    pos = np.flatnonzero(biggest > 0)
    copies = np.floor(free[:, pos] / biggest[pos]).min(axis=1)  # below 1 exactly where the largest task fails
    copies = np.maximum(copies, 0.0)
    if (biggest[pos] > 0).all() and pos.size == 4:
        return copies
    return np.where((free >= biggest).all(axis=1), copies, 0.0)


def _accommodation_one(biggest: list, free: list, count: int) -> float:
    """:func:`_accommodation` for one node, in plain Python."""
    if not any(b > 0 for b in biggest[:_RES]):
        return float(count)
    if any(f < b for f, b in zip(free, biggest)):
        return 0.0
    return float(max(min(math.floor(f / b) for f, b in zip(free, biggest) if b > 0), 0))


def _ratio(total: np.ndarray, free: np.ndarray) -> np.ndarray:
    """KAI ``getJobRatioToFreeResources`` per domain: the largest request/free over GPU, CPU and memory."""
    cols = np.flatnonzero(total[:_RES] > 0)
    if cols.size == 0:
        return np.zeros(free.shape[0])
    f = free[:, cols]
    out = np.full(f.shape, NOT_IN_DOMAIN_RATIO)
    np.divide(total[cols], f, out=out, where=f > 0)
    return out.max(axis=1)


def _describe(job) -> str:
    return f"job <{job.namespace or 'default'}/{job.name}>"


def plan(session, j: int, tasks: list[int]) -> Optional[Plan]:
    """The domains KAI's topology plugin offers job ``j``'s chunk ``tasks``; None when the job has no topology
    constraint (every node is one set)."""
    job = session.jobs[j].job
    c: Optional[TopologyConstraint] = job.topology
    if c is None or not c.topology or not tasks:
        return None
    tree = session.topology_index().trees.get(c.topology)
    if tree is None:
        return Plan(failure=(f"Requested topology {c.topology} does not exist", {"topology": c.topology}))
    topo = tree.topology
    required, preferred = topo.resolve(c.required_level), topo.resolve(c.preferred_level)
    req_lvl, pref_lvl = tree.level_index(required), tree.level_index(preferred)
    head = f"topology {topo.name}, requirement {required or ''} couldn't be satisfied for {_describe(job)}"
    details: dict = {"topology": topo.name, "required_level": required, "preferred_level": preferred}
    for kind, label, lvl in (("required", required, req_lvl), ("preferred", preferred, pref_lvl)):
        if label and lvl is None:
            return Plan(failure=(f"topology constraint error: workload specified '{label}' as the {kind} topology "
                                 f"constraint level, but the topology tree '{topo.name}' does not contain a level "
                                 f"with this name", details))
    if req_lvl is None and pref_lvl is None:
        return Plan(failure=(f"no topology constraints were found for the job, with topology name {topo.name}",
                             details))

    req = _task_requests(session, tasks)
    total = req.sum(axis=0)
    count = len(tasks)
    index = session.topology_index()
    # domains' free resources: whole GPUs only (KAI: "ignore fractions")
    free = session.nodes.free
    free_sums = index.tracked(("free", topo.name), tree, lambda rows: free[rows],
                              lambda n: free[n].tolist()).get(session.nodes)
    pod_sums = None
    if _homogeneous(session, tasks):
        biggest = req.max(axis=0)
        fractional = 0 < biggest[0] < 1  # nodes' free parts of shared GPUs count for a fractional request
        big = biggest.tolist()
        pod_sums = index.tracked(
            ("pods", topo.name, tuple(big), count), tree,
            lambda rows: _accommodation(biggest, _node_free(session, rows, fractional), count)[:, None],
            None if fractional else (lambda n: [_accommodation_one(big, free[n].tolist(), count)]),
        ).get(session.nodes)
    low = pref_lvl if pref_lvl is not None else req_lvl  # the deepest level that matters
    top = req_lvl if req_lvl is not None else -1
    ratio = _ratio(total, free_sums)  # every domain at once (the table's rows)
    fit_all = pod_sums[:, 0] >= count if pod_sums is not None else ratio <= 1.0

    def rows(lvl: int) -> slice:
        off = tree.offset[lvl]
        return slice(off, off + (1 if lvl < 0 else len(tree.names[lvl])))

    def level(lvl: int) -> tuple:
        """(free resources, allocatable pods or None) of every domain of ``lvl`` (-1: root)."""
        r = rows(lvl)
        return free_sums[r], None if pod_sums is None else pod_sums[r, 0]

    def fits(lvl: int) -> np.ndarray:
        return fit_all[rows(lvl)]

    # the lowest domain common to every member node, never below the preferred level
    common_lvl, common_dom = tree.common_domain(pref_lvl if pref_lvl is not None else len(tree.labels) - 1)
    if not fits(common_lvl)[common_dom]:
        where = "the cluster" if common_lvl < 0 else tree.names[common_lvl][common_dom]
        details.update(_largest(tree, level(top), top, total, count))
        return Plan(failure=(f"{head}: not enough resources in {where} to allocate the job", details))

    pos = _bfs_positions(tree, [ratio[rows(lvl)] for lvl in range(low + 1)])
    within = tree.within(common_lvl, common_dom)
    node_scores = None
    if pref_lvl is not None:
        def node_scores() -> np.ndarray:
            present = tree.present(pref_lvl, (common_lvl, common_dom))
            order = np.argsort(pos[pref_lvl])
            order = order[present[order]]
            score = np.zeros(len(present) + 1)  # the last entry: nodes outside the topology
            score[order] = np.floor((np.arange(len(order)) + 1) / len(order) * 10) * scores.TOPOLOGY
            return score[tree.node_domain[pref_lvl]]

    allowed_required = _domains_with_active_pods(session, j, tree, req_lvl) if req_lvl is not None else None
    candidates: list[tuple[int, int]] = []
    # KAI computes free resources and allocatable pods only inside the common domain's subtree; a domain above it
    # keeps a zero free vector, so it holds no chunk that requests anything (job_filtering.go subSetNodesFn)
    above_fails = bool((total[:_RES] > 0).any())
    for lvl in range(low, top - 1, -1):
        if lvl < common_lvl and above_fails:
            break
        ok = fits(lvl)
        order = np.zeros(1, dtype=np.int64) if lvl < 0 else np.argsort(pos[lvl])
        doms = order[ok[order]].tolist()
        if allowed_required is not None:
            doms = [d for d in doms if _ancestor(tree, lvl, d, req_lvl) in allowed_required]
        candidates.extend((lvl, d) for d in doms)
    if not candidates:
        details.update(_largest(tree, level(top), top, total, count))
        if pod_sums is not None and top >= 0:
            pods, ok = level(top)[1], fits(top)
            details["node_groups"] = ", ".join(
                f"node-group {tree.names[top][d]} can allocate only {int(pods[d])} of {count} required pods"
                for d in range(len(pods)) if not ok[d])
        return Plan(failure=(head, details))
    return Plan(tree=tree, candidates=candidates, within=within, preferred_level=pref_lvl, scores=node_scores)


def _largest(tree: TopologyTree, sums: tuple, lvl: int, total: np.ndarray, count: int) -> dict:
    """Numbers for why-pending: the chunk's GPUs and the largest free GPUs in one domain of ``lvl``."""
    f, pods = sums
    out: dict = {"level": tree.display(lvl), "need_gpus": float(total[0]), "largest_free_gpus": 0.0,
                 "largest_domain": None, "pods": count}
    if f.shape[0]:
        best = int(np.argmax(f[:, 0]))
        out.update(largest_free_gpus=float(f[best, 0]), largest_domain=ROOT if lvl < 0 else tree.names[lvl][best])
        if pods is not None:
            out["largest_allocatable_pods"] = int(pods.max())
    return out


def _bfs_positions(tree: TopologyTree, ratios: list[np.ndarray]) -> list[np.ndarray]:
    """Per level: each domain's position in the breadth-first order of KAI's sorted tree (children by ratio,
    highest first, then id; so a level's order is its parents' order, then that)."""
    out = []
    parent_pos = np.zeros(1, dtype=np.int64)
    for lvl, ratio in enumerate(ratios):
        order = np.lexsort((tree.name_rank[lvl], -ratio, parent_pos[tree.parent[lvl]]))
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = np.arange(len(order))
        out.append(pos)
        parent_pos = pos
    return out


def _ancestor(tree: TopologyTree, lvl: int, d: int, target: int) -> int:
    while lvl > target:
        d = int(tree.parent[lvl][d])
        lvl -= 1
    return d


def _domains_with_active_pods(session, j: int, tree: TopologyTree, req_lvl: int) -> Optional[set[int]]:
    """Required-level domains holding an active allocated pod of the job; None when it has none (any domain)."""
    nodes = [session.node[i] for i in session.jobs[j].tasks
             if session.status[i] in ACTIVE_ALLOCATED and session.node[i] >= 0]
    if not nodes:
        return None
    dom = tree.node_domain[req_lvl]
    return {int(dom[n]) for n in nodes if dom[n] >= 0}
