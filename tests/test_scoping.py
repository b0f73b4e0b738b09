"""Per-queue scoping of texts and explanations (scheduler/scoping.py) and the dashboard's one filter using it."""

from pathlib import Path

import yaml

from dashboard.auth import scope_tick
from dashboard.loop import MetricsReader, publish_snapshot
from dashboard.models import jobs_table, overlay_table, pending_table, queue_table
from dashboard.state import LiveState
from scheduler.engine import run_session
from scheduler.explain import explain_pending
from scheduler.scoping import HIDDEN_JOB, HIDDEN_QUEUE, Redactor
from scheduler.snapshot_io import snapshot_from_dict

SCENARIO = Path(__file__).parent / "scenarios" / "reclaim" / "department-levels-respected.yaml"
HIDDEN = ("t1", "t3", "d2", "t1-a", "t1-b", "t1-c", "t1-d", "t3-a", "t1-d-0")


def snapshot():
    return snapshot_from_dict(yaml.safe_load(SCENARIO.read_text())["snapshot"])


def test_texts_lose_hidden_names_but_keep_the_rest():
    red = Redactor(snapshot(), {"t2", "d1"})
    assert red.text("victim queue t1 allocated 4 > fair share 2; job t1-d (pod t1-d-0)") == (
        f"victim queue {HIDDEN_QUEUE} allocated 4 > fair share 2; job {HIDDEN_JOB} (pod {HIDDEN_JOB})")
    # whole names only, and resource words are never names
    assert red.text("t1x t2-a gpu") == "t1x t2-a gpu"
    assert red.value({"t1": 4, "t2": 1, "nested": ["t3 holds"]}) == {"t2": 1, "nested": [f"{HIDDEN_QUEUE} holds"]}
    assert not Redactor(snapshot(), {"d1", "d2", "t1", "t2", "t3"}).active


def test_a_counterfactual_about_another_queue_says_only_what_the_job_needs():
    snap = snapshot()
    result = run_session(snap, ["allocate"])
    (exp,) = [e for e in explain_pending(snap, result, jobs=["t2-b"])]
    assert exp.counterfactual.queue == "t1" and "t1 holds" in exp.counterfactual.message   # unscoped: all of it
    scoped = Redactor(snap, {"t2"}).explanation(exp)
    cf = scoped.counterfactual
    assert cf.message == f"would start if {HIDDEN_QUEUE} released 2 GPUs"
    assert cf.queue == HIDDEN_QUEUE and cf.jobs == []
    assert not any(h in str(scoped.to_dict()).replace(HIDDEN_QUEUE, "").replace(HIDDEN_JOB, "").split("'")
                   for h in HIDDEN)


def renamed_no_reclaim():
    """tests/scenarios/reclaim/no-reclaim-...: team-b's job waits after the whole session; its counterfactual is
    about team-a, which holds one GPU above its fair share."""
    text = (SCENARIO.parent / "no-reclaim-when-claimer-would-exceed-its-fair-share.yaml").read_text()
    doc = yaml.safe_load(text)["snapshot"]
    for q in doc["queues"]:
        q["name"] = f"team-{q['name']}"
    for j in doc["jobs"]:
        j["queue"] = f"team-{j['queue']}"
    return snapshot_from_dict(doc)


def test_a_scoped_users_tables_and_exports_name_no_other_queue():
    state = LiveState()
    publish_snapshot(state, renamed_no_reclaim(), "no reclaim", MetricsReader(simulated=False))
    full = pending_table(state.tick).set_index("job")
    assert "team-a" in full.loc["big", "counterfactual"]                 # the unscoped view names it
    tick = scope_tick(state.tick, frozenset({"team-b"}))
    tables = [pending_table(tick), jobs_table(tick), queue_table(tick, "gpu"), overlay_table(tick)]
    text = " ".join(t.to_csv(index=False) for t in tables)
    for hidden in ("team-a", "a1", "a2", "a3", "a4", "a4-0"):
        assert hidden not in text.replace(HIDDEN_QUEUE, "").replace(HIDDEN_JOB, ""), hidden
    cf = pending_table(tick).set_index("job").loc["big", "counterfactual"]
    assert cf == f"would start if {HIDDEN_QUEUE} released 2 GPUs"
