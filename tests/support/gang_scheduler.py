"""The real scheduler-plugins scheduler (Coscheduling: gang scheduling of `scheduling.x-k8s.io`
PodGroups) against a test control plane, with one scheduler profile named like the operator's
`--gang-scheduler-name`."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import yaml
from kubernetes import client

from tests.support.controlplane import ControlPlane, built
from tests.support.processes import start_process, stop_process, wait_until

PROFILE = "scheduler-plugins"
# How long a placed gang member waits at Permit for the rest of its gang (upstream's example
# configuration, manifests/coscheduling/scheduler-config.yaml, uses 10 s).
PERMIT_WAIT_SECONDS = 10


def scheduler_plugins_binary(*, build_timeout: float = 3600.0) -> Path:
    """The cached binary (testenv/build-gang-scheduler.sh; AUTOSCALER_GANG_SCHEDULER_BIN
    overrides it)."""
    return built(
        "build-gang-scheduler.sh",
        override="AUTOSCALER_GANG_SCHEDULER_BIN",
        build_timeout=build_timeout,
    )


def scheduler_config(kubeconfig: Path) -> dict[str, object]:
    """scheduler-plugins' Coscheduling example configuration, as a second profile."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "profiles": [
            {
                "schedulerName": PROFILE,
                "plugins": {
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                    "queueSort": {
                        "enabled": [{"name": "Coscheduling"}],
                        "disabled": [{"name": "*"}],
                    },
                },
                "pluginConfig": [
                    {
                        "name": "Coscheduling",
                        "args": {"permitWaitingTimeSeconds": PERMIT_WAIT_SECONDS},
                    }
                ],
            }
        ],
    }


class SchedulerPlugins:
    def __init__(self, plane: ControlPlane, binary: Path) -> None:
        self.plane, self.binary = plane, binary
        self.log = plane.workdir / "scheduler-plugins.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, api: client.ApiClient) -> SchedulerPlugins:
        config = self.plane.workdir / "scheduler-plugins.yaml"
        config.write_text(yaml.safe_dump(scheduler_config(self.plane.kubeconfig_path)))
        kubeconfig = str(self.plane.kubeconfig_path)
        self._proc = start_process(
            [
                str(self.binary),
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--v=3",
            ],
            log_path=self.log,
        )
        self._wait_ready(api)
        return self

    def _wait_ready(self, api: client.ApiClient) -> None:
        """Ready once it judged a probe pod (one no node can take): it then runs its loop."""
        core, name = client.CoreV1Api(api), f"probe-{uuid.uuid4().hex[:6]}"
        probe = {
            "metadata": {"name": name},
            "spec": {
                "schedulerName": PROFILE,
                "nodeSelector": {"no-such-label": "x"},
                "containers": [{"name": "c", "image": "none"}],
            },
        }
        core.create_namespaced_pod("default", probe)

        def judged() -> bool:
            pod = core.read_namespaced_pod(name, "default")
            return any(c.type == "PodScheduled" for c in pod.status.conditions or [])

        try:
            wait_until(
                judged,
                timeout=120,
                interval=0.2,
                what="the scheduler-plugins scheduler to judge a probe pod",
                log_path=self.log,
                proc=self._proc,
            )
        finally:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None
