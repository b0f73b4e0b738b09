"""Necessary conditions for a victim scenario, checked with arithmetic before it is simulated.

A scenario's simulation (:mod:`.solver`) evicts its victims, then places the preemptor's chunk and the
victims again, pipeline-only, on the nodes' idle + releasing resources. Nothing placed there ever frees
resources: a victim put back is un-evicted (it takes its resources again), a moved victim keeps its releasing
copy on the old node, and every placement first checks that the node's idle + releasing resources hold it.
So every task the scenario must place lands on a node whose **capacity** — idle + releasing now, plus what
the scenario's victims hold there — it fits, and the tasks placed on one node never exceed that capacity.

:func:`may_place` checks a relaxation of that packing problem; when it fails, no placement exists and the
simulation would fail too, so the solver skips it (the scenario still counts against the search budget, so
results are those of simulating it). Which tasks must be placed depends on the action: the preemptor's chunk
always; for consolidation also every victim (``allPodsReallocated``).

The relaxation, per class of identical tasks ``c`` (GPU request rounded *down* to a power of two, CPU, memory):

- ``E_c`` = ready nodes whose capacity holds one task of ``c`` (whole GPUs, CPU, memory, one pod; a shared-GPU
  task only needs a GPU node, its device share is ignored);
- the classes whose ``E`` lies inside ``E_c`` can only use ``E_c``: their CPU, memory and pods must fit in the
  capacity of ``E_c``, and for every power of two ``s`` their whole-GPU tasks of ``s`` GPUs or more, in units
  of ``s`` GPUs, must fit in ``Σ_{n ∈ E_c} ⌊gpu_n / s⌋`` (power-of-two sizes divide each other, so a node
  holding such tasks holds a multiple of ``s`` GPUs).

Fractional victims can free a whole GPU when every fraction on it goes; the capacity counts one GPU per shared
GPU a victim sits on (an upper bound), so the check stays a necessary condition.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..session import KIND_MEMORY, KIND_NONE, KIND_WHOLE
from ..session.nodes import CPU, GPU, MEM, PODS

_EPS = 1e-9


def scenario_capacity(session, victims: Iterable[int]) -> np.ndarray:
    """``(nodes, 4)`` idle + releasing whole GPUs, CPU, memory and pods once ``victims`` are evicted: what
    the scenario's placements can use on every node (an upper bound for GPUs of shared devices)."""
    return capacity_with(session, [victim_delta(session, victims)])


def victim_delta(session, victims: Iterable[int]) -> tuple[np.ndarray, np.ndarray, frozenset]:
    """What evicting ``victims`` adds to the nodes' idle + releasing resources, for :func:`capacity_with`:
    ``(node per victim, (GPUs, cpu, memory, pods) per victim, {(node, device) of shared GPUs they sit on})``
    (the rows of :meth:`Session.task_vector`, gathered from the session's columns in one go)."""
    node, kind = session.node, session.kind_list
    placed = [i for i in victims if node[i] >= 0]
    rows = np.array([node[i] for i in placed], dtype=np.int64)
    vecs = np.ones((len(placed), 4))
    if placed:
        idx = np.array(placed, dtype=np.int64)
        vecs[:, 0] = np.where(session.kind[idx] == KIND_WHOLE, session.gpu[idx], 0.0)
        vecs[:, 1] = session.cpu[idx]
        vecs[:, 2] = session.mem[idx]
    indices = session.indices
    groups = frozenset((node[i], slot) for i in placed if kind[i] > KIND_WHOLE for slot in indices[i])
    return rows, vecs, groups


def capacity_with(session, deltas) -> np.ndarray:
    """Idle + releasing resources of every node plus the :func:`victim_delta` s of a scenario's victims;
    each shared GPU a victim sits on counts one whole GPU more (it frees one if all its fractions go).

    A node's idle + releasing count below zero (KAI's discard drift of shared-GPU accounting, docs/actions.md)
    counts as zero: a simulation places nothing on such a node but does not need it either, and the pre-check
    of every candidate victim (``Solver._may_ever_succeed``) puts the victims a scenario leaves alone back on
    their own nodes, which a negative remainder would wrongly forbid."""
    cap = np.maximum(session.nodes.free, 0.0)
    if not deltas:
        return cap
    if len(deltas) == 1:
        rows, vecs, groups = deltas[0]
    else:
        rows = np.concatenate([d[0] for d in deltas])
        vecs = np.concatenate([d[1] for d in deltas])
        groups = frozenset().union(*(d[2] for d in deltas))
    if rows.size:
        np.add.at(cap, rows, vecs)
    for n, _ in groups:
        cap[n, GPU] += 1.0
    return cap


def _pow2_floor(x: float) -> int:
    k = int(x + _EPS)
    return 1 << (k.bit_length() - 1) if k >= 1 else 0


def task_classes(session, tasks: Iterable[int]) -> dict[tuple, int]:
    """``{(kind, whole GPUs, cpu, memory, GPU memory MiB): count}`` for the packing check."""
    out: dict[tuple, int] = {}
    kind, gpu, cpu, mem = session.kind_list, session._gpu_l, session._cpu_l, session._mem_l
    for i in tasks:
        k = kind[i]
        key = (k, float(gpu[i]) if k == KIND_WHOLE else 0.0, cpu[i], mem[i],
               float(session.gmem[i]) if k == KIND_MEMORY else 0.0)
        out[key] = out.get(key, 0) + 1
    return out


def may_place(session, classes: dict[tuple, int], cap: np.ndarray) -> bool:
    """False when the tasks of ``classes`` (:func:`task_classes`) provably cannot all be placed on ``cap``
    (:func:`scenario_capacity`); True when they might."""
    if not classes:
        return True
    ns = session.nodes
    capT = cap.T
    base = ns.ready & (capT[PODS] >= 1)
    gpu_node = ns.gpus > 0
    eligible = {}
    for c in classes:
        k, g, cpu, mem, gmem = c
        e = base & (capT[CPU] >= cpu) & (capT[MEM] >= mem)
        if k == KIND_WHOLE:
            e &= capT[GPU] >= g - _EPS
        elif k != KIND_NONE:
            e &= gpu_node
            if k == KIND_MEMORY:
                e &= ns.gpu_mem >= gmem
        if not e.any():
            return False
        eligible[c] = e
    if len(classes) == 1:
        ((c, count),) = classes.items()
        return _fits_within({c: count}, eligible[c], cap)
    for c, e in eligible.items():
        inside = {c2: n for c2, n in classes.items() if c2 is c or not (eligible[c2] & ~e).any()}
        if not _fits_within(inside, e, cap):
            return False
    return True


def _fits_within(classes: dict[tuple, int], nodes: np.ndarray, cap: np.ndarray) -> bool:
    """Totals and power-of-two GPU units of ``classes`` fit the capacity of the ``nodes`` mask."""
    sub = cap[nodes]
    gpus, cpu, mem, pods = sub.sum(axis=0).tolist()
    if sum(classes.values()) > pods + _EPS:
        return False
    if sum(c[2] * n for c, n in classes.items()) > cpu + _EPS:
        return False
    if sum(c[3] * n for c, n in classes.items()) > mem + _EPS:
        return False
    sizes: dict[int, int] = {}
    for c, n in classes.items():
        if c[0] == KIND_WHOLE:
            s = _pow2_floor(c[1])
            sizes[s] = sizes.get(s, 0) + n
    if not sizes:
        return True
    node_gpus = np.floor(sub[:, GPU] + _EPS)
    units, prev = 0, 0
    for s in sorted(sizes, reverse=True):
        units = units * (prev // s) + sizes[s]  # larger sizes re-expressed in units of s GPUs
        prev = s
        if units > float(np.floor(node_gpus / s).sum()):
            return False
    return True


__all__ = ["scenario_capacity", "victim_delta", "capacity_with", "task_classes", "may_place"]
