"""Orphans on the real API server, as upstream's `ClaimPods` and `ClaimServices` treat them: a
pod and a service matching a job's selector without a controller are adopted (not created again);
a pod another controller owns is left alone; the job's own pod relabelled away is released."""

from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from tests.integration.test_operator import Cluster, elastic_job
from tests.support.polling import wait_for

JSON = dict[str, Any]
CONTAINER = {"name": "pytorch", "image": "docker.io/kubeflow/pytorch-elastic-example-echo:latest"}


def labels(job: str, index: int) -> dict[str, str]:
    return {
        c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME,
        c.LABEL_JOB_NAME: job,
        c.LABEL_REPLICA_TYPE: "worker",
        c.LABEL_REPLICA_INDEX: str(index),
    }


def orphan_pod(name: str, labels: dict[str, str], owners: list[JSON] | None = None) -> JSON:
    metadata = {"name": name, "labels": labels, "ownerReferences": owners or []}
    return {"metadata": metadata, "spec": {"containers": [CONTAINER]}}


def controller_of(obj: JSON) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r["uid"] for r in refs if r.get("controller")), None)


@pytest.mark.usefixtures("operator")
def test_orphans_are_adopted_strangers_left_alone_and_relabelled_pods_released(
    kube_api: client.ApiClient, namespace: str
) -> None:
    cluster = Cluster(kube_api, namespace)
    core, ns = client.CoreV1Api(kube_api), namespace
    job = "claims"
    core.create_namespaced_pod(ns, orphan_pod(f"{job}-worker-0", labels(job, 0)))
    service = {
        "metadata": {"name": f"{job}-worker-0", "labels": labels(job, 0)},
        "spec": {"clusterIP": "None", "selector": labels(job, 0)},
    }
    core.create_namespaced_service(ns, service)
    holder = core.create_namespaced_config_map(ns, {"metadata": {"name": "holder"}})
    stranger_owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "holder",
        "uid": holder.metadata.uid,
        "controller": True,
    }
    core.create_namespaced_pod(ns, orphan_pod("stranger", labels(job, 7), [stranger_owner]))
    before = {name: pod["metadata"]["uid"] for name, pod in cluster.pods(job).items()}

    uid = cluster.create(elastic_job(job, replicas=2))["metadata"]["uid"]
    wait_for(
        lambda: controller_of(cluster.pods(job)[f"{job}-worker-0"]) == uid,
        what="the orphan pod to be adopted",
    )
    wait_for(
        lambda: controller_of(cluster.services(job)[f"{job}-worker-0"]) == uid,
        what="the orphan service to be adopted",
    )
    wait_for(lambda: f"{job}-worker-1" in cluster.pods(job), what="the missing worker created")
    pods = cluster.pods(job)
    assert pods[f"{job}-worker-0"]["metadata"]["uid"] == before[f"{job}-worker-0"]  # kept
    [ref] = pods[f"{job}-worker-0"]["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["blockOwnerDeletion"]) == ("PyTorchJob", job, True)
    cluster.run_all(job)
    cluster.wait_condition(job, ("Running", "True"))
    # Another controller's pod with the job's labels: untouched, after the passes above.
    assert pods["stranger"]["metadata"]["ownerReferences"] == [stranger_owner]
    assert cluster.pods(job)["stranger"]["metadata"]["uid"] == before["stranger"]

    # The job's own pod relabelled to another job: released, its reference removed.
    moved = {"metadata": {"labels": {c.LABEL_JOB_NAME: "elsewhere"}}}
    core.patch_namespaced_pod(f"{job}-worker-1", ns, moved)

    def released() -> bool:
        pod = core.read_namespaced_pod(f"{job}-worker-1", ns)
        return not pod.metadata.owner_references

    # Scaled down only once released: an operator that had not yet seen the new label would
    # delete worker-1 as the excess pod of its cached view.
    wait_for(released, what="the relabelled pod to be released")
    cluster.scale(job, 1)  # so worker-1 is not wanted again under the taken name
    assert controller_of(cluster.pods(job)[f"{job}-worker-0"]) == uid  # the rest still its own
