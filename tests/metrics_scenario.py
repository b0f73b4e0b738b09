"""The GPU-metrics test scenario: examples/small-cluster.yaml with placements and per-pod usage added.

Hand-derivable facts the metrics tests rely on (exporter rules in scheduler/metrics/exporter.py):

* h100-0 (8 x 81920 MiB): ``llm-pretrain-0`` holds GPUs 0-7 whole; usage 60000 MiB, 0.9 per device.
* h100-1: ``llm-pretrain-1`` holds GPUs 0-3 whole with no usage (idle but allocated); GPUs 4-7 are free.
* l4-0 (4 x 23000 MiB), GPU 1 shared, group ``grp-l4-1``, credited to its KAI reservation pod:
  ``chat-api-0`` gpu 0.5 (11500 MiB allocated) using 13000 MiB / 0.3 (over its share);
  ``embedder-0`` gpu_memory_mib 8000 (share ceil(8000/23000*100)/100 = 0.35) using 7000 MiB / 0.2, placed by
  group only (no gpu_index), so its device must be resolved through the group.
  GPU 1 totals: 20000 MiB used, utilisation 0.5.
* l4-0 GPUs 2 and 3: ``multi-0`` gpu 0.25 x gpu_devices 2 (groups ``grp-l4-2``/``grp-l4-3``), 2000 MiB and 0.1
  on each device.
* l4-0 GPU 0 and h100-1 GPUs 4-7: nothing allocated.
"""

from __future__ import annotations

from pathlib import Path

from scheduler.model import Job, Task, TaskUsage
from scheduler.snapshot_io import load_snapshot

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "small-cluster.yaml"


def metrics_snapshot():
    snap = load_snapshot(EXAMPLE)
    jobs = snap.job_map()
    pre0, pre1 = jobs["llm-pretrain"].tasks
    pre0.usage = TaskUsage(gpu_memory_mib=60000, gpu_util=0.9)
    chat = jobs["chat-api"].tasks[0]
    chat.status, chat.node, chat.gpu_groups, chat.gpu_indices = "running", "l4-0", ["grp-l4-1"], [1]
    chat.usage = TaskUsage(gpu_memory_mib=13000, gpu_util=0.3)
    emb = jobs["embedder"].tasks[0]
    emb.status, emb.node, emb.gpu_groups = "running", "l4-0", ["grp-l4-1"]
    emb.usage = TaskUsage(gpu_memory_mib=7000, gpu_util=0.2)
    snap.jobs.append(Job(name="multi", queue="serving", creation_time=1767224300, tasks=[
        Task(name="multi-0", gpu=0.25, gpu_devices=2, status="running", node="l4-0",
             gpu_groups=["grp-l4-2", "grp-l4-3"], gpu_indices=[2, 3],
             usage=TaskUsage(gpu_memory_mib=2000, gpu_util=0.1))]))
    return snap
