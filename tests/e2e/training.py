"""A training job of the example script, as a test drives and measures it."""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import JOBS
from autoscaler.engine.config import EngineConfig
from autoscaler.observability.decision_log import read_decision_log
from autoscaler.training.files import write_atomically
from tests.e2e.ft_measure import Resize as FtResize
from tests.e2e.measure import Event, Rescale, first_full_step
from tests.e2e.watching import ListWatch
from tests.support.controlplane import REPO_ROOT, ControlPlane
from tests.support.engine_process import ServiceProcess, engine_config, engine_process
from tests.support.fixtures import EXAMPLE
from tests.support.node_agent import NodeAgent
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusServer

JSON = dict[str, Any]
CHECKPOINT_EVERY = 10


def example_argument(flag: str) -> str:
    """The value the example manifest gives its training script's `flag`."""
    command = yaml.safe_load((EXAMPLE / "job.yaml").read_text())["spec"]["pytorchReplicaSpecs"][
        "Worker"
    ]["template"]["spec"]["containers"][0]["command"]
    return next(arg.split("=", 1)[1] for arg in command if arg.startswith(f"{flag}="))


COLLECTIVE_TIMEOUT = float(example_argument("--collective-timeout"))
# Measure other rendezvous settings than the operator's: the jobs declare this rdzvConf, e.g.
# torch's defaults `last_call_timeout=30,keep_alive_interval=5,keep_alive_max_attempt=3`.
RDZV_CONF_ENV = "AUTOSCALER_E2E_RDZV_CONF"
RDZV_CONF = os.environ.get(RDZV_CONF_ENV, "")
# The engine in seconds rather than minutes, for test time: NOT the shipped defaults
# (`engine_settings_changed` names each). A reading counts once the world re-formed and the
# rate window holds only the new world's steps: settle >= the longest stall (the e2e report's
# max stall) + the window + a margin, or a reading that still holds a restart makes a larger
# world look slower and the engine shrinks the job back.
ENGINE_INTERVAL = 2.0
ENGINE_WINDOW = "6s"
ENGINE_SETTLE = {
    "settle_seconds": 32,
    "cooldown_seconds": 32,
    "scale_down_stabilization_seconds": 2,
    "stale_after_seconds": 600,
    # Progress scraped every second and read every 2 s: still for 6 s is a stall (the default,
    # 60 s, suits 30 s rounds and scrapes); a lost peer stalls the survivors the collective timeout.
    "stall_seconds": 6,
}


def with_test_paths(job: JSON, *, replicas: int, script: Path, ours: dict[str, Any]) -> JSON:
    """An example's manifest as the tests run it: `replicas` workers, no volumes (the node agent
    ignores them: pods share its disk), the script from the repository under the example's own
    launcher (its command's first word), and the example's arguments with `ours` in their
    place (this test's paths and work)."""
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = replicas
    pod = worker["template"]["spec"]
    pod.pop("volumes")
    container = pod["containers"][0]
    container.pop("volumeMounts")
    launcher, _, *arguments = container["command"]
    kept = [arg for arg in arguments if arg.split("=")[0] not in ours]
    container["command"] = [
        launcher,
        str(script),
        *kept,
        *(f"{flag}={value}" for flag, value in ours.items()),
    ]
    return job


# Every process reads the work file once a step, so all of them see a new total before they
# reach it when it is a few steps ahead: this is 10-40 steps of the examples' 128-sample batches.
WORK_MARGIN = 5_000


class TrainingJob:
    """One PyTorchJob of `examples/elastic-training`, its event log and its replica history."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, workdir: Path) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.workdir = workdir / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.events_path = self.workdir / "events.jsonl"
        self.work_path = self.workdir / "total-samples"  # the example's --work-file
        self.declared: int | None = None  # the manifest's --total-samples, or its cut
        self.replica_history: list[tuple[float, int]] = []  # (time, Worker.replicas) changes
        self._events: list[Event] = []
        self._read_to = 0  # bytes of the event log parsed
        self._watcher = ListWatch(api, JOBS, namespace, on_list=self._noted, on_event=self._changed)

    def manifest(
        self,
        *,
        replicas: int = 1,
        low: int = 1,
        high: int = 4,
        max_restarts: int | None = 100,
        clean_pod_policy: str = "Running",
        total_samples: int,
        **policy: Any,
    ) -> JSON:
        """The example manifest with this test's paths (the script from the repository, the
        checkpoint directory on the host: the node agent ignores volumes, pods share its disk)
        and the work the job declares: it succeeds once it has trained `total_samples`."""
        job: JSON = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
        job["metadata"] = {"name": self.name, "namespace": self.namespace}
        elastic = {**job["spec"]["elasticPolicy"], "minReplicas": low, "maxReplicas": high}
        elastic.pop("maxRestarts")
        if max_restarts is not None:
            elastic["maxRestarts"] = max_restarts
        if RDZV_CONF:
            pairs = (item.split("=", 1) for item in RDZV_CONF.split(","))
            elastic["rdzvConf"] = [{"key": key, "value": value} for key, value in pairs]
        job["spec"]["elasticPolicy"] = {**elastic, **policy}
        job["spec"]["runPolicy"]["cleanPodPolicy"] = clean_pod_policy
        ours = {
            "--checkpoint-dir": self.workdir / "checkpoints",
            "--events": self.events_path,
            "--total-samples": total_samples,
            "--work-file": self.work_path,
            "--checkpoint-every": CHECKPOINT_EVERY,
        }
        self.declared = total_samples
        return with_test_paths(job, replicas=replicas, script=EXAMPLE / "train.py", ours=ours)

    def create(self, manifest: JSON) -> None:
        self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, copy.deepcopy(manifest)
        )
        self._watcher.start()

    @property
    def created(self) -> bool:
        return self._watcher.started

    def stop_watching(self) -> None:
        self._watcher.stop()

    # -- reading back ---------------------------------------------------------------------------

    def job(self) -> JSON:
        found: JSON = self.custom.get_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.name
        )
        return found

    def replicas(self) -> int:
        return int(self.job()["spec"]["pytorchReplicaSpecs"][c.WORKER]["replicas"])

    def scale(self, replicas: int) -> float:
        """Write the count through /scale as the HPA and the engine do; returns when."""
        body = {"spec": {"replicas": replicas}}
        self.custom.patch_namespaced_custom_object_scale(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.name, body
        )
        return time.time()

    def conditions(self) -> dict[str, str]:
        return {
            cond["type"]: cond["status"]
            for cond in self.job().get("status", {}).get("conditions", [])
        }

    def pods(self) -> dict[str, JSON]:
        listing = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{c.LABEL_JOB_NAME}={self.name}"
        )
        return {
            pod["metadata"]["name"]: pod
            for pod in self.api.sanitize_for_serialization(listing.items)
        }

    def replace_pod_of_lost_node(self, pod: str, node: str) -> float:
        """Once the node lifecycle controller marks `node` NotReady, taint it out of service
        (what an operator or a node-remediation controller does to a node known to be down),
        so taint eviction and the pod garbage collector release `pod` and the operator
        re-creates it; returns when it is re-created."""
        old = self.pods()[pod]["metadata"]["uid"]
        wait_for(lambda: not node_ready(self.core, node), timeout=60, what=f"{node} NotReady")
        taint = {
            "key": "node.kubernetes.io/out-of-service",
            "value": "nodeshutdown",
            "effect": "NoExecute",
        }
        taints = self.core.read_node(node).spec.taints or []
        self.core.patch_node(node, {"spec": {"taints": [*(t.to_dict() for t in taints), taint]}})
        wait_for(
            lambda: self.pods().get(pod, {}).get("metadata", {}).get("uid", old) != old,
            timeout=120,
            interval=0.2,
            what=f"{pod} released and re-created",
        )
        return time.time()

    def events(self) -> list[Event]:
        """The log's events so far in time order; only lines added since the last call are
        parsed (the log grows by every rank's every step, and tests poll it)."""
        if not self.events_path.exists():
            return []
        with self.events_path.open("rb") as log:
            log.seek(self._read_to)
            chunk = log.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._read_to += len(complete)
        self._events.extend(json.loads(line) for line in complete.splitlines())
        self._events.sort(key=lambda event: event["time"])
        return self._events

    def samples(self, *, at: float) -> int:
        """The job's samples trained by the newest step at or before `at` (0 before any)."""
        steps = [e for e in self.events() if e["event"] == "step" and e["time"] <= at]
        return int(steps[-1]["samples"]) if steps else 0

    def trained(self) -> int:
        """The job's samples trained by its newest step (torchrun) or commit (torchft)."""
        done = [e["samples"] for e in self.events() if e["event"] in ("step", "commit")]
        return int(max(done, default=0))

    def cut_work(self, *, margin: int = WORK_MARGIN) -> None:
        """Lowers the job's work to `margin` samples past what it has trained (never raises it):
        once a scenario's checks are done, the rest of its declared work would only add time."""
        assert self.declared is not None, "the job was created from its manifest"
        total = self.trained() + margin
        if total < self.declared:
            write_atomically(self.work_path, lambda file: file.write(f"{total}\n".encode()))
            self.declared = total

    def world(self) -> int | None:
        """The world size of the newest step, if any step ran."""
        steps = [e for e in self.events() if e["event"] == "step"]
        return steps[-1]["world"] if steps else None

    def stepping_at(self, world: int, *, after: float = 0.0) -> bool:
        """Every rank of a `world`-sized world started after `after` has stepped."""
        return first_full_step(self.events(), world=world, after=after) is not None

    def _noted(self, jobs: list[JSON]) -> None:
        for job in jobs:
            self._note(job)

    def _changed(self, kind: str, job: JSON) -> None:
        if kind in ("ADDED", "MODIFIED"):
            self._note(job)

    def _note(self, job: JSON) -> None:
        meta = job["metadata"]
        if (meta["namespace"], meta["name"]) != (self.namespace, self.name):
            return
        count = int(job["spec"]["pytorchReplicaSpecs"][c.WORKER]["replicas"])
        if not self.replica_history or self.replica_history[-1][1] != count:
            self.replica_history.append((time.time(), count))


@dataclass
class Scenario:
    """What a training scenario works with: its namespace, nodes, jobs, engine and records."""

    plane: ControlPlane
    api: client.ApiClient
    prometheus: PrometheusServer
    namespace: str
    workdir: Path
    nodes: Callable[..., NodeAgent]
    rescales: list[Rescale]  # every scenario's, for the session's summary line
    lost_jobs: list[str]
    ft_resizes: list[FtResize] = field(default_factory=list)  # torchft mode's, likewise
    ft_lost_steps: list[int] = field(default_factory=list)  # per torchft job

    jobs: list[TrainingJob] = field(default_factory=list)

    def job(self, name: str) -> TrainingJob:
        self.jobs.append(TrainingJob(self.api, self.namespace, name, self.workdir))
        return self.jobs[-1]

    def torchft_job(self, name: str) -> FaultTolerantJob:
        job = FaultTolerantJob(self.api, self.namespace, name, self.workdir)
        self.jobs.append(job)
        return job

    def engine(self, **overrides: Any) -> AbstractContextManager[ServiceProcess]:
        return running_engine(
            self.plane.kubeconfig_path,
            namespace=self.namespace,
            prometheus_url=self.prometheus.url,
            workdir=self.workdir,
            **overrides,
        )


def engine_settings(*, namespace: str, prometheus_url: str, workdir: Path) -> JSON:
    """The e2e engine's configuration: one namespace, capacity measured from the Nodes."""
    config = engine_config(
        namespace=namespace,
        prometheus_url=prometheus_url,
        capacity={},
        interval=ENGINE_INTERVAL,
        decision_log=workdir / "decisions.jsonl",
    )
    config.pop("capacity")  # measured from the Nodes, as the shipped default does
    config["prometheus"]["window"] = ENGINE_WINDOW
    config["settle"] = dict(ENGINE_SETTLE)
    return config


# What the e2e engine sets that does not shape a resize: where it looks and what it logs.
NOT_RESIZING = ("namespaces", "prometheus.url", "decision_log")


def engine_settings_changed() -> list[str]:
    """Every e2e engine setting that differs from the shipped default, as `name e2e (shipped)`."""

    def flat(tree: JSON, prefix: str = "") -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                found |= flat(value, f"{prefix}{key}.")
            else:
                found[f"{prefix}{key}"] = value
        return found

    ours = flat(engine_settings(namespace="", prometheus_url="", workdir=Path()))
    shipped = flat(EngineConfig().model_dump(mode="json"))
    return [
        f"{name} {value} (shipped {shipped[name]})"
        for name, value in ours.items()
        if name not in NOT_RESIZING and value != shipped[name]
    ]


def engine_settings_line() -> str:
    return "e2e engine, for test time, not the shipped defaults: " + ", ".join(
        engine_settings_changed()
    )


@contextmanager
def running_engine(
    plane_kubeconfig: Path, *, namespace: str, prometheus_url: str, workdir: Path, **overrides: Any
) -> Iterator[ServiceProcess]:
    """`autoscaler engine` sizing one namespace's jobs with `engine_settings` (and `overrides`)."""
    config = engine_settings(namespace=namespace, prometheus_url=prometheus_url, workdir=workdir)
    config.update(overrides)
    with engine_process(
        config, kubeconfig=plane_kubeconfig, lease_namespace=namespace, workdir=workdir
    ) as engine:
        yield engine


def finish(job: TrainingJob, *, timeout: float = 120) -> None:
    """Cuts the job's work short (`TrainingJob.cut_work`) and waits until it has succeeded."""
    job.cut_work()
    wait_succeeded(job, timeout=timeout)


def wait_succeeded(job: TrainingJob, *, timeout: float = 120) -> None:
    """Until the job has trained its declared work and succeeded."""
    wait_for(
        lambda: job.conditions().get("Succeeded") == "True",
        timeout=timeout,
        interval=1,
        what=f"{job.name} to finish its work and succeed",
    )


def restart_counts(job: TrainingJob) -> dict[str, int]:
    """Container restarts per pod of the job."""
    return {
        name: sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses", []))
        for name, pod in job.pods().items()
    }


@dataclass(frozen=True)
class PodsSeen:
    """A job's pods at one moment (uid, container restarts), to hold against a later moment."""

    at: float
    pods: dict[str, tuple[str, int]]


def pods_seen(job: TrainingJob) -> PodsSeen:
    at, uids = time.time(), {name: pod["metadata"]["uid"] for name, pod in job.pods().items()}
    counts = restart_counts(job)
    return PodsSeen(at, {name: (uid, counts.get(name, 0)) for name, uid in uids.items()})


def kept_since(job: TrainingJob, seen: PodsSeen) -> dict[str, int]:
    """The pods there both then and now (the same pod, by uid): container restarts since."""
    now = pods_seen(job).pods
    return {
        name: count - seen.pods[name][1]
        for name, (uid, count) in now.items()
        if name in seen.pods and seen.pods[name][0] == uid
    }


def node_ready(core: client.CoreV1Api, node: str) -> bool:
    conditions = core.read_node(node).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_stepping(
    job: TrainingJob, world: int, *, after: float = 0.0, timeout: float = 120
) -> None:
    """Until every rank of a `world`-sized world of `job` has stepped since `after`."""
    wait_for(
        lambda: job.stepping_at(world, after=after),
        timeout=timeout,
        interval=0.5,
        what=f"{job.name} to train at world size {world}",
    )


TORCHFT_EXAMPLE = REPO_ROOT / "examples" / "torchft"
TORCHFT_CHECKPOINT_EVERY = 50


class FaultTolerantJob(TrainingJob):
    """A PyTorchJob of `examples/torchft`: each worker a torchft replica group."""

    def manifest(  # type: ignore[override]
        self,
        *,
        replicas: int = 1,
        low: int = 1,
        high: int = 4,
        total_samples: int,
        annotations: dict[str, str] | None = None,
    ) -> JSON:
        """The example manifest with this test's paths and work (as `TrainingJob.manifest`)."""
        job: JSON = yaml.safe_load((TORCHFT_EXAMPLE / "job.yaml").read_text())
        job["metadata"] = {
            "name": self.name,
            "namespace": self.namespace,
            "annotations": {**job["metadata"]["annotations"], **(annotations or {})},
        }
        job["spec"]["elasticPolicy"] = {"minReplicas": low, "maxReplicas": high}
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        ours = {
            "--checkpoint": self.checkpoint_path,
            "--checkpoint-every": TORCHFT_CHECKPOINT_EVERY,
            "--events": self.events_path,
            "--total-samples": total_samples,
            "--work-file": self.work_path,
        }
        self.declared = total_samples
        script = TORCHFT_EXAMPLE / "train.py"
        return with_test_paths(job, replicas=replicas, script=script, ours=ours)

    @property
    def checkpoint_path(self) -> Path:
        return self.workdir / "checkpoints" / "model.pt"

    def commits(self, *, after: float = 0.0) -> list[Event]:
        return [e for e in self.events() if e["event"] == "commit" and e["time"] > after]

    def training_with(self, groups: int, *, after: float = 0.0, restarted: bool = False) -> bool:
        """A step since `after` committed with `groups` participants by every one of them
        (`restarted`: processes started after `after`)."""
        started = {
            e["process"] for e in self.events() if e["event"] == "start" and e["time"] > after
        }
        by_step: dict[int, set[str]] = {}
        for e in self.commits(after=after):
            if restarted and e["process"] not in started:
                continue
            if e["ok"] and not e["healing"] and e["participants"] == groups:
                by_step.setdefault(e["step"], set()).add(e["process"])
        return any(len(processes) == groups for processes in by_step.values())


def wait_groups(
    job: FaultTolerantJob, groups: int, *, after: float = 0.0, timeout: float = 120
) -> None:
    wait_for(
        lambda: job.training_with(groups, after=after),
        timeout=timeout,
        interval=0.5,
        what=f"{job.name} to commit steps with {groups} replica groups",
    )


def reasons(scenario: Scenario, name: str, *, after: float = 0.0) -> list[str]:
    """The engine's decisions' reasons for job `name` since `after`, oldest first."""
    log = scenario.workdir / "decisions.jsonl"
    records = read_decision_log(log) if log.exists() else []
    return [
        r["reason"]
        for r in records
        if r["name"] == name and datetime.fromisoformat(r["time"]).timestamp() > after
    ]


def sized(scenario: Scenario, name: str) -> bool:
    """Whether the engine's latest decision for `name` was the policy's, on a reading at its
    count (held for no missing data, cooldown or recovery)."""
    latest = reasons(scenario, name)[-1:]
    return bool(latest) and latest[0] not in ("MetricsUnavailable", "RescaleCooldown", "Recovering")
