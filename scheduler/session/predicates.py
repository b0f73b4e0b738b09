"""KAI's node predicates for one session (the ``predicates`` plugin, ``k8s_internal/predicates``), vectorised.

Static, per distinct pod spec and computed once per session (a node's labels and taints do not change in a
session):

- taints and tolerations: every ``NoSchedule`` / ``NoExecute`` taint of the node must be tolerated
  (kube-scheduler TaintToleration; ``PreferNoSchedule`` only scores, and KAI does not add that score);
- node selector and required node affinity (NodeAffinity: any term, every requirement of it; ``matchFields``
  on ``metadata.name``);
- required ConfigMaps that do not exist (KAI's ConfigMap pre-predicate: the pod fits no node).

Dynamic, recomputed for a pod that needs them, because pods placed in the session count (KAI adds every
allocated or pipelined pod to its node's pod list):

- host ports (NodePorts): no pod on the node may hold the same port and protocol on an overlapping address;
- inter-pod affinity (InterPodAffinity): in the node's topology domain some pod matches every required affinity
  term (the first pod of a self-affine group may go anywhere with the topology labels), no pod matches a
  required anti-affinity term, and no pod there has a required anti-affinity term matching this pod.

Pods on a node are the tasks that occupy it (running, binding, pipelined, releasing) and the other schedulers'
pods the snapshot lists (``Node.external_pods``). A task without constraints on a cluster without taints or
anti-affinity costs nothing here.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..model import HostPort, Node, PodAffinityTerm, PodConstraints, Toleration

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

STATIC_CHECKS = ("node affinity/selector", "taints", "missing ConfigMaps")
DYNAMIC_CHECKS = ("host ports", "pod affinity", "pod anti-affinity")
"""Check names as they appear in :attr:`NodeFit.failures` and why-pending (after the resource checks)."""


class _PodRecord:
    __slots__ = ("namespace", "labels", "anti", "ports", "preferred", "preferred_anti")

    def __init__(self, namespace: str, labels: dict, anti: list, ports: list, preferred: list = (),
                 preferred_anti: list = ()):
        self.namespace, self.labels, self.anti, self.ports = namespace, labels, anti, ports
        self.preferred, self.preferred_anti = preferred, preferred_anti


def _term_matches(term: PodAffinityTerm, owner_ns: str, pod_ns: str, labels: dict) -> bool:
    return term.applies_to(pod_ns, owner_ns) and term.selector.matches(labels)


def _tolerated(taint, tolerations: list[Toleration]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def untolerated_taints(node: Node, constraints: Optional[PodConstraints]) -> list:
    """The node's ``NoSchedule`` / ``NoExecute`` taints a pod with ``constraints`` does not tolerate."""
    tolerations = constraints.tolerations if constraints is not None else []
    return [t for t in node.taints if t.effect in BLOCKING_EFFECTS and not _tolerated(t, tolerations)]


def matches_node(constraints: Optional[PodConstraints], node: Node) -> bool:
    """Node selector and required node affinity (NodeAffinity filter)."""
    if constraints is None:
        return True
    labels = node.labels
    if any(labels.get(k) != v for k, v in constraints.node_selector.items()):
        return False
    if not constraints.node_affinity:
        return True
    fields = {"metadata.name": node.name}
    return any(all(r.matches(labels) for r in term.match_expressions)
               and all(r.matches(fields) for r in term.match_fields) for term in constraints.node_affinity)


class Predicates:
    """Predicate masks over the session's nodes (index order of :class:`NodeState`)."""

    def __init__(self, session):
        self.s = session
        snap = session.snapshot
        names = session.nodes.names
        by_name = {n.name: n for n in snap.nodes}
        self.nodes: list[Node] = [by_name[name] for name in names]
        self.n = len(names)
        self.labels = [n.labels for n in self.nodes]
        self.blocking = [[t for t in n.taints if t.effect in BLOCKING_EFFECTS] for n in self.nodes]
        self.any_taints = any(self.blocking)
        self.config_maps = None if snap.config_maps is None else set(snap.config_maps)
        self._static: dict[object, tuple[Optional[np.ndarray], dict]] = {}
        self._keys: dict[int, tuple] = {}
        self._domains: dict[str, np.ndarray] = {}
        # pods on each node (only built when some pod uses host ports or inter-pod (anti-)affinity)
        self.records: list[dict[int, _PodRecord]] = [dict() for _ in range(self.n)]
        self.external: list[list[_PodRecord]] = [[_PodRecord(p.namespace, p.labels, p.pod_anti_affinity,
                                                             p.host_ports) for p in n.external_pods]
                                                 for n in self.nodes]
        self.anti_pods = sum(1 for recs in self.external for r in recs if r.anti)
        self.tracking = False
        self.scores_affinity = False
        self.task_ns: dict[int, str] = {}
        # tasks whose pod-affinity score KAI stopped computing for the rest of the session (preferred_score)
        self.affinity_skipped: set[int] = set()
        # tasks whose inter-pod affinity filter KAI stopped checking for the rest of the session (note_pre_filter)
        self.filter_skipped: set[int] = set()

    # ------------------------------------------------------------------ tracking pods on nodes

    def start(self, tasks_on_nodes) -> None:
        """Record the tasks on nodes at session open (``(task, node)`` pairs)."""
        constrained = self.s.constrained_tasks
        self.constrained = bool(constrained)
        # some task has preferred terms: pod-affinity scores (and KAI's session-long skips of them) can matter
        self.scores_affinity = any(c.preferred_pod_affinity or c.preferred_pod_anti_affinity for c in constrained)
        self.tracking = self.anti_pods > 0 or self.scores_affinity or any(
            c.host_ports or c.pod_affinity or c.pod_anti_affinity for c in constrained)
        self.preferred_pods = 0  # placed pods with preferred (anti-)affinity terms: they score others
        if not self.tracking:
            return
        for i, n in tasks_on_nodes:
            self.add(i, n)

    def applies(self) -> bool:
        """Whether any predicate can fail in this session (else every mask is None and nothing is tracked)."""
        return self.any_taints or self.tracking or self.constrained

    def _record(self, i: int) -> Optional[_PodRecord]:
        c = self.s.task_objs[i].constraints
        if c is None:
            return None
        return _PodRecord(self.namespace(i), c.labels, c.pod_anti_affinity, c.host_ports, c.preferred_pod_affinity,
                          c.preferred_pod_anti_affinity)

    def namespace(self, i: int) -> str:
        ns = self.task_ns.get(i)
        if ns is None:
            job = self.s.snapshot.jobs[self.s.task_job[i]]
            name = self.s.task_names[i]
            ns = job.namespace or (name.split("/", 1)[0] if "/" in name else "default")
            self.task_ns[i] = ns
        return ns

    def add(self, i: int, n: int) -> None:
        """Task ``i`` now occupies node ``n`` (allocated, pipelined, running or releasing there)."""
        if not self.tracking or n < 0:
            return
        rec = self._record(i)
        if rec is not None:
            self.records[n][i] = rec
            if rec.anti:
                self.anti_pods += 1
            if rec.preferred or rec.preferred_anti:
                self.preferred_pods += 1

    def remove(self, i: int, n: int) -> None:
        if not self.tracking or n < 0:
            return
        rec = self.records[n].pop(i, None)
        if rec is not None and rec.anti:
            self.anti_pods -= 1
        if rec is not None and (rec.preferred or rec.preferred_anti):
            self.preferred_pods -= 1

    def _pods(self, n: int):
        yield from self.external[n]
        yield from self.records[n].values()

    # ------------------------------------------------------------------ static masks

    def static(self, i: int) -> tuple[Optional[np.ndarray], dict]:
        """``(mask or None when every node passes, {check: ok mask})`` of the static predicates for task ``i``."""
        c: Optional[PodConstraints] = self.s.task_objs[i].constraints
        if c is None:
            if not self.any_taints:
                return None, {}
            key: object = None
        else:
            key = self._keys.get(id(c))
            if key is None:  # equal specs share one mask: most pods of a cluster carry the same few tolerations
                needs_ns = bool(c.config_maps) and self.config_maps is not None
                key = self._keys[id(c)] = (repr(c.tolerations) if self.any_taints else None,
                                           repr(sorted(c.node_selector.items())), repr(c.node_affinity),
                                           (tuple(c.config_maps), self.namespace(i)) if needs_ns else None)
        hit = self._static.get(key)
        if hit is None:
            hit = self._static[key] = self._compute_static(c, self.namespace(i) if c is not None else "")
        return hit

    def _compute_static(self, c: Optional[PodConstraints], ns: str) -> tuple[Optional[np.ndarray], dict]:
        parts: dict[str, np.ndarray] = {}
        tolerations = c.tolerations if c is not None else []
        if self.any_taints:
            parts["taints"] = np.array([all(_tolerated(t, tolerations) for t in taints) for taints in self.blocking],
                                       dtype=bool)
        if c is not None and (c.node_selector or c.node_affinity):
            parts["node affinity/selector"] = np.array([matches_node(c, node) for node in self.nodes], dtype=bool)
        if c is not None and c.config_maps and self.config_maps is not None:
            missing = [name for name in c.config_maps if f"{ns}/{name}" not in self.config_maps]
            if missing:
                parts["missing ConfigMaps"] = np.zeros(self.n, dtype=bool)
        if not parts:
            return None, {}
        mask = np.ones(self.n, dtype=bool)
        for ok in parts.values():
            mask &= ok
        return mask, parts

    def missing_config_maps(self, i: int) -> list[str]:
        """Required ConfigMaps of task ``i`` that do not exist (empty when ConfigMaps are not known)."""
        c = self.s.task_objs[i].constraints
        if c is None or not c.config_maps or self.config_maps is None:
            return []
        ns = self.namespace(i)
        return [name for name in c.config_maps if f"{ns}/{name}" not in self.config_maps]

    # ------------------------------------------------------------------ dynamic masks

    def is_dynamic(self, i: int) -> bool:
        """Whether task ``i``'s fit depends on the pods placed so far (host ports, inter-pod affinity)."""
        if not self.tracking:
            return False
        c = self.s.task_objs[i].constraints
        if c is not None and (c.host_ports or c.pod_affinity or c.pod_anti_affinity or c.preferred_pod_affinity
                              or c.preferred_pod_anti_affinity):
            return True
        return self.anti_pods > 0 or self.preferred_pods > 0

    def dynamic(self, i: int, rows=slice(None)) -> dict[str, np.ndarray]:
        """``{check: ok mask over rows}`` of the dynamic predicates for task ``i`` (empty when none apply)."""
        c = self.s.task_objs[i].constraints
        ns = self.namespace(i)
        labels = c.labels if c is not None else {}
        out: dict[str, np.ndarray] = {}
        if c is not None and c.host_ports:
            out["host ports"] = np.array([not self._port_conflict(c.host_ports, k) for k in range(self.n)],
                                         dtype=bool)
        if c is not None and c.pod_affinity:
            out["pod affinity"] = self._affinity_ok(c.pod_affinity, ns, labels)
        anti_ok = np.ones(self.n, dtype=bool)
        if c is not None and c.pod_anti_affinity:
            for term in c.pod_anti_affinity:
                dom = self.domains(term.topology_key)
                counts = self._domain_counts(dom, lambda r: _term_matches(term, ns, r.namespace, r.labels))
                anti_ok &= ~((dom >= 0) & (counts[np.maximum(dom, 0)] > 0))
        if self.anti_pods and i not in self.filter_skipped:
            anti_ok &= self._existing_anti_ok(ns, labels)
        if not anti_ok.all():
            out["pod anti-affinity"] = anti_ok
        if not isinstance(rows, slice):
            out = {k: v[rows] for k, v in out.items()}
        return out

    def note_placement_attempt(self, i: int) -> None:
        """KAI tries to place task ``i`` (``allocateTask``): its PreFilter, then the node order's PreScore, each of
        which may mark the task for the rest of the session (:meth:`note_pre_filter`, :meth:`note_node_search`)."""
        self.note_pre_filter(i)
        self.note_node_search(i)

    def note_pre_filter(self, i: int) -> None:
        """KAI runs kube-scheduler's InterPodAffinity PreFilter each time it tries to place task ``i``
        (``actions/common/allocate.go`` allocateTask → ``PrePredicateFn``). It returns Skip when the pod has no
        required (anti-)affinity term of its own and no placed pod's required anti-affinity term matches it on a
        node carrying the term's topology label; KAI then skips the InterPodAffinity filter for that pod for the
        rest of the session, whatever is placed later (``plugins/predicates/predicates.go``: ``skipPredicates``
        is filled, never cleared). So does :meth:`dynamic` for a task recorded here: a pod tried while no
        anti-affinity term matched it ignores one placed later (kai_diff_gen seed 5024)."""
        if not self.tracking or i in self.filter_skipped:
            return
        c = self.s.task_objs[i].constraints
        if c is not None and (c.pod_affinity or c.pod_anti_affinity):
            return
        if self.anti_pods and self._existing_anti_matches(self.namespace(i), c.labels if c is not None else {}):
            return
        self.filter_skipped.add(i)

    def note_node_search(self, i: int) -> None:
        """KAI runs the pod-affinity PreScore each time it looks for a node for task ``i``, also when the score
        cannot matter here (no term of its own, no placed pod with preferred terms): that is a Skip, and it
        sticks for the session (see :meth:`preferred_score`)."""
        if not self.tracking or self.preferred_pods or i in self.affinity_skipped:
            return
        c = self.s.task_objs[i].constraints
        if c is None or not (c.preferred_pod_affinity or c.preferred_pod_anti_affinity):
            self.affinity_skipped.add(i)

    def preferred_score(self, i: int) -> Optional[np.ndarray]:
        """KAI's podaffinity score (plugins/podaffinity, kube-scheduler InterPodAffinity Score, not normalised):
        per node the sum of the weights of the topology domains it is in, where the pod's preferred affinity
        (+weight) / anti-affinity (−weight) terms match an existing pod there, and existing pods' preferred terms
        match this pod. Existing pods' required affinity adds nothing (KAI's hard pod affinity weight is 0).
        None when nothing contributes.

        KAI evaluates this each time it looks for a node for the task (its podaffinity plugin's NodePreOrderFn,
        kube-scheduler's PreScore), and when nothing contributes (PreScore's Skip) it records the task and
        scores it 0 on every later look in the session, whatever is placed meanwhile
        (``plugins/podaffinity/podaffinity.go``: ``skipOrderFn`` is filled, never cleared). So does this: a
        task once scored None stays None until the session ends."""
        if not self.tracking or i in self.affinity_skipped:
            return None
        c = self.s.task_objs[i].constraints
        own = (c.preferred_pod_affinity, c.preferred_pod_anti_affinity) if c is not None else ((), ())
        if not (own[0] or own[1] or self.preferred_pods):
            self.affinity_skipped.add(i)
            return None
        ns = self.namespace(i)
        labels = c.labels if c is not None else {}
        topo: dict[str, dict[str, int]] = {}

        def add(term: PodAffinityTerm, weight: int, k: int) -> None:
            value = self.labels[k].get(term.topology_key)
            if value is not None:
                per = topo.setdefault(term.topology_key, {})
                per[value] = per.get(value, 0) + weight

        for k in range(self.n):
            if not self.labels[k]:
                continue
            for rec in self._pods(k):
                for term in own[0]:
                    if _term_matches(term, ns, rec.namespace, rec.labels):
                        add(term, term.weight, k)
                for term in own[1]:
                    if _term_matches(term, ns, rec.namespace, rec.labels):
                        add(term, -term.weight, k)
                for term in rec.preferred:
                    if _term_matches(term, rec.namespace, ns, labels):
                        add(term, term.weight, k)
                for term in rec.preferred_anti:
                    if _term_matches(term, rec.namespace, ns, labels):
                        add(term, -term.weight, k)
        if not topo:
            self.affinity_skipped.add(i)
            return None
        out = np.zeros(self.n)
        for key, per in topo.items():
            for k in range(self.n):
                value = self.labels[k].get(key)
                if value is not None:
                    out[k] += per.get(value, 0)
        return out

    def _port_conflict(self, ports: list[HostPort], k: int) -> bool:
        for rec in self._pods(k):
            for have in rec.ports:
                if any(p.conflicts(have) for p in ports):
                    return True
        return False

    def domains(self, key: str) -> np.ndarray:
        """Topology domain id of every node for a label key (-1 where the node lacks the label)."""
        dom = self._domains.get(key)
        if dom is None:
            ids: dict[str, int] = {}
            dom = np.array([ids.setdefault(lab[key], len(ids)) if key in lab else -1 for lab in self.labels],
                           dtype=np.int64)
            self._domains[key] = dom
        return dom

    def _domain_counts(self, dom: np.ndarray, match) -> np.ndarray:
        counts = np.zeros(max(int(dom.max(initial=-1)) + 1, 1), dtype=np.int64)
        for k in range(self.n):
            if dom[k] < 0:
                continue
            for rec in self._pods(k):
                if match(rec):
                    counts[dom[k]] += 1
        return counts

    def _affinity_ok(self, terms: list[PodAffinityTerm], ns: str, labels: dict) -> np.ndarray:
        """InterPodAffinity's required affinity: in every term's domain a pod matches all terms; with no such pod
        anywhere, a pod matching its own terms may start the group on any node with the topology labels."""
        doms = [self.domains(t.topology_key) for t in terms]
        has_all = np.ones(self.n, dtype=bool)
        for dom in doms:
            has_all &= dom >= 0

        def all_terms(rec) -> bool:
            return all(_term_matches(t, ns, rec.namespace, rec.labels) for t in terms)

        ok = has_all.copy()
        any_match = False
        for dom in doms:
            counts = self._domain_counts(dom, all_terms)
            any_match = any_match or bool(counts.any())
            ok &= (dom >= 0) & (counts[np.maximum(dom, 0)] > 0)
        if not any_match and all(_term_matches(t, ns, ns, labels) for t in terms):
            return has_all
        return ok

    def _existing_anti_domains(self, ns: str, labels: dict):
        """``(topology key, domain)`` of every placed pod's required anti-affinity term that matches this pod, on a
        node carrying the term's topology label (kube-scheduler's ``existingAntiAffinityCounts``)."""
        for k in range(self.n):
            for rec in self._pods(k):
                for term in rec.anti:
                    if _term_matches(term, rec.namespace, ns, labels):
                        d = self.domains(term.topology_key)[k]
                        if d >= 0:
                            yield term.topology_key, int(d)

    def _existing_anti_matches(self, ns: str, labels: dict) -> bool:
        """Whether :meth:`_existing_anti_domains` finds any (the PreFilter's counts are not empty)."""
        return next(self._existing_anti_domains(ns, labels), None) is not None

    def _existing_anti_ok(self, ns: str, labels: dict) -> np.ndarray:
        """No pod in the node's domain has a required anti-affinity term matching this pod (symmetry)."""
        forbidden: dict[str, set[int]] = {}
        for key, d in self._existing_anti_domains(ns, labels):
            forbidden.setdefault(key, set()).add(d)
        ok = np.ones(self.n, dtype=bool)
        for key, bad in forbidden.items():
            dom = self.domains(key)
            ok &= ~np.isin(dom, list(bad))
        return ok
