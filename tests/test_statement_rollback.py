"""A statement's rollback gives whole-GPU tasks their device slots and indices back, bit for bit.

A whole-GPU task the snapshot gave no device holds anonymous slots; removing it frees them and re-adding it claims
none (it claims only slots still marked anonymous), so the inverse transition alone left kaidash's device forecast
(``gpu_index``) drifting after every discarded scenario. KAI picks no whole-GPU device numbers: this is kaidash's
own bookkeeping. The shared-GPU idle/releasing counts are left to drift as KAI's Discard does (docs/engine.md)."""

from scheduler.session import Statement
from tests._engine_helpers import session_from_yaml, tid


def _slots(s) -> tuple:
    """The device rows of every node and every task's device indices."""
    ns = s.nodes
    return ns.slot_whole.tobytes(), ns.slot_owner.tobytes(), [list(x) for x in s.indices]


def _one_node(gpus: int) -> str:
    """A snapshot's nodes and queues: one node ``n1`` of ``gpus`` 80 GB GPUs, one queue ``a``; jobs follow."""
    return (f"nodes:\n  - {{name: n1, gpus: {gpus}, gpu_memory_mib: 80000, cpu_millis: 16000, memory_bytes: 64Gi}}\n"
            "queues:\n  - {name: a, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}\njobs:\n")


def test_discarding_the_eviction_of_a_whole_gpu_task_without_devices_gives_its_slots_back():
    """The snapshot gave w no device indices: its slots are held anonymously, and removing it frees them; the
    rollback re-adds it without devices, so the slots stayed free (seen on most kai_diff_gen seeds)."""
    s = session_from_yaml(_one_node(4) + """
  - {name: w, queue: a, tasks: [{name: w-0, gpu: 2, status: running, node: n1}]}
""")
    before = _slots(s)
    st = Statement(s)
    st.evict(tid(s, "w-0"), "reclaim")
    st.discard()
    assert _slots(s) == before


def test_a_rolled_back_task_without_devices_does_not_take_another_anonymous_tasks_slots():
    """v and w both hold two anonymous slots. Once v's are freed by its eviction, re-adding v would claim the
    only slots still marked anonymous, w's: v's indices must come back empty and w's devices stay w's."""
    s = session_from_yaml(_one_node(4) + """
  - {name: v, queue: a, tasks: [{name: v-0, gpu: 2, status: running, node: n1}]}
  - {name: w, queue: a, tasks: [{name: w-0, gpu: 2, status: running, node: n1}]}
""")
    before = _slots(s)
    st = Statement(s)
    cp = st.checkpoint()
    st.evict(tid(s, "v-0"), "reclaim")
    st.pipeline(tid(s, "v-0"), 0, update_if_on_node=False)   # un-evicted where it was, then rolled back
    st.rollback(cp)
    assert _slots(s) == before
    st.evict(tid(s, "v-0"), "preempt")
    st.discard()
    assert _slots(s) == before
