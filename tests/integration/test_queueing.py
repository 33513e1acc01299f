"""Queueing against the real API server, operator and Prometheus: the engine (a real process, its
decisions fixed by `tests/support/queue_policy.py`) holds a preemptible job back for a shorter
one, and resumes it once the shorter one has finished."""

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.controller.runner import Operator
from tests.integration.test_operator import Cluster, elastic_job
from tests.support.controlplane import ControlPlane
from tests.support.engine_process import engine_config, engine_process
from tests.support.polling import wait_for
from tests.support.processes import log_tail
from tests.support.prometheus import PrometheusServer
from tests.support.training import Kubelet, Trainer, remove_jobs_and_pods

POLICY = Path(__file__).parents[1] / "support" / "queue_policy.py"
GPU = "nvidia.com/gpu"


def gpu_job(name: str, **annotations: str) -> dict[str, Any]:
    job = elastic_job(name, replicas=2, low=1, high=2, maxRestarts=50)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {GPU: "1"}}
    job["metadata"].setdefault("annotations", {}).update(annotations)
    return job


@pytest.fixture
def engine_log(
    control_plane: ControlPlane, prometheus: PrometheusServer, namespace: str, tmp_path: Path
) -> Iterator[Path]:
    config = engine_config(
        namespace=namespace,
        prometheus_url=prometheus.url,
        capacity={GPU: 4},
        interval=1.0,
        policy=str(POLICY),
    )
    with engine_process(
        config,
        kubeconfig=control_plane.kubeconfig_path,
        lease_namespace=namespace,
        workdir=tmp_path,
    ) as process:
        yield process.log


def test_a_preemptible_job_is_held_back_for_a_shorter_one_and_resumed_after_it(
    kube_api: client.ApiClient,
    namespace: str,
    operator: Operator,
    prometheus: PrometheusServer,
    engine_log: Path,
) -> None:
    cluster = Cluster(kube_api, namespace)

    def spec(name: str) -> dict[str, Any]:
        return cluster.job(name)["spec"]  # type: ignore[no-any-return]

    def annotations(name: str) -> dict[str, str]:
        return cluster.job(name)["metadata"].get("annotations") or {}

    with ExitStack() as stack:
        stack.enter_context(Kubelet(kube_api, namespace))
        stack.callback(remove_jobs_and_pods, kube_api, namespace)
        for name in ("long", "short"):
            trainer = stack.enter_context(
                Trainer(kube_api, namespace=namespace, name=name, curve=lambda n: 100.0 * n)
            )
            prometheus.add_target(trainer.target, job="training", labels={"test": namespace})
            stack.callback(prometheus.remove_target, trainer.target, job="training")
        cluster.create(gpu_job("long", **{c.ANNOTATION_PREEMPTIBLE: "true"}))
        cluster.create(gpu_job("short"))
        try:
            wait_for(
                lambda: spec("long")["runPolicy"].get("suspend") is True,
                timeout=40,
                interval=0.3,
                what="the engine to hold 'long' back",
            )
            assert c.ANNOTATION_HELD_SINCE in annotations("long")
            wait_for(lambda: not cluster.pods("long"), timeout=20, what="long's pods to go")
            cluster.wait_condition("long", ("Suspended", "True"))
            assert spec("long")["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
            assert "HeldBack" in cluster.events("long")
            assert len(cluster.pods("short")) == 2  # never held back: not preemptible

            for pod in cluster.pods("short"):
                cluster.set_phase(pod, "Succeeded")
            cluster.wait_condition("short", ("Succeeded", "True"))
            wait_for(
                lambda: spec("long")["runPolicy"].get("suspend") is False,
                timeout=30,
                interval=0.3,
                what="the engine to resume 'long'",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{log_tail(engine_log)}") from None
        assert c.ANNOTATION_HELD_SINCE not in annotations("long")
        assert spec("long")["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
        wait_for(lambda: len(cluster.pods("long")) == 2, timeout=20, what="long's pods back")
        wait_for(
            lambda: ("Suspended", "False") in cluster.conditions("long"),
            timeout=20,
            what="long's Suspended condition cleared",
        )
        assert "Resumed" in cluster.events("long")
        state = annotations("long")[c.ANNOTATION_STATE]
        assert '"suspensions":1' in state
