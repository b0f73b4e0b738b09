"""The dashboard's live loop on a real API server: objects changing while it runs (a pod created, bound,
deleted; a node going NotReady) show up within two ticks of the change.

"Within two ticks": when the API server has accepted a change, the tick being computed may already have taken
its snapshot; the one after it must show the change. The loop runs at its default period (2 s).
"""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s

import kube_scenario as scenario
from dashboard.feeds import KubeFeed
from dashboard.loop import LiveLoop
from dashboard.options import SourceOptions
from kube_cluster import CONTEXT, wait_for

pytestmark = pytest.mark.kube_apiserver


class TickLog:
    """Every tick the loop publishes: (index, input snapshot)."""

    def __init__(self):
        self.ticks: list = []
        self._lock = threading.Lock()

    def __call__(self, tick) -> None:
        with self._lock:
            self.ticks.append((tick.index, tick.snapshot))

    def last_index(self) -> int:
        with self._lock:
            return self.ticks[-1][0] if self.ticks else -1

    def shown_within(self, after: int, predicate, ticks: int = 2, timeout: float = 60.0) -> int:
        """Wait for tick ``after + ticks``; returns the first tick after ``after`` whose snapshot satisfies
        ``predicate`` (AssertionError if none of those ``ticks`` ticks does)."""
        wait_for(lambda: self.last_index() >= after + ticks, timeout, f"tick {after + ticks}")
        with self._lock:
            window = [(i, s) for i, s in self.ticks if after < i <= after + ticks]
        for index, snap in window:
            if predicate(snap):
                return index
        raise AssertionError(f"not shown in ticks {after + 1}..{after + ticks}")


def _task(snap, job: str, task: str):
    j = snap.job_map().get(job)
    return next((t for t in j.tasks if t.name == task), None) if j else None


@pytest.fixture
def spare_node(kai_cluster):
    """A Ready GPU node whose kubelet the test plays (kwok does not run it), removed afterwards."""
    core = k8s.CoreV1Api(kai_cluster.admin)
    core.create_node(scenario.gpu_node("h100-spare", kwok=False, ready=True))
    yield "h100-spare"
    core.delete_node("h100-spare")


def test_changes_while_the_dashboard_runs_show_up_within_two_ticks(kai_cluster, kaidash_kubeconfig, spare_node):
    api = kai_cluster.admin
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    log = TickLog()
    loop = LiveLoop(SourceOptions(source="kube", context=CONTEXT),
                    feed=KubeFeed(CONTEXT, kubeconfig=str(kaidash_kubeconfig), backoff_initial_s=0.1))
    loop.on_tick.append(log)
    loop.start()
    custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "vision", "podgroups",
                                           scenario.creatable(scenario.pod_group("pg-late", "vision", "vision")))
    try:
        wait_for(lambda: log.last_index() >= 0, 60, "the first tick")
        assert loop.state.period_s == 2.0
        obj, _ = scenario.kai_pod("late-0", "vision", gpu=1, queue="vision", pod_group="pg-late")

        after = log.last_index()
        core.create_namespaced_pod("vision", obj)
        log.shown_within(after, lambda s: getattr(_task(s, "vision/pg-late", "vision/late-0"), "status", None)
                         == "pending")

        after = log.last_index()
        scenario.bind(api, "late-0", "vision", "h100-1")
        log.shown_within(after, lambda s: (t := _task(s, "vision/pg-late", "vision/late-0")) is not None
                         and (t.status, t.node) == ("running", "h100-1"))

        after = log.last_index()
        core.delete_namespaced_pod("late-0", "vision")
        log.shown_within(after, lambda s: getattr(_task(s, "vision/pg-late", "vision/late-0"), "status", None)
                         in (None, "releasing"))
        wait_for(lambda: _task(log.ticks[-1][1], "vision/pg-late", "vision/late-0") is None, 30,
                 "kwok to finish the deletion")

        assert log.ticks[-1][1].node_map()[spare_node].ready
        after = log.last_index()
        scenario.set_node_ready(api, spare_node, False)
        log.shown_within(after, lambda s: not s.node_map()[spare_node].ready)
    finally:
        loop.stop()
        custom.delete_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "vision", "podgroups", "pg-late")
        try:
            core.delete_namespaced_pod("late-0", "vision", grace_period_seconds=0)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
