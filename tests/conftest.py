"""Shared pytest configuration."""

import os

import pytest

from hypothesis import settings

# Property tests are deterministic (same examples every run, no example database) and have no per-example
# deadline, so CI on a shared 2-core machine neither flakes nor times out. HYPOTHESIS_PROFILE=explore
# draws fresh random examples locally.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=100)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ------------------------------------------------------------------------------ real Kubernetes API server

def pytest_collection_finish(session):
    """Build the control-plane binaries before the first ``kube_apiserver`` test runs, outside any test's
    timeout (a no-op when ``scripts/setup.sh --tests`` built them; about 1,000 CPU-seconds when nothing is cached).
    A failure is not raised here: the ``kube_cluster`` fixture reports it on each test that needs it."""
    if session.config.option.collectonly or not any(i.get_closest_marker("kube_apiserver") for i in session.items):
        return
    from kube_cluster import ControlPlaneError, kube_binaries

    try:
        kube_binaries(build=False)
        return
    except ControlPlaneError:
        pass
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("building the Kubernetes control plane for the kube_apiserver tests (tools/kube/build.sh)")
    try:
        kube_binaries()
    except ControlPlaneError:
        pass


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    """A real control plane on loopback (tests/kube_cluster.py), started once per test session."""
    from kube_cluster import ControlPlane, kube_binaries

    plane = ControlPlane(kube_binaries(), tmp_path_factory.mktemp("kube-cluster")).start()
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def kai_cluster(kube_cluster):
    """The control plane with the KAI-scheduled GPU cluster of tests/kube_scenario.py loaded."""
    import kube_scenario

    kube_scenario.load(kube_cluster.admin)
    return kube_cluster


@pytest.fixture(scope="session")
def kaidash_kubeconfig(kai_cluster, tmp_path_factory):
    """A kubeconfig (context ``kaidash-test``) for kaidash's shipped ServiceAccount, bound to the read-only
    ClusterRole of deploy/kubernetes: every kube_apiserver test runs kaidash with exactly these rights."""
    import kube_rbac

    kube_rbac.install_identity(kai_cluster.admin)
    path = tmp_path_factory.mktemp("kaidash-identity") / "kubeconfig"
    return kai_cluster.token_kubeconfig(path, kube_rbac.token(kai_cluster.admin))
