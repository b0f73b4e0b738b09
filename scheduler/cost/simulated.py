"""Cost over a simulated run: sample the cost rates of a :class:`~scheduler.simulate.Simulator` as it runs.

What a capacity review asks ("what would two more H100 nodes, or spreading instead of packing, cost or save over
a day?") is the ledger of a simulated variant: :func:`simulate_costs` runs the simulator to ``until_s``, taking
:func:`~scheduler.cost.cost_rates` every ``sample_every_s`` of cluster time into a
:class:`~scheduler.cost.CostLedger` (each sample holds until the next: a step function at that resolution).
Idleness comes from the pods' recorded usage; jobs arriving during a simulation record none, so idle cost
covers the jobs of the starting snapshot only.
"""

from __future__ import annotations

from typing import Optional

from .ledger import CostLedger
from .prices import GpuPrices
from .rates import cost_rates


def simulate_costs(simulator, until_s: float, prices: Optional[GpuPrices] = None, *,
                   sample_every_s: float = 600.0, ledger: Optional[CostLedger] = None) -> CostLedger:
    """Run ``simulator`` to ``until_s`` seconds after its start, sampling cost rates into a ledger (returned).

    The simulator is advanced in place (``simulator.run`` in steps), so its frames cover the same run.
    """
    if sample_every_s <= 0:
        raise ValueError(f"sample_every_s: must be positive, got {sample_every_s}")
    prices = prices or GpuPrices()
    ledger = ledger or CostLedger(max_gap_s=2 * sample_every_s, currency=prices.currency)
    t = 0.0
    while True:
        simulator.run(t)
        ledger.add(cost_rates(simulator.snapshot, prices), at=simulator.time)
        if t >= until_s:
            break
        t = min(until_s, t + sample_every_s)
    return ledger


__all__ = ["simulate_costs"]
