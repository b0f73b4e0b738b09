"""KAI fair-share division (kai-semantics.md §b). Every expected number is derived by hand in the comments."""

import pytest

from scheduler.fairshare import (
    Claim,
    DivisionTrace,
    QueueShare,
    cluster_total,
    compute_fair_share,
    divide_resource,
)
from scheduler.model import ExternalUsage, Job, Node, Queue, QueueResource, Snapshot, Task


def divide(total, *claims, k=1.0):
    fair, remaining = divide_resource(total, list(claims), k)
    return fair, remaining


# ---------------------------------------------------------------------------------------------- one level

def test_worked_example_b4():
    # Phase 1: A=2, B=3, C=1, 4 left. Round 1 (W=4): shares 1, 2, 1 -> A+1, B+1 (satisfied), C+1; 1 left.
    # Round 2 (W=2): 0.5 each -> nothing given, remainders A .5, C .5. Phase 3: tie -> older A gets 1.
    fair, remaining = divide(
        10,
        Claim("A", deserved=2, over_quota_weight=1, requested=8, creation_time=1),
        Claim("B", deserved=3, over_quota_weight=2, requested=4, creation_time=2),
        Claim("C", deserved=1, over_quota_weight=1, requested=6, creation_time=3),
    )
    assert fair == {"A": 4, "B": 4, "C": 2}
    assert remaining == 0


def test_worked_example_trace_records_each_phase():
    trace = DivisionTrace()
    divide_resource(10, [Claim("A", 2, -1, 1, 8, creation_time=1), Claim("B", 3, -1, 2, 4, creation_time=2),
                         Claim("C", 1, -1, 1, 6, creation_time=3)], 1.0, trace)
    assert [g for _, _, _, g in trace.deserved] == [2, 3, 1]
    assert trace.after_deserved == 4
    assert len(trace.rounds) == 2
    assert {s.queue: s.given for s in trace.rounds[0].steps} == {"A": 1, "B": 1, "C": 1}
    assert {s.queue: s.leftover for s in trace.rounds[1].steps} == {"A": 0.5, "C": 0.5}
    assert trace.leftovers == [(100, "A", 0.5, 1.0)]
    text = "\n".join(trace.lines("GPUs"))
    assert "A: min(deserved 2, requestable 8) = 2" in text
    assert "fair share: A=4, B=4, C=2" in text


def test_time_based_variant_b4():
    # nW = 0.5 each; sw_A = 0.5 + (0.5 - 0.6) = 0.4, sw_B = 0.5 + (0.5 - 0.1) = 0.9, S = 1.3.
    # Shares 10*.4/1.3 = 3.08 -> 3 (rem .08), 10*.9/1.3 = 6.92 -> 6 (rem .92); 1 left -> B. A=3, B=7.
    fair, remaining = divide(10, Claim("A", requested=20, usage=0.6), Claim("B", requested=20, usage=0.1))
    assert fair == {"A": 3, "B": 7}
    assert remaining == 0


def test_k_zero_ignores_usage_and_negative_k_is_zero():
    # k=0: sw = nW = 0.5 each -> 5 and 5 whatever the usage.
    for k in (0.0, -2.0):
        fair, _ = divide(10, Claim("A", requested=20, usage=0.6), Claim("B", requested=20, usage=0.1), k=k)
        assert fair == {"A": 5, "B": 5}


def test_usage_above_weight_with_large_k_gets_no_surplus():
    # k=3: sw_A = max(0, 0.5 + 3*(0.5-0.9)) = max(0, -0.7) = 0; sw_B = 0.5 + 3*0.5 = 2 -> B share 10, takes 8
    # (its whole request), round 2: only A unsatisfied, W=1, nW=1, sw=max(0, 1+3*(1-0.9)) = 1.3 -> A gets 2.
    fair, _ = divide(10, Claim("A", requested=20, usage=0.9), Claim("B", requested=8, usage=0.0), k=3.0)
    assert fair == {"A": 2, "B": 8}


def test_oversubscribed_deserved_is_granted():
    # Phase 1 is not capped by the total: total 1, deserved 3, request 2 -> 2.
    fair, remaining = divide(1, Claim("A", deserved=3, requested=2))
    assert fair == {"A": 2}
    assert remaining == 0


def test_priority_buckets_higher_priority_takes_surplus_first():
    # Bucket prio 2: B alone, share 10 >= its request 6 -> 6; bucket prio 1 gets the 4 left, weight irrelevant.
    fair, remaining = divide(10, Claim("A", over_quota_weight=100, requested=10, priority=1),
                             Claim("B", over_quota_weight=1, requested=6, priority=2))
    assert fair == {"A": 4, "B": 6}
    assert remaining == 0


def test_priority_does_not_affect_deserved():
    # Phase 1 gives A its quota 3 although B has higher priority; B takes the 7 left.
    fair, _ = divide(10, Claim("A", deserved=3, requested=10, priority=1), Claim("B", requested=10, priority=9))
    assert fair == {"A": 3, "B": 7}


def test_weight_zero_gets_no_surplus():
    # Phase 1: A=2, B=0, 8 left. W=0+1; sw_A=0, sw_B=2 -> B share 8 >= request 5 -> 5. Round 2: only A, W=0.
    fair, remaining = divide(10, Claim("A", deserved=2, over_quota_weight=0, requested=10),
                             Claim("B", over_quota_weight=1, requested=5))
    assert fair == {"A": 2, "B": 5}
    assert remaining == 3


def test_limit_zero_blocks_even_with_quota():
    # requestable = min(0, 4) = 0 -> A gets nothing; B takes its whole request 6 of 6.
    fair, _ = divide(6, Claim("A", deserved=5, limit=0, requested=4), Claim("B", requested=10))
    assert fair == {"A": 0, "B": 6}


def test_limit_caps_fair_share():
    # Round 1 (W=2): shares 5/5; A's remaining requestable is 3 <= 5 -> 3; B floor 5. 2 left.
    # Round 2: A satisfied (limit 3 <= 3); B alone, share 2 < 5 -> 2. A=3, B=7.
    fair, _ = divide(10, Claim("A", limit=3, requested=10), Claim("B", requested=10))
    assert fair == {"A": 3, "B": 7}


def test_quota_minus_one_means_whole_amount():
    # A: min(total 8, request 5) = 5; B quota 2 -> 2; 1 left -> B (only unsatisfied) gets 1.
    fair, _ = divide(8, Claim("A", deserved=-1, requested=5), Claim("B", deserved=2, requested=10))
    assert fair == {"A": 5, "B": 3}
    # A's unlimited quota takes the whole 8; B's deserved 2 still granted (oversubscribed), nothing left.
    fair, remaining = divide(8, Claim("A", deserved=-1, requested=20), Claim("B", deserved=2, requested=10))
    assert fair == {"A": 8, "B": 2}
    assert remaining == 0


def test_zero_request_gets_zero_even_with_quota():
    fair, remaining = divide(10, Claim("A", deserved=5, requested=0), Claim("B", requested=3))
    assert fair == {"A": 0, "B": 3}
    assert remaining == 7


def test_fractional_requests_are_met_exactly():
    # Round 1 (W=3): share 2/3 each: A .5 <= .667 -> .5; B .7 > .667 -> 0 (rem .667); C 0 (rem .667). 1.5 left.
    # Round 2 (W=2): share .75: B .7 -> .7 (satisfied, remainder dropped); C 0 (rem .75). 0.8 left.
    # Round 3 (W=1): share .8 < 3 -> 0 (rem .8). Phase 3: C gets min(1, .8) = .8.
    fair, remaining = divide(2, Claim("A", requested=0.5), Claim("B", requested=0.7), Claim("C", requested=3))
    assert fair == pytest.approx({"A": 0.5, "B": 0.7, "C": 0.8})
    assert remaining == pytest.approx(0, abs=1e-12)


def test_phase3_hands_out_whole_unit_without_rechecking_request():
    # Shares .75 each < requests .8 -> floor 0, remainders .75/.75, 1.5 left. Phase 3: older A gets
    # min(1, 1.5) = 1 (more than its request .8: KAI's overshoot), then B gets the last .5.
    fair, remaining = divide(1.5, Claim("A", requested=0.8, creation_time=1), Claim("B", requested=0.8, creation_time=2))
    assert fair == {"A": 1.0, "B": 0.5}
    assert remaining == 0


def test_phase3_largest_remainder_first():
    # Shares .25 / .75 -> remainders .25 / .75 -> B gets the unit although A is older.
    fair, _ = divide(1, Claim("A", requested=5, over_quota_weight=1, creation_time=0),
                     Claim("B", requested=5, over_quota_weight=3, creation_time=9))
    assert fair == {"A": 0, "B": 1}


def test_phase3_tie_goes_to_older_queue_then_name():
    # Three equal remainders of 1/3 -> the oldest queue (C) gets the one unit.
    fair, _ = divide(1, Claim("A", requested=5, creation_time=5), Claim("B", requested=5, creation_time=5),
                     Claim("C", requested=5, creation_time=0))
    assert fair == {"A": 0, "B": 0, "C": 1}
    # Same creation time -> alphabetical name, whatever the input order.
    fair, _ = divide(1, Claim("c", requested=5), Claim("b", requested=5), Claim("a", requested=5))
    assert fair == {"a": 1, "b": 0, "c": 0}


def test_phase3_serves_higher_priority_leftovers_first():
    # Bucket prio 2: X alone (sw 2 of 2) share 2.5 < request 5 -> 2 (rem .5); 0.5 left.
    # Bucket prio 1: Y share 0.5 -> 0 (rem .5). Phase 3 serves prio 2 first: X gets min(1, .5) = .5 although
    # Y is older and has the same remainder.
    fair, remaining = divide(2.5, Claim("X", requested=5, priority=2, creation_time=9),
                             Claim("Y", requested=5, priority=1, creation_time=0))
    assert fair == {"X": 2.5, "Y": 0.0}
    assert remaining == 0

# ---------------------------------------------------------------------------------------------- snapshots

def _node(name, gpus, mem_mib=81920, **kw):
    return Node(name=name, gpus=gpus, gpu_memory_mib=mem_mib, cpu_millis=64000, memory_bytes=2**38, **kw)


def _job(name, queue, *tasks, **kw):
    return Job(name=name, queue=queue, tasks=list(tasks), **kw)


def _q(name, parent=None, gpu_quota=0.0, gpu_weight=1.0, gpu_limit=-1.0, **kw):
    return Queue(name=name, parent=parent, gpu=QueueResource(gpu_quota, gpu_limit, gpu_weight), **kw)


def test_hierarchy_children_divide_parent_fair_share():
    # 8 GPUs. Top: P1 (quota 2) requests 8 (= c1 4 + c2 4), P2 (quota 2) requests 2.
    #   Phase 1: P1=2, P2=2, 4 left; P2 satisfied, P1 alone takes floor(4)=4 -> P1=6, P2=2.
    # Children of P1 divide 6: c1 quota 1 -> 1, c2 quota 0 -> 0, 5 left. W=3: sw c1 = 2/3, c2 = 4/3, S=2;
    #   c1 share 5/3 -> 1 (rem .667), c2 share 10/3 -> 3 (rem .333); 1 left -> c1. c1=3, c2=3.
    snap = Snapshot(
        nodes=[_node("n1", 4), _node("n2", 4)],
        queues=[_q("P1", gpu_quota=2), _q("P2", gpu_quota=2), _q("c1", "P1", gpu_quota=1, gpu_weight=1),
                _q("c2", "P1", gpu_weight=2)],
        jobs=[_job("j1", "c1", Task("t1", gpu=1, status="running", node="n1"), Task("t2", gpu=3)),
              _job("j2", "c2", Task("t3", gpu=4)),
              _job("j3", "P2", Task("t4", gpu=2))])
    shares = compute_fair_share(snap)
    fs = {q: s["gpu"].fair_share for q, s in shares.items()}
    assert fs == {"P1": 6, "P2": 2, "c1": 3, "c2": 3}
    assert shares["P1"]["gpu"].requested == 8 and shares["P1"]["gpu"].allocated == 1
    assert shares["c1"]["gpu"].requested == 4 and shares["c1"]["gpu"].allocated == 1
    assert shares["c2"]["gpu"].allocated == 0


def test_snapshot_totals_and_per_queue_accounting():
    # Total GPUs: n1 4 - 1 external + n2 2 = 5; n3 is not Ready and counts 0.
    # Queue q: running 20480 MiB on n1 (81920 MiB GPUs) = 0.25 GPU; running 1 GPU (non-preemptible job) on n2;
    # pending 20480 MiB converted with the smallest GPU memory 40960 -> 0.5; pending 2 GPUs; a releasing task
    # counts in neither; a task pipelined last cycle is a Pending pod (nominated node) to KAI: requested.
    # allocated 1.25, non-preemptible 1, requested 1.25 + 0.5 + 2 + 1 = 4.75.
    snap = Snapshot(
        nodes=[_node("n1", 4, 81920, external=ExternalUsage(gpus=1, cpu_millis=4000)), _node("n2", 2, 40960),
               _node("n3", 8, 163840, ready=False)],
        queues=[_q("q", gpu_quota=1)],
        jobs=[_job("a", "q", Task("a0", gpu_memory_mib=20480, status="running", node="n1", cpu_millis=500),
                   Task("a1", gpu_memory_mib=20480), Task("a2", gpu=2, cpu_millis=1000),
                   Task("a3", gpu=1, status="releasing", node="n2"), Task("a4", gpu=1, status="pipelined", node="n2")),
              _job("b", "q", Task("b0", gpu=1, status="running", node="n2"), preemptible=False)])
    total = cluster_total(snap)
    assert total["gpu"] == 5
    assert total["cpu"] == 64000 * 2 - 4000
    s = compute_fair_share(snap)["q"]["gpu"]
    assert s.allocated == pytest.approx(1.25)
    assert s.allocated_non_preemptible == 1
    assert s.requested == pytest.approx(4.75)
    assert s.fair_share == pytest.approx(4.75)  # alone in a 5-GPU cluster: gets its whole request
    assert compute_fair_share(snap)["q"]["cpu"].requested == 1500
    assert snap.jobs[0].tasks[0].status == "running"  # not mutated


def test_fractional_placed_task_counts_gpus_on_its_node():
    # 0.5 fraction over 2 devices on its node = 1 GPU allocated.
    snap = Snapshot(nodes=[_node("n1", 4)], queues=[_q("q")],
                    jobs=[_job("a", "q", Task("a0", gpu=0.5, gpu_devices=2, status="binding", node="n1"))])
    assert compute_fair_share(snap)["q"]["gpu"].allocated == 1.0


def test_usage_from_snapshot_or_argument():
    # Same as the time-based variant: 10 GPUs, two weight-1 queues, usage .6/.1 -> 3/7.
    def snap_with(usage):
        return Snapshot(nodes=[_node("n1", 8), _node("n2", 2)], queues=[_q("A"), _q("B")],
                        jobs=[_job("a", "A", Task("a0", gpu=8), Task("a1", gpu=8)),
                              _job("b", "B", Task("b0", gpu=8), Task("b1", gpu=8))], usage=usage)
    snap = snap_with({"A": {"gpu": 0.6}, "B": {"gpu": 0.1}})
    assert {q: s["gpu"].fair_share for q, s in compute_fair_share(snap).items()} == {"A": 3, "B": 7}
    assert compute_fair_share(snap)["A"]["gpu"].usage == 0.6
    # An explicit usage argument replaces the snapshot's: equal usage -> 5/5.
    shares = compute_fair_share(snap, usage={"A": {"gpu": 0.2}, "B": {"gpu": 0.2}})
    assert shares["A"]["gpu"].fair_share == 5 and shares["B"]["gpu"].fair_share == 5
    # k-value 0 in the snapshot config switches the usage term off.
    snap.config.k_value = 0.0
    assert compute_fair_share(snap)["A"]["gpu"].fair_share == 5


def test_queue_share_requestable_and_allocatable():
    assert QueueShare(limit=-1, requested=7).requestable == 7
    assert QueueShare(limit=3, requested=7).requestable == 3
    assert QueueShare(deserved=-1, limit=6, fair_share=2).allocatable == 6
    assert QueueShare(deserved=4, limit=-1, fair_share=2).allocatable == 4
    assert QueueShare(deserved=4, limit=5, fair_share=9).allocatable == 5


def test_orphan_queue_gets_nothing():
    # Built in code (the loader rejects it): parent missing -> KAI drops the queue -> fair share 0.
    snap = Snapshot(nodes=[_node("n1", 4)], queues=[_q("ok"), _q("orphan", "ghost")],
                    jobs=[_job("a", "ok", Task("a0", gpu=1)), _job("b", "orphan", Task("b0", gpu=2))])
    shares = compute_fair_share(snap)
    assert shares["ok"]["gpu"].fair_share == 1
    assert shares["orphan"]["gpu"].fair_share == 0
    assert shares["orphan"]["gpu"].requested == 2
