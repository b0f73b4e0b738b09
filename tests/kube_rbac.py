"""kaidash's shipped identity (deploy/kubernetes: Namespace, ServiceAccount, read-only ClusterRole and its
binding) installed in the test control plane, tokens for it, and questions to the real authorizer."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Iterable

import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

ROOT = Path(__file__).resolve().parents[1]
DEPLOY_DIR = ROOT / "deploy" / "kubernetes"
NAMESPACE, ACCOUNT = "kaidash", "kaidash"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"


def manifests() -> list[dict]:
    """Every object of deploy/kubernetes, in the kustomization's order, with its namespace applied."""
    kustomization = yaml.safe_load((DEPLOY_DIR / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((DEPLOY_DIR / name).read_text()):
            if doc:
                docs.append(doc)
    return docs


def shipped(kind: str, name: str) -> dict:
    return copy.deepcopy(next(d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name))


def install_identity(api: k8s.ApiClient) -> None:
    """Create the Namespace, ServiceAccount, ClusterRole and ClusterRoleBinding exactly as shipped."""
    for doc in manifests():
        if doc["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            k8s_utils.create_from_dict(api, doc)


def service_account(api: k8s.ApiClient, name: str, namespace: str = NAMESPACE) -> None:
    k8s.CoreV1Api(api).create_namespaced_service_account(namespace, {"metadata": {"name": name}})


def token(api: k8s.ApiClient, name: str = ACCOUNT, namespace: str = NAMESPACE) -> str:
    """A bound token for the ServiceAccount (TokenRequest API), valid for an hour."""
    req = k8s.CoreV1Api(api).create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}})
    return req.status.token


def bind_cluster_role(api: k8s.ApiClient, role: dict, account: str, namespace: str = NAMESPACE) -> None:
    """Create ``role`` (a ClusterRole) and bind it to a ServiceAccount."""
    rbac = k8s.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding({
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})


def allowed(api: k8s.ApiClient, user: str, verb: str, group: str, resource: str, subresource: str = "",
            namespace: str = "", groups: Iterable[str] = ()) -> bool:
    """The authorizer's answer (SubjectAccessReview) for ``user`` doing ``verb`` on ``group/resource``."""
    attrs = {"verb": verb, "group": group, "resource": resource}
    if subresource:
        attrs["subresource"] = subresource
    if namespace:
        attrs["namespace"] = namespace
    review = k8s.AuthorizationV1Api(api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}",
                                          "system:authenticated", *groups],
                 "resourceAttributes": attrs}})
    return bool(review.status.allowed)
