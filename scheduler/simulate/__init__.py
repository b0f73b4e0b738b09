"""Discrete-event simulation: arrivals, completions, a scheduling cycle every period, time-based usage.

```python
from scheduler.simulate import Simulator, UsageConfig
sim = Simulator(snapshot, arrivals, period_s=10).run(4 * 3600)
frames = sim.frames()          # {"queues", "cluster", "evictions", "jobs"} DataFrames
```
See ``docs/simulate.md``.
"""

from .events import EventQueue
from .records import CLUSTER_METRICS, QUEUE_METRICS, Recorder
from .simulator import Simulator, Step, normalise_arrivals
from .usage import UsageConfig, UsageTracker

__all__ = ["EventQueue", "Recorder", "QUEUE_METRICS", "CLUSTER_METRICS", "Simulator", "Step",
           "normalise_arrivals", "UsageConfig", "UsageTracker"]
