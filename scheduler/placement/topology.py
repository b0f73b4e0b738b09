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
  without one). Every domain of those levels that fits is a candidate; when the job already has active pods
  and a required level, only the required-level domains holding one of them (and their sub-domains) count.
- Candidates are tried in turn, narrowest level first; inside a level in the order of the tree sorted for
  bin-packing: children by the chunk's dominant-resource ratio to their free resources, highest first (the
  fullest domain that still fits), then by id. The first domain where every task fits wins.
- With a preferred level every node gets ``floor((k + 1) / D * 10) * 100000`` in node order, ``k`` being its
  preferred-level domain's position among the ``D`` such domains in that sorted order.

:func:`plan` returns the candidate node sets (and node scores) for one chunk, or why there is none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..model import Topology, TopologyConstraint
from ..session.core import ACTIVE_ALLOCATED, KIND_MEMORY
from . import scores

ROOT = "root"
NOT_IN_DOMAIN_RATIO = 1000.0  # KAI requiredResourceNotInDomainRatio
_RES = 3  # GPU, CPU, memory columns of the node arrays take part in the ratio (pods do not)


@dataclass
class Plan:
    """Where a chunk may go: ``node_sets`` (bool masks over the session's nodes) in the order to try, and a
    per-node score to add (preferred level), or ``failure`` = ``(message, details)`` when no domain fits."""

    node_sets: list[np.ndarray] = field(default_factory=list)
    bonus: Optional[np.ndarray] = None
    domains: list[str] = field(default_factory=list)
    failure: Optional[tuple[str, dict]] = None


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
            self.node_domain.append(dom)
            self.names.append(list(index))
            self.parent.append(np.array(par, dtype=np.int64))

    def level_index(self, label: Optional[str]) -> Optional[int]:
        return self.labels.index(label) if label in self.labels else None

    def display(self, lvl: int) -> str:
        """A level's name for people: its alias, else its label."""
        if lvl < 0:
            return ROOT
        return self.topology.levels[lvl].alias or self.labels[lvl]


class TopologyIndex:
    """Every topology of a session's snapshot, built once per session."""

    def __init__(self, session):
        nodes = session.snapshot.node_map()
        labels = [nodes[name].labels for name in session.nodes.names]
        self.trees = {t.name: TopologyTree(t, labels) for t in session.snapshot.topologies}


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


def _node_free(session, fractional: bool) -> np.ndarray:
    """Idle + releasing resources per node; with ``fractional`` the free parts of shared GPUs are added to the
    whole GPUs (KAI's approximation for fractional requests)."""
    ns = session.nodes
    free = ns.free.copy()
    if fractional and ns.gpu_mem.size:
        room = np.where(ns.sh_used > 0, np.maximum(ns.gpu_mem[:, None] - ns.sh_alloc + ns.sh_rel, 0.0), 0.0)
        free[:, 0] += room.sum(axis=1) / np.where(ns.gpu_mem > 0, ns.gpu_mem, 1.0)
    return free


def _accommodation(req: np.ndarray, free: np.ndarray, count: int) -> np.ndarray:
    """KAI ``calcNodeAccommodation`` per node: copies of the largest task each node holds."""
    biggest = req.max(axis=0)
    if not (biggest[:_RES] > 0).any():
        return np.full(free.shape[0], count, dtype=np.int64)
    fits = (free >= biggest[None, :]).all(axis=1)
    pos = biggest > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        copies = np.floor(free[:, pos] / biggest[pos]).min(axis=1)
    return np.where(fits, copies, 0).astype(np.int64)


def _ratio(total: np.ndarray, free: np.ndarray) -> np.ndarray:
    """KAI ``getJobRatioToFreeResources`` per domain: the largest request/free over GPU, CPU and memory."""
    out = np.zeros(free.shape[0])
    for c in range(_RES):
        if total[c] <= 0:
            continue
        with np.errstate(divide="ignore"):
            r = np.where(free[:, c] > 0, total[c] / np.where(free[:, c] > 0, free[:, c], 1.0), NOT_IN_DOMAIN_RATIO)
        out = np.maximum(out, r)
    return out


def _describe(job) -> str:
    return f"job <{job.namespace or 'default'}/{job.name}>"


def plan(session, j: int, tasks: list[int]) -> Optional[Plan]:
    """The domains KAI's topology plugin offers job ``j``'s chunk ``tasks``; None when the job has no topology
    constraint (every node is one set)."""
    job = session.jobs[j].job
    c: Optional[TopologyConstraint] = job.topology
    if c is None or not c.topology or not tasks:
        return None
    index = session.topology_index()
    tree = index.trees.get(c.topology)
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

    member = tree.member
    req = _task_requests(session, tasks)
    total = req.sum(axis=0)
    biggest_gpu = float(req[:, 0].max())
    free = _node_free(session, False)  # domains' free resources: whole GPUs only ("ignore fractions")
    homogeneous = _homogeneous(session, tasks)
    per_node = None
    if homogeneous:
        fractional = 0 < biggest_gpu < 1  # nodes' free parts of shared GPUs count for a fractional request
        per_node = _accommodation(req, _node_free(session, True) if fractional else free, len(tasks))
    count = len(tasks)

    # per level (-1 = root): free resources, allocatable pods and the fit of every domain
    def level_sums(lvl: int):
        if lvl < 0:
            rows = member
            f = free[rows].sum(axis=0, keepdims=True)
            pods = np.array([per_node[rows].sum()]) if per_node is not None else None
            return f, pods
        dom = tree.node_domain[lvl]
        d = len(tree.names[lvl])
        rows = dom >= 0
        f = np.stack([np.bincount(dom[rows], weights=free[rows, col], minlength=d) for col in range(4)], axis=1)
        pods = np.bincount(dom[rows], weights=per_node[rows], minlength=d) if per_node is not None else None
        return f, pods

    sums = {lvl: level_sums(lvl) for lvl in range(-1, len(tree.labels))}

    def fits(lvl: int) -> np.ndarray:
        f, pods = sums[lvl]
        if pods is not None:
            return pods >= count
        return _ratio(total, f) <= 1.0

    # the lowest domain common to every member node, never below the preferred level
    common_lvl, common_dom = -1, 0
    stop = pref_lvl if pref_lvl is not None else len(tree.labels) - 1
    if member.any():
        for lvl in range(stop + 1):
            doms = np.unique(tree.node_domain[lvl][member])
            if doms.size != 1:
                break
            common_lvl, common_dom = lvl, int(doms[0])
    common_name = ROOT if common_lvl < 0 else tree.names[common_lvl][common_dom]
    if not fits(common_lvl)[common_dom]:
        where = "the cluster" if common_lvl < 0 else common_name
        details.update(_largest(tree, sums, req_lvl if req_lvl is not None else -1, total, count, per_node))
        return Plan(failure=(f"{head}: not enough resources in {where} to allocate the job", details))

    ranks = _sibling_ranks(tree, sums, total)
    in_common = (np.ones(len(member), dtype=bool) if common_lvl < 0
                 else tree.node_domain[common_lvl] == common_dom)
    bonus = None
    if pref_lvl is not None:
        order = _bfs_order(tree, ranks, pref_lvl)
        dom = tree.node_domain[pref_lvl]
        present = [d for d in order if ((dom == d) & in_common).any()]
        bonus = np.zeros(len(member))
        for k, d in enumerate(present):
            bonus[dom == d] = np.floor((k + 1) / len(present) * 10) * scores.TOPOLOGY

    top = req_lvl if req_lvl is not None else -1
    low = pref_lvl if pref_lvl is not None else req_lvl
    allowed_required = _domains_with_active_pods(session, j, tree, req_lvl) if req_lvl is not None else None
    node_sets, names = [], []
    last_level_fit = None
    for lvl in range(low, top - 1, -1):
        ok = fits(lvl)
        if lvl == top:
            last_level_fit = ok
        doms = [0] if lvl < 0 else _bfs_order(tree, ranks, lvl)
        for d in doms:
            if not ok[d]:
                continue
            rows = member if lvl < 0 else tree.node_domain[lvl] == d
            if allowed_required is not None:
                anc = d if lvl == req_lvl else _ancestor(tree, lvl, d, req_lvl)
                if anc not in allowed_required:
                    continue
            node_sets.append(rows & in_common)
            names.append(ROOT if lvl < 0 else tree.names[lvl][d])
    if not node_sets:
        details.update(_largest(tree, sums, top, total, count, per_node))
        if last_level_fit is not None and per_node is not None and top >= 0:
            pods = sums[top][1]
            groups = ", ".join(f"node-group {tree.names[top][d]} can allocate only {int(pods[d])} of {count} "
                               f"required pods" for d in range(len(pods)) if not last_level_fit[d])
            details["node_groups"] = groups
        return Plan(failure=(head, details))
    return Plan(node_sets=node_sets, bonus=bonus, domains=names)


def _largest(tree: TopologyTree, sums: dict, lvl: int, total: np.ndarray, count: int, per_node) -> dict:
    """Numbers for why-pending: the chunk's GPUs and the largest free GPUs in one domain of ``lvl``."""
    f, pods = sums[lvl]
    if f.shape[0] == 0:
        return {"level": tree.display(lvl), "need_gpus": float(total[0]), "largest_free_gpus": 0.0,
                "largest_domain": None, "pods": count}
    best = int(np.argmax(f[:, 0]))
    out = {"level": tree.display(lvl), "need_gpus": float(total[0]), "largest_free_gpus": float(f[best, 0]),
           "largest_domain": ROOT if lvl < 0 else tree.names[lvl][best], "pods": count}
    if pods is not None:
        out["largest_allocatable_pods"] = int(pods.max())
    return out


def _sibling_ranks(tree: TopologyTree, sums: dict, total: np.ndarray) -> list[np.ndarray]:
    """Per level: each domain's position among its siblings in KAI's sorted tree (ratio descending, id)."""
    out = []
    for lvl in range(len(tree.labels)):
        f = sums[lvl][0]
        ratio = _ratio(total, f)
        names = tree.names[lvl]
        order = sorted(range(len(names)), key=lambda d: (int(tree.parent[lvl][d]), -ratio[d], names[d]))
        rank = np.empty(len(names), dtype=np.int64)
        prev, k = None, 0
        for d in order:
            p = int(tree.parent[lvl][d])
            k = 0 if p != prev else k + 1
            prev = p
            rank[d] = k
        out.append(rank)
    return out


def _bfs_order(tree: TopologyTree, ranks: list[np.ndarray], lvl: int) -> list[int]:
    """Domains of ``lvl`` in breadth-first order of the sorted tree (parents' order, then sibling rank)."""
    pos = np.zeros(1, dtype=np.int64)  # root
    order: list[int] = [0]
    for level in range(lvl + 1):
        par = tree.parent[level]
        idx = np.arange(len(par))
        key = np.lexsort((ranks[level], pos[par]))
        order = idx[key].tolist()
        pos = np.empty(len(par), dtype=np.int64)
        pos[key] = np.arange(len(par))
    return order


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
