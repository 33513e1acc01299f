"""A user's own torchrun script, which imports only torch (`examples/torch-only`), as an
elastic PyTorchJob: it runs to Succeeded through a scale-up and a scale-down written through
/scale, and no rescale costs more epochs than its own snapshot interval. Each rescale is recorded
from its write to the first epoch rank 0 finished at the new world, as the test saw the line (the
script prints per epoch, not per step: the stall measured holds one epoch more)."""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from tests.e2e.measure import Rescale
from tests.e2e.training import Scenario, TrainingJob, kept_since, pods_seen
from tests.support.controlplane import REPO_ROOT
from tests.support.node_agent import NodeAgent
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(600)
EXAMPLE = REPO_ROOT / "examples" / "torch-only"
DONE = re.compile(r"rank 0: epoch (\d+) done, world (\d+)")
RESUMED = re.compile(r"rank 0: resuming from the snapshot at epoch (\d+)")
JSON = dict[str, Any]


def manifest(namespace: str, snapshot: Path) -> JSON:
    """The example manifest, its snapshot on this test's disk (pods share the agent's)."""
    job: JSON = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["metadata"] |= {"namespace": namespace}
    pod = job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
    pod.pop("volumes")
    container = pod["containers"][0]
    container.pop("volumeMounts")
    args = [a for a in container["command"][2:] if not a.startswith("--snapshot=")]
    container["command"] = ["torchrun", str(EXAMPLE / "train.py"), *args, f"--snapshot={snapshot}"]
    return job


def argument(job: JSON, flag: str) -> int:
    """The value the job's command gives the script's `flag`."""
    pod = job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
    command = pod["containers"][0]["command"]
    return int(next(arg.split("=", 1)[1] for arg in command if arg.startswith(f"{flag}=")))


class Logs:
    """What rank 0 printed, in order, across the job's pods and their incarnations."""

    def __init__(self, agent: NodeAgent, namespace: str, name: str) -> None:
        self.agent, self.namespace, self.name = agent, namespace, name
        self.seen: dict[str, int] = {}  # characters of each pod's log already read

    def new_lines(self) -> list[str]:
        lines = []
        for index in range(4):
            pod = f"{self.name}-worker-{index}"
            text = self.agent.container_log(self.namespace, pod, "pytorch")
            lines += text[self.seen.get(pod, 0) :].splitlines()
            self.seen[pod] = len(text)
        return lines


def test_a_torch_only_script_survives_a_scale_up_and_a_scale_down(scenario: Scenario) -> None:
    agent = scenario.nodes(2)
    job = manifest(scenario.namespace, scenario.workdir / "snapshot.pt")
    name = job["metadata"]["name"]
    custom = client.CustomObjectsApi(scenario.api)
    custom.create_namespaced_custom_object(
        c.GROUP, c.VERSION, scenario.namespace, c.PLURAL, copy.deepcopy(job)
    )
    logs = Logs(agent, scenario.namespace, name)
    done: list[tuple[int, int, float]] = []  # (epoch, world, when seen) as rank 0 finished them
    redone: list[int] = []  # epochs each restart trained again

    def read() -> None:
        for line in logs.new_lines():
            if match := RESUMED.search(line):
                redone.append(max(e for e, _, _ in done) + 1 - int(match[1]))
            elif match := DONE.search(line):
                done.append((int(match[1]), int(match[2]), time.time()))

    def trains_at(world: int) -> None:
        """Until rank 0 has finished three epochs in a row at `world`."""

        def three() -> bool:
            read()
            return len(done) >= 3 and all(w == world for _, w, _ in done[-3:])

        wait_for(three, timeout=240, interval=0.5, what=f"three epochs at world {world}: {done}")

    def succeeded() -> bool:
        found: JSON = custom.get_namespaced_custom_object(
            c.GROUP, c.VERSION, scenario.namespace, c.PLURAL, name
        )
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(x["type"] == "Succeeded" and x["status"] == "True" for x in conditions)

    trains_at(1)
    pods = TrainingJob(scenario.api, scenario.namespace, name, scenario.workdir)  # to read back
    seen = pods_seen(pods)
    current = 1
    for replicas in (2, 1):
        body = {"spec": {"replicas": replicas}}
        written = time.time()
        custom.patch_namespaced_custom_object_scale(
            c.GROUP, c.VERSION, scenario.namespace, c.PLURAL, name, body
        )
        restarts = len(redone)
        trains_at(replicas)
        formed = next(at for _, w, at in done if w == replicas and at > written)
        kind = "scale-up" if replicas > current else "scale-down"
        scenario.rescales.append(
            Rescale(
                job=name,
                cause=f"{kind} {current}->{replicas} by hand, to rank 0's first epoch",
                stall_seconds=round(formed - written, 1),
                steps_redone=sum(redone[restarts:]),  # epochs: the script counts no steps
                world=replicas,
            )
        )
        current = replicas
    wait_for(succeeded, timeout=300, interval=1, what="the job to finish its epochs")
    read()
    assert kept_since(pods, seen) == {f"{name}-worker-0": 0}, "worker-0's container restarted"
    assert {epoch for epoch, _, _ in done} == set(range(argument(job, "--epochs")))
    assert len(redone) >= 2, f"each rescale restarts from the snapshot: {redone}"
    assert all(0 <= epochs <= argument(job, "--save-every") for epochs in redone), redone
    print(f"\ntorch-only: epochs trained again per restart {redone}")
