"""bench/kai_cost_whatif.py: per-cycle cost of KAI and kaidash on the what-if's states (a stand-in binary for KAI)."""

import stat

import pytest

from bench.kai_cost_whatif import case_rows, go_duration_ms, kai_cost, main, totals

FAKE_TOOL = """#!/bin/sh
# a stand-in for KAI's snapshot-tool: the log lines kai_cost reads, more scenario lines at verbosity >= 5
zip="$2"; v="$4"
test -f "$zip" || { echo "no zip $zip"; exit 3; }
echo 'INFO main.go:131 [snapshot-runner] [allocate] Action <allocate> completed in 1.5ms'
echo 'INFO main.go:131 [snapshot-runner] [reclaim] Action <reclaim> completed in 250µs'
if [ "$v" -ge 5 ]; then
  printf '[reclaim] Trying to solve scenario: Pending tasks: a\\t Recorded victim jobs:\\t Potential victim tasks: b\\n'
  printf '[reclaim] Trying to solve scenario: Pending tasks: a\\t Recorded victim jobs:\\t Potential victim tasks: c\\n'
fi
"""


def test_go_durations_read_as_go_prints_them():
    assert go_duration_ms("88.443348ms") == pytest.approx(88.443348)
    assert go_duration_ms("132.509µs") == pytest.approx(0.132509)
    assert go_duration_ms("1m2.5s") == pytest.approx(62_500)
    with pytest.raises(ValueError):
        go_duration_ms("12 ms")


def _fake(tmp_path):
    tool = tmp_path / "snapshot-tool"
    tool.write_text(FAKE_TOOL)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(tool)


def test_kai_cost_reads_the_tools_timers_and_scenarios(tmp_path):
    z = tmp_path / "s.zip"
    z.write_bytes(b"PK")
    cost = kai_cost(_fake(tmp_path), z, runs=3)
    assert cost["actions_ms"] == pytest.approx(1.75)
    assert cost["scenarios"] == 2
    assert cost["cpu_ms"] >= 0


def test_a_failing_tool_is_an_error_naming_the_zip(tmp_path):
    with pytest.raises(RuntimeError, match="missing.zip: the snapshot tool exited with status 3"):
        kai_cost(_fake(tmp_path), tmp_path / "missing.zip", runs=1)


def test_each_cycle_of_a_slider_is_costed_on_both_sides(tmp_path):
    from bench.whatif_latency import SLIDERS

    rows = case_rows("queue quota", SLIDERS["queue quota"], _fake(tmp_path), kai_runs=1, runs=1)
    assert [r["cycle"] for r in rows] == list(range(len(rows))) and len(rows) >= 2
    t = totals(rows)
    # the quota slider makes reclaim search victims: kaidash's trace counts its scenarios
    assert t["kaidash"]["scenarios"] > 100
    assert t["kai"]["scenarios"] == 2 * len(rows)   # the stand-in logs two per run


def test_cli_refuses_an_unknown_slider_and_a_missing_binary(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--sliders", "no such slider"])
    assert "unknown slider" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--snapshot-tool", str(tmp_path / "nothing")])
    assert "not an executable file" in capsys.readouterr().err
