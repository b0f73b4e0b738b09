"""KAI agreement on hand-built DRA clusters: ``python -m bench.kai_diff_dra --snapshot-tool PATH [--keep DIR]``.

Each cluster is a KAI ``/get-snapshot`` zip with ``resource.k8s.io/v1`` objects: nodes ``dra-0`` / ``dra-1`` whose
``gpu.nvidia.com`` ResourceSlices publish 4 / 8 devices, a 4-GPU device-plugin node ``plain``, a DeviceClass, a shared
1-device claim allocated to two running pods on ``dra-0``, a running 2-device template claim there, pending template
claims of the sizes listed per variant, a fractional pod, and optionally a pending pod joining the shared claim
(``join``; with the claim's queue label: ``label``) and a pod whose template claim was not made (``nomade``). Both
schedulers run ``allocate``; the decision sets (placements, fair share) are compared as ``bench.kai_diff`` does.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kai_objects as ko  # noqa: E402

from bench.kai_diff import compare, object_features, write_zip  # noqa: E402
from bench.kai_diff_kai import run_snapshot_tool  # noqa: E402
from bench.kai_diff_kaidash import kaidash_decisions  # noqa: E402

Q = {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}


def slice_(node, driver, n):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}", "uid": f"slice-{node}-{driver}", "resourceVersion": "1"},
            "spec": {"nodeName": node, "driver": driver, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{k}", "attributes": {"index": {"int": k}}} for k in range(n)]}}


def dclass(name, driver):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name, "uid": f"dc-{name}", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def claim(name, ns, count, owner=None, reserved=(), alloc=None, cls="gpu.nvidia.com", labels=None):
    meta = {"name": name, "namespace": ns, "uid": f"claim-{name}", "resourceVersion": "1", "creationTimestamp": ko.T0,
            "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True}]
    st = {}
    if reserved:
        st["reservedFor"] = [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in reserved]
    if alloc:
        node, devs = alloc
        st["allocation"] = {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devs]},
                            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}}]}},
            "status": st}


def cpod(name, group, ref, node=None, made=None):
    p = ko.pod(name, pod_group=group, node=node)
    p["spec"]["resourceClaims"] = [ref]
    if made:
        p["status"]["resourceClaimStatuses"] = [{"name": ref["name"], "resourceClaimName": made}]
    return p


def build(variant, extra=()):
    pods, claims, groups = [], [], []
    if "join" in extra:  # a pending pod of the allocated shared claim
        j = cpod("join-0", "join", {"name": "gpu", "resourceClaimName": "shared-gpu"})
        j["metadata"]["creationTimestamp"] = "2025-12-31T00:00:00Z"
        pods.append(j); groups.append(ko.pod_group("join"))
    if "nomade" in extra:  # a template claim the DRA controller has not made yet
        j = cpod("nomade-0", "nomade", {"name": "gpu", "resourceClaimTemplateName": "t"})
        pods.append(j); groups.append(ko.pod_group("nomade"))
    # running: a shared claim of 1 device held by two pods on dra-0 (allocated gpu-0)
    sh = [cpod(f"sh-{k}", "sh", {"name": "gpu", "resourceClaimName": "shared-gpu"}, node="dra-0") for k in (0, 1)]
    pods += sh; groups.append(ko.pod_group("sh", min_member=2))
    claims.append(claim("shared-gpu", "team-a", 1, reserved=sh, alloc=("dra-0", ["gpu-0"]),
                        labels={"kai.scheduler/queue": "team-a"} if "label" in extra else {}))
    # running: a template claim of 2 devices on dra-0 (gpu-1, gpu-2)
    r = cpod("run-0", "run", {"name": "gpu", "resourceClaimTemplateName": "two"}, node="dra-0", made="run-0-gpu-a")
    pods.append(r); groups.append(ko.pod_group("run"))
    claims.append(claim("run-0-gpu-a", "team-a", 2, owner=r, reserved=[r], alloc=("dra-0", ["gpu-1", "gpu-2"])))
    # pending: template claims of various sizes
    for k, n in enumerate(variant):
        p = cpod(f"inf{k}-0", f"inf{k}", {"name": "gpu", "resourceClaimTemplateName": "t"}, made=f"inf{k}-0-gpu-x")
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:0{k+1}:00Z"
        pods.append(p); groups.append(ko.pod_group(f"inf{k}"))
        claims.append(claim(f"inf{k}-0-gpu-x", "team-a", n, owner=p))
    # pending fractional pod and a device-plugin pod
    pods.append(ko.pod("frac-0", pod_group="frac", annotations={"gpu-fraction": "0.5"})); groups.append(ko.pod_group("frac"))
    objects = {"nodes": [ko.node("dra-0", gpus=0), ko.node("dra-1", gpus=0), ko.node("plain", gpus=4)],
               "pods": pods, "queues": [ko.queue("team-a", **Q)], "podgroups": groups,
               "priorityclasses": ko.kai_priority_classes(),
               "resourceSlices": [slice_("dra-0", "gpu.nvidia.com", 4), slice_("dra-1", "gpu.nvidia.com", 8)],
               "resourceClaims": claims, "deviceClasses": [dclass("gpu.nvidia.com", "gpu.nvidia.com")]}
    cfg = copy.deepcopy(ko.DEFAULT_KAI_CONFIG); cfg["actions"] = "allocate"
    doc = ko.kai_snapshot_doc(objects, config=cfg)
    doc["discovery"] = {"serverVersion": {"major": "1", "minor": "34", "gitVersion": "v1.34.0"},
                        "resources": [{"groupVersion": "resource.k8s.io/v1", "resources": [
                            {"name": "resourceclaims", "kind": "ResourceClaim", "namespaced": True, "singularName": "", "verbs": ["list"]},
                            {"name": "resourceslices", "kind": "ResourceSlice", "namespaced": False, "singularName": "", "verbs": ["list"]},
                            {"name": "deviceclasses", "kind": "DeviceClass", "namespaced": False, "singularName": "", "verbs": ["list"]}]}]}
    return doc


VARIANTS = {"a": [1, 6, 2], "b": [2, 8, 1], "c": [4, 1, 1, 1], "d": [8, 8], "e": [1, 1, 5, 3],
            "f": ([1], ("join",)), "g": ([1, 1], ("join",)), "h": ([2], ("nomade",)),
            "i": ([1], ("join", "label")), "j": ([1, 1], ("join", "label")), "k": ([2, 1], ("join", "label", "nomade"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshot-tool", required=True, help="path of KAI's snapshot-tool binary")
    ap.add_argument("--keep", help="directory to keep the zips and KAI's logs in")
    opts = ap.parse_args(argv)
    folder = Path(opts.keep or tempfile.mkdtemp(prefix="kai-diff-dra-"))
    folder.mkdir(parents=True, exist_ok=True)
    same = 0
    for name, v in VARIANTS.items():
        doc = build(*v) if isinstance(v, tuple) else build(v)
        z = folder / f"{name}.zip"
        write_zip(doc, z)
        kd = kaidash_decisions(str(z))
        run = run_snapshot_tool(opts.snapshot_tool, z)
        (folder / f"{name}.log").write_text(run.log or "")
        if run.decisions is None:
            print(name, v, "KAI error:", run.error)
            continue
        cmp = compare(kd, run.decisions.to_dict(), object_features(doc))
        same += bool(cmp["identical"])
        print(name, v, "identical" if cmp["identical"] else "DIFF " + json.dumps(cmp["diffs"]))
    print(f"{same}/{len(VARIANTS)} identical (zips and logs in {folder})")
    return 0 if same == len(VARIANTS) else 1


if __name__ == "__main__":
    sys.exit(main())
