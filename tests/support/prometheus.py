"""A real Prometheus server (Debian's /usr/bin/prometheus) scraping file_sd targets every second."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

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

PROMETHEUS_BIN = Path(os.environ.get("AUTOSCALER_PROMETHEUS_BIN", "/usr/bin/prometheus"))
POLL = 0.1


class PrometheusServer:
    """Prometheus with one file_sd scrape job per `job` label; targets change at runtime."""

    def __init__(self, *, binary: Path = PROMETHEUS_BIN, startup_timeout: float = 60.0) -> None:
        self._binary = binary
        self._timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        # (job, host:port) -> extra labels
        self._targets: dict[tuple[str, str], dict[str, str]] = {}
        self.url = ""
        self.startup_seconds = 0.0

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("prometheus not started")
        return self._workdir

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    @property
    def targets_path(self) -> Path:
        return self.workdir / "targets.json"

    def start(self, workdir: Path) -> None:
        if not self._binary.is_file():
            raise StartupError(
                f"{self._binary} not found; install it with "
                "`apt-get install -y --no-install-recommends prometheus`"
            )
        start = time.monotonic()
        self._workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self._write_targets()
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()))
        for attempt in range(2):
            try:
                self._start_once(config=config)
                break
            except StartupError:
                self._stop_proc()
                if attempt == 1 or not port_in_use(self.log_path):
                    raise
        self.startup_seconds = time.monotonic() - start

    def add_target(self, host_port: str, *, job: str, labels: dict[str, str] | None = None) -> None:
        self._targets[(job, host_port)] = dict(labels or {})
        self._write_targets()

    def remove_target(self, host_port: str, *, job: str) -> None:
        self._targets.pop((job, host_port), None)
        self._write_targets()

    def query(self, promql: str) -> list[dict[str, object]]:
        """Instant query via the HTTP API (tests may prefer prometheus_api_client)."""
        status, body = http_get(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        )
        if status != 200:
            raise RuntimeError(f"query {promql!r} -> HTTP {status}: {body[:500]}")
        result: list[dict[str, object]] = json.loads(body)["data"]["result"]
        return result

    def wait_for_series(self, promql: str, *, timeout: float = 30.0) -> list[dict[str, object]]:
        found: list[dict[str, object]] = []

        def probe() -> bool:
            found[:] = self.query(promql)
            return bool(found)

        wait_until(
            probe, timeout=timeout, interval=0.25, what=f"series {promql!r}", log_path=self.log_path
        )
        return found

    def kill(self) -> None:
        """SIGKILL Prometheus (a crash: its head block is recovered from the WAL on restart)."""
        if self._proc is None:
            raise RuntimeError("prometheus not running")
        self._proc.kill()
        self._proc.wait(timeout=15)
        self._proc = None

    def restart(self) -> float:
        """Start Prometheus again on the same URL and storage; returns the seconds until ready."""
        if self._proc is not None:
            raise RuntimeError("prometheus is still running")
        start = time.monotonic()
        self._start_once(config=self.workdir / "prometheus.yml", url=self.url)
        return time.monotonic() - start

    def stop(self, *, remove_workdir: bool = True) -> None:
        self._stop_proc()
        if remove_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def log_tail(self, *, lines: int = 40) -> str:
        return log_tail(self.log_path, lines=lines)

    def _config(self) -> dict[str, object]:
        return {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "scrape_configs": [
                {
                    "job_name": "testenv",
                    "file_sd_configs": [
                        {"files": [str(self.targets_path)], "refresh_interval": "1s"}
                    ],
                }
            ],
        }

    def _start_once(self, *, config: Path, url: str = "") -> None:
        self.url = url or f"http://127.0.0.1:{free_port()}"
        self._proc = start_process(
            [
                str(self._binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            log_path=self.log_path,
        )
        wait_until(
            lambda: http_get(f"{self.url}/-/ready")[0] == 200,
            timeout=self._timeout,
            interval=POLL,
            what="prometheus /-/ready",
            log_path=self.log_path,
            proc=self._proc,
        )

    def _write_targets(self) -> None:
        # One group per target: the `job` label from file_sd overrides the scrape job's name.
        groups = [
            {"targets": [host_port], "labels": {**labels, "job": job}}
            for (job, host_port), labels in sorted(self._targets.items())
        ]
        # Atomic replace: Prometheus' file watcher must never see a half-written file.
        tmp = self.targets_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_path)

    def _stop_proc(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None


class PodMonitorTargets:
    """Prometheus' Kubernetes pod discovery for one PodMonitor, done by the test: Debian's
    Prometheus is built without Kubernetes service discovery. Polls the pods through the API
    server and keeps the file_sd targets to what prometheus-operator's generated config would
    scrape: pods the selector matches that have not finished and have an IP, at the container
    port the endpoint names, labelled by the endpoint's `replace` relabelings."""

    def __init__(
        self,
        server: PrometheusServer,
        pod_monitor: Mapping[str, Any],
        list_pods: Callable[[], list[dict[str, Any]]],
        *,
        job: str = "training",
        interval: float = 0.5,
    ) -> None:
        spec = pod_monitor["spec"]
        self._endpoint = spec["podMetricsEndpoints"][0]
        selector = spec.get("selector") or {}
        self._labels = dict(selector.get("matchLabels") or {})
        self._present = [e["key"] for e in selector.get("matchExpressions") or []]
        if any(e["operator"] != "Exists" for e in selector.get("matchExpressions") or []):
            raise ValueError("only Exists expressions are supported")
        self._server, self._list_pods, self._job = server, list_pods, job
        self._interval = interval
        self._current: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-targets", daemon=True)

    def __enter__(self) -> PodMonitorTargets:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for target in self._current:
            self._server.remove_target(target, job=self._job)

    def targets(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        """`podIP:port` -> target labels, for the pods the PodMonitor scrapes."""
        found = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            status = pod.get("status") or {}
            if any(labels.get(k) != v for k, v in self._labels.items()):
                continue
            if any(k not in labels for k in self._present) or not status.get("podIP"):
                continue
            if status.get("phase") in ("Succeeded", "Failed"):
                continue
            port = self._port(pod)
            if port is not None:
                found[f"{status['podIP']}:{port}"] = self._relabel(pod)
        return found

    def _port(self, pod: dict[str, Any]) -> int | None:
        for container in pod["spec"]["containers"]:
            for port in container.get("ports") or []:
                if port.get("name") == self._endpoint["port"]:
                    return int(port["containerPort"])
        return None

    def _relabel(self, pod: dict[str, Any]) -> dict[str, str]:
        meta = {"__meta_kubernetes_namespace": pod["metadata"]["namespace"]}
        for key, value in (pod["metadata"].get("labels") or {}).items():
            meta[_meta_label("label", key)] = value
        labels = {}
        for rule in self._endpoint.get("relabelings") or []:
            if rule.get("action", "replace") != "replace":
                raise ValueError(f"unsupported relabeling {rule}")
            value = ";".join(meta.get(name, "") for name in rule["sourceLabels"])
            if value:
                labels[rule["targetLabel"]] = value
        return labels

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                wanted = self.targets(self._list_pods())
            except Exception:  # the API server restarting: keep the last targets
                continue
            for target in self._current - wanted.keys():
                self._server.remove_target(target, job=self._job)
            for target, labels in wanted.items():
                self._server.add_target(target, job=self._job, labels=labels)
            self._current = set(wanted)


def _meta_label(kind: str, key: str) -> str:
    """Prometheus' pod meta label for a Kubernetes label key (non-alphanumerics become `_`)."""
    return f"__meta_kubernetes_pod_{kind}_" + "".join(ch if ch.isalnum() else "_" for ch in key)
