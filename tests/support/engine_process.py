"""`autoscaler engine` and `autoscaler operator` as real processes, tuned for tests: rounds and
lease timings of seconds, /metrics on a free loopback port, logs in the test's directory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.polling import wait_for
from tests.support.processes import free_port, http_get, log_tail, start_process, stop_process

# Prometheus's default scrape timeout: 2 s once ran out on a loaded 2-core machine
# (test_faults_policy's leaking policy).
SCRAPE_TIMEOUT_SECONDS = 10.0

# client-go's lease and renew deadline: training processes saturate both cores for seconds at a
# time, and a process that gives up its lease after a 2 s stall takes every later e2e test with it.
LEASE_FLAGS = ("--lease-duration", "15", "--renew-deadline", "10", "--retry-period", "0.5")
# Fast failover for the tests that kill a leader and time its standby's takeover.
FAILOVER_LEASE_FLAGS = ("--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.2")
# A renew deadline longer than a control-plane restart (~5 s here, twice that on a loaded
# machine): with LEASE_FLAGS the leader gives up after 2 s of outage and exits.
OUTAGE_LEASE_FLAGS = ("--lease-duration", "40", "--renew-deadline", "30", "--retry-period", "0.5")


@dataclass
class ServiceProcess:
    """A started `autoscaler engine` or `autoscaler operator`."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def target(self) -> str:
        """Its /metrics as a Prometheus target (also the series' `instance` label)."""
        return f"127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        return http_get(f"http://{self.target}{path}", timeout=SCRAPE_TIMEOUT_SECONDS)

    def serves(self) -> bool:
        try:
            return self.get("/healthz")[0] == 200
        except OSError:
            assert self.proc.poll() is None, log_tail(self.log)
            return False


def engine_config(
    *,
    namespace: str,
    prometheus_url: str,
    capacity: dict[str, float],
    interval: float = 1.0,
    decision_log: Path | None = None,
    policy: str = "global-optimizer",
) -> dict[str, Any]:
    """An engine sizing one namespace's jobs every `interval` s, with settle times of seconds."""
    config: dict[str, Any] = {
        "interval_seconds": interval,
        "namespaces": [namespace],
        "policy": {"name": policy, "config": {}},
        "prometheus": {"url": prometheus_url, "window": "2s", "timeout_seconds": 2},
        "settle": {
            "settle_seconds": 4,
            "cooldown_seconds": 4,
            "scale_down_stabilization_seconds": 2,
            "stale_after_seconds": 600,
        },
        "capacity": capacity,
    }
    if decision_log is not None:
        config["decision_log"] = str(decision_log)
    return config


@contextmanager
def engine_process(
    config: dict[str, Any],
    *,
    kubeconfig: Path,
    lease_namespace: str,
    workdir: Path,
    lease: Sequence[str] = LEASE_FLAGS,
    exit_code: int = 0,
) -> Iterator[ServiceProcess]:
    """The engine with `config`, its lease in `lease_namespace`, serving /healthz; its exit status
    must be `exit_code` (0: SIGTERMed at exit; a fault test may kill it, or it may lose its lease).
    """
    path = workdir / "engine.yaml"
    path.write_text(yaml.safe_dump(config))
    port, log = free_port(), workdir / "engine.log"
    argv = [
        sys.executable, "-m", "autoscaler", "engine", "--config", str(path),
        "--kubeconfig", str(kubeconfig), "--metrics-address", f"127.0.0.1:{port}",
        "--lease-namespace", lease_namespace, *lease,
    ]  # fmt: skip
    started = ServiceProcess(start_process(argv, log_path=log), port, log)
    with _stopped_at_exit(started, exit_code=exit_code) as engine:
        wait_for(engine.serves, what="the engine to serve /healthz")
        yield engine


@contextmanager
def operator_process(
    *,
    kubeconfig: Path,
    lease_namespace: str,
    workdir: Path,
    identity: str = "operator",
    lease: Sequence[str] = LEASE_FLAGS,
    flags: Sequence[str] = (),
    exit_code: int = 0,
) -> Iterator[ServiceProcess]:
    """The operator (resync every 2 s, then `flags`), its lease in `lease_namespace`, serving
    /healthz; its exit status must be `exit_code`, as the engine's."""
    port, log = free_port(), workdir / f"{identity}.log"
    argv = [
        sys.executable, "-m", "autoscaler", "operator", "--leader-elect",
        "--kubeconfig", str(kubeconfig), "--metrics-address", f"127.0.0.1:{port}",
        "--health-probe-bind-address", "0",
        "--identity", identity, "--lease-namespace", lease_namespace, *lease,
        "--resync-seconds", "2", *flags,
    ]  # fmt: skip
    started = ServiceProcess(start_process(argv, log_path=log), port, log)
    with _stopped_at_exit(started, exit_code=exit_code) as operator:
        wait_for(operator.serves, what=f"{identity} to serve /healthz")
        yield operator


@contextmanager
def _stopped_at_exit(process: ServiceProcess, *, exit_code: int) -> Iterator[ServiceProcess]:
    """SIGTERM at exit (if still running); the exit status is asserted only when nothing else
    failed first."""
    try:
        yield process
    except BaseException:
        stop_process(process.proc)
        raise
    code = stop_process(process.proc)
    assert code == exit_code, log_tail(process.log)
