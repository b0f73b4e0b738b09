"""Transactional operations on a session (KAI ``framework.Statement``, kai-semantics §c.0, §c.2b).

Every tentative operation (allocate, pipeline, evict) is applied to the session at once, so later queries
see it (queue Allocated grows on allocate/pipeline and shrinks on evict immediately), and is recorded so
that :meth:`Statement.rollback` can undo everything after a :meth:`Statement.checkpoint`.

- ``allocate``: the task is placed on idle resources → status ``binding``.
- ``pipeline``: placed on resources that are being released → status ``pipelined``. A task evicted in this
  session that is pipelined back onto the same node (same GPU groups for a fraction) is *un-evicted*
  (restored to its previous status) instead; placing it elsewhere is a move: its releasing copy stays on
  the old node until the pod is gone (``session.shadow``: one copy per move), and the task is pipelined on the
  new node.
- ``evict``: a running/binding/pipelined task becomes ``releasing`` on its node (its resources can be pipelined
  onto); evicting a task pipelined earlier in the session leaves it releasing there, as KAI does.
"""

from __future__ import annotations

from typing import Optional

from ..decisions import Eviction
from ..errors import EngineError
from .core import KIND_WHOLE, Session, _TaskState
from .nodes import SLOT_PIPELINED


_EVICTABLE = frozenset({"running", "binding", "pipelined"})

_UNDO_APPLY, _UNDO_STATUS, _UNDO_MOVE = 0, 1, 2
"""How rollback undoes an operation: ``Session._apply`` of the state before (any operation); ``Session._restatus``
(an operation that changed only the task's status where it is); ``Session._apply_move`` (a move it made)."""

APPENDED = object()
"""An operation that appended one eviction to ``session.evictions`` (rollback pops it)."""


class Statement:
    """A transaction over a :class:`Session`."""

    def __init__(self, session: Session):
        self.session = session
        self._ops: list[list] = []  # see _record

    # ------------------------------------------------------------------ operations

    def allocate(self, task: int, node: int, groups: Optional[list[str]] = None,
                 indices: Optional[list[int]] = None) -> None:
        """Place ``task`` on idle resources of ``node`` (status ``binding``)."""
        s = self.session
        self._record(task, node=node)
        s._apply(task, _TaskState("binding", node, list(groups or []), list(indices or []),
                                  s.accepted_gpus_on(task, node), s.shadow.get(task), None))

    def pipeline(self, task: int, node: int, groups: Optional[list[str]] = None,
                 indices: Optional[list[int]] = None, update_if_on_node: bool = True) -> None:
        """Place ``task`` on releasing resources of ``node`` (status ``pipelined``), or un-evict it."""
        s = self.session
        groups = list(groups or [])
        indices = list(indices or [])
        cur = s._state(task)
        self._record(task, cur, node)
        evicted_here = cur.status == "releasing" and cur.evict_prior is not None
        on_node = _copy_on_node(cur, node) if evicted_here else None
        if on_node is not None:
            # KAI looks the pod up in the target node's pods, which still hold the releasing copy an earlier
            # move left there: placed back on that node, the task is un-evicted where it was evicted from
            # (Statement.Unevict undoes the eviction), not moved back (framework/statement.go: Pipeline).
            same_gpu = (not s.is_shared(task)) or not groups or groups == list(on_node)
            if same_gpu and not update_if_on_node:
                if cur.indices and s.kind_list[task] == KIND_WHOLE:
                    self._reseat_pipelined(task, cur.node, cur.indices)
                    self._record(task)
                if s._can_restatus(task):
                    self._ops[-1][4] = _UNDO_STATUS
                    s._restatus(task, cur.evict_prior, None)
                else:
                    s._apply(task, _TaskState(cur.evict_prior, cur.node, cur.groups, cur.indices, cur.accepted,
                                              cur.shadow, None))
                name = s.task_names[task]
                evictions = s.evictions
                for last in range(len(evictions) - 1, -1, -1):
                    if evictions[last].task == name:  # the eviction this un-evicts (an earlier, committed one stays)
                        self._ops[-1][2] = (last, evictions.pop(last))
                        break
                return
        shadow = cur.shadow
        if evicted_here:
            # A move: the evicted pod keeps releasing its resources on the node it leaves (KAI leaves it there).
            shadow = tuple(cur.shadow or ()) + ((cur.node, list(cur.groups), list(cur.indices), cur.accepted),)
            moved = self._ops[-1][3]
            name = s.task_names[task]
            for e in reversed(s.evictions):
                if e.task == name:
                    moved.append((e, e.moved_to))
                    e.moved_to = s.nodes.names[node]
                    break
        new = _TaskState("pipelined", node, groups, indices, s.accepted_gpus_on(task, node), shadow, cur.evict_prior)
        if evicted_here and s._can_move(task):
            self._ops[-1][4] = _UNDO_MOVE
            s._apply_move(task, new)
        else:
            s._apply(task, new)

    def _reseat_pipelined(self, task: int, node: int, indices: list[int]) -> None:
        """Before ``task`` (whole GPUs) is un-evicted onto ``indices``: a task pipelined meanwhile onto one of
        those releasing devices is given another releasing or idle device of the node. KAI gives a pipelined
        task no device (node counts only), so this keeps kaidash's device forecast free of collisions."""
        s = self.session
        ns = s.nodes
        taken = [d for d in indices if ns.slot_whole_rows[node][d] == SLOT_PIPELINED]
        if not taken:
            return
        for k in range(len(s.status)):
            if s.status[k] != "pipelined" or s.node[k] != node or s.kind_list[k] != KIND_WHOLE:
                continue
            clash = [d for d in s.indices[k] if d in taken]
            if not clash:
                continue
            cur = s._state(k)
            keep = [d for d in cur.indices if d not in clash]
            self._record(k)
            s._apply(k, _TaskState(cur.status, cur.node, cur.groups, keep, cur.accepted, cur.shadow,
                                   cur.evict_prior))
            spare = [d for d in ns.free_whole_slots(node, len(clash) + len(indices), pipelined=True)
                     if d not in indices and d not in keep][: len(clash)]
            if len(spare) < len(clash):
                spare += clash[len(spare):]  # the slots cannot say (anonymous occupancy): leave the forecast
            s._apply(k, _TaskState(cur.status, cur.node, cur.groups, sorted(keep + spare), cur.accepted,
                                   cur.shadow, cur.evict_prior))

    def evict(self, task: int, action: str, preemptor: Optional[str] = None, message: str = "") -> None:
        """Evict an allocated task: it becomes ``releasing`` where it is, its queue's Allocated shrinks (KAI
        ``Statement.Evict``). A task pipelined earlier in the session is evicted the same way, on the node it was
        pipelined to; releasing copies an earlier move left stay where they are."""
        s = self.session
        cur = s._state(task)
        status = cur.status
        if status not in _EVICTABLE:
            raise EngineError(f"tasks[{s.task_names[task]}].status: cannot evict a {status} task")
        self._record(task, cur)
        op = self._ops[-1]
        if s._can_restatus(task):
            op[4] = _UNDO_STATUS
            s._restatus(task, "releasing", status)
        else:
            s._apply(task, _TaskState("releasing", cur.node, cur.groups, cur.indices, cur.accepted, cur.shadow,
                                      status))
        s.evictions.append(Eviction(task=s.task_names[task], job=s.jobs[s.task_job[task]].key, action=action,
                                    preemptor=preemptor, message=message))
        op[2] = APPENDED
        s.free_epoch += 1

    def convert_all_allocated_to_pipelined(self, job: int) -> None:
        """KAI ``ConvertAllAllocatedToPipelined``: a gang that could only be partly bound is pipelined whole."""
        s = self.session
        touched = {op[0] for op in self._ops}
        for task in s.jobs[job].tasks:
            if task in touched and s.status[task] == "binding":
                cur = s._state(task)
                self._record(task)
                s._apply(task, _TaskState("pipelined", cur.node, cur.groups, cur.indices, cur.accepted,
                                          cur.shadow, cur.evict_prior))

    # ------------------------------------------------------------------ transaction control

    def checkpoint(self) -> int:
        """A mark to :meth:`rollback` to."""
        return len(self._ops)

    def rollback(self, checkpoint: int) -> None:
        """Undo every operation recorded after ``checkpoint`` (latest first)."""
        s = self.session
        apply, evictions, pop = s._apply, s.evictions, self._ops.pop
        for _ in range(len(self._ops) - checkpoint):
            task, before, eviction_change, moved, how, slots = pop()
            if how == _UNDO_STATUS:   # only the status changed (Session._restatus): change it back
                s._restatus(task, before.status, before.evict_prior)
            elif how == _UNDO_MOVE:   # a move Session._apply_move made: back to the releasing placement
                s._apply_move(task, before, undo=True)
            else:
                apply(task, before)
            if slots:   # a whole-GPU task: the devices the inverse transition does not give back (_record)
                s.indices[task] = before.indices
                for kept in slots:
                    s.nodes.restore_slots(kept)
            if eviction_change is APPENDED:
                evictions.pop()
            elif eviction_change is not None:
                evictions.insert(*eviction_change)
            if moved:
                for e, moved_to in reversed(moved):
                    e.moved_to = moved_to

    def discard(self) -> None:
        """Undo everything this statement did."""
        self.rollback(0)

    def commit(self) -> None:
        """Keep everything: the operations become the session's state and can no longer be rolled back.

        Every task this statement leaves bound or pipelined is noted in ``session.committed_placements``
        (task → (status, node)): KAI sends the bind request or records the pipelining at commit
        (``framework/statement.go: Commit``), so that decision stands even if a later statement of the session
        evicts the task again."""
        s = self.session
        s.commits += 1
        for task in dict.fromkeys(op[0] for op in self._ops):
            status = s.status[task]
            if status in ("binding", "pipelined"):
                s.committed_placements[s.task_names[task]] = (status, s.nodes.names[s.node[task]])
        self._ops.clear()

    @property
    def operations(self) -> int:
        """Number of recorded operations (for tests and diagnostics)."""
        return len(self._ops)

    def _record(self, task: int, before: Optional[_TaskState] = None, node: int = -1) -> None:
        """``before``: the task's current state when the caller already read it; ``node``: where the operation
        places it, when not where it is."""
        # [task, state before, change to session.evictions (APPENDED, or (index, eviction) removed), moved_to
        # changes to undo, how to undo it (_UNDO_*), device rows of the nodes a whole-GPU task's operation touches
        # (NodeState.keep_slots)]
        s = self.session
        if before is None:
            before = s._state(task)
        self._ops.append([task, before, None, [], _UNDO_APPLY, _keep_slots(s, task, before, node)])


def _keep_slots(s: Session, task: int, before: _TaskState, node: int) -> list:
    """Device rows of the nodes an operation on ``task`` can touch (where it is, where it goes, its releasing
    copies), when it is a whole-GPU task: a task the snapshot gave no device frees its anonymous slots when removed
    and claims none when added back, so the rollback puts the rows back (kaidash's device forecast; KAI picks no
    whole-GPU device numbers)."""
    if s.kind_list[task] != KIND_WHOLE:
        return ()
    keep = s.nodes.keep_slots
    n0 = before.node
    kept = [keep(n0)] if n0 >= 0 else []
    if node >= 0 and node != n0:
        kept.append(keep(node))
    if before.shadow:
        seen = {n0, node}
        for c in before.shadow:
            if c[0] not in seen:
                seen.add(c[0])
                kept.append(keep(c[0]))
    return kept


def _copy_on_node(cur: _TaskState, node: int) -> Optional[list]:
    """GPU groups of the copy of an evicted task that ``node`` holds (KAI ``node.PodInfos``): the task itself
    where it was evicted, or the releasing copy the latest move away from ``node`` left there; None when the
    node holds none."""
    if cur.node == node:
        return list(cur.groups)
    for sn, sg, _si, _acc in reversed(cur.shadow or ()):
        if sn == node:
            return list(sg)
    return None
