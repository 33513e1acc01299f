"""docs/migrating.md, step by step, on a control plane that runs upstream v1.9.3 as its
manifests install it (its CRD, its validating webhook configuration, its manager with the
PyTorchJob scheme): a job started under upstream carries on under this operator with the pods
upstream made; upstream's webhook configuration, left behind, refuses every job until the guide's
step removes it."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from autoscaler.clients.kube import Kube, api_client
from tests.integration.conftest import CRD_FILE
from tests.integration.test_gang import bind_operator_role, install_crd, namespace, operator
from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support import apply as kubectl
from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.polling import wait_for
from tests.support.upstream_operator import (
    MANIFESTS,
    WEBHOOK_CONFIGURATION,
    UpstreamOperator,
    training_operator_binary,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def upstream_cluster(tmp_path: Path) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane with upstream's CRD (not the project's)."""
    plane = ControlPlane(bin_dir=binaries_dir())
    plane.start(tmp_path / "plane")
    try:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))  # type: ignore[no-untyped-call]
        with api:
            install_crd(api, MANIFESTS / "kubeflow.org_pytorchjobs.yaml")
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


def test_replacing_upstream(
    upstream_cluster: tuple[ControlPlane, client.ApiClient], tmp_path: Path
) -> None:
    plane, api = upstream_cluster
    kube = Kube(api_client(kubeconfig=str(plane.kubeconfig_path)))
    manager = UpstreamOperator(
        binary=training_operator_binary(),
        kube=kube,
        kubeconfig=plane.kubeconfig_path,
        workdir=tmp_path,
        namespace="kubeflow",
    )
    manager.start()
    with namespace(api, "team-a") as cluster:
        cluster.create(elastic_job("before", replicas=2))
        pods = cluster.wait_pods("before", names("before", "worker", 2))
        cluster.run_all("before")
        cluster.wait_condition("before", ("Running", "True"))
        made_by_upstream = {name: pod["metadata"]["uid"] for name, pod in pods.items()}

        # Step 1: remove upstream's Deployment. Its webhook configuration stays behind and,
        # with nothing serving it and failurePolicy Fail, refuses every PyTorchJob.
        manager.stop(keep_webhook=True)
        refused = refusal(cluster, elastic_job("after", replicas=1))
        assert "failed calling webhook" in refused, refused
        assert "validator.pytorchjob.training-operator.kubeflow.org" in refused

        # Step 2: delete upstream's validating webhook configuration.
        path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{WEBHOOK_CONFIGURATION}"
        kube.request("DELETE", path)
        wait_for(lambda: not refusal(cluster, elastic_job("after", replicas=1)), what="creates")

        # Step 3: the project's CRD over upstream's (server-side apply): stored jobs stay.
        kubectl.apply(kubectl.RestMapper(kube), yaml.safe_load(CRD_FILE.read_text()))

        # Step 4: this operator. The job upstream started keeps upstream's pods; the new one runs.
        with operator(plane):
            cluster.wait_pods("after", names("after", "worker", 1))
            cluster.wait_condition("before", ("Running", "True"))
            kept = {name: pod["metadata"]["uid"] for name, pod in cluster.pods("before").items()}
            assert kept == made_by_upstream
            cluster.set_phase("before-worker-0", "Succeeded")
            cluster.wait_condition("before", ("Succeeded", "True"))
    kube.close()
