"""The fault matrix, control-plane half: kube-apiserver or etcd crash (SIGKILL) and come back on
the same URL and data, a watch expires (410 Gone), Prometheus crashes and comes back. The
operator and the engine run as real processes (`autoscaler operator`, `autoscaler engine`).

The control plane and Prometheus are this module's own: breaking the session's would break the
tests sharing them. A kubelet stand-in (tests/support/training.py) marks pods Running. Each case
records its recovery time in the run's fault matrix section.
"""

import math
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import yaml
from kubernetes import client

from autoscaler.clients.prometheus import duration_seconds
from autoscaler.metrics_contract import DEFAULT_QUERY_TEMPLATE
from autoscaler.observability.decision_log import read_decision_log
from tests.integration.test_gang import control_plane as own_control_plane
from tests.integration.test_gang import namespace as case_namespace
from tests.integration.test_operator import Cluster, elastic_job, names, owner_of
from tests.support.controlplane import RESTRICTED_USER, ControlPlane
from tests.support.crd import RBAC_FILE
from tests.support.engine_process import (
    OUTAGE_LEASE_FLAGS,
    ServiceProcess,
    engine_config,
    engine_process,
    operator_process,
)
from tests.support.polling import wait_for
from tests.support.processes import http_get, log_tail
from tests.support.prometheus import PrometheusServer
from tests.support.recovery import Record, stopwatch
from tests.support.training import GPU, Kubelet, Trainer

pytestmark = pytest.mark.faults
JSON = dict[str, Any]
WORKERS = 6  # a scale-up from 1 the crash interrupts after its first new pod
EXPIRED = "the watch of pytorchjobs expired (410 Gone); listing again"


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    with own_control_plane(tmp_path_factory.mktemp("faults-plane")) as found:
        yield found


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    server = PrometheusServer()
    try:
        server.start(tmp_path_factory.mktemp("faults-prometheus"))
        yield server
    finally:
        server.stop()


@dataclass
class Case:
    plane: ControlPlane
    cluster: Cluster
    prometheus: PrometheusServer
    workdir: Path
    stack: ExitStack

    def operator(self, *flags: str) -> ServiceProcess:
        """The operator as the restricted user, its lease outliving a control-plane restart."""
        return self.stack.enter_context(
            operator_process(
                kubeconfig=self.plane.kubeconfig_for(RESTRICTED_USER),
                lease_namespace=self.cluster.ns,
                workdir=self.workdir,
                lease=OUTAGE_LEASE_FLAGS,
                flags=("--namespace", self.cluster.ns, *flags),
            )
        )

    def engine(self, **config: Any) -> ServiceProcess:
        settings = engine_config(
            namespace=self.cluster.ns, prometheus_url=self.prometheus.url, capacity={GPU: 4}
        )
        settings["policy"]["config"] = {"objective": {"kind": "throughput"}}
        engine = self.stack.enter_context(
            engine_process(
                {**settings, **config},
                kubeconfig=self.plane.kubeconfig_path,
                lease_namespace=self.cluster.ns,
                workdir=self.workdir,
                lease=OUTAGE_LEASE_FLAGS,
            )
        )
        wait_for(lambda: metric(engine, "autoscaler_rounds_total") >= 1, what="an engine round")
        return engine


@pytest.fixture
def case(
    plane: tuple[ControlPlane, client.ApiClient], metrics_server: PrometheusServer, tmp_path: Path
) -> Iterator[Case]:
    control, api = plane
    with (
        case_namespace(api, f"f-{uuid4().hex[:8]}") as cluster,
        Kubelet(api, cluster.ns),
        ExitStack() as stack,
    ):
        bind_lease_role(api, cluster.ns)
        yield Case(control, cluster, metrics_server, tmp_path, stack)


def bind_lease_role(api: client.ApiClient, namespace: str) -> None:
    """The operator's leader-election Role from deploy/operator, in `namespace`, bound to the
    restricted test user (deploy binds it to the operator's ServiceAccount)."""
    documents = yaml.safe_load_all(RBAC_FILE.read_text())
    role = next(d for d in documents if d["kind"] == "Role")
    role["metadata"]["namespace"] = namespace
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, role)
    subject = {"kind": "User", "name": RESTRICTED_USER, "apiGroup": "rbac.authorization.k8s.io"}
    binding = {
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": [subject],
    }
    rbac.create_namespaced_role_binding(namespace, binding)


# -- helpers -----------------------------------------------------------------------------------


def metric(service: ServiceProcess, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when there are none)."""
    status, body = service.get("/metrics")
    assert status == 200
    return sum_samples(body, name, labels)


def sum_samples(text: str, name: str, labels: dict[str, str]) -> float:
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + " ", name + "{")) and all(w in line for w in wanted)
    )


def reachable(read: Callable[[], Any]) -> Any:
    """`read()`, or None while the API server (or etcd behind it) is still coming back."""
    try:
        return read()
    except Exception:  # refused connections, resets, 5xx and timeouts alike: not yet
        return None


def open_watches(plane: ControlPlane, resource: str) -> float:
    """Watches of `resource` kube-apiserver is serving now (its long-running request gauge)."""
    status, body = http_get(f"{plane.url}/metrics", token=plane.token, cafile=plane.ca_path)
    assert status == 200, body[:200]
    labels = {"resource": resource, "verb": "WATCH"}
    return sum_samples(body, "apiserver_longrunning_requests", labels)


def create_running(cluster: Cluster, *jobs: JSON) -> None:
    for job in jobs:
        cluster.create(job)
    expected = {
        job["metadata"]["name"]: job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        for job in jobs
    }
    wait_for(lambda: converged(cluster, expected), what=f"{sorted(expected)} to run")


def converged(cluster: Cluster, workers: dict[str, int]) -> bool:
    """Exactly the jobs' pods exist in their namespace (no orphan, no extra), all Running, and
    each job's status says so: Running, its count of workers active."""
    pods = cluster.core.list_namespaced_pod(cluster.ns).items
    expected = set().union(*(names(name, "worker", count) for name, count in workers.items()))
    if {pod.metadata.name for pod in pods} != expected:
        return False
    if any(pod.status.phase != "Running" for pod in pods):
        return False
    for name, count in workers.items():
        status = cluster.job(name).get("status") or {}
        active = ((status.get("replicaStatuses") or {}).get("Worker") or {}).get("active")
        last = (status.get("conditions") or [{}])[-1]
        if active != count or (last.get("type"), last.get("status")) != ("Running", "True"):
            return False
    return True


def uids(cluster: Cluster, name: str) -> dict[str, str]:
    return {pod: found["metadata"]["uid"] for pod, found in cluster.pods(name).items()}


def assert_intact(cluster: Cluster, job: JSON, *, before: dict[str, str], conditions: Any) -> None:
    """Every pod owned by the job once, the pods from before the fault the same objects (no
    delete-and-recreate), the services matching the pods, no condition lost or added."""
    name = job["metadata"]["name"]
    pods = cluster.pods(name)
    for pod in pods.values():
        assert pod["metadata"]["ownerReferences"] == [owner_of(job)], pod["metadata"]["name"]
    now = uids(cluster, name)
    assert len(set(now.values())) == len(now)
    assert {pod: now[pod] for pod in before} == before
    assert set(cluster.services(name)) == set(pods)
    assert [cond[:2] for cond in cluster.full_conditions(name)] == conditions


def scale_through(case: Case, recovery: Record, *, fault: str, crash: Callable[[], float]) -> None:
    """Scale a running job from 1 to WORKERS, `crash` a server once the operator has created the
    first new pod, and wait for the operator and the engine to converge; record the recovery."""
    cluster = case.cluster
    operator, engine = case.operator(), case.engine()
    create_running(cluster, elastic_job("grow", replicas=1, low=1, high=WORKERS))
    job = cluster.job("grow")
    before, conditions = uids(cluster, "grow"), [c[:2] for c in cluster.full_conditions("grow")]
    cluster.scale("grow", WORKERS)
    wait_for(lambda: len(cluster.pods("grow")) > 1, interval=0.01, what="the first new pod")
    with stopwatch() as since_crash:
        back = crash()
        rounds = metric(engine, "autoscaler_rounds_total", result="ok")
        wait_for(
            lambda: reachable(lambda: converged(cluster, {"grow": WORKERS})),
            timeout=90,
            interval=0.2,
            what=f"{WORKERS} running workers after the {fault}\n{log_tail(operator.log)}",
        )
        recovered = since_crash()
    assert_intact(cluster, job, before=before, conditions=conditions)
    for service in (operator, engine):
        assert service.proc.poll() is None
        assert service.get("/healthz")[0] == 200
    wait_for(
        lambda: metric(engine, "autoscaler_rounds_total", result="ok") > rounds,
        what="an engine round after the fault",
    )
    # No throughput for this job: the engine holds it and never undoes the user's /scale.
    assert metric(engine, "autoscaler_scale_writes_total") == 0
    assert cluster.job("grow")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == WORKERS
    recovery(
        fault,
        recovered,
        f"{WORKERS} pods, none duplicated or recreated, status intact; timed from the SIGKILL,"
        f" {back:.1f} s of it the server's restart until ready",
    )


# -- the cases ---------------------------------------------------------------------------------


def test_apiserver_killed_mid_scale_up(case: Case, recovery: Record) -> None:
    plane = case.plane

    def crash() -> float:
        plane.kill_apiserver()
        return plane.restart_apiserver()

    scale_through(case, recovery, fault="kube-apiserver SIGKILL mid scale-up", crash=crash)


def test_etcd_killed_mid_scale_up(case: Case, recovery: Record) -> None:
    plane = case.plane

    def crash() -> float:
        plane.kill_etcd()
        return plane.restart_etcd()

    scale_through(case, recovery, fault="etcd SIGKILL mid scale-up", crash=crash)


def test_a_change_made_while_the_watch_was_gone_is_acted_on_after_410(
    case: Case, recovery: Record
) -> None:
    """The operator stalls (SIGSTOP) until its watches have ended at their timeout; meanwhile the
    job is scaled and kube-apiserver restarts, so its watch cache starts after the version the
    operator would watch from. Resumed, the operator must get 410 Gone, list, and act."""
    cluster, plane = case.cluster, case.plane
    operator = case.operator("--watch-timeout-seconds", "2")
    create_running(cluster, elastic_job("gap", replicas=1, low=1, high=4))
    os.kill(operator.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: open_watches(plane, "pytorchjobs") == 0, what="the watch to end")
        cluster.scale("gap", 3)
        plane.kill_apiserver()
        plane.restart_apiserver()
    finally:
        os.kill(operator.proc.pid, signal.SIGCONT)
    with stopwatch() as elapsed:
        wait_for(
            lambda: reachable(lambda: converged(cluster, {"gap": 3})),
            timeout=60,
            interval=0.2,
            what=f"the operator to act on the scale\n{log_tail(operator.log)}",
        )
        recovered = elapsed()
    assert EXPIRED in operator.log.read_text(), log_tail(operator.log)
    recovery(
        "watch expired (410 Gone)",
        recovered,
        "3 pods for a /scale made while the operator had no watch: it got 410, listed, acted;"
        " timed from its resume",
    )


def test_prometheus_killed_holds_every_job_then_sizing_resumes(
    case: Case, recovery: Record
) -> None:
    cluster, prometheus = case.cluster, case.prometheus
    case.operator()
    engine = case.engine()
    prometheus.kill()
    jobs = training_jobs(case, "left", "right")
    rounds = metric(engine, "autoscaler_rounds_total")
    failed = "autoscaler_throughput_unavailable_total"
    wait_for(
        lambda: (
            all("MetricsUnavailable" in cluster.events(name) for name in jobs)
            and metric(engine, "autoscaler_rounds_total") >= rounds + 3
            and metric(engine, failed, cause="query_failed") >= 2 * 3
        ),
        what="the engine to hold both jobs for three rounds",
    )
    held = metric(engine, "autoscaler_rounds_total") - rounds
    assert metric(engine, "autoscaler_scale_writes_total") == 0
    assert {name: replicas(cluster, name) for name in jobs} == dict.fromkeys(jobs, 1)
    back = prometheus.restart()
    with stopwatch() as elapsed:
        wait_for(
            lambda: all(replicas(cluster, name) == 2 for name in jobs),
            timeout=60,
            interval=0.2,
            what=f"the engine to size both jobs to 2\n{log_tail(engine.log)}",
        )
        recovered = elapsed()
    recovery(
        "Prometheus SIGKILL",
        recovered,
        f"2 jobs held at 1 worker for {held:.0f} rounds (MetricsUnavailable, no write), then"
        f" sized to 2 each; timed from Prometheus' return ({back:.1f} s to restart)",
    )


STALE_AFTER = 3.0  # seconds: the outage below outlasts it, so every reading the engine had is stale


def test_prometheus_lost_after_sizing_shrinks_and_grows_nothing_then_sizing_resumes(
    case: Case, recovery: Record
) -> None:
    """Jobs sized from their readings first; then Prometheus is SIGKILLed for longer than the
    staleness window, the case where missing data could shrink a job: every count is held,
    with the reason on the job and in the decision log, and the engine decides again within
    two rounds of its readings spanning a rate window again (a window reaching into the outage
    divides what it holds by the whole window: too low)."""
    cluster, prometheus = case.cluster, case.prometheus
    log = case.workdir / "decisions.jsonl"
    case.operator()
    settings = engine_config(namespace=cluster.ns, prometheus_url="", capacity={})["settle"]
    engine = case.engine(
        decision_log=str(log), settle={**settings, "stale_after_seconds": STALE_AFTER}
    )
    jobs = training_jobs(case, "left", "right")
    sized = dict.fromkeys(jobs, 2)
    wait_for(
        lambda: {name: replicas(cluster, name) for name in jobs} == sized,
        timeout=60,
        what="the engine to size both jobs from their readings",
    )
    writes = metric(engine, "autoscaler_scale_writes_total")
    prometheus.kill()
    lost = metric(engine, "autoscaler_rounds_total")
    with stopwatch() as outage:
        wait_for(
            lambda: (
                outage() > 2 * STALE_AFTER
                and all(held_round(log, name) for name in jobs)
                and all("MetricsUnavailable" in cluster.events(name) for name in jobs)
            ),
            timeout=60,
            what="both jobs held past the staleness window",
        )
        held_for = outage()
    held = metric(engine, "autoscaler_rounds_total") - lost
    assert metric(engine, "autoscaler_scale_writes_total") == writes
    assert {name: replicas(cluster, name) for name in jobs} == sized
    back = prometheus.restart()
    with stopwatch() as readable:  # Prometheus rate()s need fresh scrapes in their window first
        for name in jobs:
            prometheus.wait_for_series(throughput_query(cluster.ns, name))
        first_reading = readable()
    returned = datetime.now(UTC)
    with stopwatch() as elapsed:
        wait_for(
            lambda: not any(held_round(log, name) for name in jobs),
            timeout=30,
            interval=0.2,
            what=f"the engine to decide on readings again\n{log_tail(engine.log)}",
        )
        recovered = elapsed()
    rounds = rounds_until_decided(log, jobs, since=returned)
    defaults = engine_config(namespace="", prometheus_url="", capacity={})
    window = duration_seconds(defaults["prometheus"]["window"]) / defaults["interval_seconds"]
    # A round to read again, the window's rounds, one where round times jitter around its end,
    # and one to spare (as when the first round after the return still reads nothing).
    bound = 3 + math.ceil(window)
    assert rounds <= bound, f"sizing resumed {rounds:.0f} rounds after its return, not {bound}"
    assert {name: replicas(cluster, name) for name in jobs} == sized
    recovery(
        "Prometheus SIGKILL after sizing",
        recovered,
        f"2 jobs sized to 2, then Prometheus down {held_for:.1f} s (> {STALE_AFTER:g} s"
        f" staleness): held for {held:.0f} rounds, no write; deciding again {rounds:.0f}"
        f" round(s) after its readings returned ({back:.1f} s to restart, first readings"
        f" {first_reading:.1f} s later); timed from its readings",
    )


def throughput_query(namespace: str, name: str) -> str:
    window = engine_config(namespace="", prometheus_url="", capacity={})["prometheus"]["window"]
    return DEFAULT_QUERY_TEMPLATE.format(namespace=namespace, name=name, window=window)


def rounds_until_decided(log: Path, jobs: tuple[str, ...], *, since: datetime) -> int:
    """The rounds begun after `since`, up to the first that decided every job on readings: from
    the log's own round times, so a slow poll of the engine cannot add rounds that came later."""
    held: dict[str, set[str]] = {}
    for record in read_decision_log(log):
        if record["name"] in jobs and datetime.fromisoformat(record["time"]) > since:
            held.setdefault(record["time"], set()).update(
                [record["name"]] if record["reason"] == "MetricsUnavailable" else []
            )
    times = sorted(held, key=datetime.fromisoformat)
    return next((i + 1 for i, time in enumerate(times) if not held[time]), 0)


def held_round(log: Path, name: str) -> bool:
    """Whether the engine's newest decision for `name` was held for missing metrics."""
    records = [r for r in read_decision_log(log) if r["name"] == name] if log.exists() else []
    return bool(records) and records[-1]["reason"] == "MetricsUnavailable"


def training_jobs(case: Case, *names: str) -> tuple[str, ...]:
    """Linearly scaling jobs of one worker each, running, their throughput scraped."""
    cluster, prometheus = case.cluster, case.prometheus
    create_running(cluster, *(gpu_job(name) for name in names))
    for name in names:
        trainer = case.stack.enter_context(
            Trainer(cluster.api, namespace=cluster.ns, name=name, curve=lambda n: 100.0 * n)
        )
        prometheus.add_target(trainer.target, job="training", labels={"test": cluster.ns})
        case.stack.callback(prometheus.remove_target, trainer.target, job="training")
    return names


def gpu_job(name: str) -> JSON:
    """One worker, up to two, a GPU each: with 4 GPUs and linear curves, two each is optimal."""
    job = elastic_job(name, replicas=1, low=1, high=2, maxRestarts=50)
    containers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers[0]["resources"] = {"limits": {GPU: "1"}}
    return job


def replicas(cluster: Cluster, name: str) -> int:
    count: int = cluster.job(name)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return count
