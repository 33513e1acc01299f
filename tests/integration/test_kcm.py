"""The operator with the real kube-controller-manager: garbage collection through owner
references, and the real HPA controller scaling an elastic job through its scale subresource.

Metrics come from the fake external-metrics server (tests/support/external_metrics.py) behind
the aggregator. There is no kubelet: pod phases are set by the test.
"""

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.controller.runner import Operator
from tests.integration.test_operator import CPU_METRIC, Cluster, elastic_job, names
from tests.support.controlplane import ControlPlane
from tests.support.external_metrics import GROUP, VERSION, ExternalMetricsServer
from tests.support.polling import wait_for

JSON = dict[str, Any]
# Normally ~1 s; generous because kube-controller-manager would pick up a CRD created after it
# started only at its 30 s discovery resync (the controller_manager fixture prevents that).
KCM_TIMEOUT = 90.0


@pytest.fixture
def cluster(
    operator: Operator,
    controller_manager: ControlPlane,  # started after the CRD (tests/integration/conftest.py)
    kube_api: client.ApiClient,
    namespace: str,
) -> Cluster:
    return Cluster(kube_api, namespace)


def external_metric(name: str, average_value: str) -> JSON:
    return {
        "type": "External",
        "external": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": average_value},
        },
    }


def worker_replicas(cluster: Cluster, job: str) -> int:
    replicas: int = cluster.job(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return replicas


def hpa_conditions(cluster: Cluster, name: str) -> dict[str, tuple[str, str]]:
    hpa = cluster.hpas().get(name) or {}
    return {
        cond["type"]: (cond["status"], cond.get("reason", ""))
        for cond in (hpa.get("status") or {}).get("conditions") or []
    }


def timed(predicate: Callable[[], Any], *, what: str) -> float:
    start = time.monotonic()
    wait_for(predicate, timeout=KCM_TIMEOUT, what=what)
    return time.monotonic() - start


def test_aggregator_serves_the_fake_external_metrics(
    kube_api: client.ApiClient, external_metrics: ExternalMetricsServer
) -> None:
    external_metrics.set("probe_metric", 1.5)
    url = f"{kube_api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/default/probe_metric"
    headers = {"Authorization": kube_api.configuration.auth_settings()["BearerToken"]["value"]}
    response = kube_api.call_api("GET", url, header_params=headers)
    response.read()
    assert response.status == 200
    body = json.loads(response.data)
    assert body["items"][0]["metricName"] == "probe_metric"
    assert body["items"][0]["value"] == "1500m"
    external_metrics.clear("probe_metric")


def test_garbage_collector_deletes_what_the_job_owned(cluster: Cluster, operator: Operator) -> None:
    cluster.create(elastic_job("owned", replicas=2, metrics=[CPU_METRIC]))
    cluster.wait_pods("owned", names("owned", "worker", 2))
    wait_for(lambda: len(cluster.services("owned")) == 2, what="the services")
    wait_for(lambda: "owned" in cluster.hpas(), what="the HPA")

    # The operator keeps running: it must leave the cascade to the garbage collector, even
    # when the collector removes worker-0 before the operator's watch reports the job gone.
    restarts_before = cluster.events("owned").count("PyTorchJobRestarting")
    cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, cluster.ns, c.PLURAL, "owned")

    def all_gone() -> bool:
        return not (cluster.pods("owned") or cluster.services("owned") or cluster.hpas())

    seconds = timed(all_gone, what="the garbage collector to delete pods, services and HPA")
    print(f"garbage collected in {seconds:.1f}s")
    wait_for(
        lambda: operator.jobs.get((cluster.ns, "owned")) is None,
        what="the operator to forget the job",
    )
    assert cluster.events("owned").count("PyTorchJobRestarting") == restarts_before


def test_hpa_scales_the_job_and_is_clamped_to_min_and_max(
    cluster: Cluster, external_metrics: ExternalMetricsServer
) -> None:
    """The HPA reads the job's scale subresource: `spec.replicas` is Worker.replicas, the
    selector is the one the operator writes to `.status.replicaStatuses.Worker.selector`
    (without it: "selector is required"), and `status.replicas` is the active worker count.

    An External metric with an AverageValue target needs no pod metrics, only that count:
    replicas = ceil(value / averageValue), and currentMetrics reports value / status.replicas.
    Scaling itself works with no Running pods, but then status.replicas is 0 and 1.36 reports
    an averageValue of -9223372036854775808m (a division by zero), so the test plays kubelet
    and sets the pods Running, as a real cluster would.
    """
    metric = f"queue_depth_{cluster.ns.replace('-', '_')}"
    external_metrics.set(metric, 100)  # 100 / averageValue 10 -> 10 replicas, above max 3
    cluster.create(
        elastic_job("hpa", replicas=1, low=1, high=3, metrics=[external_metric(metric, "10")])
    )
    cluster.wait_pods("hpa", {"hpa-worker-0"})
    cluster.run_all("hpa")
    worker_0 = cluster.pods("hpa")["hpa-worker-0"]["metadata"]["uid"]

    up = timed(lambda: worker_replicas(cluster, "hpa") == 3, what="the HPA to scale up to 3")
    cluster.wait_pods("hpa", names("hpa", "worker", 3))
    cluster.run_all("hpa")

    def clamped_at_max() -> bool:
        status = cluster.hpas()["hpa"].get("status") or {}
        current = (status.get("currentMetrics") or [{}])[0]
        return (
            status.get("currentReplicas") == 3
            and status.get("desiredReplicas") == 3
            and current.get("external", {}).get("current") == {"averageValue": "33334m"}
            and hpa_conditions(cluster, "hpa").get("ScalingLimited") == ("True", "TooManyReplicas")
        )

    wait_for(clamped_at_max, what="the HPA to report 3 of 10 wanted (100 over 3 active)")
    at_max = hpa_conditions(cluster, "hpa")
    # SucceededRescale right after the write; ReadyForNewScale on the next syncs, as 3 == 3.
    assert at_max["AbleToScale"] in {("True", "SucceededRescale"), ("True", "ReadyForNewScale")}
    assert at_max["ScalingActive"] == ("True", "ValidMetricFound")
    assert worker_replicas(cluster, "hpa") == 3  # never beyond maxReplicas

    external_metrics.set(metric, 0)  # 0 / 10 -> 0 replicas, below min 1
    down = timed(lambda: worker_replicas(cluster, "hpa") == 1, what="the HPA to scale down to 1")
    pods = cluster.wait_pods("hpa", {"hpa-worker-0"})
    assert pods["hpa-worker-0"]["metadata"]["uid"] == worker_0  # worker-0 kept
    wait_for(
        lambda: hpa_conditions(cluster, "hpa").get("ScalingLimited") == ("True", "TooFewReplicas"),
        what="ScalingLimited/TooFewReplicas",
    )
    assert cluster.hpas()["hpa"]["status"]["desiredReplicas"] == 1
    assert hpa_conditions(cluster, "hpa")["ScalingActive"] == ("True", "ValidMetricFound")
    assert worker_replicas(cluster, "hpa") == 1  # never below minReplicas
    assert cluster.ns in external_metrics.namespaces  # read in the HPA's namespace
    print(f"HPA scaled up in {up:.1f}s, down in {down:.1f}s; at max {at_max}")
