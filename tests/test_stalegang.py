"""Stale-gang eviction (kai-semantics §c.6): readable scenarios plus sub-group staleness."""

import pytest

from scheduler.engine import run_session
from scheduler.snapshot_io import loads_snapshot
from tests._scenario_runner import run_scenario, scenario_paths

SCENARIOS = scenario_paths("stale")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path):
    run_scenario(path)


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 5


SUBGROUPS = """
time: 1000
nodes:
  - {name: n1, gpus: 3, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: t, gpu: {quota: 3}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - name: g
    queue: t
    stale_since: 800
    subgroups: [{name: master, min_available: 1}, {name: workers, min_available: 2}]
    tasks:
      - {name: m-0, gpu: 1, subgroup: master, status: running, node: n1}
      - {name: w-0, gpu: 1, subgroup: workers, status: running, node: n1}
      - {name: w-1, gpu: 1, subgroup: workers, status: failed}
  - {name: other, queue: t, tasks: [{name: other-0, gpu: 1, status: running, node: n1}]}
"""


def test_a_sub_group_below_its_minimum_makes_the_whole_job_stale():
    # workers has 1 active pod of 2 required (w-1 failed, and no GPU is free to replace it): stale for 200 s.
    result = run_session(loads_snapshot(SUBGROUPS))
    out = result.to_contract()
    assert sorted(out["evicted"]) == ["m-0", "w-0"]
    assert out["tasks"]["other-0"]["status"] == "running"
    assert "in sub-group workers" in result.evicted[0].message


def test_satisfied_sub_groups_are_not_stale():
    snap = loads_snapshot(SUBGROUPS.replace("min_available: 2}", "min_available: 1}"))
    result = run_session(snap)
    assert result.to_contract()["evicted"] == []
