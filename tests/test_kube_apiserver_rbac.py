"""deploy/kubernetes against a real API server: the manifests are accepted (server-side dry run, with the
restricted Pod Security Standard enforced), the shipped read-only ClusterRole is enough for kaidash and the
real authorizer denies every write it could attempt, and a role missing one resource degrades that resource
only (docs/sources.md)."""

from __future__ import annotations

import copy
import json
import time

import pytest
from kubernetes import client as k8s

import kube_rbac
import kube_scenario as scenario
from kube_cluster import CONTEXT, wait_for
from kube_rbac import USER
from scheduler.sources.kube import RESOURCE_TYPES, KubeSource

pytestmark = pytest.mark.kube_apiserver

FAST = dict(backoff_initial_s=0.1, backoff_max_s=1.0, watch_timeout_s=30)
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# (group, resource, subresource) kaidash reads, and the subresources a scheduler or binder writes
READ = [("", "nodes"), ("", "pods"), ("scheduling.k8s.io", "priorityclasses"), ("scheduling.run.ai", "queues"),
        ("scheduling.run.ai", "podgroups"), ("scheduling.run.ai", "bindrequests"), ("kai.scheduler", "topologies"),
        ("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "resourceslices")]
SUBRESOURCES = [("", "pods", "binding"), ("", "pods", "eviction"), ("", "pods", "status"), ("", "nodes", "status"),
                ("scheduling.run.ai", "podgroups", "status"), ("scheduling.run.ai", "queues", "status"),
                ("scheduling.run.ai", "bindrequests", "status")]


def _apply_dry_run(api: k8s.ApiClient, doc: dict, namespace: str | None = None) -> list[str]:
    """Server-side apply of ``doc`` with ``dryRun=All``; returns the API server's warnings (raises on rejection)."""
    doc = copy.deepcopy(doc)
    group_version = doc["apiVersion"]
    plural = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
              "ClusterRoleBinding": "clusterrolebindings", "Deployment": "deployments", "Service": "services",
              "Pod": "pods"}[doc["kind"]]
    ns = namespace or doc["metadata"].get("namespace")
    if namespace:
        doc["metadata"]["namespace"] = namespace
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    path = f"{base}/namespaces/{ns}/{plural}/{doc['metadata']['name']}" if ns and doc["kind"] not in (
        "Namespace", "ClusterRole", "ClusterRoleBinding") else f"{base}/{plural}/{doc['metadata']['name']}"
    method, url, headers, body, _ = api.param_serialize(
        "PATCH", path, query_params=[("dryRun", "All"), ("fieldManager", "kaidash-test"), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=json.dumps(doc), auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers, body=body)
    resp.read()
    if not 200 <= resp.status < 300:
        raise k8s.ApiException(http_resp=resp)
    warnings = resp.headers.get("Warning")
    return [warnings] if warnings else []


def test_deploy_manifests_are_accepted_by_the_api_server(kai_cluster, kaidash_kubeconfig):
    api = kai_cluster.admin
    docs = kube_rbac.manifests()
    assert [d["kind"] for d in docs] == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "Deployment", "Service"]
    for doc in docs:
        assert _apply_dry_run(api, doc) == [], doc["kind"]
    # dry run: nothing was created
    with pytest.raises(k8s.ApiException) as exc:
        k8s.AppsV1Api(api).read_namespaced_deployment("kaidash", "kaidash")
    assert exc.value.status == 404


def test_the_deployments_pod_meets_the_restricted_pod_security_standard(kai_cluster):
    api = kai_cluster.admin
    k8s.CoreV1Api(api).create_namespace({"metadata": {"name": "kaidash-restricted", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}}})
    deployment = next(d for d in kube_rbac.manifests() if d["kind"] == "Deployment")
    assert _apply_dry_run(api, deployment, "kaidash-restricted") == []
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "kaidash-probe"},
           "spec": {**template["spec"], "serviceAccountName": "default"}}
    assert _apply_dry_run(api, pod, "kaidash-restricted") == []       # enforced: a violation would raise 403
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(k8s.ApiException) as exc:                       # the check is real: it can fail
        _apply_dry_run(api, bad, "kaidash-restricted")
    assert exc.value.status == 403 and "allowPrivilegeEscalation" in exc.value.body


def test_shipped_role_reads_everything_kaidash_needs(kai_cluster, kaidash_kubeconfig):
    src = KubeSource.from_kubeconfig(str(kaidash_kubeconfig), context=CONTEXT)
    conv = src.capture()
    assert {r.state for r in src.status().resources.values()} == {"ok"}
    assert not [w for w in conv.warnings if "forbidden" in (w.message or "")]
    assert len(conv.snapshot.nodes) == len(scenario.EXPECTED["nodes"])
    for group, resource in READ:
        for verb in ("get", "list", "watch"):
            assert kube_rbac.allowed(kai_cluster.admin, USER, verb, group, resource), (verb, resource)


def test_the_real_authorizer_denies_every_write_kaidash_could_attempt(kai_cluster, kaidash_kubeconfig):
    api = kai_cluster.admin
    denied = []
    for group, resource in READ:
        for verb in WRITE_VERBS:
            denied.append(not kube_rbac.allowed(api, USER, verb, group, resource))
    for group, resource, sub in SUBRESOURCES:
        for verb in ("create", "update", "patch"):
            denied.append(not kube_rbac.allowed(api, USER, verb, group, resource, sub, namespace="vision"))
    assert all(denied) and len(denied) == len(READ) * len(WRITE_VERBS) + len(SUBRESOURCES) * 3
    # and nothing else is readable (secrets, configmaps, events)
    for resource in ("secrets", "configmaps", "events"):
        assert not kube_rbac.allowed(api, USER, "list", "", resource)
    # the same token through an ordinary (writing) client: the server itself answers 403
    writer = kai_cluster.api_client(kaidash_kubeconfig)
    attempts = [
        lambda: k8s.CoreV1Api(writer).delete_namespaced_pod("sweep-0", "vision"),
        lambda: k8s.CoreV1Api(writer).patch_node("h100-0", {"spec": {"unschedulable": True}}),
        lambda: scenario.bind(writer, "sweep-0", "vision", "h100-0"),
        lambda: k8s.CoreV1Api(writer).create_namespaced_pod_eviction(
            "pretrain-worker-1", "llm", {"metadata": {"name": "pretrain-worker-1", "namespace": "llm"}}),
        lambda: k8s.CustomObjectsApi(writer).patch_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues", "llm", {"spec": {"priority": 1}}),
        lambda: k8s.CustomObjectsApi(writer).create_namespaced_custom_object(
            "scheduling.run.ai", "v1alpha2", "vision", "bindrequests",
            {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest", "metadata": {"name": "x"},
             "spec": {"podName": "sweep-0", "selectedNode": "h100-0"}}),
    ]
    for attempt in attempts:
        with pytest.raises(k8s.ApiException) as exc:
            attempt()
        assert exc.value.status == 403 and USER in exc.value.body
    writer.close()
    assert scenario.pod_phase(api, "sweep-0", "vision") == "Pending"


def _role_without(resource: str, name: str, verb: str | None = None) -> dict:
    """The shipped ClusterRole without ``resource`` (or, with ``verb``, without that verb on it)."""
    role = kube_rbac.shipped("ClusterRole", "kaidash-read")
    role["metadata"] = {"name": name}
    rules = []
    for rule in role["rules"]:
        rest = [r for r in rule["resources"] if r != resource]
        if rest:
            rules.append({**rule, "resources": rest})
        if resource in rule["resources"] and verb:
            rules.append({**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]})
    role["rules"] = rules
    return role


def test_a_role_missing_one_resource_degrades_that_resource_only(kai_cluster, kaidash_kubeconfig, tmp_path):
    api = kai_cluster.admin
    kube_rbac.service_account(api, "kaidash-partial")
    role = _role_without("podgroups", "kaidash-read-no-podgroups")
    kube_rbac.bind_cluster_role(api, role, "kaidash-partial")
    kubeconfig = kai_cluster.token_kubeconfig(tmp_path / "partial", kube_rbac.token(api, "kaidash-partial"))
    src = KubeSource.from_kubeconfig(str(kubeconfig), context=CONTEXT, **FAST).start()
    try:
        assert src.wait_until_synced(30)
        st = src.status().resources
        assert st["podgroups"].state == "forbidden"
        assert st["podgroups"].error.startswith("forbidden: cannot list podgroups.scheduling.run.ai: HTTP 403")
        assert 'User "system:serviceaccount:kaidash:kaidash-partial" cannot list resource "podgroups"' \
            in st["podgroups"].error
        assert {n for n, r in st.items() if r.state == "ok"} == {r.name for r in RESOURCE_TYPES} - {"podgroups"}
        snap = src.snapshot()
        # pods are grouped by their pod-group-name annotation; the gang's details are unknown without it
        assert set(snap.job_map()) >= set(scenario.EXPECTED["jobs"])
        assert any(w.kind == "podgroups.scheduling.run.ai" and "forbidden" in w.message for w in src.warnings)
        # the missing permission is granted: the retry picks the resource up
        k8s.RbacAuthorizationV1Api(api).patch_cluster_role(role["metadata"]["name"], {
            "rules": kube_rbac.shipped("ClusterRole", "kaidash-read")["rules"]})
        wait_for(lambda: src.status().resources["podgroups"].state == "ok", 30, "podgroups after the grant")
        assert src.snapshot().job_map()["llm/pg-pretrain"].min_available == 3
    finally:
        src.stop()


def test_a_role_that_may_list_but_not_watch_keeps_the_listed_data_and_polls(kai_cluster, kaidash_kubeconfig,
                                                                           tmp_path):
    api = kai_cluster.admin
    kube_rbac.service_account(api, "kaidash-nowatch")
    role = _role_without("queues", "kaidash-read-no-queue-watch", verb="watch")
    kube_rbac.bind_cluster_role(api, role, "kaidash-nowatch")
    kubeconfig = kai_cluster.token_kubeconfig(tmp_path / "nowatch", kube_rbac.token(api, "kaidash-nowatch"))
    src = KubeSource.from_kubeconfig(str(kubeconfig), context=CONTEXT, **FAST).start()
    try:
        assert src.wait_until_synced(30)
        wait_for(lambda: (src.status().resources["queues"].error or "").startswith("forbidden"), 30,
                 "the watch to be refused")
        st = src.status().resources["queues"]
        assert st.state == "stale", st
        assert st.error.startswith("forbidden: cannot watch queues.scheduling.run.ai: HTTP 403"), st.error
        assert 'cannot watch resource "queues"' in st.error
        # the listed queues stay in use (not synthesised), refreshed by relisting at the backoff's pace
        assert {q.name for q in src.snapshot().queues} == set(scenario.EXPECTED["queues"])
        since = time.time()
        time.sleep(4)
        user = "system:serviceaccount:kaidash:kaidash-nowatch"
        lists = [e for e in kai_cluster.audit_events(user, since)
                 if e["verb"] == "list" and e["objectRef"]["resource"] == "queues"]
        assert 1 <= len(lists) <= 10, len(lists)    # backoff 0.1 s doubling to 1 s, not a relist every 0.1 s
    finally:
        src.stop()
