"""The session's node and queue accounting in plain-Python rows, with the numpy arrays written lazily on read
(``NodeState.idle_rows`` ..., ``QueueState.allocated_rows``): every array read equals, bit for bit, what numpy's
in-place row arithmetic (the accounting before the rows) gives for the same operations, on non-integer amounts
where a changed order of operations would show."""

import numpy as np
import pytest

from scheduler.errors import EngineError
from scheduler.fairshare import compute_fair_share
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task
from scheduler.session import Session
from scheduler.session.nodes import SLOT_ACTIVE, SLOT_FREE, SLOT_PIPELINED, SLOT_RELEASING

STATUSES = ("running", "binding", "releasing", "pipelined")


def _session() -> Session:
    nodes = [Node(name=f"n{i}", gpus=4, gpu_memory_mib=40960, cpu_millis=64000, memory_bytes=2**38)
             for i in range(12)]
    queues = [Queue("root", creation_time=1, gpu=QueueResource(8, -1, 1)),
              Queue("a", parent="root", creation_time=2, gpu=QueueResource(4, -1, 1)),
              Queue("b", parent="root", creation_time=3, gpu=QueueResource(4, 6, 1))]
    jobs = [Job(name=f"j{k}", queue="ab"[k % 2], creation_time=k,
                tasks=[Task(f"j{k}-0", gpu=1, cpu_millis=1000, memory_bytes=2**30, status="running",
                            node=f"n{k % 12}", gpu_indices=[k // 12])]) for k in range(24)]
    snap = Snapshot(nodes=nodes, queues=queues, jobs=jobs, time=100)
    return Session(snap, compute_fair_share(snap))


def _reference_add(ref: dict, n: int, vec: np.ndarray, status: str, sign: int) -> None:
    """The numpy row updates of NodeState.add (sign +1) / remove (sign -1) before the plain-Python rows."""
    if sign > 0:
        ref["used"][n] += vec
        if status == "releasing":
            ref["rel"][n] += vec
            ref["idle"][n] -= vec
        elif status == "pipelined":
            ref["rel"][n] -= vec
        else:
            ref["idle"][n] -= vec
    else:
        ref["used"][n] -= vec
        if status == "releasing":
            ref["rel"][n] -= vec
            ref["idle"][n] += vec
        elif status == "pipelined":
            ref["rel"][n] += vec
        else:
            ref["idle"][n] += vec


def _check_nodes(ns, ref: dict) -> None:
    for name in ("idle", "rel", "used"):
        assert getattr(ns, name).tobytes() == ref[name].tobytes(), name
        assert np.array(getattr(ns, name + "_rows")).tobytes() == ref[name].tobytes(), name + "_rows"
    free = ref["idle"] + ref["rel"]
    assert ns.free.tobytes() == free.tobytes()
    assert ns.freeT.tobytes() == np.ascontiguousarray(free.T).tobytes()
    assert ns.idleT.tobytes() == np.ascontiguousarray(ref["idle"].T).tobytes()


def test_node_rows_follow_numpy_row_arithmetic_bit_for_bit():
    s = _session()
    ns = s.nodes
    rng = np.random.default_rng(14)
    ref = {name: getattr(ns, name).copy() for name in ("idle", "rel", "used")}
    for step in range(600):
        n = int(rng.integers(ns.n))
        vec = np.round(rng.random(4) * [3, 1e4, 1e10, 2], 1) + 0.1   # tenths: not exact in binary
        kind = rng.integers(3)
        if kind == 0:
            status = STATUSES[rng.integers(4)]
            ns.add(n, tuple(vec.tolist()), status)
            _reference_add(ref, n, vec, status, +1)
        elif kind == 1:
            status = STATUSES[rng.integers(4)]
            ns.remove(n, tuple(vec.tolist()), status)
            _reference_add(ref, n, vec, status, -1)
        else:
            old, new = STATUSES[rng.integers(4)], STATUSES[rng.integers(4)]
            ns.restatus(n, tuple(vec.tolist()), old, new)
            _reference_add(ref, n, vec, old, -1)
            _reference_add(ref, n, vec, new, +1)
        if step % 7 == 0:   # arrays read now and then: several changes of a node are written at once
            _check_nodes(ns, ref)
    _check_nodes(ns, ref)


def test_restatus_is_remove_then_add_on_devices_too():
    s, t = _session(), _session()
    n, vec = 3, (1.0, 1000.0, float(2**30), 1.0)
    for status in ("running", "releasing", "pipelined"):
        s.nodes.add(n, vec, status, whole_slots=[1, 2], owner=7)
        t.nodes.add(n, vec, status, whole_slots=[1, 2], owner=7)
    for old, new in (("pipelined", "releasing"), ("releasing", "running"), ("running", "pipelined")):
        s.nodes.restatus(n, vec, old, new, [1, 2], [1, 2], owner=7)
        t.nodes.remove(n, vec, old, whole_slots=[1, 2], owner=7, derive=False)
        t.nodes.add(n, vec, new, whole_slots=[1, 2], owner=7)
        for name in ("idle", "rel", "used", "free", "freeT", "idleT", "slot_whole", "slot_owner"):
            assert getattr(s.nodes, name).tobytes() == getattr(t.nodes, name).tobytes(), (old, new, name)
        assert s.nodes.change_log == t.nodes.change_log and s.nodes.version == t.nodes.version
    assert set(s.nodes.slot_whole[n].tolist()) <= {SLOT_FREE, SLOT_ACTIVE, SLOT_RELEASING, SLOT_PIPELINED}


def test_queue_rows_follow_numpy_row_arithmetic_bit_for_bit():
    s = _session()
    qs = s.queues
    rng = np.random.default_rng(3)
    alloc, alloc_np = qs.allocated.copy(), qs.allocated_np.copy()
    for step in range(400):
        q = int(rng.integers(len(qs.names)))
        amount = np.round(rng.random(3) * [2, 1e4, 1e10], 1) + 0.1
        sign = (1.0, -1.0, 0.5)[rng.integers(3)]
        non_preemptible = bool(rng.integers(2))
        qs.add(q, tuple(amount.tolist()) if step % 2 else amount, non_preemptible, sign)
        for a in qs.chains[q]:   # the numpy updates before the rows
            if sign in (1.0, -1.0):
                op = np.add if sign > 0 else np.subtract
                op(alloc[a], amount, out=alloc[a])
                if non_preemptible:
                    op(alloc_np[a], amount, out=alloc_np[a])
            else:
                alloc[a] += sign * amount
                if non_preemptible:
                    alloc_np[a] += sign * amount
        if step % 5 == 0:
            assert qs.allocated.tobytes() == alloc.tobytes()
    assert qs.allocated.tobytes() == alloc.tobytes()
    assert qs.allocated_np.tobytes() == alloc_np.tobytes()
    assert np.array(qs.allocated_rows).tobytes() == alloc.tobytes()


def test_refresh_takes_bulk_edits_and_refuses_unwritten_changes():
    s = _session()
    ns = s.nodes
    ns.idle[2, 1] -= 500.0            # a bulk edit of the array in place ...
    ns.slot_whole[2, 3] = SLOT_RELEASING
    ns.refresh()                       # ... reaches the rows
    assert ns.idle_rows[2][1] == ns.idle[2, 1] and ns.free_rows[2][1] == ns.idle[2, 1] + ns.rel[2, 1]
    assert ns.slot_whole_rows[2][3] == SLOT_RELEASING
    ns.add(5, (1.0, 1.0, 1.0, 1.0), "running")
    with pytest.raises(EngineError, match="refresh"):
        ns.refresh()                   # node 5's arrays are not written yet: a bulk edit now would lose it
    for name in ("idle", "rel", "used", "free", "freeT", "idleT", "slot_whole"):
        getattr(ns, name)              # reading writes them
    ns.refresh()
