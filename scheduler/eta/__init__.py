"""Pending ETA by forward simulation: when will each waiting job start, and what is it waiting for?

```python
from scheduler.eta import EtaConfig, WorkloadModel, estimate_eta
report = estimate_eta(snapshot, WorkloadModel.from_log(job_log), EtaConfig(runs=5))
report["llm/llm-train-0007"].text       # "starts in ~40 min (20 min–1.5 h), after llm/llm-train-0003 finishes"
report.frame()                          # one row per waiting job (the Pending view)
report.queue_frame()                    # per queue: next start, median and longest expected wait
```
See ``docs/eta.md`` for the method, its measured error and its cost.
"""

from .estimate import EtaConfig, EtaWhatIf, estimate_eta, estimate_eta_whatif, never_reason, pending_keys
from .planner import EtaPlanner
from .report import EtaEstimate, EtaReport, RunningEstimate, format_duration
from .workload import WorkloadModel

__all__ = ["EtaConfig", "EtaWhatIf", "estimate_eta", "estimate_eta_whatif", "never_reason", "pending_keys",
           "EtaPlanner", "EtaEstimate", "EtaReport", "RunningEstimate", "format_duration", "WorkloadModel"]
