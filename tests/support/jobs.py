"""Job manifests for tests: the upstream examples and a table of invalid jobs.

Each invalid case names the field and the message the API server reports; the same table runs
against the real kube-apiserver and against the offline validator, so the two cannot drift.
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]
UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"
UPSTREAM_JOBS = ("echo.yaml", "imagenet.yaml", "etcd-job.yaml")


def upstream_job(name: str) -> JSON:
    job: JSON = yaml.safe_load((UPSTREAM / name).read_text())
    return job


def echo_with(edit: Callable[[JSON], object]) -> JSON:
    """The upstream echo job (elastic 1..2, Worker replicas 2) changed by `edit`."""
    job = upstream_job("echo.yaml")
    edit(job)
    return job


def spec(job: JSON) -> JSON:
    result: JSON = job["spec"]
    return result


def worker(job: JSON) -> JSON:
    result: JSON = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    return result


def container(job: JSON) -> JSON:
    result: JSON = worker(job)["template"]["spec"]["containers"][0]
    return result


def elastic(job: JSON) -> JSON:
    result: JSON = job["spec"]["elasticPolicy"]
    return result


def with_master(job: JSON, *, replicas: int) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Master"] = {
        **copy.deepcopy(worker(job)),
        "replicas": replicas,
    }


@dataclass(frozen=True)
class Invalid:
    id: str
    job: JSON
    field: str
    message: str


WORKER_BOUNDS = "[elasticPolicy.minReplicas, elasticPolicy.maxReplicas]"
INVALID = [
    Invalid(
        "name-not-dns-1035",
        echo_with(lambda j: j["metadata"].update(name="9lives")),
        "metadata.name",
        'Invalid value: metadata.name "9lives" must be a DNS-1035 label: at most 63 lowercase '
        "letters, digits or '-', starting with a letter and ending with a letter or digit",
    ),
    Invalid(
        "min-exceeds-max",
        echo_with(lambda j: elastic(j).update(minReplicas=3, maxReplicas=2)),
        "spec.elasticPolicy.minReplicas",
        "Invalid value: elasticPolicy.minReplicas (3) must not exceed elasticPolicy.maxReplicas (2)",
    ),
    Invalid(
        "min-zero",
        echo_with(lambda j: elastic(j).update(minReplicas=0)),
        "spec.elasticPolicy.minReplicas",
        "Invalid value: 0: spec.elasticPolicy.minReplicas in body should be greater than or equal to 1",
    ),
    Invalid(
        "max-zero",
        echo_with(lambda j: elastic(j).update(maxReplicas=0)),
        "spec.elasticPolicy.maxReplicas",
        "Invalid value: 0: spec.elasticPolicy.maxReplicas in body should be greater than or equal to 1",
    ),
    Invalid(
        "min-not-integer",
        echo_with(lambda j: elastic(j).update(minReplicas="two")),
        "spec.elasticPolicy.minReplicas",
        'Invalid value: "string": spec.elasticPolicy.minReplicas in body must be of type integer: "string"',
    ),
    Invalid(
        "rdzv-backend-unknown",
        echo_with(lambda j: elastic(j).update(rdzvBackend="zookeeper")),
        "spec.elasticPolicy.rdzvBackend",
        'Unsupported value: "zookeeper": supported values: "c10d", "etcd", "etcd-v2"',
    ),
    Invalid(
        "rdzv-port-too-high",
        echo_with(lambda j: elastic(j).update(rdzvPort=70000)),
        "spec.elasticPolicy.rdzvPort",
        "Invalid value: 70000: spec.elasticPolicy.rdzvPort in body should be less than or equal to 65535",
    ),
    Invalid(
        "worker-above-max",
        echo_with(lambda j: worker(j).update(replicas=5)),
        "spec.pytorchReplicaSpecs[Worker].replicas",
        f"Invalid value: pytorchReplicaSpecs.Worker.replicas (5) must be within {WORKER_BOUNDS} = [1, 2]",
    ),
    Invalid(
        "worker-below-only-min",
        echo_with(lambda j: (elastic(j).pop("maxReplicas"), elastic(j).update(minReplicas=3))),
        "spec.pytorchReplicaSpecs[Worker].replicas",
        f"Invalid value: pytorchReplicaSpecs.Worker.replicas (2) must be within {WORKER_BOUNDS} = [3, 3]",
    ),
    Invalid(
        "worker-replicas-zero",
        echo_with(lambda j: worker(j).update(replicas=0)),
        "spec.pytorchReplicaSpecs.Worker.replicas",
        "Invalid value: 0: spec.pytorchReplicaSpecs.Worker.replicas in body should be greater than or equal to 1",
    ),
    Invalid(
        "elastic-without-worker",
        echo_with(
            lambda j: spec(j).update(pytorchReplicaSpecs={"Master": {**worker(j), "replicas": 1}})
        ),
        "spec.pytorchReplicaSpecs",
        "Required value: pytorchReplicaSpecs.Worker must be configured if elastic policy is used",
    ),
    Invalid(
        "master-replicas-two",
        echo_with(lambda j: with_master(j, replicas=2)),
        "spec.pytorchReplicaSpecs[Master].replicas",
        "Invalid value: pytorchReplicaSpecs.Master.replicas must be 1, got 2",
    ),
    Invalid(
        "replica-type-unknown",
        echo_with(lambda j: spec(j)["pytorchReplicaSpecs"].update(Chief=copy.deepcopy(worker(j)))),
        "spec.pytorchReplicaSpecs",
        'Invalid value: replica types must be exactly "Master" or "Worker" (case-sensitive)',
    ),
    Invalid(
        "replica-type-lowercase",
        echo_with(
            lambda j: spec(j).update(pytorchReplicaSpecs={"worker": worker(j)}, elasticPolicy=None)
        ),
        "spec.pytorchReplicaSpecs",
        'Invalid value: replica types must be exactly "Master" or "Worker" (case-sensitive)',
    ),
    Invalid(
        "no-replica-specs",
        echo_with(lambda j: (spec(j).pop("elasticPolicy"), spec(j).update(pytorchReplicaSpecs={}))),
        "spec.pytorchReplicaSpecs",
        "Invalid value: 0: spec.pytorchReplicaSpecs in body should have at least 1 properties",
    ),
    Invalid(
        "no-containers",
        echo_with(lambda j: worker(j)["template"]["spec"].update(containers=[])),
        "spec.pytorchReplicaSpecs[Worker].template",
        "Required value: template.spec.containers must not be empty",
    ),
    Invalid(
        "no-template",
        echo_with(lambda j: worker(j).pop("template")),
        "spec.pytorchReplicaSpecs[Worker].template",
        "Required value: template.spec.containers must not be empty",
    ),
    Invalid(
        "container-without-image",
        echo_with(lambda j: container(j).pop("image")),
        "spec.pytorchReplicaSpecs[Worker].template",
        'Required value: container "pytorch" must have an image',
    ),
    Invalid(
        "no-pytorch-container",
        echo_with(lambda j: container(j).update(name="trainer")),
        "spec.pytorchReplicaSpecs[Worker].template",
        'Required value: template.spec.containers must include a container named "pytorch"',
    ),
    Invalid(
        "template-wrong-type",
        echo_with(lambda j: container(j).update(command="python echo.py")),
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command",
        'Invalid value: "string": spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command '
        'in body must be of type array: "string"',
    ),
    Invalid(
        "both-nproc-fields",
        echo_with(lambda j: (spec(j).update(nprocPerNode="2"), elastic(j).update(nProcPerNode=2))),
        "spec.elasticPolicy.nProcPerNode",
        "Forbidden: elasticPolicy.nProcPerNode is deprecated and must not be set together with "
        "nprocPerNode: use only nprocPerNode",
    ),
    Invalid(
        "nproc-per-node-garbage",
        echo_with(lambda j: spec(j).update(nprocPerNode="4 gpus")),
        "spec.nprocPerNode",
        'Invalid value: nprocPerNode "4 gpus" is not a form torchrun accepts: a positive integer, '
        "auto, cpu, gpu, xpu or an accelerator backend name",
    ),
    Invalid(
        "nproc-per-node-zero",
        echo_with(lambda j: spec(j).update(nprocPerNode="0")),
        "spec.nprocPerNode",
        'Invalid value: nprocPerNode "0" is not a form torchrun accepts: a positive integer, '
        "auto, cpu, gpu, xpu or an accelerator backend name",
    ),
    Invalid(
        "rdzv-conf-empty-key",
        echo_with(lambda j: elastic(j).update(rdzvConf=[{"key": "", "value": "3"}])),
        "spec.elasticPolicy.rdzvConf",
        "Invalid value: every rdzvConf entry needs a non-empty key and value: torchrun reads them "
        "as key=value pairs",
    ),
    Invalid(
        "rdzv-conf-no-value",
        echo_with(lambda j: elastic(j).update(rdzvConf=[{"key": "timeout"}])),
        "spec.elasticPolicy.rdzvConf",
        "Invalid value: every rdzvConf entry needs a non-empty key and value: torchrun reads them "
        "as key=value pairs",
    ),
    Invalid(
        "clean-pod-policy-unknown",
        echo_with(lambda j: spec(j).update(runPolicy={"cleanPodPolicy": "Some"})),
        "spec.runPolicy.cleanPodPolicy",
        'Unsupported value: "Some": supported values: "None", "Running", "All"',
    ),
    Invalid(
        "restart-policy-unknown",
        echo_with(lambda j: worker(j).update(restartPolicy="Sometimes")),
        "spec.pytorchReplicaSpecs.Worker.restartPolicy",
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never", "ExitCode"',
    ),
    Invalid(
        "managed-by-unknown",
        echo_with(lambda j: spec(j).update(runPolicy={"managedBy": "example.com/mine"})),
        "spec.runPolicy.managedBy",
        'Unsupported value: "example.com/mine": supported values: "kubeflow.org/training-operator", '
        '"kueue.x-k8s.io/multikueue"',
    ),
    Invalid(
        "backoff-limit-negative",
        echo_with(lambda j: spec(j).update(runPolicy={"backoffLimit": -1})),
        "spec.runPolicy.backoffLimit",
        "Invalid value: -1: spec.runPolicy.backoffLimit in body should be greater than or equal to 0",
    ),
    Invalid(
        "metrics-empty",
        echo_with(lambda j: elastic(j).update(metrics=[])),
        "spec.elasticPolicy.metrics",
        "Invalid value: 0: spec.elasticPolicy.metrics in body should have at least 1 items",
    ),
    Invalid(
        "metric-without-type",
        echo_with(
            lambda j: elastic(j).update(
                metrics=[{"resource": {"name": "cpu", "target": {"type": "Utilization"}}}]
            )
        ),
        "spec.elasticPolicy.metrics[0].type",
        "Required value",
    ),
]


def queued_echo() -> JSON:
    """The echo job in a scheduling queue: the stored object the update cases start from."""
    return echo_with(lambda j: spec(j).update(runPolicy={"schedulingPolicy": {"queue": "q1"}}))


# Updates of `queued_echo()`: (id, edit, field, message).
INVALID_UPDATES: list[tuple[str, Callable[[JSON], object], str, str]] = [
    (
        "managed-by-changed",
        lambda j: spec(j).update(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}),
        "spec.runPolicy.managedBy",
        "Invalid value: runPolicy.managedBy is immutable",
    ),
    (
        "queue-changed",
        lambda j: spec(j)["runPolicy"]["schedulingPolicy"].update(queue="other"),
        "spec.runPolicy.schedulingPolicy.queue",
        'Invalid value: "other": spec.runPolicy.schedulingPolicy.queue is immutable',
    ),
]


# Forms torchrun's `--nproc-per-node` accepts (torch 2.15 `determine_local_world_size`): accepted
# at apply as upstream accepts them; `npu` stands for any registered accelerator backend name.
TORCHRUN_NPROC_FORMS = ("auto", "cpu", "gpu", "xpu", "npu", "8")


def echo_with_nproc(value: str) -> JSON:
    return echo_with(lambda j: spec(j).update(nprocPerNode=value))
