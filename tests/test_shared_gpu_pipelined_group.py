"""A fraction pipelined onto a shared GPU whose tasks are all releasing (KAI opens a new GPU group there).

KAI (``api/node_info/gpu_sharing_node_info.go``, ``gpu_sharing/gpuSharing.go``): the fully releasing group counts
as one releasing whole GPU and is no candidate; a fraction pipelined onto it opens a new group, which takes that
releasing GPU when its first task is added and gives it back when its last one is removed
(``isPipelinedToReleasingGpu``). kaidash keeps both groups in one device slot; these tests pin the counters.
"""

import numpy as np

from scheduler.session.nodes import GPU
from scheduler.session.statement import Statement
from tests._engine_helpers import session_from_yaml, tid

CLUSTER = """
version: 1
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 16384, cpu_millis: 8000, memory_bytes: 32Gi, pods: 16}]
queues: [{name: q0, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: w, queue: q0, creation_time: 0, tasks: [{name: w-0, gpu: 1, status: running, node: n0, gpu_index: 0}]}
  - {name: r, queue: q0, creation_time: 1,
     tasks: [{name: r-0, gpu_memory_mib: 1000, status: releasing, node: n0, gpu_index: 1, gpu_group: g1}]}
  - {name: a, queue: q0, creation_time: 2, tasks: [{name: a-0, gpu_memory_mib: 4000}]}
  - {name: b, queue: q0, creation_time: 3, tasks: [{name: b-0, gpu_memory_mib: 8000}]}
"""


def _counters(s):
    ns = s.nodes
    return float(ns.idle[0, GPU]), float(ns.rel[0, GPU])


def test_discarding_pipelined_fractions_gives_the_releasing_gpu_back():
    s = session_from_yaml(CLUSTER)
    assert _counters(s) == (0.0, 1.0)
    stmt = Statement(s)
    assert s.place(stmt, tid(s, "a-0"), 0, pipeline_only=True)
    assert _counters(s) == (0.0, 0.0)      # the new group took the releasing GPU
    assert s.place(stmt, tid(s, "b-0"), 0, pipeline_only=True)
    assert _counters(s) == (0.0, 0.0)      # joining that group takes nothing more
    stmt.discard()
    assert _counters(s) == (0.0, 1.0)      # its last task gone, the releasing GPU is back
    assert np.all(s.nodes.sh_used[0] == [0.0, 1000.0])


def test_the_group_opened_by_pipelining_fits_nothing_on_idle():
    s = session_from_yaml(CLUSTER)
    ns = s.nodes
    stmt = Statement(s)
    assert s.place(stmt, tid(s, "a-0"), 0)
    assert ns.opened_by_pipelining(0, 1)
    assert not ns.group_fits_idle(0, 1, 8000.0)
    assert ns.group_used(0, 1) == 4000.0   # KAI's used memory of the new group: a-0 only, not r-0
