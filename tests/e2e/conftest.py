"""Real elastic training under the operator and the engine: a control plane of its own.

kube-apiserver, etcd, kube-controller-manager (HPA, garbage collector, node lifecycle, taint
eviction, pod garbage collector), kube-scheduler, a process node agent running the pods as
torchrun processes in network namespaces, Prometheus discovering the pods through the API server
as the shipped PodMonitor selects them, and `autoscaler operator` as a process. Its own control plane,
because the node lifecycle controller would mark the API-only Nodes of other tests NotReady.

Timings shortened for tests (each is a flag of the real component):
- kube-controller-manager: `--node-monitor-grace-period=5s`, `--node-monitor-period=1s`
  (defaults 50 s and 5 s): a node whose Lease stops is NotReady after ~5 s; the HPA's downscale
  window 120 s (default 300 s);
- kube-apiserver: `--default-not-ready-toleration-seconds=2`,
  `--default-unreachable-toleration-seconds=2` (defaults 300 s): pods leave a lost node's
  processes to the taint-eviction controller after 2 s;
- node agent: heartbeat 1 s, container restart back-off 1 s doubling to 4 s (kubelet: 10 s to
  300 s; the first restart is immediate in both).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import PODS, Kube
from tests.e2e.ft_measure import Resize as FtResize
from tests.e2e.ft_measure import summarise as ft_summarise
from tests.e2e.measure import Rescale, summarise
from tests.e2e.placement import PlacementWatch, SpreadTime, summed
from tests.e2e.training import Scenario, engine_settings_line
from tests.support.controlplane import REPO_ROOT, ControlPlane, binaries_dir
from tests.support.crd import CRD_FILE, established
from tests.support.engine_process import ServiceProcess, operator_process
from tests.support.external_metrics import ExternalMetricsServer, register, unregister
from tests.support.node_agent import TEST_TIMING, NodeAgent, NodeSpec
from tests.support.polling import wait_for
from tests.support.processes import log_tail
from tests.support.prometheus import PodMonitorTargets, PrometheusServer

POD_MONITOR = REPO_ROOT / "deploy" / "monitoring" / "training-podmonitor.yaml"
CONTROLLERS = (
    "horizontal-pod-autoscaler-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
)
CONTROLLER_FLAGS = (
    "--node-monitor-grace-period=5s",
    "--node-monitor-period=1s",
    # A rescale stalls training for seconds, and the throughput an HPA scales on drops with it:
    # without a downscale window the HPA shrinks the job it just grew, mid-rendezvous, and again.
    "--horizontal-pod-autoscaler-downscale-stabilization=120s",
)
APISERVER_FLAGS = (
    "--default-not-ready-toleration-seconds=2",
    "--default-unreachable-toleration-seconds=2",
)
REPORT_ENV = "AUTOSCALER_E2E_REPORT"  # where the session writes every measured rescale
_RESCALES = pytest.StashKey[list[Rescale]]()
_LOST = pytest.StashKey[list[str]]()
_FT = pytest.StashKey[list[FtResize]]()
_FT_LOST_STEPS = pytest.StashKey[list[int]]()
_SPREAD = pytest.StashKey[list[SpreadTime]]()


@pytest.fixture(scope="session")
def e2e_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(bin_dir=binaries_dir(), apiserver_flags=APISERVER_FLAGS)
    try:
        plane.start(tmp_path_factory.mktemp("e2e-controlplane"))
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def e2e_api(e2e_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(e2e_plane.kubeconfig_path))  # type: ignore[no-untyped-call]
    with api:
        yield api


@pytest.fixture(scope="session")
def e2e_cluster(e2e_plane: ControlPlane, e2e_api: client.ApiClient) -> ControlPlane:
    """The CRD Established, then kube-controller-manager and kube-scheduler running."""
    ext = client.ApiextensionsV1Api(e2e_api)
    ext.create_custom_resource_definition(yaml.safe_load(CRD_FILE.read_text()))
    wait_for(lambda: established(ext), what="the PyTorchJob CRD to be Established")
    e2e_plane.start_controller_manager(controllers=CONTROLLERS, flags=CONTROLLER_FLAGS)
    e2e_plane.start_scheduler()
    return e2e_plane


@pytest.fixture(scope="session")
def e2e_prometheus(
    e2e_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """Prometheus scraping the training pods exactly as the shipped PodMonitor selects them."""
    kube = Kube(e2e_api)

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = kube.list(PODS)["items"]  # raw JSON: cheap on shared CPUs
        return items

    server = PrometheusServer()
    try:
        server.start(tmp_path_factory.mktemp("e2e-prometheus"))
        with PodMonitorTargets(server, yaml.safe_load(POD_MONITOR.read_text()), pods):
            yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def e2e_operator(
    e2e_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    with operator_process(
        kubeconfig=e2e_cluster.kubeconfig_path,
        lease_namespace="default",
        workdir=tmp_path_factory.mktemp("e2e-operator"),
    ) as process:
        yield process


@pytest.fixture(scope="session")
def e2e_external_metrics(
    e2e_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExternalMetricsServer]:
    server = ExternalMetricsServer(tmp_path_factory.mktemp("e2e-external-metrics"))
    server.start()
    try:
        register(e2e_api, server)
        yield server
    finally:
        unregister(e2e_api)
        server.stop()


@pytest.fixture
def e2e_namespace(e2e_api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "e2e-" + request.node.name.removeprefix("test_").replace("_", "-")[:40].rstrip("-")
    core = client.CoreV1Api(e2e_api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    client.CustomObjectsApi(e2e_api).delete_collection_namespaced_custom_object(
        c.GROUP, c.VERSION, name, c.PLURAL
    )
    core.delete_namespace(name)


@pytest.fixture
def nodes(
    e2e_cluster: ControlPlane,
    e2e_api: client.ApiClient,
    e2e_operator: ServiceProcess,
    torch_env: Path,
    tmp_path: Path,
) -> Callable[..., NodeAgent]:
    """`nodes(count, gpus=2) -> NodeAgent`: Nodes whose pods run with the training environment."""
    # Fail at once, not after every wait's timeout, when the shared operator is gone.
    assert e2e_operator.proc.poll() is None, "the e2e operator exited:\n" + log_tail(
        e2e_operator.log
    )
    agents: list[NodeAgent] = []

    def start(count: int, *, gpus: int = 2) -> NodeAgent:
        specs = [NodeSpec(f"node-{len(agents)}-{i}", gpus=gpus) for i in range(count)]
        base_env = {"PATH": f"{torch_env / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"}
        base_env["PYTHONPATH"] = str(REPO_ROOT)
        agent = NodeAgent(
            e2e_api,
            specs,
            workdir=tmp_path / f"agent-{len(agents)}",
            base_env=base_env,
            **TEST_TIMING,
        )
        agents.append(agent)
        return agent.start()

    yield start  # type: ignore[misc]
    for agent in reversed(agents):
        agent.stop()
        assert not agent.errors, agent.errors


@pytest.fixture
def scenario(
    *,
    request: pytest.FixtureRequest,
    e2e_cluster: ControlPlane,
    e2e_api: client.ApiClient,
    e2e_prometheus: PrometheusServer,
    e2e_namespace: str,
    nodes: Callable[..., NodeAgent],
    e2e_operator: ServiceProcess,
    tmp_path: Path,
) -> Iterator[Scenario]:
    stash = request.config.stash
    made = Scenario(
        plane=e2e_cluster,
        api=e2e_api,
        prometheus=e2e_prometheus,
        namespace=e2e_namespace,
        workdir=tmp_path,
        nodes=nodes,
        rescales=stash.setdefault(_RESCALES, []),
        lost_jobs=stash.setdefault(_LOST, []),
        ft_resizes=stash.setdefault(_FT, []),
        ft_lost_steps=stash.setdefault(_FT_LOST_STEPS, []),
    )
    watch = PlacementWatch(e2e_api, e2e_namespace, e2e_operator).start()
    yield made
    stash.setdefault(_SPREAD, []).append(watch.stop())
    for job in made.jobs:
        job.stop_watching()
        # A job a scenario started and did not see succeed is lost, whatever the reason.
        if job.created and job.conditions().get("Succeeded") != "True":
            made.lost_jobs.append(f"{made.namespace}/{job.name}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    measured = session.config.stash.get(_RESCALES, None)
    if measured is None:
        return
    report = os.environ.get(REPORT_ENV)
    if report:
        path = Path(report)
        lost = session.config.stash.get(_LOST, [])
        lines = [r.to_json() for r in measured] + [f'{{"lost": {len(lost)}}}']
        lines += [r.to_json() for r in session.config.stash.get(_FT, [])]
        lines.append(f'{{"ft_lost_steps": {sum(session.config.stash.get(_FT_LOST_STEPS, []))}}}')
        lines.append(summed(session.config.stash.get(_SPREAD, [])).to_json())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    measured = config.stash.get(_RESCALES, None)
    if measured:
        terminalreporter.section("elastic training")
        terminalreporter.write_line(engine_settings_line())
        for rescale in measured:
            terminalreporter.write_line(
                f"{rescale.job}: {rescale.cause} stalled {rescale.stall_seconds:.1f} s, "
                f"{rescale.steps_redone} steps redone"
            )
        summary = summarise(measured, lost_jobs=len(config.stash.get(_LOST, [])))
        for line in (summary.scale_up_line, summary.node_lost_line, summary.line):
            terminalreporter.write_line(line)
        terminalreporter.write_line(summed(config.stash.get(_SPREAD, [])).line)
    ft_measured = config.stash.get(_FT, None)
    if ft_measured:
        terminalreporter.section("elastic training, torchft mode")
        if not measured:
            terminalreporter.write_line(engine_settings_line())
        for resize in ft_measured:
            terminalreporter.write_line(
                f"{resize.job}: {resize.cause} paused the survivors {resize.pause_seconds:.1f} s"
            )
        lost_steps = sum(config.stash.get(_FT_LOST_STEPS, []))
        ft_summary = ft_summarise(ft_measured, lost_steps=lost_steps)
        lines = (ft_summary.line, ft_summary.newcomer_line, ft_summary.node_lost_line)
        for line in (*lines, ft_summary.lighthouse_line):
            terminalreporter.write_line(line)
