"""Upstream's operator, the Kubeflow training operator's manager (kubeflow/training-operator, the
version `testenv/trainingoperatorbin` pins), run against a test control plane with only the
PyTorchJob scheme enabled.

Installed as its `manifests/base` would install it (vendored in tests/fixtures/upstream), with
what a test cluster lacks replaced:

- its validating webhook configuration (`webhook/manifests.yaml` with `patch.yaml`'s names),
  every kind's entry, as upstream installs it: the manager's certificate rotator writes a CA and a serving certificate
  into the Secret `training-operator-webhook-cert` and injects the CA there; the kubelet's part,
  the Secret's files in the directory the manager reads them from, is done here;
- its webhook Service `training-operator` is `type: ExternalName` with `externalName: localhost`,
  on the port the manager serves its webhook (127.0.0.1 reaches it), so kube-apiserver calls it
  and verifies the certificate against `training-operator.<namespace>.svc`;
- it runs with the admin kubeconfig, its metrics and probes on free ports.

The manager reads its serving certificate from a fixed directory (`CERT_DIR`), so one runs on a
machine at a time: a manager holds `CERT_LOCK` from its start to its stop, and a test process
(pytest-xdist runs two) that wants another waits for it.
"""

from __future__ import annotations

import base64
import copy
import fcntl
import shutil
import subprocess
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import IO, Any

import yaml

from autoscaler.clients.kube import Kube, NotFoundError, Resource
from tests.support.apply import RestMapper, apply
from tests.support.controlplane import built
from tests.support.jobs import UPSTREAM
from tests.support.processes import (
    free_port,
    http_get,
    log_tail,
    start_process,
    stop_process,
    wait_until,
)

JSON = dict[str, Any]
MANIFESTS = UPSTREAM / "training-operator-v1.9.4"
SECRET = "training-operator-webhook-cert"  # its --webhook-secret-name default
SERVICE = "training-operator"  # its --webhook-service-name default
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"  # patch.yaml's name
# Upstream's fixed directory (`pkg/cert`), where its webhook server also reads them (TMPDIR unset).
CERT_DIR = Path("/tmp") / "k8s-webhook-server" / "serving-certs"
CERT_LOCK = CERT_DIR.parent.with_suffix(".lock")
CERTIFICATE_FILES = ("ca.crt", "tls.crt", "tls.key")
SECRETS = Resource("", "v1", "secrets")
WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")


def training_operator_binary(*, build_timeout: float = 3600.0) -> Path:
    """testenv/build-training-operator.sh's binary (AUTOSCALER_TRAINING_OPERATOR_BIN overrides)."""
    return built(
        "build-training-operator.sh",
        override="AUTOSCALER_TRAINING_OPERATOR_BIN",
        build_timeout=build_timeout,
    )


class UpstreamOperator:
    def __init__(
        self,
        *,
        binary: Path,
        kube: Kube,
        kubeconfig: Path,
        workdir: Path,
        namespace: str,
        schemes: tuple[str, ...] = ("pytorchjob",),
        flags: tuple[str, ...] = (),
    ) -> None:
        """`namespace`: where the manager's Secret and Service live (its MY_POD_NAMESPACE);
        `schemes`: its `--enable-scheme`s (each kind's CRD must be installed); `flags`: more of
        its flags (`--controller-threads=4`, `--namespace=x`)."""
        self.binary, self.kube, self.kubeconfig, self.schemes = binary, kube, kubeconfig, schemes
        self.flags = flags
        self.workdir, self.namespace = workdir, namespace
        self.webhook_port, self.metrics_port, self.probe_port = (
            free_port(),
            free_port(),
            free_port(),
        )
        self.log = workdir / "training-operator.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock: IO[bytes] | None = None

    def start(self, *, timeout: float = 120.0) -> None:
        self._lock = CERT_LOCK.open("ab")
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # released by stop(), or when this process ends
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        mapper = RestMapper(self.kube)
        for obj in (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": self._named(SECRET)},
            self._webhook_service(),
            self._webhook_configuration(),
        ):
            apply(mapper, obj)
        shutil.rmtree(CERT_DIR, ignore_errors=True)  # an earlier run's: not this CA's
        argv = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            *(f"--enable-scheme={scheme}" for scheme in self.schemes),
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            f"--webhook-server-port={self.webhook_port}",
            *self.flags,
        ]
        env = {"MY_POD_NAMESPACE": self.namespace, "PATH": "/usr/bin:/bin"}
        self._proc = start_process(argv, log_path=self.log, env=env)
        for check, what in (
            (self._mount_certificate, f"the manager to write its certificate into {SECRET}"),
            (self.ready, "the manager's /readyz (certificates ready, webhook serving)"),
            (
                partial(self._serving, self._validator_paths()),
                "the manager's validators for its schemes",
            ),
        ):
            wait_until(
                check, timeout=timeout, interval=0.2, what=what, log_path=self.log, proc=self._proc
            )

    def stop(self, *, keep_webhook: bool = False) -> None:
        """The webhook configuration first: with failurePolicy Fail it would reject every later
        PyTorchJob of the control plane once nothing serves it (`keep_webhook`: left, as by
        deleting upstream's Deployment alone)."""
        if not keep_webhook:
            with suppress(NotFoundError):
                self.kube.request("DELETE", WEBHOOKS.path(None, WEBHOOK_CONFIGURATION))
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None
        if self._lock is not None:
            self._lock.close()  # closing the file releases its lock
            self._lock = None

    def ready(self) -> bool:
        try:
            return http_get(f"http://127.0.0.1:{self.probe_port}/readyz")[0] == 200
        except OSError:
            return False

    def _serving(self, paths: list[str]) -> bool:
        """Whether its webhook server answers every path: its /readyz passes before it registers
        the validators (`setupControllers` in its cmd/training-operator.v1/main.go does that after
        the certificates, in a goroutine), and an unregistered path answers 404, which
        kube-apiserver reports as a failed webhook call."""
        try:
            return all(
                http_get(f"https://127.0.0.1:{self.webhook_port}{path}")[0] != 404 for path in paths
            )
        except OSError:
            return False

    def _validator_paths(self) -> list[str]:
        hooks = self._webhook_configuration()["webhooks"]
        return [
            hook["clientConfig"]["service"]["path"]
            for hook in hooks
            if any(f".{scheme}." in hook["name"] for scheme in self.schemes)
        ]

    def metrics(self) -> str:
        return http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")[1]

    def log_tail(self, *, lines: int = 60) -> str:
        return log_tail(self.log, lines=lines)

    def _named(self, name: str) -> JSON:
        return {"name": name, "namespace": self.namespace}

    def _mount_certificate(self) -> bool:
        """What the kubelet does for upstream's Deployment, which mounts the Secret there."""
        data = self.kube.request("GET", SECRETS.path(self.namespace, SECRET)).get("data") or {}
        if not all(data.get(name) for name in CERTIFICATE_FILES):
            return False
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in CERTIFICATE_FILES:
            (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
        return True

    def _webhook_service(self) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self._named(SERVICE),
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "webhook-server", "port": self.webhook_port}],
            },
        }

    def _webhook_configuration(self) -> JSON:
        [document] = yaml.safe_load_all((MANIFESTS / "webhook" / "manifests.yaml").read_text())
        hooks = copy.deepcopy(document["webhooks"])
        for hook in hooks:
            service = hook["clientConfig"]["service"]
            hook["clientConfig"]["service"] = {
                **service,
                "name": SERVICE,
                "namespace": self.namespace,
                "port": self.webhook_port,
            }
        return {**document, "metadata": {"name": WEBHOOK_CONFIGURATION}, "webhooks": hooks}
