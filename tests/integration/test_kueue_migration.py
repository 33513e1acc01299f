"""From Kueue's built-in PyTorchJob integration to the operator's (`--kueue`), with a job running:
stop Kueue, turn the operator's integration on, start Kueue with PyTorchJob as an external
framework. The running job keeps its admitted Workload and is never stopped."""

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller import kueue as own
from autoscaler.controller.runner import Operator
from tests.integration.test_kueue import Queues, admitted, gpu_job, queue_objects
from tests.integration.test_operator import Cluster, passes_later
from tests.support.apply import RestMapper, apply
from tests.support.controlplane import ControlPlane
from tests.support.kueue import KueueManager, kueue_binary, workload_of
from tests.support.polling import wait_for
from tests.support.training import Kubelet, remove_jobs_and_pods


@pytest.fixture
def admin(control_plane: ControlPlane) -> Iterator[Kube]:
    kube = Kube(api_client(kubeconfig=str(control_plane.kubeconfig_path)))
    yield kube
    kube.close()


def manager(control_plane: ControlPlane, admin: Kube, workdir: Path, *, own_: bool) -> KueueManager:
    return KueueManager(
        binary=kueue_binary(),
        kube=admin,
        kubeconfig=control_plane.kubeconfig_path,
        workdir=workdir,
        own_integration=own_,
    )


@pytest.fixture
def cluster(kube_api: client.ApiClient, namespace: str) -> Cluster:
    return Cluster(kube_api, namespace)


def test_a_running_job_keeps_its_workload_when_the_operator_takes_over(
    control_plane: ControlPlane, cluster: Cluster, operator: Operator, admin: Kube, tmp_path: Path
) -> None:
    before = operator.config
    with ExitStack() as stack:
        stack.callback(setattr, operator, "config", before)
        stack.callback(remove_jobs_and_pods, cluster.api, cluster.ns)
        stack.enter_context(Kubelet(cluster.api, cluster.ns))
        builtin = manager(control_plane, admin, tmp_path / "builtin", own_=False)
        stack.callback(builtin.stop)
        builtin.start()
        queues = Queues(RestMapper(admin), queue_objects(cluster.ns, gpus=2))
        for obj in queues.objects:
            apply(queues.mapper, obj)
        created = cluster.create(gpu_job("kept", queue="team"))
        assert created["spec"]["runPolicy"]["suspend"] is True, "Kueue's webhook suspends it"
        uid = created["metadata"]["uid"]
        first = wait_for(
            lambda: (w := workload_of(admin, cluster.ns, uid)) is not None and admitted(w) and w,
            what="Kueue's own Workload admitted",
        )
        cluster.wait_pods("kept", {"kept-worker-0", "kept-worker-1"})
        assert own.FINALIZER in first["metadata"]["finalizers"]

        builtin.stop()
        operator.config = dataclasses.replace(before, kueue=True)
        operator.watch_kueue_if_served()
        taking_over = manager(control_plane, admin, tmp_path / "own", own_=True)
        stack.callback(taking_over.stop)
        taking_over.start()
        passes_later(operator, 5)

        kept = workload_of(admin, cluster.ns, uid)
        assert kept is not None
        assert kept["metadata"]["uid"] == first["metadata"]["uid"]
        assert admitted(kept)
        assert cluster.job("kept")["spec"]["runPolicy"]["suspend"] is False
        assert set(cluster.pods("kept")) == {"kept-worker-0", "kept-worker-1"}
        assert "Stopped" not in cluster.events("kept"), "stopped after the takeover"

        for pod in cluster.pods("kept"):
            cluster.set_phase(pod, "Succeeded")
        done = wait_for(
            lambda: (
                (w := workload_of(admin, cluster.ns, uid)) is not None
                and own.has(w, own.FINISHED)
                and own.FINALIZER not in (w["metadata"].get("finalizers") or [])
                and w
            ),
            what="the Workload finished by the operator, Kueue's finalizer off",
        )
        assert done["metadata"]["uid"] == first["metadata"]["uid"]
        cluster.jobs.delete_namespaced_custom_object(
            c.GROUP, c.VERSION, cluster.ns, c.PLURAL, "kept"
        )
        wait_for(lambda: workload_of(admin, cluster.ns, uid) is None, what="its Workload gone")
