"""A real Kueue manager (sigs.k8s.io/kueue, the version `testenv/kueuebin` pins) for tests.

Installed as Kueue's kustomize config would, with what a test cluster lacks replaced:

- its CRDs (`tests/data/kueue/`, upstream's `config/components/crd/bases`) with the conversion
  webhook stanza upstream's `crd/patches` add, and its webhook configurations (upstream's
  `config/components/webhook/manifests.yaml`, only the PyTorchJob and `kueue.x-k8s.io` entries);
- its internal certificate management on, as in a default install: Kueue writes a CA and a
  serving certificate into the Secret `kueue-webhook-server-cert` and injects the CA into the
  webhook configurations and the CRDs; the kubelet's part, the Secret's files in `certDir`, is
  done here. (With it off, v0.19.2 reads a metrics certificate from a fixed path under `/etc`.);
- the webhook Service `kueue-system/kueue-webhook-service` is `type: ExternalName` with
  `externalName: localhost`: kube-apiserver resolves it to localhost and the Service port, where
  the manager serves its webhooks (127.0.0.1, a free port), and verifies the certificate against
  `kueue-webhook-service.kueue-system.svc`, the name Kueue issued it for;
- the only integration is `kubeflow.org/pytorchjob`, or (`own_integration`) none built in and
  PyTorchJob listed in `integrations.externalFrameworks`, for the operator's own integration;
  the visibility API server is off; the manager runs with the admin kubeconfig (Kueue's own
  RBAC is not exercised).
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import yaml

from autoscaler.clients.kube import Kube, NotFoundError, Resource, api_client
from autoscaler.controller.kueue import EXTERNAL_FRAMEWORK
from tests.support.apply import RestMapper, apply
from tests.support.controlplane import REPO_ROOT, built
from tests.support.processes import (
    free_port,
    http_get,
    log_tail,
    start_process,
    stop_process,
    wait_until,
)

JSON = dict[str, Any]
DATA = REPO_ROOT / "tests" / "data" / "kueue"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
NAMESPACE = "kueue-system"  # Kueue's default `namespace`
SERVICE = "kueue-webhook-service"  # its default `internalCertManagement.webhookServiceName`
SECRET = "kueue-webhook-server-cert"  # its default `webhookSecretName`: must exist, may be empty
WEBHOOK_CONFIGURATIONS = {  # the names Kueue injects its CA into (`pkg/util/cert`)
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
# The CRDs whose versions Kueue converts (`pkg/util/cert`): each gets upstream's conversion patch.
CONVERTED = {"localqueues", "clusterqueues", "workloads", "cohorts", "multikueueclusters"}
WORKLOADS = Resource(GROUP, VERSION, "workloads")
SECRETS = Resource("", "v1", "secrets")
CERTIFICATE_FILES = ("ca.crt", "tls.crt", "tls.key")  # the keys of the Secret Kueue fills


def kueue_binary(*, build_timeout: float = 3600.0) -> Path:
    """The Kueue manager binary (testenv/build-kueue.sh; AUTOSCALER_KUEUE_BIN overrides it)."""
    return built("build-kueue.sh", override="AUTOSCALER_KUEUE_BIN", build_timeout=build_timeout)


class KueueManager:
    """Kueue's CRDs, webhooks and manager process, installed into the test API server."""

    def __init__(
        self,
        *,
        binary: Path,
        kube: Kube,
        kubeconfig: Path,
        workdir: Path,
        own_integration: bool = False,
    ) -> None:
        self.binary, self.kube, self.kubeconfig, self.workdir = binary, kube, kubeconfig, workdir
        self.own_integration = own_integration
        self.mapper = RestMapper(kube)
        self.webhook_port, self.health_port = free_port(), free_port()
        self.log = workdir / "kueue.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout: float = 120.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._install()
        config = self.workdir / "config.yaml"
        config.write_text(yaml.safe_dump(self.configuration()))
        argv = [str(self.binary), f"--config={config}", f"--kubeconfig={self.kubeconfig}"]
        self._proc = start_process(argv, log_path=self.log)
        wait_until(
            self._mount_certificate,
            timeout=timeout,
            interval=0.2,
            what=f"Kueue to write its certificate into the Secret {SECRET}",
            log_path=self.log,
            proc=self._proc,
        )
        wait_until(
            self.ready,
            timeout=timeout,
            interval=0.2,
            what="Kueue's /readyz (certificates injected, webhook server listening)",
            log_path=self.log,
            proc=self._proc,
        )

    def _mount_certificate(self) -> bool:
        """What the kubelet does for Kueue's Deployment, which mounts the Secret at `certDir`:
        Kueue waits for the files before it serves (and before it reports ready)."""
        secret = self.kube.request("GET", SECRETS.path(NAMESPACE, SECRET))
        data = secret.get("data") or {}
        if not all(data.get(name) for name in CERTIFICATE_FILES):
            return False
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        for name in CERTIFICATE_FILES:
            (certs / name).write_bytes(base64.b64decode(data[name]))
        return True

    def stop(self) -> None:
        """Webhook configurations first: with failurePolicy Fail they would reject every later
        PyTorchJob of the session once nothing serves them."""
        for kind, name in WEBHOOK_CONFIGURATIONS.items():
            plural = f"{kind.lower()}s"
            with suppress(NotFoundError):
                self.kube.request(
                    "DELETE",
                    Resource("admissionregistration.k8s.io", "v1", plural).path(None, name),
                )
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    def ready(self) -> bool:
        try:
            return http_get(f"http://127.0.0.1:{self.health_port}/readyz")[0] == 200
        except OSError:
            return False

    def log_tail(self, *, lines: int = 60) -> str:
        return log_tail(self.log, lines=lines)

    def configuration(self) -> JSON:
        """Kueue's `Configuration` (config.kueue.x-k8s.io/v1beta2) for one test manager."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},  # off: nothing here scrapes Kueue
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": str(self.workdir / "certs"),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
            "integrations": self.integrations(),
            "featureGates": {"VisibilityOnDemand": False},
        }

    def integrations(self) -> JSON:
        """Kueue's built-in PyTorchJob integration, or (own) PyTorchJob as an external framework
        beside the one built-in integration Kueue needs listed (batch/v1 Job: no Job runs here)."""
        if self.own_integration:
            return {"frameworks": ["batch/job"], "externalFrameworks": [EXTERNAL_FRAMEWORK]}
        return {"frameworks": ["kubeflow.org/pytorchjob"]}

    # -- installation -------------------------------------------------------------------------

    def _install(self) -> None:
        for obj in (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": NAMESPACE},
            },
            self._webhook_service(),
            *(self._crd(path) for path in sorted(DATA.glob(f"{GROUP}_*.yaml"))),
            *self._webhook_configurations(),
        ):
            apply(self.mapper, obj)
        for path in sorted(DATA.glob(f"{GROUP}_*.yaml")):
            self._wait_established(yaml.safe_load(path.read_text())["metadata"]["name"])

    def _webhook_service(self) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": self.webhook_port}],
            },
        }

    def _service_reference(self, path: str) -> JSON:
        return {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": self.webhook_port}

    def _crd(self, path: Path) -> JSON:
        crd: JSON = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": self._service_reference("/convert")},
                    "conversionReviewVersions": ["v1"],
                },
            }
        return crd

    def _webhook_configurations(self) -> list[JSON]:
        configurations = []
        for document in yaml.safe_load_all((DATA / "webhook-manifests.yaml").read_text()):
            webhooks = [
                hook
                for hook in document["webhooks"]
                if _served_here(hook, pytorchjobs=not self.own_integration)
            ]
            for hook in webhooks:
                hook["clientConfig"] = {
                    "service": self._service_reference(hook["clientConfig"]["service"]["path"])
                }
            document["metadata"] = {"name": WEBHOOK_CONFIGURATIONS[document["kind"]]}
            configurations.append({**document, "webhooks": webhooks})
        return configurations

    def _wait_established(self, name: str) -> None:
        path = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions").path(None, name)

        def established() -> bool:
            conditions = (self.kube.request("GET", path).get("status") or {}).get("conditions")
            return any(
                c["type"] == "Established" and c["status"] == "True" for c in conditions or []
            )

        wait_until(established, timeout=60, interval=0.2, what=f"the CRD {name} to be Established")


def _served_here(webhook: JSON, *, pytorchjobs: bool) -> bool:
    """Kueue's own kinds, and PyTorchJobs while its integration is on: the webhooks of
    integrations not enabled here (and of pods, deployments, ...) would only add failure
    points, and those of one turned off are not served."""
    rules = webhook.get("rules") or []
    return bool(rules) and all(
        rule["apiGroups"] == [GROUP]
        or (
            pytorchjobs
            and rule["apiGroups"] == ["kubeflow.org"]
            and rule["resources"] == ["pytorchjobs"]
        )
        for rule in rules
    )


def workload_of(kube: Kube, namespace: str, job_uid: str) -> JSON | None:
    """The Workload Kueue created for a job (its controller owner reference is the job)."""
    try:
        items = kube.request("GET", WORKLOADS.path(namespace, None)).get("items") or []
    except NotFoundError:
        return None
    for workload in items:
        refs = workload["metadata"].get("ownerReferences") or []
        if any(ref.get("uid") == job_uid and ref.get("controller") for ref in refs):
            return dict(workload)
    return None


@contextmanager
def running_kueue(
    kubeconfig: Path, workdir: Path, *, own_integration: bool = False
) -> Iterator[KueueManager]:
    """Kueue's manager on the cluster of `kubeconfig` (its admin's), stopped at the end."""
    kube = Kube(api_client(kubeconfig=str(kubeconfig)))
    manager = KueueManager(
        binary=kueue_binary(),
        kube=kube,
        kubeconfig=kubeconfig,
        workdir=workdir,
        own_integration=own_integration,
    )
    try:
        manager.start()
        yield manager
    finally:
        manager.stop()
        kube.close()
