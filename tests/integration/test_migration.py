"""docs/migrating.md, step by step, on a control plane that runs upstream v1.9.4 as its
manifests install it (its CRD, its validating webhook configuration, its manager with the
PyTorchJob scheme): a job started under upstream carries on under this operator with the pods
upstream made; upstream's webhook configuration, left behind, refuses every job until the guide's
step removes it."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from autoscaler.clients.kube import Kube, api_client
from tests.integration.test_gang import bind_operator_role, install_crd, namespace, operator
from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support import apply as kubectl
from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.crd import CRD_FILE
from tests.support.polling import wait_for
from tests.support.upstream_operator import (
    MANIFESTS,
    WEBHOOK_CONFIGURATION,
    WEBHOOKS,
    UpstreamOperator,
    training_operator_binary,
)

JSON = dict[str, Any]
PYTORCHJOB_WEBHOOK = "validator.pytorchjob.training-operator.kubeflow.org"


@pytest.fixture
def upstream_cluster(tmp_path: Path) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane with upstream's CRDs for PyTorchJob and TFJob (not the project's)."""
    plane = ControlPlane(bin_dir=binaries_dir())
    plane.start(tmp_path / "plane")
    try:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))  # type: ignore[no-untyped-call]
        with api:
            for kind in ("pytorchjobs", "tfjobs"):
                install_crd(api, MANIFESTS / f"kubeflow.org_{kind}.yaml")
            bind_operator_role(api)
            yield plane, api
    finally:
        plane.stop()


def refusal(cluster: Cluster, job: dict[str, object]) -> str:
    try:
        cluster.create(job)
    except client.ApiException as error:
        return str(error.body)
    return ""


def upstream_manager(
    plane: ControlPlane, kube: Kube, workdir: Path, *schemes: str
) -> UpstreamOperator:
    manager = UpstreamOperator(
        binary=training_operator_binary(),
        kube=kube,
        kubeconfig=plane.kubeconfig_path,
        workdir=workdir,
        namespace="kubeflow",
        schemes=schemes,
    )
    manager.start()
    return manager


def tfjob(name: str) -> JSON:
    container = {"name": "tensorflow", "image": "docker.io/kubeflow/tf-mnist-with-summaries:latest"}
    worker = {"replicas": 1, "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {"Worker": worker}},
    }


def finish_under_this_operator(plane: ControlPlane, kube: Kube, cluster: Cluster) -> None:
    """Steps 3 and 4: the project's CRD over upstream's (server-side apply: stored jobs stay),
    then this operator. The job upstream started keeps upstream's pods; the new one runs."""
    made_by_upstream = {
        name: pod["metadata"]["uid"] for name, pod in cluster.pods("before").items()
    }
    kubectl.apply(kubectl.RestMapper(kube), yaml.safe_load(CRD_FILE.read_text()))
    with operator(plane):
        cluster.wait_pods("after", names("after", "worker", 1))
        cluster.wait_condition("before", ("Running", "True"))
        kept = {name: pod["metadata"]["uid"] for name, pod in cluster.pods("before").items()}
        assert kept == made_by_upstream
        cluster.set_phase("before-worker-0", "Succeeded")
        cluster.wait_condition("before", ("Succeeded", "True"))


def start_under_upstream(cluster: Cluster) -> None:
    cluster.create(elastic_job("before", replicas=2))
    cluster.wait_pods("before", names("before", "worker", 2))
    cluster.run_all("before")
    cluster.wait_condition("before", ("Running", "True"))


def assert_refused_by_the_pytorchjob_webhook(cluster: Cluster) -> None:
    refused = refusal(cluster, elastic_job("after", replicas=1))
    assert "failed calling webhook" in refused, refused
    assert PYTORCHJOB_WEBHOOK in refused


def test_replacing_upstream(
    upstream_cluster: tuple[ControlPlane, client.ApiClient], tmp_path: Path
) -> None:
    plane, api = upstream_cluster
    kube = Kube(api_client(kubeconfig=str(plane.kubeconfig_path)))
    manager = upstream_manager(plane, kube, tmp_path, "pytorchjob")
    with namespace(api, "team-a") as cluster:
        start_under_upstream(cluster)
        # Step 1: remove upstream's Deployment. Its webhook configuration stays behind and,
        # with nothing serving it and failurePolicy Fail, refuses every PyTorchJob.
        manager.stop(keep_webhook=True)
        assert_refused_by_the_pytorchjob_webhook(cluster)
        # Step 2: delete upstream's validating webhook configuration.
        kube.request("DELETE", WEBHOOKS.path(None, WEBHOOK_CONFIGURATION))
        wait_for(lambda: not refusal(cluster, elastic_job("after", replicas=1)), what="creates")
        finish_under_this_operator(plane, kube, cluster)
    kube.close()


def test_keeping_upstream_for_the_other_kinds(
    upstream_cluster: tuple[ControlPlane, client.ApiClient], tmp_path: Path
) -> None:
    plane, api = upstream_cluster
    kube = Kube(api_client(kubeconfig=str(plane.kubeconfig_path)))
    manager = upstream_manager(plane, kube, tmp_path / "all", "pytorchjob", "tfjob")
    try:
        with namespace(api, "team-b") as cluster:
            start_under_upstream(cluster)
            # Step 1: upstream restarted with --enable-scheme for the kinds it keeps. Its
            # webhook configuration still has the PyTorchJob entry, whose path it no longer serves.
            manager.stop(keep_webhook=True)
            manager = upstream_manager(plane, kube, tmp_path / "tf", "tfjob")
            assert_refused_by_the_pytorchjob_webhook(cluster)
            # Step 2: the PyTorchJob entry removed from it, by index.
            hooks = kube.request("GET", WEBHOOKS.path(None, WEBHOOK_CONFIGURATION))["webhooks"]
            index = [h["name"] for h in hooks].index(PYTORCHJOB_WEBHOOK)
            patch = [{"op": "remove", "path": f"/webhooks/{index}"}]
            kube.request(
                "PATCH",
                WEBHOOKS.path(None, WEBHOOK_CONFIGURATION),
                body=patch,
                content_type="application/json-patch+json",
            )
            wait_for(lambda: not refusal(cluster, elastic_job("after", replicas=1)), what="creates")
            # Upstream still validates and runs TFJobs.
            bad = tfjob("bad")
            bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = (
                "x"
            )
            tfjobs = client.CustomObjectsApi(api)
            with pytest.raises(client.ApiException, match="tensorflow"):
                tfjobs.create_namespaced_custom_object(
                    "kubeflow.org", "v1", "team-b", "tfjobs", bad
                )
            tfjobs.create_namespaced_custom_object(
                "kubeflow.org", "v1", "team-b", "tfjobs", tfjob("tf")
            )
            wait_for(lambda: cluster.pods("tf"), what="upstream to create the TFJob's pod")
            finish_under_this_operator(plane, kube, cluster)
            assert list(cluster.pods("tf")) == ["tf-worker-0"]  # this operator left it alone
    finally:
        manager.stop()
        kube.close()
