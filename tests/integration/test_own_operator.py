"""Upstream's unlabelled object counters, against a real API server.

Each case runs an operator of its own on this module's control plane: the session operator's
counters (process-wide, without labels, as upstream's) move with every other test's jobs.
"""

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.integration.test_gang import control_plane, namespace, operator
from tests.integration.test_operator import (
    elastic_job,
    names,
    object_counters,
    passes_later,
)
from tests.support.controlplane import ControlPlane
from tests.support.polling import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    with control_plane(tmp_path_factory.mktemp("own-operator-plane")) as found:
        yield found


def test_upstream_object_counters_count_pods_and_services(
    plane: tuple[ControlPlane, client.ApiClient],
) -> None:
    """A failed worker is counted once while resyncs keep seeing the job; its deletion is
    counted when the watch shows it; its replacement is one more created pod."""
    control, api = plane
    with operator(control) as running, namespace(api, "counters") as cluster:
        job = elastic_job("counted", replicas=2)
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
        cluster.start_running(job)
        cluster.set_phase("counted-worker-1", "Failed")
        wait_for(lambda: object_counters(running)["created_pods"] == 3, what="the replacement pod")
        passes_later(running, 4)
        assert object_counters(running) == {
            "created_pods": 3,
            "deleted_pods": 1,
            "failed_pods": 1,
            "succeeded_service_creation": 2,
            "failed_service_creation": 0,
            "created_pod_groups": 0,
            "deleted_pod_groups": 0,
        }
        assert set(cluster.pods("counted")) == names("counted", "worker", 2)
