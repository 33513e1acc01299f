"""The fault matrix, process half: real `autoscaler operator` and `autoscaler engine` processes
killed or cut off at precise points, each behind its own proxy to the real API server
(`tests/support/apiproxy.py`), which logs every request and fires the fault.

- the operator SIGKILLed between the creates of a scale-up: the standby finishes it, each pod
  created exactly once;
- the engine SIGKILLed before its `/scale` write reaches the server, and after the server did it
  but before the engine saved its state: the count is written once, the state's rescale count
  is right and the cooldown holds after the takeover;
- a concurrent writer of the job's labels making the engine's `/scale` and the operator's
  `/status` writes conflict: every writer's update survives;
- the leader cut off from the API server: it stops before the standby's first write.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.controller.runner import Operator
from autoscaler.engine.state import JobState
from tests.integration.conftest import RBAC_FILE
from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support.apiproxy import ApiProxy, Exchange, Match
from tests.support.controlplane import RESTRICTED_USER, ControlPlane
from tests.support.engine_process import (
    LEASE_FLAGS,
    ServiceProcess,
    engine_config,
    engine_process,
    operator_process,
)
from tests.support.polling import wait_for
from tests.support.processes import log_tail
from tests.support.prometheus import PrometheusServer
from tests.support.recovery import Record, stopwatch
from tests.support.training import GPU, Kubelet, Trainer, remove_jobs_and_pods

pytestmark = [pytest.mark.integration, pytest.mark.faults]
JSON = dict[str, Any]
KILLED = -signal.SIGKILL
LEASE_LOST = 1  # the exit status of a service that lost its lease
LEASE_SECONDS = float(LEASE_FLAGS[LEASE_FLAGS.index("--lease-duration") + 1])
COOLDOWN = 4.0  # the engine's cooldown_seconds (engine_config)


@pytest.fixture
def proxies(control_plane: ControlPlane) -> Iterator[Callable[[], ApiProxy]]:
    """`proxies()` -> a new proxy to the session's API server; every one is closed at teardown."""
    started: list[ApiProxy] = []

    def start() -> ApiProxy:
        started.append(ApiProxy(control_plane))
        return started[-1]

    yield start
    for proxy in started:
        proxy.close()


@pytest.fixture
def operator_access(
    operator_kubeconfig: Path, kube_api: client.ApiClient, namespace: str
) -> Path:
    """The operator's test user, also granted deploy/operator's leader-election Role in the
    test's namespace (where its Lease is): its kubeconfig. The namespace takes both with it."""
    documents = list(yaml.safe_load_all(RBAC_FILE.read_text()))
    role = next(d for d in documents if d["kind"] == "Role")
    binding = next(d for d in documents if d["kind"] == "RoleBinding")
    role["metadata"]["namespace"] = binding["metadata"]["namespace"] = namespace
    binding["subjects"] = [
        {"kind": "User", "name": RESTRICTED_USER, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(namespace, role)
    rbac.create_namespaced_role_binding(namespace, binding)
    return operator_kubeconfig


# -- matching requests --------------------------------------------------------------------------


def creates(resource: str) -> Match:
    return lambda method, path: method == "POST" and path.endswith(f"/{resource}")


def scale_writes(method: str, path: str) -> bool:
    return method == "PUT" and path.endswith("/scale")


def status_writes(method: str, path: str) -> bool:
    return method == "PUT" and path.endswith("/status")


def nth(count: int, match: Match) -> Match:
    """Fires at the `count`-th request `match` fires at."""
    seen = [0]

    def counted(method: str, path: str) -> bool:
        if match(method, path):
            seen[0] += 1
        return seen[0] == count

    return counted


def created_names(exchanges: list[Exchange], resource: str) -> list[str]:
    """The names of the objects the server created (201), in order."""
    return [
        e.body["metadata"]["name"]
        for e in exchanges
        if creates(resource)(e.method, e.path) and e.status == 201
    ]


def holder(kube_api: client.ApiClient, namespace: str, name: str) -> str:
    try:
        lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(name, namespace)
    except client.ApiException:
        return ""
    return lease.spec.holder_identity or ""


# -- 1. the operator killed between the creates of a scale-up ------------------------------------


def test_operator_killed_between_creates_of_a_scale_up_is_finished_once_by_the_standby(
    control_plane: ControlPlane,
    operator_access: Path,
    crd: object,
    kube_api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    proxies: Callable[[], ApiProxy],
    recovery: Record,
) -> None:
    cluster = Cluster(kube_api, namespace)
    first_proxy, second_proxy = proxies(), proxies()
    with ExitStack() as stack:
        first = stack.enter_context(
            operator_process(
                kubeconfig=first_proxy.kubeconfig(operator_access, tmp_path / "first.conf"),
                lease_namespace=namespace,
                workdir=tmp_path,
                identity="first",
                exit_code=KILLED,
            )
        )
        wait_for(
            lambda: holder(kube_api, namespace, "pytorchjob-operator") == "first",
            what="first to lead",
        )
        stack.enter_context(
            operator_process(
                kubeconfig=second_proxy.kubeconfig(operator_access, tmp_path / "second.conf"),
                lease_namespace=namespace,
                workdir=tmp_path,
                identity="second",
            )
        )
        cluster.create(elastic_job("grow", replicas=1, high=4))
        before = cluster.wait_pods("grow", names("grow", "worker", 1))
        # The scale-up's creates are worker-1, -2, -3, then their services: die at worker-2's.
        killed = first_proxy.kill_on(nth(2, creates("pods")), first.proc, when="before")
        cluster.scale("grow", 4)
        assert killed.wait(timeout=30), log_tail(first.log)
        with stopwatch() as elapsed:
            left = cluster.pods("grow")
            assert set(left) == names("grow", "worker", 2), "the kill came between two creates"
            cluster.wait_pods("grow", names("grow", "worker", 4))
            wait_for(
                lambda: set(cluster.services("grow")) == names("grow", "worker", 4),
                what="the services of the 4 workers",
            )
            cluster.run_all("grow")
            wait_for(lambda: active_workers(cluster, "grow") == 4, what="4 active workers")
            seconds = elapsed()
        after = cluster.pods("grow")
        uid = lambda pods, name: pods[name]["metadata"]["uid"]  # noqa: E731
        for name in ("grow-worker-0", "grow-worker-1"):
            assert uid(after, name) == uid(left, name), f"{name} was replaced"
        assert uid(after, "grow-worker-0") == uid(before, "grow-worker-0")
        exchanges = first_proxy.exchanges + second_proxy.exchanges
        # Every pod and service created once, by one of the two; none deleted, none refused as
        # already existing (the standby's fresh caches knew worker-1).
        made = created_names(exchanges, "pods")
        assert sorted(made) == sorted(names("grow", "worker", 4)), made
        assert sorted(created_names(exchanges, "services")) == sorted(names("grow", "worker", 4))
        assert not [e for e in exchanges if e.status == 409 and e.method == "POST"]
        assert not [e for e in exchanges if e.method == "DELETE" and "/pods/" in e.path]
        assert created_names(second_proxy.exchanges, "pods") == ["grow-worker-2", "grow-worker-3"]
        conditions = cluster.conditions("grow")
        assert conditions[-1] == ("Running", "True"), conditions
        assert ("Restarting", "True") not in conditions
    recovery(
        "operator SIGKILLed between the creates of a scale-up",
        seconds,
        "standby created the other 2 workers once; 4 active, no pod twice",
    )


def active_workers(cluster: Cluster, job: str) -> int:
    statuses = (cluster.job(job).get("status") or {}).get("replicaStatuses") or {}
    return int((statuses.get(c.WORKER) or {}).get("active") or 0)
