"""Who can see what: the access map (users, groups, departments), the authorize callback, the per-user
filtering of ticks and history (dashboard/auth.py), and the serve flags turned into Panel's options."""

from __future__ import annotations

import argparse

import pytest

from dashboard.auth import (ALL, AccessMap, ScopedState, add_auth_arguments, expand, scope_tick, serve_kwargs,
                            user_and_groups)
from dashboard.loop import MetricsReader, publish_snapshot
from dashboard.models import QueuesModel, jobs_table, pending_table, queue_table
from dashboard.state import LiveState
from scheduler.errors import SourceError
from scheduler.snapshot_io import loads_snapshot

from test_dashboard_models import SCENARIO   # org -> a (a-train running on n0), b (b-serve, b-big pending)

DEEP = """
version: 1
time: 0
nodes: [{name: n0, gpus: 8, gpu_memory_mib: 80000, cpu_millis: 64000, memory_bytes: 512Gi}]
queues:
  - {name: research, gpu: {quota: 8}}
  - {name: llm, parent: research, gpu: {quota: 4}}
  - {name: llm-pretrain, parent: llm, gpu: {quota: 2}}
  - {name: vision, parent: research, gpu: {quota: 4}}
  - {name: serving, gpu: {quota: 0}}
jobs: []
"""


@pytest.fixture
def state():
    st = LiveState()
    publish_snapshot(st, loads_snapshot(SCENARIO), "two queues", MetricsReader(simulated=False))
    return st


ACCESS = AccessMap.from_dict({
    "users": {"alice": ["a"], "bob": ["org"], "carol": "*", "dave": []},
    "groups": {"team-b": ["b"], "admins": "*"},
    "default": [],
})


# ------------------------------------------------------------------------------------------- the map

def test_grants_of_users_groups_and_default():
    assert ACCESS.grant("alice") == frozenset({"a"})
    assert ACCESS.grant("alice", ["team-b"]) == frozenset({"a", "b"})       # user and group grants add up
    assert ACCESS.grant("carol") == ALL and ACCESS.grant("zoe", ["admins"]) == ALL
    assert ACCESS.grant("zoe") == frozenset() and ACCESS.grant(None) == frozenset()
    assert ACCESS.grant("dave") == frozenset()                            # listed with nothing: nothing
    assert AccessMap.from_dict({"default": "*"}).grant("anyone") == ALL


def test_a_department_grants_its_subtree_only():
    queues = loads_snapshot(DEEP).queues
    assert expand(frozenset({"llm"}), queues) == {"llm", "llm-pretrain"}
    assert expand(frozenset({"research"}), queues) == {"research", "llm", "llm-pretrain", "vision"}
    assert expand(frozenset({"serving", "vision"}), queues) == {"serving", "vision"}
    assert expand(frozenset({"no-such-queue"}), queues) == frozenset()
    assert expand(ALL, queues) is None


def test_authorize_callback_refuses_users_without_any_grant():
    assert ACCESS.authorize({"user": "alice"}, "/") is True
    assert ACCESS.authorize({"user": "zoe"}, "/") is False
    assert ACCESS.authorize({"email": "zoe@example.com", "groups": ["team-b"]}, "/") is True
    assert ACCESS.authorize(None, "/") is False


def test_user_and_groups_from_oidc_claims():
    assert user_and_groups({"email": "a@x", "groups": ["g1", "g2"]}) == ("a@x", ["g1", "g2"])
    assert user_and_groups({"user": "alice", "email": "a@x"}) == ("alice", [])
    assert user_and_groups({"preferred_username": "al", "groups": "one"}) == ("al", ["one"])


@pytest.mark.parametrize("doc, message", [
    ({"users": {"alice": 3}}, "users.alice: expected a list of queue names"),
    ({"users": ["alice"]}, "users must map names"),
    ({"admins": ["x"]}, "unknown key 'admins'"),
    ({"groups": {"g": [""]}}, "groups.g: expected a list"),
    ([1, 2], "expected a mapping"),
])
def test_bad_access_maps_name_the_entry(doc, message):
    with pytest.raises(SourceError, match=message):
        AccessMap.from_dict(doc, "access map x.yaml")


def test_load_reads_yaml_and_names_the_file(tmp_path):
    path = tmp_path / "access.yaml"
    path.write_text("users:\n  alice: [a]\ngroups:\n  ops: '*'\n")
    m = AccessMap.load(path)
    assert m.grant("alice") == {"a"} and m.grant("x", ["ops"]) == ALL
    path.write_text("users: [unclosed\n")
    with pytest.raises(SourceError, match=f"access map {path}: not valid YAML"):
        AccessMap.load(path)


# ------------------------------------------------------------------------------------------- filtering

def test_scoped_tick_keeps_only_the_permitted_queue_and_its_jobs(state):
    tick = scope_tick(state.tick, frozenset({"b"}))
    assert [q.name for q in tick.scheduled.queues] == ["b"]
    assert tick.scheduled.queues[0].parent is None                      # org is not visible: b is a root
    assert {j.name for j in tick.scheduled.jobs} == {"b-serve", "b-big"}
    assert set(tick.result.queue_stats) == {"b"} and set(tick.result.fair_share) == {"b"}
    assert set(tick.result.jobs) == {"b-serve", "b-big"}
    assert all(name.startswith("b-") for name in tick.result.tasks)
    assert set(tick.explanations) <= {"b-serve", "b-big"}
    assert len(tick.scheduled.nodes) == 2                              # capacity stays visible
    # the engine's numbers for b are unchanged by the filtering (fair share 3 = min(limit 3, ...))
    assert tick.result.queue_stats["b"]["gpu"] == state.tick.result.queue_stats["b"]["gpu"]
    # the process's tick is untouched
    assert {q.name for q in state.tick.scheduled.queues} == {"org", "a", "b"}


def test_frames_of_a_scoped_tick_name_no_other_queue(state):
    tick = scope_tick(state.tick, frozenset({"a"}))
    assert set(queue_table(tick)["queue"]) == {"a"}
    assert set(jobs_table(tick)["queue"]) == {"a"} and set(jobs_table(tick)["job"]) == {"a-train"}
    assert len(pending_table(tick)) == 0                               # b's pending jobs are not a's


def test_a_department_sees_its_subtree(state):
    tick = scope_tick(state.tick, frozenset({"org"}))
    assert {q.name for q in tick.scheduled.queues} == {"org", "a", "b"}
    assert scope_tick(state.tick, ALL) is state.tick


def test_gpu_frame_rows_of_other_queues_are_dropped():
    import pandas as pd

    frame = pd.DataFrame({"node": ["n0", "n0", "n1"], "gpu_index": [0, 1, 0], "queue": ["a", "b", None],
                          "pod": ["a-0", "b-0", None], "dcgm_pod": ["a-0", "b-0", "b-0"]})
    from dashboard.auth import scope_gpu_frame

    out = scope_gpu_frame(frame, frozenset({"a"}))
    assert list(out["queue"].fillna("")) == ["a", ""]
    assert list(out["dcgm_pod"].fillna("")) == ["a-0", ""]             # b's pod name is blanked on a free GPU


def test_scoped_state_follows_the_process_state_and_filters_history(state):
    scoped = ScopedState(state, frozenset({"a"}))
    assert [q.name for q in scoped.tick.scheduled.queues] == ["a"]
    hist = scoped.history.queues_frame()
    assert set(hist["queue"]) == {"a"} and len(hist) == 1               # one tick recorded
    assert QueuesModel(scoped).frame()["queue"].tolist() == ["a"]
    # a new publish on the process's state reaches the scoped state, filtered
    publish_snapshot(state, loads_snapshot(SCENARIO), "again", MetricsReader(simulated=False))
    assert scoped.tick is not state.tick and scoped.source_label == "again"
    assert [q.name for q in scoped.tick.scheduled.queues] == ["a"]
    assert len(scoped.history.records()) == 1                           # a new source resets the history
    state.fail("kube: Queue b is malformed")
    assert scoped.error and "Queue b" not in scoped.error and scoped.source_status == "stale"
    scoped.detach()
    publish_snapshot(state, loads_snapshot(SCENARIO), "third", MetricsReader(simulated=False))
    assert scoped.source_label == "again"                               # detached: no longer follows


# ------------------------------------------------------------------------------------------- serve flags

def _args(*argv):
    p = argparse.ArgumentParser()
    add_auth_arguments(p)
    return p.parse_args(list(argv))


def test_no_auth_flags_no_auth():
    assert serve_kwargs(_args(), env={}) == {}


def test_basic_auth_from_flag_or_environment():
    kw = serve_kwargs(_args("--basic-auth", "users.json", "--cookie-secret", "s3"), env={})
    assert kw == {"basic_auth": "users.json", "cookie_secret": "s3"}
    kw = serve_kwargs(_args(), env={"KAIDASH_BASIC_AUTH": "pw", "PANEL_COOKIE_SECRET": "x"})
    assert kw == {"basic_auth": "pw"}                                   # Panel reads its own cookie secret
    kw = serve_kwargs(_args("--basic-auth", "pw"), env={})
    assert len(kw["cookie_secret"]) >= 32                               # random when none is given


def test_generic_oidc_needs_its_three_urls():
    extra = "{'AUTHORIZE_URL': 'https://idp/auth', 'TOKEN_URL': 'https://idp/token', 'USER_URL': 'https://idp/me'}"
    kw = serve_kwargs(_args("--oauth-provider", "generic", "--oauth-key", "kaidash", "--oauth-secret", "s",
                            "--oauth-extra-params", extra, "--cookie-secret", "c"), env={})
    assert kw["oauth_provider"] == "generic" and kw["oauth_key"] == "kaidash"
    assert kw["oauth_extra_params"]["TOKEN_URL"] == "https://idp/token"
    with pytest.raises(SourceError, match="needs TOKEN_URL, USER_URL"):
        serve_kwargs(_args("--oauth-provider", "generic", "--oauth-extra-params", "{'AUTHORIZE_URL': 'u'}"), env={})
    env = {"PANEL_OAUTH_PROVIDER": "generic", "PANEL_OAUTH_AUTHORIZE_URL": "a", "PANEL_OAUTH_TOKEN_URL": "t",
           "PANEL_OAUTH_USER_URL": "u", "PANEL_COOKIE_SECRET": "c"}
    assert serve_kwargs(_args(), env=env) == {"oauth_provider": "generic"}


def test_conflicting_or_incomplete_auth_is_refused():
    with pytest.raises(SourceError, match="one of --basic-auth and --oauth-provider"):
        serve_kwargs(_args("--basic-auth", "pw", "--oauth-provider", "github"), env={})
    with pytest.raises(SourceError, match="--access-map needs a login"):
        serve_kwargs(_args("--access-map", "a.yaml"), env={})
    with pytest.raises(SourceError, match="not a Python dict literal"):
        serve_kwargs(_args("--oauth-provider", "github", "--oauth-extra-params", "{oops"), env={})


def test_gpu_evidence_naming_another_queues_pod_is_hidden():
    import pandas as pd

    from dashboard.auth import HIDDEN_EVIDENCE, scope_gpu_frame

    frame = pd.DataFrame({"node": ["n0", "n0", "n1"], "gpu_index": [0, -1, 0], "queue": ["a", "b", None],
                          "pod": ["a-0", "b-0", None], "task": ["a-0", "b-0", None],
                          "dcgm_pod": ["ns/a-0", None, "ns/stray"],
                          "evidence": ["idle allocated: n0 GPU 0 held by a-0", "held, device unknown: ns/b-0",
                                       "unallocated in use: no pod holds n1 GPU 0; DCGM credits ns/stray"]})
    out = scope_gpu_frame(frame, frozenset({"a"}))
    assert list(out["evidence"]) == ["idle allocated: n0 GPU 0 held by a-0", HIDDEN_EVIDENCE]
    frame.loc[0, "evidence"] = "in use, holder unknown: n0 GPU 0 may belong to ns/b-0 (1 GPU)"
    assert scope_gpu_frame(frame, frozenset({"a"}))["evidence"].iloc[0] == HIDDEN_EVIDENCE


def test_overlay_of_a_scoped_tick_names_no_hidden_preemptor():
    from pathlib import Path

    import yaml

    from dashboard.models import overlay_table
    from scheduler.snapshot_io import snapshot_from_dict

    doc = yaml.safe_load((Path(__file__).parent / "scenarios/reclaim/department-levels-respected.yaml").read_text())
    st = LiveState()
    publish_snapshot(st, snapshot_from_dict(doc["snapshot"]), "reclaim", MetricsReader(simulated=False))
    full = overlay_table(st.tick)
    assert "reclaim for t2-a" in set(full["cause"])
    scoped = overlay_table(scope_tick(st.tick, frozenset({"t1"})))
    assert set(scoped["queue"]) == {"t1"} and set(scoped["action"]) == {"evict"}
    assert not scoped["text"].str.contains("t2").any()
    assert scoped["cause"].str.contains("a queue you cannot see").all()


def test_a_restricted_users_upload_is_refused_before_anything_is_parsed(state, monkeypatch):
    from dashboard.auth import ScopedState
    from dashboard.views import snapshot as snapshot_view

    parsed = []
    def spy(*args):
        parsed.append(args)
        raise ValueError("parsed")          # stop there: only whether parsing was reached matters
    monkeypatch.setattr(snapshot_view, "load_uploaded", spy)
    scoped = ScopedState(state, frozenset({"b"}))
    view = snapshot_view.SnapshotView(scoped)
    assert view.upload.disabled
    assert view.import_file("cluster.yaml", b"version: 1\nnodes: []\n") is False
    assert parsed == [] and 'data-import="refused"' in view.message.object
    assert scoped.tick is not None and {q.name for q in scoped.tick.snapshot.queues} == {"b"}   # unchanged
    full = snapshot_view.SnapshotView(state)                      # a user with every queue may import
    assert not full.upload.disabled
    assert full.import_file("cluster.yaml", b"version: 1\nnodes: []\n") is False
    assert len(parsed) == 1
    scoped.detach()
