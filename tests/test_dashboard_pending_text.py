"""Pending's one-line summaries (``dashboard.views.pending_text``) of the explainer's counterfactuals and the ETA
lines: on the explainer's real output they keep the numbers a person acts on and fit one table line; a text in
no known shape is cut to its first clause."""

from __future__ import annotations

import math
import re

import pytest

from dashboard.views.pending_text import MAX_CHARS, short_counterfactual, short_eta
from scheduler.engine import run_session
from scheduler.eta.report import EtaEstimate
from scheduler.explain import explain_pending
from scheduler.sources.synthetic import generate_scenario


@pytest.fixture(scope="module")
def explained():
    """The explainer's answers on two seeded clusters (limits, quotas, releases, added nodes)."""
    out = []
    for seed, nodes in ((7, 64), (3, 8)):
        snap = generate_scenario(seed=seed, nodes=nodes).snapshot
        jobs = {j.key: j for j in snap.jobs}
        # a budget no search reaches on a busy machine: the same answers every run
        out += [(e, jobs[e.job]) for e in explain_pending(snap, run_session(snap), budget_ms_per_job=60_000)
                if e.counterfactual]
    return out


def _number(text: str) -> str:
    return re.search(r"[\d.]+", text)[0]


def test_every_real_counterfactual_gets_a_one_line_summary_with_its_numbers(explained):
    kinds = set()
    for exp, job in explained:
        cf = exp.counterfactual
        short = short_counterfactual(cf.message, job.queue)
        assert 0 < len(short) <= MAX_CHARS, (short, cf.message)
        kinds.add(cf.kind)
        if cf.kind in ("raise_limit", "raise_quota"):
            over = re.search(r"by ([\d.]+)", cf.message)[1]
            what = "limit" if cf.kind == "raise_limit" else "quota"
            assert short.startswith(f"{what} +{over} GPUs"), (short, cf.message)   # the job's own queue: not repeated
            assert short.endswith(": not enough") == ("even then it would wait" in cf.message), short
        elif cf.kind == "release":
            many = f" ({len(cf.jobs)} jobs)" if len(cf.jobs) > 1 else ""
            at_most = "" if cf.minimal else "≤"
            assert short == f"{cf.queue} frees {at_most}{cf.amount:g} GPUs{many}", (short, cf.jobs)
        elif cf.kind == "add_nodes":
            n, pool = re.search(r"with (\d+) more nodes? like \S+ in pool (\S+)", cf.message).groups()
            assert short == f"+{n} node{'s' if n != '1' else ''} in pool {pool}", short
    assert {"raise_limit", "raise_quota", "release", "add_nodes"} <= kinds, kinds


def test_a_limit_of_another_queue_names_that_queue():
    text = ("over the queue limit by 2 GPUs: queue org gpu limit 10 GPUs, 9 GPUs allocated, job needs 3 GPUs; "
            "with the limit raised to 12 GPUs it would start")
    assert short_counterfactual(text, "team-a") == "org limit +2 GPUs"
    assert short_counterfactual(text, "org") == "limit +2 GPUs"


@pytest.mark.parametrize("text, short", [
    ("needs 8 whole GPUs on one node; largest free block is 7 on node a100-80-007 (36 whole GPUs free in total, the "
     "job needs 32); would start with 2 more nodes like a100-80-000 in pool a100-80 (+16 GPUs)",
     "8 GPUs on 1 node; max free 7"),
    ("needs 16 whole GPUs on one node; the largest Ready node has 8 GPUs: no change of queues or placement can help",
     "needs a 16-GPU node (max 8)"),
    ("would start if queue llm released 72 GPUs (a, b, c, d, e and 3 more jobs); llm holds 186 GPUs against a fair "
     "share of 144 GPUs", "llm frees 72 GPUs (8 jobs)"),
    ("would start if queue llm released 184 GPUs (a, b, c, d, e and 8 more jobs); llm holds 186 GPUs against a fair "
     "share of 144 GPUs; not proven the smallest set: the search stopped at its time budget",
     "llm frees ≤184 GPUs (13 jobs)"),
    ("fits on node n1 after consolidation: moving 2 preemptible tasks (a -> n2, b -> n3)", "consolidate: move 2 pods"),
    ("no rack with 16 free GPUs; largest 8 (rack-b2x)", "no rack with 16 free GPUs"),
    ("no single change found within the search budget", "no single change found"),
    ("nothing: KAI would bind it this cycle", "nothing: starts this cycle"),
    ("queue 'ghost' does not exist: KAI does not schedule the job", "queue 'ghost' does not exist"),
    ("a sentence in a shape nobody wrote a rule for, long enough to be cut at the end", None),
])
def test_known_shapes_and_the_first_clause_of_anything_else(text, short):
    got = short_counterfactual(text)
    if short is None:       # no rule: the first clause, cut with an ellipsis
        assert len(got) <= MAX_CHARS and got.endswith("…") and text.startswith(got[:-1])
    else:
        assert got == short


def _estimate(**kw) -> EtaEstimate:
    base = dict(job="q/j", queue="q", priority=100, gpus=1.0, shape="1", waiting_s=60.0, p10_s=1200.0, p50_s=2400.0,
                p90_s=5400.0, started_runs=3, runs=3, horizon_s=86400.0, blocker="after q/other finishes")
    return EtaEstimate(**{**base, **kw})


def test_eta_summaries_keep_the_median_and_drop_what_the_tooltip_says():
    full = _estimate().text
    assert full.startswith("starts in ~40 min (20 min–1.5 h), after q/other")      # the tooltip: all of it
    assert short_eta(full) == "~40 min"
    assert short_eta(_estimate(provisional=True).text) == "likely ~40 min"
    assert short_eta(_estimate(p10_s=2400.0, p90_s=2400.0, blocker="").text) == "~40 min"
    assert short_eta(_estimate(p50_s=math.inf, reason="OverLimit", message="limit 4").text) == "> 24.0 h"
    assert short_eta(_estimate(never=True, message="no node has 16 GPUs").text) == "cannot start"
    assert short_eta(_estimate(p10_s=0.0, p50_s=10.0, p90_s=20.0).text) == "next cycle"
    assert short_eta("KAI would bind it this cycle") == "this cycle"
    assert short_eta("") == ""
