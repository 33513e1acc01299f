"""Fault matrix: a policy plug-in that hangs or leaks, run by the real `autoscaler engine` process
(its default: the policy in a worker process) against the real API server, operator and
Prometheus.

The plug-in is tests/support/misbehaving_policy.py, configured by its path as a user would.
"""

import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.controller.runner import Operator
from autoscaler.engine.policy_runner import resident_mb
from autoscaler.observability.decision_log import read_decision_log
from tests.integration.test_operator import Cluster, elastic_job
from tests.support import misbehaving_policy
from tests.support.controlplane import ControlPlane
from tests.support.engine_process import ServiceProcess, engine_config, engine_process
from tests.support.polling import wait_for
from tests.support.processes import log_tail
from tests.support.prometheus import PrometheusServer
from tests.support.recovery import Record, stopwatch
from tests.support.training import Kubelet, Trainer, remove_jobs_and_pods

pytestmark = pytest.mark.faults
GPU = "nvidia.com/gpu"
PLUGIN_FILE = str(Path(misbehaving_policy.__file__))
TIMEOUT = 3.0  # the policy's budget: a hung call is killed after this
REPLACED = "worker replaced"  # the runner's log line when it kills a worker


def engine_with(
    behaviour: dict[str, Any], *, namespace: str, prometheus: PrometheusServer, tmp_path: Path
) -> dict[str, Any]:
    """The engine deciding every half second with the misbehaving plug-in, `TIMEOUT` a call."""
    config = engine_config(
        namespace=namespace,
        interval=0.5,
        prometheus_url=prometheus.url,
        capacity={GPU: 4},
        decision_log=tmp_path / "decisions.jsonl",
        policy=PLUGIN_FILE,
    )
    config["policy"].update(timeout_seconds=TIMEOUT, config={"restart_seconds": 0, **behaviour})
    return config


@pytest.fixture
def cluster(kube_api: client.ApiClient, namespace: str, operator: Operator) -> Cluster:
    return Cluster(kube_api, namespace)


@pytest.fixture
def training(
    kube_api: client.ApiClient, cluster: Cluster, prometheus: PrometheusServer
) -> Iterator[None]:
    """One job of 1 to 4 one-GPU workers, its throughput linear in its workers, scraped."""
    with ExitStack() as stack:
        stack.enter_context(Kubelet(kube_api, cluster.ns))
        stack.callback(remove_jobs_and_pods, kube_api, cluster.ns)
        job = elastic_job("linear", replicas=1, low=1, high=4, maxRestarts=50)
        container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
        container[0]["resources"] = {"limits": {GPU: "1"}}
        cluster.create(job)
        trainer = stack.enter_context(
            Trainer(kube_api, namespace=cluster.ns, name="linear", curve=lambda n: 100.0 * n)
        )
        prometheus.add_target(trainer.target, job="training", labels={"test": cluster.ns})
        stack.callback(prometheus.remove_target, trainer.target, job="training")
        yield


def workers(cluster: Cluster) -> int:
    count: int = cluster.job("linear")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return count


@dataclass(frozen=True)
class Round:
    """One round of the job, from the decision log."""

    started: datetime
    policy: str  # the policy step's reason: its own, or why it gave none
    replicas: int  # the settled count
    decided: datetime  # when the policy answered or was given up on


def rounds_of(path: Path) -> list[Round]:
    return [
        Round(
            started=(started := datetime.fromisoformat(r["time"])),
            policy=r["steps"][0]["reason"],
            replicas=r["replicas"],
            decided=started + timedelta(seconds=r["solve_seconds"]),
        )
        for r in read_decision_log(path)
    ]


@pytest.mark.usefixtures("training")
def test_a_hung_policy_costs_one_round_then_a_fresh_worker_sizes_the_job(
    control_plane: ControlPlane,
    cluster: Cluster,
    prometheus: PrometheusServer,
    tmp_path: Path,
    recovery: Record,
) -> None:
    marker = tmp_path / "hung-once"
    config = engine_with(
        {"behaviour": "hang", "hang_once_file": str(marker)},
        namespace=cluster.ns,
        prometheus=prometheus,
        tmp_path=tmp_path,
    )
    decisions = tmp_path / "decisions.jsonl"
    with engine_process(
        config,
        kubeconfig=control_plane.kubeconfig_path,
        lease_namespace=cluster.ns,
        workdir=tmp_path,
    ) as engine:
        try:
            wait_for(lambda: workers(cluster) == 4, timeout=120, what="the job sized to 4")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{log_tail(engine.log)}") from None
        assert engine.serves()
    rounds = rounds_of(decisions)
    assert marker.exists(), "the policy never hung"
    hung = [i for i, one in enumerate(rounds) if one.policy == "PolicyTimeout"]
    assert len(hung) == 1, rounds  # one round lost, not every round after
    hang = rounds[hung[0]]
    assert hang.replicas == 1  # the count the job had: nothing written during the hang
    assert hang.decided - hang.started >= timedelta(seconds=TIMEOUT)
    resumed = next(one for one in rounds[hung[0] + 1 :] if not one.policy.startswith("Policy"))
    assert "PolicyStillRunning" not in {one.policy for one in rounds}
    assert engine.log.read_text().count(REPLACED) == 1
    # the hung call began TIMEOUT before it was given up on (the round may first have waited for
    # the worker to load); recovered = the next decision, from a fresh worker
    hung_at = hang.decided - timedelta(seconds=TIMEOUT)
    recovery(
        "policy hang",
        (resumed.decided - hung_at).total_seconds(),
        f"from the hung call's start to the next decision: killed at its {TIMEOUT:g} s budget,"
        " a fresh worker loaded; the job kept 1 worker meanwhile, then went to 4",
    )


ROUNDS_BEFORE, ROUNDS_WATCHED = 4, 12
LEAK_MB, WORKER_LIMIT_MB = 50, 300


@pytest.mark.usefixtures("training")
def test_a_leaking_policy_is_recycled_and_the_engine_stays_flat(
    control_plane: ControlPlane,
    cluster: Cluster,
    prometheus: PrometheusServer,
    tmp_path: Path,
    recovery: Record,
) -> None:
    config = engine_with(
        {"behaviour": "leak", "leak_mb": LEAK_MB},
        namespace=cluster.ns,
        prometheus=prometheus,
        tmp_path=tmp_path,
    )
    config["policy"]["max_memory_mb"] = WORKER_LIMIT_MB
    with engine_process(
        config,
        kubeconfig=control_plane.kubeconfig_path,
        lease_namespace=cluster.ns,
        workdir=tmp_path,
    ) as engine:
        wait_for(lambda: rounds_run(engine) >= ROUNDS_BEFORE, timeout=60, what="warm-up rounds")
        before = resident_mb(engine.proc.pid)
        assert before is not None
        wait_for(lambda: REPLACED in engine.log.read_text(), timeout=60, what="a recycle")
        with stopwatch() as elapsed:
            decided = decided_rounds(engine)
            wait_for(lambda: decided_rounds(engine) > decided, timeout=60, what="a decision")
            resumed = elapsed()
        start = rounds_run(engine)
        wait_for(
            lambda: rounds_run(engine) >= start + ROUNDS_WATCHED, timeout=120, what="more rounds"
        )
        after = resident_mb(engine.proc.pid)
        assert after is not None
        recycles = engine.log.read_text().count(REPLACED)
        # It keeps sizing the job: a rescale waits for the throughput at the new count, so the
        # last step to 4 may still be ahead (once measured at 2 here on a loaded machine).
        try:
            wait_for(lambda: workers(cluster) == 4, timeout=90, what="the job sized to 4")
        except AssertionError as missed:  # what held it (it once stayed below 4 for 90 s)
            newest = rounds_of(tmp_path / "decisions.jsonl")[-5:]
            raise AssertionError(f"{missed}; the newest rounds: {newest}") from None
    growth = 100.0 * (after - before) / before
    leaked = LEAK_MB * (ROUNDS_BEFORE + ROUNDS_WATCHED)
    # in the engine's own process the leak would have added ~leaked MB; isolated, a few %
    assert growth < 5.0, (before, after)
    assert recycles >= ROUNDS_WATCHED * LEAK_MB // WORKER_LIMIT_MB, recycles
    recovery(
        "policy leak",
        resumed,
        f"decisions resumed after the worker was recycled; engine RSS {before} -> {after} MB"
        f" ({growth:+.1f} %) over {ROUNDS_WATCHED} rounds while the plug-in leaked {LEAK_MB} MB"
        f" a call (>= {leaked} MB in all), worker recycled {recycles} times",
    )


def rounds_run(engine: ServiceProcess) -> int:
    return int(sum(_samples(engine, "autoscaler_rounds_total").values()))


def decided_rounds(engine: ServiceProcess) -> int:
    return int(_samples(engine, "autoscaler_rounds_total").get('result="ok"', 0.0))


def _samples(engine: ServiceProcess, name: str) -> dict[str, float]:
    status, body = engine.get("/metrics")
    assert status == 200
    pattern = re.compile(rf"^{name}\{{(.*)\}} (\S+)$", re.MULTILINE)
    return {labels: float(value) for labels, value in pattern.findall(body)}
