"""The fault matrix, process half: real `autoscaler operator` and `autoscaler engine` processes
killed or cut off at precise points, each behind its own proxy to a real API server
(`tests/support/apiproxy.py`), which logs every request and fires the fault.

- the operator SIGKILLed between the creates of a scale-up: the standby finishes it, each pod
  created exactly once;
- the engine SIGKILLed before its `/scale` write reaches the server, and after the server did it
  but before the engine saved its state: the count is written once, the state's rescale count
  is right and the cooldown holds after the takeover;
- a concurrent writer of the job's labels making the engine's `/scale` and the operator's
  `/status` writes conflict: every writer's update survives;
- the leader cut off from the API server: it stops before the standby's first write.

The module runs a control plane of its own: the session's has an operator running in the test
process over every namespace, which would race the processes under test.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.cli.common import LEASE_LOST
from autoscaler.cli.operator_command import LEADER_ELECTION_ID
from autoscaler.engine.state import JobState
from tests.integration.test_gang import control_plane as own_control_plane
from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support.apiproxy import ApiProxy, Exchange, Match
from tests.support.controlplane import RESTRICTED_USER, ControlPlane
from tests.support.crd import RBAC_FILE
from tests.support.engine_process import (
    FAILOVER_LEASE_FLAGS,
    ServiceProcess,
    engine_config,
    engine_process,
    operator_process,
)
from tests.support.polling import wait_for
from tests.support.processes import log_tail
from tests.support.prometheus import PrometheusServer
from tests.support.recovery import Record, stopwatch
from tests.support.training import GPU, Kubelet, Trainer

pytestmark = pytest.mark.faults
JSON = dict[str, Any]
KILLED = -signal.SIGKILL
LEASE_SECONDS = float(FAILOVER_LEASE_FLAGS[FAILOVER_LEASE_FLAGS.index("--lease-duration") + 1])
OPERATOR_LEASE, ENGINE_LEASE = LEADER_ELECTION_ID, "elastic-autoscaler-engine"
COOLDOWN = 4.0  # the engine's cooldown_seconds (engine_config)


@pytest.fixture(scope="module")
def own(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """This module's API server, with the CRD and the operator's ClusterRole, and an admin
    client of it."""
    with own_control_plane(tmp_path_factory.mktemp("faults-processes")) as found:
        yield found


@pytest.fixture
def plane(own: tuple[ControlPlane, client.ApiClient]) -> ControlPlane:
    return own[0]


@pytest.fixture
def api(own: tuple[ControlPlane, client.ApiClient]) -> client.ApiClient:
    return own[1]


@pytest.fixture
def ns(plane: ControlPlane, api: client.ApiClient) -> Iterator[str]:
    """A namespace for one case, with deploy/operator's leader-election Role bound to the
    operator's test user (its Leases live here). It is deleted afterwards; with no namespace
    controller it stays Terminating until the module's API server stops."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    documents = list(yaml.safe_load_all(RBAC_FILE.read_text()))
    role = next(d for d in documents if d["kind"] == "Role")
    binding = next(d for d in documents if d["kind"] == "RoleBinding")
    role["metadata"]["namespace"] = binding["metadata"]["namespace"] = name
    binding["subjects"] = [
        {"kind": "User", "name": RESTRICTED_USER, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(name, role)
    rbac.create_namespaced_role_binding(name, binding)
    yield name
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def proxies(plane: ControlPlane) -> Iterator[Callable[[], ApiProxy]]:
    """`proxies()` -> a new proxy to this module's API server; all are closed at teardown."""
    started: list[ApiProxy] = []

    def start() -> ApiProxy:
        started.append(ApiProxy(plane))
        return started[-1]

    yield start
    for proxy in started:
        proxy.close()


@dataclass(frozen=True)
class Env:
    """What every case uses: the module's API server, an admin client, the case's namespace
    and directory, and `proxy()` for a new proxy to the API server."""

    plane: ControlPlane
    api: client.ApiClient
    ns: str
    tmp_path: Path
    proxy: Callable[[], ApiProxy]


@pytest.fixture
def env(
    plane: ControlPlane,
    api: client.ApiClient,
    ns: str,
    tmp_path: Path,
    proxies: Callable[[], ApiProxy],
) -> Env:
    return Env(plane, api, ns, tmp_path, proxies)


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


def leader_and_standby(
    env: Env, stack: ExitStack, first_proxy: ApiProxy, second_proxy: ApiProxy, *, leader_exits: int
) -> ServiceProcess:
    """Operator "first" (leading, through `first_proxy`, expected to exit with `leader_exits`)
    and operator "second" (its standby, through `second_proxy`); returns the leader."""
    operator = env.plane.kubeconfig_for(RESTRICTED_USER)
    first = stack.enter_context(
        operator_process(
            lease=FAILOVER_LEASE_FLAGS,
            kubeconfig=first_proxy.kubeconfig(operator, env.tmp_path / "first.conf"),
            lease_namespace=env.ns,
            workdir=env.tmp_path,
            identity="first",
            exit_code=leader_exits,
        )
    )
    wait_for(lambda: holder(env.api, env.ns, OPERATOR_LEASE) == "first", what="first to lead")
    stack.enter_context(
        operator_process(
            lease=FAILOVER_LEASE_FLAGS,
            kubeconfig=second_proxy.kubeconfig(operator, env.tmp_path / "second.conf"),
            lease_namespace=env.ns,
            workdir=env.tmp_path,
            identity="second",
        )
    )
    return first


# -- 1. the operator killed between the creates of a scale-up ------------------------------------


def test_operator_killed_between_creates_of_a_scale_up_is_finished_once_by_the_standby(
    env: Env, recovery: Record
) -> None:
    cluster = Cluster(env.api, env.ns)
    first_proxy, second_proxy = env.proxy(), env.proxy()
    with ExitStack() as stack:
        first = leader_and_standby(env, stack, first_proxy, second_proxy, leader_exits=KILLED)
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


# -- 2. the engine killed around its /scale write --------------------------------------------------


def growing_job(name: str) -> JSON:
    """An elastic job of 1..4 one-GPU workers, starting at 1."""
    job = elastic_job(name, replicas=1, low=1, high=4, maxRestarts=50)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {GPU: "1"}}
    return job


def stepwise_engine(namespace: str, prometheus: PrometheusServer) -> JSON:
    """An engine that adds one worker per decision (capacity: 4 GPUs), so a write applied twice
    would show as a count two steps up, and a rescale inside the cooldown as a write too early."""
    config = engine_config(namespace=namespace, prometheus_url=prometheus.url, capacity={GPU: 4})
    config["settle"].update(scale_up_max_pods=1, scale_up_max_percent=1)
    assert config["settle"]["cooldown_seconds"] == COOLDOWN
    return config


@contextmanager
def training(
    api: client.ApiClient, cluster: Cluster, prometheus: PrometheusServer, name: str
) -> Iterator[None]:
    """A growing job whose pods the stand-in kubelet runs, its throughput (100 samples/s per
    worker) scraped by Prometheus."""
    with ExitStack() as stack:
        stack.enter_context(Kubelet(api, cluster.ns))
        cluster.create(growing_job(name))
        curve: Callable[[int], float] = lambda n: 100.0 * n  # noqa: E731
        trainer = stack.enter_context(Trainer(api, namespace=cluster.ns, name=name, curve=curve))
        prometheus.add_target(trainer.target, job="training", labels={"test": cluster.ns})
        stack.callback(prometheus.remove_target, trainer.target, job="training")
        yield


def scale_counts(exchanges: list[Exchange]) -> list[int]:
    """The counts `/scale` writes set on the server, in order."""
    writes = sorted((e for e in exchanges if scale_writes(e.method, e.path)), key=arrival)
    return [e.body["spec"]["replicas"] for e in writes if e.status == 200]


def arrival(exchange: Exchange) -> float:
    return exchange.arrived


def saved_states(exchanges: list[Exchange]) -> list[tuple[float, JobState]]:
    """Each engine state the server stored (the state annotation's merge patches), in order."""
    states = []
    for e in sorted(exchanges, key=arrival):
        annotations = ((e.body or {}).get("metadata") or {}).get("annotations") or {}
        if e.method == "PATCH" and e.status == 200 and c.ANNOTATION_STATE in annotations:
            states.append((e.arrived, JobState.from_json(annotations[c.ANNOTATION_STATE])))
    return states


def ok_scale_writes(exchanges: list[Exchange]) -> list[Exchange]:
    writes = [e for e in exchanges if scale_writes(e.method, e.path) and e.status == 200]
    return sorted(writes, key=arrival)


@pytest.mark.parametrize("when", ["before", "after"])
def test_engine_killed_around_its_scale_write_rescales_once_and_keeps_the_cooldown(
    when: Literal["before", "after"], env: Env, prometheus: PrometheusServer, recovery: Record
) -> None:
    """`before`: killed as its PUT /scale arrives, never forwarded (decided, not written);
    `after`: killed once the server answered it (written, the state annotation not saved)."""
    cluster = Cluster(env.api, env.ns)
    first_proxy, second_proxy = env.proxy(), env.proxy()
    config = stepwise_engine(env.ns, prometheus)
    admin = env.plane.kubeconfig_path
    for name in ("first", "second"):
        (env.tmp_path / name).mkdir()
    with ExitStack() as stack:
        stack.enter_context(
            operator_process(
                lease=FAILOVER_LEASE_FLAGS,
                kubeconfig=env.plane.kubeconfig_for(RESTRICTED_USER),
                lease_namespace=env.ns,
                workdir=env.tmp_path,
            )
        )
        stack.enter_context(training(env.api, cluster, prometheus, "grow"))
        first = stack.enter_context(
            engine_process(
                config,
                lease=FAILOVER_LEASE_FLAGS,
                kubeconfig=first_proxy.kubeconfig(admin, env.tmp_path / "first.conf"),
                lease_namespace=env.ns,
                workdir=env.tmp_path / "first",
                exit_code=KILLED,
            )
        )
        killed = first_proxy.kill_on(scale_writes, first.proc, when=when)
        wait_for(lambda: holder(env.api, env.ns, ENGINE_LEASE), what="the first engine to lead")
        second = stack.enter_context(
            engine_process(
                config,
                lease=FAILOVER_LEASE_FLAGS,
                kubeconfig=second_proxy.kubeconfig(admin, env.tmp_path / "second.conf"),
                lease_namespace=env.ns,
                workdir=env.tmp_path / "second",
            )
        )
        assert killed.wait(timeout=60), log_tail(first.log)
        with stopwatch() as elapsed:
            # Recovered: the new leader's stored state has the count and one rescale.
            wait_for(
                lambda: any(
                    (s.replicas, s.rescales) == (2, 1)
                    for _, s in saved_states(second_proxy.exchanges)
                ),
                timeout=30,
                what="the second engine to store 2 workers and 1 rescale",
            )
            seconds = elapsed()
        # The next step (3) comes only after the cooldown, from the new leader.
        wait_for(
            lambda: len(ok_scale_writes(second_proxy.exchanges + first_proxy.exchanges)) >= 2,
            timeout=40,
            what="the next rescale",
        )
        wait_for(
            lambda: any(s.rescales == 2 for _, s in saved_states(second_proxy.exchanges)),
            what="the second rescale to be stored",
        )
        assert second.proc.poll() is None
    exchanges = first_proxy.exchanges + second_proxy.exchanges
    assert scale_counts(exchanges)[:2] == [2, 3], scale_counts(exchanges)
    # A write refused for a concurrent change (409) did nothing; the engine retries it.
    attempted = [
        e for e in first_proxy.exchanges if scale_writes(e.method, e.path) and e.status != 409
    ]
    assert [(e.body["spec"]["replicas"], e.status) for e in attempted] == [
        (2, None if when == "before" else 200)
    ]
    writes = ok_scale_writes(exchanges)
    stored = saved_states(second_proxy.exchanges)
    # Every stored state counts exactly the rescales written before it, a restart for each.
    for at, state in stored:
        assert state.rescales == len([w for w in writes if w.arrived < at]), (at, state)
        assert state.restarts_spent == state.rescales
    first_rescale = next(s for _, s in stored if s.rescales == 1).last_rescale
    assert first_rescale is not None
    gap = writes[1].arrived - first_rescale.timestamp()
    assert gap >= COOLDOWN, f"rescaled again {gap:.1f} s after the takeover's rescale"
    what = "decided, not written" if when == "before" else "written, state not saved"
    recovery(
        f"engine SIGKILLed {when} its /scale write ({what})",
        seconds,
        f"count written once, state: 2 workers, 1 rescale; next rescale {gap:.1f} s later",
    )


# -- 3. a concurrent writer: 409 Conflicts on /scale and /status ----------------------------------


class LabelWriter:
    """Writes a counter into one label of a job every 50 ms, and on demand (`write`): merge
    patches, never refused, but each moves the job's resourceVersion. (Paced, so the engine's
    /scale writes still land within the case's time: unpaced, they conflicted again and again.)"""

    LABEL = "faults.test/writes"

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.jobs, self.namespace, self.name = client.CustomObjectsApi(api), namespace, name
        self.written = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="label-writer")

    def __enter__(self) -> LabelWriter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def write(self) -> None:
        with self._lock:  # the label's last value is the count of writes, whoever made them
            patch = {"metadata": {"labels": {self.LABEL: str(self.written + 1)}}}
            self.jobs.patch_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.name, patch
            )
            self.written += 1

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.write()


def test_concurrent_writer_causes_conflicts_and_no_update_is_lost(
    env: Env, prometheus: PrometheusServer, recovery: Record
) -> None:
    cluster = Cluster(env.api, env.ns)
    operator_proxy, engine_proxy = env.proxy(), env.proxy()
    with ExitStack() as stack:
        stack.enter_context(
            operator_process(
                lease=FAILOVER_LEASE_FLAGS,
                kubeconfig=operator_proxy.kubeconfig(
                    env.plane.kubeconfig_for(RESTRICTED_USER), env.tmp_path / "operator.conf"
                ),
                lease_namespace=env.ns,
                workdir=env.tmp_path,
            )
        )
        stack.enter_context(training(env.api, cluster, prometheus, "grow"))
        writer = stack.enter_context(LabelWriter(env.api, env.ns, "grow"))
        # Besides the writer's own pace, a write just before each of the first two /scale and
        # /status writes: each meets a job changed since it was read (for the engine's first
        # PUT of a rescale, read by its informer; for a retry, by its GET), a 409 at least twice.
        engine_proxy.interfere_on(scale_writes, writer.write, times=2)
        operator_proxy.interfere_on(status_writes, writer.write, times=2)
        stack.enter_context(
            engine_process(
                stepwise_engine(env.ns, prometheus),
                lease=FAILOVER_LEASE_FLAGS,
                kubeconfig=engine_proxy.kubeconfig(
                    env.plane.kubeconfig_path, env.tmp_path / "engine.conf"
                ),
                lease_namespace=env.ns,
                workdir=env.tmp_path,
            )
        )
        with stopwatch() as elapsed:
            wait_for(
                lambda: active_workers(cluster, "grow") == 3,
                timeout=60,
                what="3 active workers under the concurrent writer",
            )
            seconds = elapsed()
        stack.pop_all().close()  # the engine, the writer, the stand-ins and the operator stop
        job = cluster.job("grow")
    engine_writes = ok_scale_writes(engine_proxy.exchanges)
    scale_conflicts = [
        e for e in engine_proxy.exchanges if scale_writes(e.method, e.path) and e.status == 409
    ]
    status_conflicts = [
        e for e in operator_proxy.exchanges if status_writes(e.method, e.path) and e.status == 409
    ]
    assert len(scale_conflicts) >= 2, "the interfering writes caused no conflict on /scale"
    assert len(status_conflicts) >= 2, "the interfering writes caused no conflict on /status"
    # The engine's count, the writer's last label and the operator's status all survived.
    replicas = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    assert replicas == engine_writes[-1].body["spec"]["replicas"]
    assert job["metadata"]["labels"][LabelWriter.LABEL] == str(writer.written)
    assert active_workers_of(job) == replicas
    state = JobState.from_json(job["metadata"]["annotations"][c.ANNOTATION_STATE])
    assert state.rescales == len(engine_writes)
    recovery(
        "a concurrent writer: 409 Conflicts on /scale and /status",
        seconds,
        f"{len(scale_conflicts)} /scale and {len(status_conflicts)} /status conflicts retried; "
        f"1 -> {replicas} workers, {writer.written} label writes kept",
    )


def active_workers_of(job: JSON) -> int:
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return int((statuses.get(c.WORKER) or {}).get("active") or 0)


# -- 4. the leader cut off from the API server ---------------------------------------------------


@pytest.mark.parametrize("how", ["refused", "silent"])
def test_leader_cut_off_stops_before_the_standby_writes(
    how: Literal["refused", "silent"], env: Env, recovery: Record
) -> None:
    """`refused`: the leader's connections close (its requests fail at once); `silent`: they
    stay open and nothing answers (a partition: its requests wait for their timeouts)."""
    cluster = Cluster(env.api, env.ns)
    first_proxy, second_proxy = env.proxy(), env.proxy()
    with ExitStack() as stack:
        first = leader_and_standby(env, stack, first_proxy, second_proxy, leader_exits=LEASE_LOST)
        cluster.create(elastic_job("cut", replicas=1, high=4))
        cluster.wait_pods("cut", names("cut", "worker", 1))
        cut = first_proxy.cut(how)
        cluster.scale("cut", 2)  # work only a leader that reaches the server can do
        cluster.wait_pods("cut", names("cut", "worker", 2))
        recovered = time.time()
        assert holder(env.api, env.ns, OPERATOR_LEASE) == "second"
        wait_for(lambda: first.proc.poll() is not None, timeout=60, what="first to exit")
    takeover = min(e.arrived for e in second_proxy.writes())
    old = first_proxy.writes()
    last_try = max(e.arrived for e in old)
    assert last_try < takeover, f"the old leader wrote {last_try - takeover:.2f} s after the new"
    # Whether a request of the old leader reaches the proxy after a silent cut depends on the
    # connection it was queued on (one whose exchange the cut tore holds it unread), so the
    # proof that the cut held is that nothing was answered after it.
    answered = [e for e in first_proxy.exchanges if e.answered is not None and e.answered >= cut]
    assert not answered, f"the cut let answers through: {answered}"
    lost = lease_lost_at(first.log)
    assert lost < takeover, f"the old leader stopped {lost - takeover:.2f} s after the takeover"
    assert created_names(second_proxy.exchanges, "pods") == ["cut-worker-1"]
    recovery(
        f"operator leader cut off from the API server ({how})",
        recovered - cut,
        f"it stopped {lost - cut:.1f} s after the cut, the standby wrote first "
        f"{takeover - cut:.1f} s after it; the standby created the new worker",
    )


def lease_lost_at(log: Path) -> float:
    """When (time.time()) the process logged that it lost its lease: it stops acting then."""
    line = next(line for line in log.read_text().splitlines() if "lost the lease" in line)
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")  # logging's local asctime
    return stamp.timestamp()
