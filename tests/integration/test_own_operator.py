"""The operator's pod flags and upstream's unlabelled object counters, against a real API server.

Each case runs an operator of its own on this module's control plane: the session's operator
runs with upstream's default flags and would build the same jobs' pods first, and its counters
(process-wide, without labels, as upstream's) move with every other test's jobs.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from autoscaler.cli import parser
from autoscaler.cli.pod_settings import pod_settings
from tests.integration.test_gang import control_plane, namespace, operator
from tests.integration.test_operator import (
    elastic_job,
    envtest_job,
    names,
    object_counters,
    passes_later,
)
from tests.support.controlplane import ControlPlane
from tests.support.polling import wait_for

# A template of upstream's format using all three fields it may use.
INIT_TEMPLATE = """\
- name: wait-for-master
  image: {{.InitContainerImage}}
  command: ['sh', '-c', 'for i in $(seq {{.MaxTries}}); do nslookup {{.MasterAddr}} && exit 0; sleep 1; done; exit 1']
  resources:
    requests: {cpu: 10m, memory: 8Mi}
"""


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    with control_plane(tmp_path_factory.mktemp("own-operator-plane")) as found:
        yield found


def test_init_container_flags_reach_a_master_worker_jobs_pods(
    plane: tuple[ControlPlane, client.ApiClient], tmp_path: Path
) -> None:
    """`--pytorch-init-container-image`, `-max-tries` and `-template-file`, read as `autoscaler
    operator` reads them, shape the Worker pods the API server stores; the Master gets none."""
    template = tmp_path / "init.yaml"
    template.write_text(INIT_TEMPLATE)
    args = parser().parse_args(
        [
            "operator",
            "--pytorch-init-container-image=mirror.local/busybox:1.36",
            "--pytorch-init-container-max-tries=7",
            f"--pytorch-init-container-template-file={template}",
        ]
    )
    settings = pod_settings(args)
    control, api = plane
    with operator(control, pods=settings), namespace(api, "init-flags") as cluster:
        cluster.create(envtest_job("flags", workers=2))
        pods = cluster.wait_pods("flags", {"flags-master-0", *names("flags", "worker", 2)})
        assert pods["flags-master-0"]["spec"].get("initContainers") is None
        command = "for i in $(seq 7); do nslookup flags-master-0 && exit 0; sleep 1; done; exit 1"
        for name in names("flags", "worker", 2):
            (init,) = pods[name]["spec"]["initContainers"]
            assert (init["name"], init["image"], init["command"]) == (
                "wait-for-master",
                "mirror.local/busybox:1.36",
                ["sh", "-c", command],
            )
            assert init["resources"] == {"requests": {"cpu": "10m", "memory": "8Mi"}}


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
