"""GPU cost: prices, per-hour rates per category and queue on a cluster worked out by hand, the ledger.

The cluster (example prices: H100 4.0, L4 0.8, A100 2.0 per GPU-hour):

- ``h1``: 8 H100s. ``big`` (llm) holds GPUs 0-4 at 90 % utilisation, ``idle1`` (vision) GPU 5 at 0 %; its CPU is
  nearly all taken (2,000 of 64,000 millicores left). GPUs 6 and 7 are free.
- ``l1``: 4 L4s. ``inf1`` (inference) holds 0.7 of GPU 0 at 30 %; GPUs 1-3 free.
- ``n3``: 8 A100s, not Ready.
- Pending: ``gang`` (4 whole GPUs) and ``half`` (0.5 of a GPU), each asking 4,000 millicores.

Stranded: on h1 no pending shape fits (4 GPUs > 2 free; the fraction fits a GPU but not the CPU), so its 2 free
GPUs are stranded; on l1 the 0.3 left on GPU 0 is smaller than 0.5, the 3 free L4s are usable. Unused quota:
vision 6 − 1 = 5, inference 2 − 0.7 = 1.3, llm 4 − 5 → 0, at the mean price (8·4 + 4·0.8) / 12.
"""

import io
import math

import pandas as pd
import pytest

from scheduler.cost import CostLedger, GpuPrices, PriceError, cost_rates, simulate_costs, stranded_gpus
from scheduler.cost.rates import idle_gpus_from_frame, pending_shapes
from scheduler.snapshot_io import loads_snapshot

DAY = 86400.0
T0 = 1_767_225_600.0          # 2026-01-01T00:00Z

CLUSTER = f"""
version: 1
time: {T0}
nodes:
  - {{name: h1, gpus: 8, gpu_model: NVIDIA-H100-80GB-HBM3, gpu_memory_mib: 81920, cpu_millis: 64000,
     memory_bytes: 512Gi}}
  - {{name: l1, gpus: 4, gpu_model: NVIDIA-L4, gpu_memory_mib: 23000, cpu_millis: 32000, memory_bytes: 128Gi}}
  - {{name: n3, gpus: 8, gpu_model: NVIDIA-A100-SXM4-40GB, gpu_memory_mib: 40960, cpu_millis: 64000,
     memory_bytes: 512Gi, ready: false}}
queues:
  - {{name: llm, gpu: {{quota: 4}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
  - {{name: vision, gpu: {{quota: 6}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
  - {{name: inference, gpu: {{quota: 2}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
jobs:
  - {{name: big, queue: llm, tasks: [{{name: big-0, gpu: 5, cpu_millis: 60000, status: running, node: h1,
     gpu_index: [0, 1, 2, 3, 4], usage: {{gpu_util: 0.9, gpu_memory_mib: 60000}}}}]}}
  - {{name: idle1, queue: vision, tasks: [{{name: idle1-0, gpu: 1, cpu_millis: 2000, status: running, node: h1,
     gpu_index: 5, usage: {{gpu_util: 0.0, gpu_memory_mib: 100}}}}]}}
  - {{name: inf1, queue: inference, tasks: [{{name: inf1-0, gpu: 0.7, cpu_millis: 4000, status: running, node: l1,
     gpu_index: 0, gpu_group: g0, usage: {{gpu_util: 0.3, gpu_memory_mib: 9000}}}}]}}
  - {{name: gang, queue: vision, tasks: [{{name: gang-0, gpu: 4, cpu_millis: 4000}}]}}
  - {{name: half, queue: inference, tasks: [{{name: half-0, gpu: 0.5, cpu_millis: 4000}}]}}
"""
MEAN = (8 * 4.0 + 4 * 0.8) / 12


@pytest.fixture
def snap():
    return loads_snapshot(CLUSTER)


# ---------------------------------------------------------------------------------------------- prices

def test_prices_match_the_longest_model_key_and_fall_back_to_the_default():
    p = GpuPrices()
    assert p.price("NVIDIA-H100-80GB-HBM3") == 4.0 and p.price("NVIDIA-A100-SXM4-80GB") == 2.5
    assert p.price("NVIDIA-A100-SXM4-40GB") == 2.0 and p.price("NVIDIA-L40S") == 1.5 and p.price("NVIDIA-L4") == 0.8
    assert p.price("AMD-MI300X") == p.default_gpu_hour == 2.0 and p.price(None) == 2.0
    custom = GpuPrices.from_dict({"currency": "EUR", "gpu_hour": {"h100": 3}, "default_gpu_hour": 1})
    assert custom.price("NVIDIA-H100-80GB-HBM3") == 3 and custom.price("Tesla-T4") == 1 and custom.currency == "EUR"
    assert custom.with_overrides(["T4=0.25", "default=0.5"]).price("Tesla-T4") == 0.25
    assert GpuPrices.from_dict({"gpu_hour": {"H100": 3}}).price("T4") == 0.0   # own table: no silent example default


def test_bad_prices_name_the_key(tmp_path):
    with pytest.raises(PriceError, match=r"gpu_hour.H100: expected a price >= 0"):
        GpuPrices.from_dict({"gpu_hour": {"H100": -1}})
    with pytest.raises(PriceError, match=r"prices.yaml.gpu_hours: unknown key"):
        GpuPrices.from_dict({"gpu_hours": {}}, source="prices.yaml")
    with pytest.raises(PriceError, match=r"--gpu-hour H100: expected MODEL=PRICE"):
        GpuPrices().with_overrides(["H100"])
    bad = tmp_path / "p.yaml"
    bad.write_text("gpu_hour: [1, 2")
    with pytest.raises(PriceError, match="not valid YAML"):
        GpuPrices.load(bad)
    with pytest.raises(PriceError, match="cannot read"):
        GpuPrices.load(tmp_path / "missing.yaml")


# ---------------------------------------------------------------------------------------------- rates

def test_rates_per_category_and_queue(snap):
    r = cost_rates(snap)
    c = r.cluster()
    assert c["capacity"] == pytest.approx(8 * 4.0 + 4 * 0.8)
    assert c["unavailable"] == pytest.approx(8 * 2.0)
    assert r.total("allocated", "llm") == pytest.approx(20.0) and r.total("allocated", "vision") == pytest.approx(4.0)
    assert r.total("allocated", "inference") == pytest.approx(0.7 * 0.8)
    assert r.idle_basis == "usage"
    assert r.total("idle_allocated") == pytest.approx(4.0) and r.gpus("idle_allocated", "vision") == 1.0
    assert r.gpus("stranded") == pytest.approx(2.3) and c["stranded"] == pytest.approx(2 * 4.0 + 0.3 * 0.8)
    assert r.gpus("free") == pytest.approx(3.0) and c["free"] == pytest.approx(3 * 0.8)
    assert r.gpus("allocated") + r.gpus("stranded") + r.gpus("free") == pytest.approx(12)
    assert r.gpus("unused_quota", "vision") == 5 and r.gpus("unused_quota", "inference") == pytest.approx(1.3)
    assert r.total("unused_quota", "llm") == 0 and r.total("unused_quota") == pytest.approx(6.3 * MEAN)
    per = r.per_queue()
    assert list(per.columns) == ["allocated", "idle_allocated", "unused_quota"]
    assert per.at["vision", "unused_quota"] == pytest.approx(5 * MEAN)
    text = r.to_csv()
    assert text.splitlines()[0] == "category,queue,gpu_model,gpus,cost_per_h,time,currency"


def test_stranded_by_node_and_why(snap):
    s = stranded_gpus(snap).set_index("node")
    assert "n3" not in s.index                                     # not Ready: unavailable, not stranded
    assert s.at["h1", "free_gpus"] == 2 and s.at["h1", "stranded_gpus"] == 2
    assert s.at["h1", "why"] == "no pending shape fits the free GPUs"
    assert s.at["l1", "free_gpus"] == pytest.approx(3.3) and s.at["l1", "stranded_gpus"] == pytest.approx(0.3)
    assert s.at["l1", "why"] == "free fractions smaller than any pending fraction"
    assert [sh[:3] for sh in pending_shapes(snap)] == [("fraction", 0.5, 1), ("whole", 4.0, 1)]


def test_nothing_pending_means_nothing_stranded(snap):
    snap.jobs = [j for j in snap.jobs if j.name not in ("gang", "half")]
    r = cost_rates(snap)
    assert r.gpus("stranded") == 0 and r.gpus("free") == pytest.approx(5.3)
    assert set(stranded_gpus(snap)["why"]) == {"no pending GPU pod"}


def test_idle_from_the_dcgm_frame_wins_over_usage(snap):
    frame = pd.DataFrame({"node": ["h1", "h1", "l1", "l1"], "gpu_index": [0, 6, 0, 1],
                          "task": ["big-0", None, "inf1-0", None], "queue": ["llm", None, "inference", None],
                          "share": [1.0, math.nan, 0.7, math.nan], "idle_allocated": [True, False, True, False]})
    assert idle_gpus_from_frame(frame, snap) == {("llm", "NVIDIA-H100-80GB-HBM3"): 1.0,
                                                 ("inference", "NVIDIA-L4"): 0.7}
    r = cost_rates(snap, gpu_frame=frame)
    assert r.idle_basis == "dcgm" and r.total("idle_allocated") == pytest.approx(4.0 + 0.7 * 0.8)
    assert r.total("idle_allocated", "vision") == 0


def test_without_any_utilisation_idle_is_zero_and_said(snap):
    for j in snap.jobs:
        for t in j.tasks:
            t.usage = None
    r = cost_rates(snap)
    assert r.idle_basis == "none" and r.total("idle_allocated") == 0 and "no GPU utilisation" in r.notes[0]


# ---------------------------------------------------------------------------------------------- ledger

def _at(snap, t):
    r = cost_rates(snap)
    r.time = t
    return r


def test_ledger_splits_at_midnight_skips_gaps_and_totals_by_period(snap):
    ledger = CostLedger(max_gap_s=3600)
    ledger.add(_at(snap, T0 - 1800))                 # 23:30 on Dec 31
    ledger.add(_at(snap, T0 + 1800))                 # 00:30 on Jan 1: half an hour each side of midnight
    ledger.add(_at(snap, T0 + 5 * 3600))             # a 4.5 h gap: the loop was down, not charged
    ledger.add(_at(snap, T0 + 6 * 3600))
    daily = ledger.daily()
    cap = daily[daily["category"] == "capacity"].set_index("day")
    assert cap.at["2025-12-31", "gpu_hours"] == pytest.approx(12 * 0.5)
    assert cap.at["2026-01-01", "gpu_hours"] == pytest.approx(12 * 1.5)
    assert cap.at["2026-01-01", "covered_h"] == pytest.approx(1.5)
    today = ledger.totals(days=1).set_index("category")
    assert today.at["stranded", "cost"] == pytest.approx(1.5 * (2 * 4.0 + 0.3 * 0.8))
    assert ledger.totals(days=1).attrs["covered_h"] == pytest.approx(1.5)
    assert ledger.total("capacity", days=30) == pytest.approx(2.0 * (8 * 4.0 + 4 * 0.8))
    assert ledger.total("idle_allocated", days=30, queue="vision") == pytest.approx(2 * 4.0)
    series = ledger.series()
    assert list(series["time"]) == [T0 - 1800, T0 + 1800, T0 + 5 * 3600, T0 + 6 * 3600]
    assert series["stranded"].iloc[0] == pytest.approx(2 * 4.0 + 0.3 * 0.8)
    again = CostLedger.from_csv(io.StringIO(ledger.to_csv()))
    pd.testing.assert_frame_equal(again.daily(), ledger.daily())
    assert again.total("capacity", now=T0 + 6 * 3600) == ledger.total("capacity")


def test_ledger_keeps_a_bounded_number_of_days(snap):
    ledger = CostLedger(keep_days=3, max_gap_s=DAY, series_every_s=DAY, series_keep_s=2 * DAY)
    for d in range(6):
        ledger.add(_at(snap, T0 + d * DAY / 2))
    assert ledger.daily()["day"].nunique() <= 4
    assert list(ledger.series()["time"]) == [T0 + DAY, T0 + 2 * DAY]    # one a day at most, the last two kept
    with pytest.raises(PriceError, match="not a cost ledger CSV"):
        CostLedger.from_csv(io.StringIO("a,b\n1,2\n"))


def test_simulated_costs_follow_the_simulator(snap):
    from scheduler.simulate import Simulator

    snap.jobs = [j for j in snap.jobs if j.name != "gang"]
    for j in snap.jobs:
        j.duration_s = 1800.0
    sim = Simulator(snap, period_s=60)
    ledger = simulate_costs(sim, 3600, sample_every_s=600)
    assert sim.time == T0 + 3600
    # everything finishes at 30 min: allocated GPU-hours are those of the first half hour (+ the pending 0.5 GPU
    # job, placed at once), capacity is charged for the whole hour
    assert ledger.totals(days=1).set_index("category").at["capacity", "gpu_hours"] == pytest.approx(12.0)
    alloc = ledger.totals(days=1, by_queue=True)
    assert alloc[alloc["category"] == "allocated"]["gpu_hours"].sum() == pytest.approx((5 + 1 + 0.7 + 0.5) * 0.5)
