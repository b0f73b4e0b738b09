"""What the GPUs cost, and what the waste costs: prices, per-hour rates per queue, daily and 30-day totals.

```python
from scheduler.cost import GpuPrices, CostLedger, cost_rates
prices = GpuPrices.load("prices.yaml")          # or GpuPrices() for the documented example prices
rates = cost_rates(snapshot, prices, gpu_frame)  # per hour: allocated, idle_allocated, stranded, unused_quota, ...
rates.total("idle_allocated", queue="llm")       # one number
ledger = CostLedger(); ledger.add(rates)         # every tick: integrates rates into UTC days
ledger.totals(days=30)                           # per category over the last 30 days
```
See ``docs/cost.md``.
"""

from .ledger import CostLedger
from .prices import EXAMPLE_DEFAULT, EXAMPLE_PRICES, GpuPrices, PriceError
from .rates import CATEGORIES, WASTE, CostRates, cost_rates, cost_summary, pending_shapes, stranded_gpus
from .simulated import simulate_costs

__all__ = ["CostLedger", "GpuPrices", "PriceError", "EXAMPLE_PRICES", "EXAMPLE_DEFAULT", "CATEGORIES", "WASTE",
           "CostRates", "cost_rates", "cost_summary", "pending_shapes", "stranded_gpus", "simulate_costs"]
