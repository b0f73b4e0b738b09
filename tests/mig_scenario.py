"""The MIG metrics test scenario: one A100 node sliced into MIG instances, one H100 node of whole GPUs.

Hand-derivable facts (``scheduler/metrics/mig.py`` ``mig_layout``; exporter rules in ``SimInstance``):

* ``a100-mig`` (A100 80 GB = 81920 MiB, 8 GPU-equivalent cells): instances in ``Node.mig`` order,
  ``1g.10gb`` × 4 (cells 0-3) then ``3g.40gb`` × 1 (cells 4-6): 7 compute slices and 80 GiB, so all five fit
  on physical GPU 0, ids 1-5. Cell 7 is a whole GPU: physical GPU 1.
* ``serve/small-0`` holds the 1g.10gb instance at cell 0 (id 1), uses 7000 MiB, activity 0.4;
  ``serve/small-1`` holds the one at cell 1 (id 2), 9000 MiB, activity 0 (allocated and idle);
  the 1g.10gb instances at cells 2 and 3 (ids 3, 4) are free;
  ``serve/big-0`` holds the 3g.40gb (cells 4-6, id 5), 30000 MiB, 0.6: 10000 MiB on each of its cells;
  ``train/whole-0`` holds the whole GPU (cell 7, physical 1), 50000 MiB, 0.9.
* ``h100-0`` (8 × 81920 MiB, no MIG): ``train/h100-job-0`` holds GPUs 0-1 whole, 60000 MiB and 0.8 each.
"""

from __future__ import annotations

from scheduler.snapshot_io import snapshot_from_dict

A100_MIB = 81920
USAGE = {"small-0": (7000, 0.4), "small-1": (9000, 0.0), "big-0": (30000, 0.6), "whole-0": (50000, 0.9),
         "h100-job-0": (60000, 0.8)}


def _task(namespace, name, node, indices, gpu=None, mig=None):
    used, util = USAGE[name]
    task = {"name": f"{namespace}/{name}", "node": node, "status": "running", "gpu_index": indices,
            "usage": {"gpu_memory_mib": used, "gpu_util": util}}
    if mig:
        task["mig"] = mig
    else:
        task["gpu"] = gpu
    return task


def mig_snapshot():
    tasks = [("serve", _task("serve", "small-0", "a100-mig", [0], mig={"1g.10gb": 1})),
             ("serve", _task("serve", "small-1", "a100-mig", [1], mig={"1g.10gb": 1})),
             ("serve", _task("serve", "big-0", "a100-mig", [4, 5, 6], mig={"3g.40gb": 1})),
             ("train", _task("train", "whole-0", "a100-mig", [7], gpu=1)),
             ("train", _task("train", "h100-job-0", "h100-0", [0, 1], gpu=2))]
    return snapshot_from_dict({
        "version": 1.2,
        "nodes": [{"name": "a100-mig", "gpus": 8, "gpu_memory_mib": A100_MIB, "cpu_millis": 64000,
                   "memory_bytes": "512Gi", "mig": {"1g.10gb": 4, "3g.40gb": 1}, "gpu_model": "A100-SXM4-80GB"},
                  {"name": "h100-0", "gpus": 8, "gpu_memory_mib": A100_MIB, "cpu_millis": 64000,
                   "memory_bytes": "512Gi", "gpu_model": "H100 80GB HBM3"}],
        "queues": [{"name": "serve"}, {"name": "train"}],
        "jobs": [{"name": t["name"].split("/")[1], "namespace": ns, "queue": ns, "min_available": 1, "tasks": [t]}
                 for ns, t in tasks]})
