"""Session fixtures for the real test environment. Failures to start are errors, never skips."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from kubernetes import client, config

from autoscaler.clients.kube import Kube
from tests.support.controlplane import REPO_ROOT, ControlPlane, binaries_dir
from tests.support.external_metrics import ExternalMetricsServer, register, unregister
from tests.support.node_agent import TEST_TIMING, NodeAgent, NodeSpec, default_base_env
from tests.support.processes import StartupError
from tests.support.prometheus import PrometheusServer
from tests.support.serviceaccounts import request_token, write_kubeconfig

_TIMINGS = pytest.StashKey[dict[str, float]]()
_LINES = pytest.StashKey[list[str]]()  # a suite's own result lines (the conformance count)


def summary_line(config: pytest.Config, line: str) -> None:
    """`line`, printed at the end of the run under the terminal summary."""
    config.stash.setdefault(_LINES, []).append(line)


def _record(request: pytest.FixtureRequest, what: str, seconds: float) -> None:
    request.config.stash.setdefault(_TIMINGS, {})[what] = seconds


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    timings = config.stash.get(_TIMINGS, {})
    if timings:
        terminalreporter.section("test environment")
        for what, seconds in timings.items():
            terminalreporter.write_line(f"{what} started in {seconds:.1f}s")
    for line in config.stash.get(_LINES, []):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    plane = ControlPlane(bin_dir=binaries_dir())
    try:
        plane.start(tmp_path_factory.mktemp("controlplane"))
        _record(request, "kube-apiserver+etcd", plane.startup_seconds)
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def controller_manager(request: pytest.FixtureRequest, control_plane: ControlPlane) -> ControlPlane:
    """The control plane with kube-controller-manager (HPA, GC, namespace controllers) running."""
    _record(request, "kube-controller-manager", control_plane.start_controller_manager())
    return control_plane


@pytest.fixture(scope="session")
def scheduler(request: pytest.FixtureRequest, control_plane: ControlPlane) -> ControlPlane:
    """The control plane with kube-scheduler running (binds pods to Nodes; no kubelet)."""
    _record(request, "kube-scheduler", control_plane.start_scheduler())
    return control_plane


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig_path)
    )
    with api:
        yield api


@pytest.fixture(scope="session")
def service_account_kubeconfig(
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, str], Path]:
    """`(namespace, name) -> kubeconfig` of an existing ServiceAccount, with a fresh token from
    the TokenRequest API: clients built from it act with exactly that account's permissions."""
    directory = tmp_path_factory.mktemp("serviceaccounts")

    def kubeconfig(namespace: str, name: str) -> Path:
        token = request_token(Kube(kube_api), namespace, name)
        user = f"system:serviceaccount:{namespace}:{name}"
        return write_kubeconfig(
            directory / f"{namespace}.{name}.kubeconfig",
            server=control_plane.url,
            ca=control_plane.ca_path,
            user=user,
            token=token,
        )

    return kubeconfig


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace; without namespace-controller it stays Terminating after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def prometheus(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    server = PrometheusServer()
    try:
        server.start(tmp_path_factory.mktemp("prometheus"))
        _record(request, "prometheus", server.startup_seconds)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def external_metrics(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kube_api: client.ApiClient,
) -> Iterator[ExternalMetricsServer]:
    """A fake external.metrics.k8s.io server, registered and Available in the aggregator."""
    server = ExternalMetricsServer(tmp_path_factory.mktemp("external-metrics"))
    server.start()
    try:
        _record(request, "external metrics APIService", register(kube_api, server))
        yield server
    finally:
        unregister(kube_api)  # first, so the aggregator stops calling a stopped server
        server.stop()


@pytest.fixture
def start_node_agent(
    scheduler: ControlPlane, kube_api: client.ApiClient, tmp_path: Path
) -> Iterator[Callable[..., NodeAgent]]:
    """`start_node_agent(nodes=[NodeSpec("node-0")], base_env=None, **timing) -> NodeAgent`.

    Starts a NodeAgent (tests/support/node_agent.py) that runs the pods kube-scheduler binds
    to `nodes` as local processes. Timing defaults to TEST_TIMING (1 s heartbeats, 1 s..4 s
    back-off); `base_env` to default_base_env() (this venv's bin first on PATH, the repo on
    PYTHONPATH). Every agent started is stopped at teardown.
    """
    agents: list[NodeAgent] = []

    def start(
        nodes: Sequence[NodeSpec] = (NodeSpec("node-0"),),
        *,
        base_env: Mapping[str, str] | None = None,
        **timing: float,
    ) -> NodeAgent:
        agent = NodeAgent(
            kube_api,
            nodes,
            workdir=tmp_path / f"node-agent-{len(agents)}",
            base_env=default_base_env() if base_env is None else base_env,
            **{**TEST_TIMING, **timing},
        )
        agents.append(agent)
        return agent.start()

    yield start
    for agent in reversed(agents):
        agent.stop()


@pytest.fixture
def node_agent(start_node_agent: Callable[..., NodeAgent]) -> NodeAgent:
    """One NodeAgent with a single Node, node-0 (4 CPUs, 16Gi, 2 nvidia.com/gpu)."""
    return start_node_agent()


EXAMPLE = REPO_ROOT / "examples" / "elastic-training"  # the training script real torchrun runs


def training_environment(*, timeout: float = 3600.0) -> Path:
    """The cached virtualenv with PyTorch (testenv/torch.sh installs it on a cache miss)."""
    command = ["bash", str(REPO_ROOT / "testenv" / "torch.sh")]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO_ROOT
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise StartupError(
            f"`{' '.join(command)}` failed (exit {result.returncode}): real training "
            f"needs PyTorch.\n{result.stderr[-3000:]}"
        )
    return Path(lines[-1])


@pytest.fixture(scope="session")
def torch_env() -> Path:
    return training_environment()
