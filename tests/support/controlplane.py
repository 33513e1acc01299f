"""A real kube-apiserver + etcd (+ optional kube-controller-manager, kube-scheduler) for tests.

Set up as envtest-style harnesses do (controller-runtime's `envtest`): static-token
authentication, RBAC, a serving certificate from a throwaway CA (clients verify TLS), everything on 127.0.0.1.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client, config

from tests.support.processes import (
    StartupError,
    free_port,
    http_get,
    log_tail,
    port_in_use,
    start_process,
    stop_process,
    wait_until,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
ADMIN_USER = "admin"
RESTRICTED_USER = "operator-test"
DEFAULT_CONTROLLERS = (
    "horizontal-pod-autoscaler-controller",
    "garbage-collector-controller",
    "namespace-controller",
)
POLL = 0.1


def built(script: str, *, override: str, build_timeout: float = 3600.0) -> Path:
    """What a `testenv/` build script prints last (it builds on a cache miss only), or the path
    in the environment variable `override`."""
    if os.environ.get(override):
        return Path(os.environ[override])
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "testenv" / script)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=build_timeout,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = "\n".join(result.stderr.splitlines()[-30:])
        raise StartupError(
            f"testenv/{script} failed (exit {result.returncode}); the tests that need what it "
            f"builds cannot run.\n--- stderr tail ---\n{tail}"
        )
    return Path(lines[-1])


def binaries_dir(*, build_timeout: float = 3600.0) -> Path:
    """The directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
    and etcd (testenv/build.sh; AUTOSCALER_TESTENV_BIN overrides the lookup)."""
    found = built("build.sh", override="AUTOSCALER_TESTENV_BIN", build_timeout=build_timeout)
    missing = [
        n
        for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd")
        if not (found / n).is_file()
    ]
    if missing:
        raise StartupError(f"{found} lacks {', '.join(missing)}")
    return found


@dataclass(frozen=True)
class _User:
    name: str
    uid: str
    token: str
    groups: tuple[str, ...]


class ControlPlane:
    """etcd + kube-apiserver as child processes; kube-controller-manager, kube-scheduler on
    demand."""

    def __init__(
        self,
        *,
        bin_dir: Path,
        startup_timeout: float = 60.0,
        apiserver_flags: Sequence[str] = (),
    ) -> None:
        self._bin = bin_dir
        self._timeout = startup_timeout
        self._apiserver_flags = tuple(apiserver_flags)
        self._workdir: Path | None = None
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._kcm: subprocess.Popen[bytes] | None = None
        self._scheduler: subprocess.Popen[bytes] | None = None
        # Where etcd listens and keeps its data, and kube-apiserver's log: a restart reuses them.
        self._etcd_urls = ("", "")  # client, peer
        self._etcd_data: Path | None = None
        self._etcd_log: Path | None = None
        self._apiserver_log: Path | None = None
        self._users: dict[str, _User] = {}
        self._kubeconfigs: dict[str, Path] = {}
        self.url = ""
        self.startup_seconds = 0.0
        self.kcm_startup_seconds = 0.0
        self.scheduler_startup_seconds = 0.0

    # -- public API ---------------------------------------------------------------------------

    @property
    def token(self) -> str:
        return self._users[ADMIN_USER].token

    @property
    def kubeconfig_path(self) -> Path:
        return self._kubeconfigs[ADMIN_USER]

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("control plane not started")
        return self._workdir

    def kubeconfig_for(self, user: str) -> Path:
        """Kubeconfig of a pre-created user: 'admin' (system:masters) or 'operator-test'."""
        return self._kubeconfigs[user]

    def start(self, workdir: Path) -> None:
        start = time.monotonic()
        self._workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        for attempt in range(2):
            try:
                self._start_etcd_and_apiserver(attempt=attempt)
                break
            except StartupError:
                logs = [self._log(f"etcd-{attempt}"), self._log(f"kube-apiserver-{attempt}")]
                self._stop_servers()
                if attempt == 1 or not any(port_in_use(p) for p in logs):
                    raise
        for user in self._users.values():
            self._kubeconfigs[user.name] = self._write_kubeconfig(user)
        self.startup_seconds = time.monotonic() - start

    def start_controller_manager(
        self, *, controllers: Sequence[str] = DEFAULT_CONTROLLERS, flags: Sequence[str] = ()
    ) -> float:
        """Start kube-controller-manager once; returns the seconds it took to get ready."""
        if self._kcm is not None and self._kcm.poll() is None:
            return self.kcm_startup_seconds
        start = time.monotonic()
        log = self._log("kube-controller-manager")
        self._kcm = start_process(
            [
                str(self._bin / "kube-controller-manager"),
                *self._component_flags(),
                f"--controllers={','.join(controllers)}",
                "--horizontal-pod-autoscaler-sync-period=1s",
                "--horizontal-pod-autoscaler-downscale-stabilization=0s",
                "--v=2",
                *flags,
            ],
            log_path=log,
        )
        wait_until(
            lambda: _all_started(log, controllers),
            timeout=self._timeout,
            interval=POLL,
            what=f"kube-controller-manager to start {', '.join(controllers)}",
            log_path=log,
            proc=self._kcm,
        )
        self.kcm_startup_seconds = time.monotonic() - start
        return self.kcm_startup_seconds

    def start_scheduler(self) -> float:
        """Start kube-scheduler once; returns the seconds it took to get ready.

        Ready means it has scheduled something: a probe pod whose nodeSelector matches no node
        gets its PodScheduled=False condition, which the scheduler writes only after its caches
        synced and its scheduling loop runs (its log has no such line with leader election off).
        """
        if self._scheduler is not None and self._scheduler.poll() is None:
            return self.scheduler_startup_seconds
        start = time.monotonic()
        log = self._log("kube-scheduler")
        self._scheduler = start_process(
            [
                str(self._bin / "kube-scheduler"),
                *self._component_flags(),
                "--v=2",
            ],
            log_path=log,
        )
        with _SchedulerProbe(self.kubeconfig_path) as probe:
            wait_until(
                probe.rejected,
                timeout=self._timeout,
                interval=POLL,
                what="kube-scheduler to mark a probe pod unschedulable",
                log_path=log,
                proc=self._scheduler,
            )
        self.scheduler_startup_seconds = time.monotonic() - start
        return self.scheduler_startup_seconds

    def _component_flags(self) -> list[str]:
        """What kube-controller-manager and kube-scheduler share: the admin kubeconfig for the
        API, authentication and authorization; no leader election; no serving port."""
        kubeconfig = str(self.kubeconfig_path)
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
        ]

    # -- faults: crash a server, start it again on the same URL and data ----------------------

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (a crash: no graceful shutdown, watches cut mid-stream)."""
        self._apiserver = _killed(self._apiserver)

    def stop_apiserver(self) -> None:
        """SIGTERM kube-apiserver: it ends its watches and exits."""
        if self._apiserver is not None:
            stop_process(self._apiserver)
            self._apiserver = None

    def restart_apiserver(self) -> float:
        """Start kube-apiserver again on the same URL and etcd (after `kill_apiserver` or
        `stop_apiserver`); returns the seconds until it served the 'default' namespace."""
        if self._apiserver is not None:
            raise RuntimeError("kube-apiserver is still running")
        start = time.monotonic()
        self._start_apiserver(
            etcd_url=self._etcd_urls[0], log=self._required(self._apiserver_log), port=self.port
        )
        return time.monotonic() - start

    def kill_etcd(self) -> None:
        """SIGKILL etcd; kube-apiserver keeps running and reconnects once etcd is back."""
        self._etcd = _killed(self._etcd)

    def restart_etcd(self) -> float:
        """Start etcd again on the same ports and data dir; returns the seconds until healthy."""
        if self._etcd is not None:
            raise RuntimeError("etcd is still running")
        start = time.monotonic()
        self._launch_etcd()
        return time.monotonic() - start

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def etcd_url(self) -> str:
        return self._etcd_urls[0]

    def stop(self, *, remove_workdir: bool = True) -> None:
        for attr in ("_scheduler", "_kcm"):
            proc: subprocess.Popen[bytes] | None = getattr(self, attr)
            if proc is not None:
                stop_process(proc)
                setattr(self, attr, None)
        self._stop_servers()
        if remove_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def log_tail(self, component: str, *, lines: int = 40) -> str:
        return log_tail(self._log(component), lines=lines)

    # -- internals ----------------------------------------------------------------------------

    def _log(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def _write_credentials(self) -> None:
        key, pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        _run(["openssl", "genrsa", "-out", str(key), "2048"])
        _run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)])
        self._write_serving_certificate()
        self._users = {
            ADMIN_USER: _User(ADMIN_USER, "admin-uid", secrets.token_hex(24), ("system:masters",)),
            RESTRICTED_USER: _User(RESTRICTED_USER, "operator-test-uid", secrets.token_hex(24), ()),
        }
        rows = [
            f'{u.token},{u.name},{u.uid},"{",".join(u.groups)}"'
            if u.groups
            else f"{u.token},{u.name},{u.uid}"
            for u in self._users.values()
        ]
        tokens = self.workdir / "tokens.csv"
        tokens.write_text("\n".join(rows) + "\n")
        tokens.chmod(0o600)

    @property
    def ca_path(self) -> Path:
        """CA that signed the apiserver's serving certificate (clients verify TLS against it)."""
        return self.workdir / "pki" / "ca.crt"

    def _write_serving_certificate(self) -> None:
        # Our own CA rather than insecure-skip-tls-verify: urllib3 warns on unverified HTTPS,
        # and pytest turns warnings into errors.
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
        ca_key, key, csr = pki / "ca.key", pki / "server.key", pki / "server.csr"
        _run(
            [
                *("openssl", "req", "-x509", *ec, "-subj", "/CN=testenv-ca"),
                *("-keyout", str(ca_key), "-out", str(self.ca_path)),
                *("-addext", "basicConstraints=critical,CA:TRUE"),
                *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
            ]
        )
        _run(
            ["openssl", "req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr)]
        )
        ext = pki / "server.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\n"
            "authorityKeyIdentifier=keyid\n"
        )
        _run(
            [
                *("openssl", "x509", "-req", "-in", str(csr), "-days", "2", "-extfile", str(ext)),
                *("-CA", str(self.ca_path), "-CAkey", str(ca_key), "-CAcreateserial"),
                *("-out", str(pki / "server.crt")),
            ]
        )

    def _start_etcd_and_apiserver(self, *, attempt: int) -> None:
        etcd_url = self._start_etcd(log=self._log(f"etcd-{attempt}"), attempt=attempt)
        self._start_apiserver(etcd_url=etcd_url, log=self._log(f"kube-apiserver-{attempt}"))

    def _start_etcd(self, *, log: Path, attempt: int) -> str:
        self._etcd_urls = (f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}")
        self._etcd_data, self._etcd_log = self.workdir / f"etcd-data-{attempt}", log
        self._launch_etcd()
        return self._etcd_urls[0]

    def _launch_etcd(self) -> None:
        client, peer = self._etcd_urls
        log = self._required(self._etcd_log)
        self._etcd = start_process(
            [
                str(self._bin / "etcd"),
                "--name=t",
                f"--data-dir={self._etcd_data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=t={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            log_path=log,
        )
        wait_until(
            lambda: '"health":"true"' in http_get(f"{client}/health")[1],
            timeout=self._timeout,
            interval=POLL,
            what="etcd /health",
            log_path=log,
            proc=self._etcd,
        )

    @staticmethod
    def _required(path: Path | None) -> Path:
        if path is None:
            raise RuntimeError("control plane not started")
        return path

    def _start_apiserver(self, *, etcd_url: str, log: Path, port: int | None = None) -> None:
        port = port or free_port()
        self._apiserver_log = log
        self.url = f"https://127.0.0.1:{port}"
        self._apiserver = start_process(
            [
                str(self._bin / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={self.workdir / 'pki' / 'server.crt'}",
                f"--tls-private-key-file={self.workdir / 'pki' / 'server.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={self.workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                "--v=1",
                *self._apiserver_flags,
            ],
            log_path=log,
        )
        apiserver = self._apiserver

        def wait(probe: Callable[[], bool], what: str) -> None:
            wait_until(
                probe, timeout=self._timeout, interval=POLL, what=what, log_path=log, proc=apiserver
            )

        wait(
            lambda: http_get(f"{self.url}/readyz", cafile=self.ca_path) == (200, "ok"),
            "kube-apiserver /readyz",
        )
        # The bootstrap controller creates 'default' just after /readyz turns ok.
        wait(
            lambda: (
                http_get(
                    f"{self.url}/api/v1/namespaces/default", token=self.token, cafile=self.ca_path
                )[0]
                == 200
            ),
            "the 'default' namespace",
        )

    def _write_kubeconfig(self, user: _User) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testenv",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": user.name, "user": {"token": user.token}}],
            "contexts": [{"name": user.name, "context": {"cluster": "testenv", "user": user.name}}],
            "current-context": user.name,
        }
        path = self.workdir / f"{user.name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def _stop_servers(self) -> None:
        for attr in ("_apiserver", "_etcd"):
            proc: subprocess.Popen[bytes] | None = getattr(self, attr)
            if proc is not None:
                stop_process(proc)
                setattr(self, attr, None)


class _SchedulerProbe:
    """A pod in 'default' that no node can take; deleted again on exit."""

    NAME = "testenv-scheduler-probe"

    def __init__(self, kubeconfig: Path) -> None:
        self._api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(self._api)

    def __enter__(self) -> _SchedulerProbe:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.NAME},
            "spec": {
                "nodeSelector": {"testenv.invalid/scheduler-probe": "no-such-node"},
                "containers": [{"name": "probe", "image": "none", "command": ["true"]}],
            },
        }
        self._core.create_namespaced_pod("default", pod)
        return self

    def rejected(self) -> bool:
        pod = self._core.read_namespaced_pod(self.NAME, "default")
        return any(
            cond.type == "PodScheduled" and cond.status == "False"
            for cond in pod.status.conditions or []
        )

    def __exit__(self, *_: object) -> None:
        try:
            self._core.delete_namespaced_pod(self.NAME, "default", grace_period_seconds=0)
        finally:
            self._api.close()


def _killed(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL `proc` and reap it."""
    if proc is None:
        raise RuntimeError("not running")
    proc.kill()
    proc.wait(timeout=15)


def _all_started(log: Path, controllers: Sequence[str]) -> bool:
    """Every controller logged its start (1.36 wording); the GC also finished its initial sync."""
    text = log.read_text(errors="replace") if log.exists() else ""
    started = {
        line.rsplit('controller="', 1)[-1].rstrip('"')
        for line in text.splitlines()
        if '"Controller starting..."' in line
    }
    gc_ready = "garbage-collector-controller" not in controllers or (
        '"Proceeding to collect garbage"' in text
    )
    return started.issuperset(controllers) and gc_ready


def _run(argv: Sequence[str]) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StartupError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
