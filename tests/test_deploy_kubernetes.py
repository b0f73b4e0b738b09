"""deploy/kubernetes: schema-valid offline, RBAC read-only on exactly what kaidash reads, a sane Deployment.

Schemas come from the ``kubernetes-validate`` package, which bundles the Kubernetes JSON schemas for every
minor release: validation reads files from site-packages and never touches the network.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBE_DIR = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"

READ_VERBS = {"get", "list", "watch"}

# (API group, resource) pairs kaidash's kube source reads; "" is the core group. BindRequest's group is KAI's
# scheduling.run.ai (kai-scheduler/KAI-Scheduler deployments/kai-scheduler/crds/scheduling.run.ai_bindrequests.yaml).
READ_RESOURCES = {
    ("", "nodes"),
    ("", "pods"),
    ("scheduling.k8s.io", "priorityclasses"),
    ("scheduling.run.ai", "queues"),
    ("scheduling.run.ai", "podgroups"),
    ("scheduling.run.ai", "bindrequests"),
    ("kai.scheduler", "topologies"),
    ("resource.k8s.io", "resourceclaims"),
    ("resource.k8s.io", "resourceslices"),
}

# The oldest Kubernetes minor still commonly run and the newest the bundled schemas know.
KUBE_VERSIONS = ["1.29", kubernetes_validate.utils.latest_version()]


def _kustomization() -> dict:
    return yaml.safe_load((KUBE_DIR / "kustomization.yaml").read_text())


def _manifests() -> list[tuple[str, dict]]:
    """Every object the kustomization applies, as ``(file name, document)``."""
    out = []
    for name in _kustomization()["resources"]:
        for doc in yaml.safe_load_all((KUBE_DIR / name).read_text()):
            if doc:
                out.append((name, doc))
    return out


def _by_kind(kind: str) -> list[dict]:
    return [doc for _, doc in _manifests() if doc["kind"] == kind]


def _one(kind: str) -> dict:
    docs = _by_kind(kind)
    assert len(docs) == 1, f"expected exactly one {kind}, found {len(docs)}"
    return docs[0]


def rbac_problems(docs: list[dict]) -> list[str]:
    """Everything in ``docs`` that grants more than read access to :data:`READ_RESOURCES`."""
    problems = []
    for doc in docs:
        if doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if "aggregationRule" in doc:
            problems.append(f"{name}: aggregationRule pulls in rules from other roles")
        for i, rule in enumerate(doc.get("rules") or []):
            where = f"{name}.rules[{i}]"
            if rule.get("nonResourceURLs"):
                problems.append(f"{where}: nonResourceURLs {rule['nonResourceURLs']}")
            extra_verbs = set(rule.get("verbs", [])) - READ_VERBS
            if extra_verbs:
                problems.append(f"{where}: verbs beyond get/list/watch: {sorted(extra_verbs)}")
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    if (group, resource) not in READ_RESOURCES:
                        problems.append(f"{where}: resource {resource!r} in group {group!r} is not one kaidash reads")
    return problems


def _granted(docs: list[dict]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for doc in docs:
        if doc.get("kind") in ("ClusterRole", "Role"):
            for rule in doc.get("rules") or []:
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        granted.setdefault((group, resource), set()).update(rule.get("verbs", []))
    return granted


# ------------------------------------------------------------------------------------------ kustomization

def test_kustomization_applies_every_manifest_in_the_folder():
    listed = set(_kustomization()["resources"])
    present = {p.name for p in KUBE_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    assert _kustomization()["namespace"] == "kaidash"


def test_kustomization_image_entry_names_the_deployment_image():
    images = {i["name"] for i in _kustomization()["images"]}
    container_image = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container_image.split(":")[0] in images


def test_objects_are_the_ones_documented():
    kinds = sorted(doc["kind"] for _, doc in _manifests())
    assert kinds == sorted(["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"])
    for _, doc in _manifests():
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "kaidash", doc["kind"]


# ------------------------------------------------------------------------------------------ schemas

@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schema(version):
    for name, doc in _manifests():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} {doc['kind']}: {'.'.join(map(str, exc.path))}: {exc.message}")


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"].update(pathh="/x"), "pathh"),
    (lambda d: d["spec"].update(replicas="one"), "replicas"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="http"), "containerPort"),
])
def test_schema_validation_rejects_a_broken_deployment(mutate, field):
    """The schema check is not vacuous: typical mistakes in the Deployment are caught (strict mode)."""
    doc = copy.deepcopy(_one("Deployment"))
    mutate(doc)
    with pytest.raises(kubernetes_validate.ValidationError) as info:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[0], strict=True)
    assert field in str(info.value.message) or field in map(str, info.value.path)


# ------------------------------------------------------------------------------------------ RBAC

def test_rbac_grants_only_get_list_watch_on_what_kaidash_reads():
    docs = [doc for _, doc in _manifests()]
    assert rbac_problems(docs) == []


def test_rbac_grants_every_read_verb_on_every_resource_kaidash_reads():
    """List-then-watch needs list and watch on each; get is used for single objects."""
    granted = _granted([doc for _, doc in _manifests()])
    assert set(granted) == READ_RESOURCES
    for pair, verbs in granted.items():
        assert verbs == READ_VERBS, pair


@pytest.mark.parametrize("rule, words", [
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create"]}, "['create']"),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "['*']"),
    ({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["get"]}, "'pods/eviction'"),
    ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}, "'secrets'"),
    ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["list"]}, "group '*'"),
    ({"apiGroups": ["scheduling.run.ai"], "resources": ["*"], "verbs": ["list"]}, "'*'"),
    ({"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["patch", "update"]}, "['patch', 'update']"),
    ({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}, "nonResourceURLs"),
])
def test_rbac_checker_flags_any_write_verb_or_extra_resource(rule, words):
    role = copy.deepcopy(_one("ClusterRole"))
    role["rules"].append(rule)
    problems = rbac_problems([role])
    assert len(problems) == 1 and words in problems[0], problems


def test_rbac_checker_also_looks_at_namespaced_roles():
    role = {"kind": "Role", "metadata": {"name": "extra"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}
    assert rbac_problems([role]) == ["Role/extra.rules[0]: resource 'configmaps' in group '' is not one kaidash reads"]


def test_binding_gives_the_read_role_to_kaidash_service_account_only():
    role, binding, account = _one("ClusterRole"), _one("ClusterRoleBinding"), _one("ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert not _by_kind("RoleBinding") and not _by_kind("Role")
    pod = _one("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True and account["automountServiceAccountToken"] is True


# ------------------------------------------------------------------------------------------ Deployment, Service

def _container() -> dict:
    return _one("Deployment")["spec"]["template"]["spec"]["containers"][0]


def _arg_value(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def test_deployment_runs_one_replica_of_kaidash_serve_against_kube_and_prometheus():
    deployment = _one("Deployment")
    assert deployment["spec"]["replicas"] == 1
    args = _container()["args"]
    assert args[0] == "serve"
    assert _arg_value(args, "--source") == "kube"
    assert re.fullmatch(r"https?://prometheus[\w.-]*(:\d+)?/?", _arg_value(args, "--prometheus"))
    assert _arg_value(args, "--address") == "0.0.0.0"
    assert _arg_value(args, "--port") == "5006"
    # docs/deploy.md's kustomize patch replaces args/8 to point at another Prometheus.
    assert args.index("--prometheus") + 1 == 8
    assert _container()["ports"] == [{"name": "http", "containerPort": 5006, "protocol": "TCP"}]


def test_deployment_probes_hit_healthz_and_readyz_on_the_http_port():
    c = _container()
    for probe in ("livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


def test_deployment_sets_requests_and_limits_for_cpu_and_memory():
    resources = _container()["resources"]
    for kind in ("requests", "limits"):
        assert set(resources[kind]) == {"cpu", "memory"}, kind


def test_deployment_is_locked_down():
    pod = _one("Deployment")["spec"]["template"]["spec"]
    c = _container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # The only writable path is an emptyDir at /tmp, and HOME points into it; the login Secret is read-only.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert {p: m["name"] for p, m in mounts.items()} == {"/tmp": "tmp", "/etc/kaidash/auth": "auth"}
    assert "emptyDir" in volumes["tmp"]
    assert mounts["/etc/kaidash/auth"]["readOnly"] is True and "secret" in volumes["auth"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HOME"].startswith("/tmp")


def test_deployment_turns_on_authentication():
    """Every page needs a login: basic auth from the Secret, a fixed cookie secret, and the access map (queues
    per user, who may switch the shared source)."""
    pod = _one("Deployment")["spec"]["template"]["spec"]
    c = _container()
    args = c["args"]
    secret_dir = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "auth")
    auth_volume = next(v for v in pod["volumes"] if v["name"] == "auth")
    files = {i["path"] for i in auth_volume["secret"]["items"]}
    assert _arg_value(args, "--basic-auth") == f"{secret_dir}/credentials.json" and "credentials.json" in files
    assert _arg_value(args, "--access-map") == f"{secret_dir}/access.yaml" and "access.yaml" in files
    cookie = next(e for e in c["env"] if e["name"] == "KAIDASH_COOKIE_SECRET")
    assert cookie["valueFrom"]["secretKeyRef"]["name"] == auth_volume["secret"]["secretName"]
    assert "--cookie-secret" not in args                  # a secret never sits in the args
    from scheduler.cli import build_parser
    from dashboard.auth import serve_kwargs

    parsed = build_parser()[0].parse_args(args)
    kwargs = serve_kwargs(parsed, env={"KAIDASH_COOKIE_SECRET": "from-the-secret"})
    assert kwargs["basic_auth"] == f"{secret_dir}/credentials.json"
    assert kwargs["cookie_secret"] == "from-the-secret"


def test_deployment_uid_is_the_image_user():
    """runAsNonRoot can only verify a numeric USER: the pod's uid must be the one the image creates."""
    user_lines = [line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.startswith("USER ")]
    uid, gid = user_lines[-1].split(":")
    ctx = _one("Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsGroup"]) == (int(uid), int(gid))
    assert int(uid) != 0


def test_service_exposes_the_pods_http_port():
    service, deployment = _one("Service"), _one("Deployment")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 5006, "targetPort": "http", "protocol": "TCP"}]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.skipif(not (ROOT / "dashboard" / "serve_command.py").exists(),
                    reason="`kaidash serve` is not built yet (dashboard/serve_command.py, issue 6)")
def test_deployment_args_parse_with_the_real_kaidash_cli():
    from scheduler.cli import build_parser

    parser, handlers = build_parser()
    assert "serve" in handlers
    args = parser.parse_args(_container()["args"])
    assert args.command == "serve"
