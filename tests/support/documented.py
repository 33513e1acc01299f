"""The differential conformance suite's documented differences, each a predicate over one
difference: where it is (case, step, object and field, matched whole) and what each operator
holds there. A difference no predicate explains is undocumented."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.conformance import Difference

Value = Callable[..., bool]  # the value, then `where`'s named groups as keywords


@dataclass(frozen=True)
class Known:
    """One documented difference: `where` (a regular expression the whole labelled path must
    match), a rule for this operator's value and one for upstream's, and the words of the
    PyTorchJob reference that state it (checked to be there). A rule also gets the named groups
    of `where` as keywords, so a value can be judged against the object it sits on."""

    where: str
    ours: Value
    theirs: Value
    words: str

    def explains(self, found: Difference) -> bool:
        path, ours, theirs = found
        match = re.fullmatch(self.where, path)
        if match is None:
            return False
        groups = match.groupdict()
        return bool(self.ours(ours, **groups) and self.theirs(theirs, **groups))


def absent(value: Any, **_: str) -> bool:
    return value is None


def equal(expected: Any) -> Value:
    return lambda value, **_: value == expected


def env_var(name: str, value: Value) -> Value:
    """An environment variable `name` whose value satisfies `value`."""
    return lambda var, **_: (
        isinstance(var, dict) and var.get("name") == name and value(var.get("value"))
    )


def rendezvous_config(**expected: str) -> Value:
    """Text that parses as torchrun's `--rdzv-conf` (`k=v,...`) into exactly `expected`."""

    def parses(text: Any, **_: str) -> bool:
        pairs = [item.split("=", 1) for item in str(text).split(",")]
        return (
            all(len(p) == 2 for p in pairs)
            and dict(pairs) == expected
            and len(pairs) == len(expected)
        )

    return parses


def messages(*patterns: str) -> Value:
    """The distinct messages of one kind of Event: exactly one matching each pattern, in order."""
    return lambda found, **_: (
        isinstance(found, list)
        and len(found) == len(patterns)
        and all(re.fullmatch(p, m) for p, m in zip(patterns, found, strict=True))
    )


PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def packing_of(job: str) -> dict[str, Any]:
    """The affinity this operator gives each worker of elastic job `job`: one preferred term,
    weight 100, for a node running the job's own workers."""
    workers = {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": "worker",
    }
    term = {"labelSelector": {"matchLabels": workers}, "topologyKey": "kubernetes.io/hostname"}
    return {"podAffinity": {PREFERRED: [{"weight": 100, "podAffinityTerm": term}]}}


def packing(found: Any, *, job: str) -> bool:
    """Exactly `packing_of` the job whose worker the pod is."""
    return bool(found == packing_of(job))


JOB = r"[a-z0-9-]+"
ANY_CASE = r".+"  # a case name may hold a slash ("... through /scale")
POD_ENV = rf"objects [^:]+: Pod/{JOB}-worker-\d+\.spec\.containers\[pytorch\]\.env"
EVENTS = r"lifecycle {case} / events: \.{kind}"
DEADLINE = r"lifecycle activeDeadlineSeconds / deadline passed, nothing else happened: "
SPREAD = r"lifecycle scale-down across nodes / scaled to 2: "  # worker-1 alone on its node
RESTARTS = r"job ([a-z0-9-]+) is restarting because Worker replica\(s\) failed\."
STATUS_RESTARTS = r"PyTorchJob [a-z0-9-]+ is restarting because 1 Worker replica\(s\) failed\."
FAILED_WORKER = r"worker failed, (OnFailure|Never|ExitCode retryable|ExitCode permanent)"

DOCUMENTED: tuple[Known, ...] = (
    Known(
        rf"objects [^:]+: Pod/(?P<job>{JOB})-worker-\d+\.spec\.affinity",
        packing,
        absent,
        "get a preferred pod affinity to the job's own workers",
    ),
    Known(
        rf"objects [^:]+: Pod/{JOB}-worker-\d+\.spec\.schedulingGates",
        equal([{"name": "elastic-autoscaler.io/placement"}]),
        absent,
        "held by the scheduling gate `elastic-autoscaler.io/placement`, which the operator lifts",
    ),
    Known(
        rf"{POD_ENV}\[TORCH_DISABLE_SHARE_RDZV_TCP_STORE\]",
        env_var("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", equal("1")),
        absent,
        "get `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`",
    ),
    Known(
        rf"{POD_ENV}\[PET_RDZV_CONF\]",
        env_var(
            "PET_RDZV_CONF",
            rendezvous_config(
                last_call_timeout="3", keep_alive_interval="2", keep_alive_max_attempt="3"
            ),
        ),
        absent,
        "`PET_RDZV_CONF=last_call_timeout=3,keep_alive_interval=2,",
    ),
    Known(
        r"lifecycle Master\+Worker / master succeeded: \.status\.replicaStatuses\.Worker\.selector",
        equal(
            "training.kubeflow.org/job-name=l-mw,"
            "training.kubeflow.org/operator-name=pytorchjob-controller,"
            "training.kubeflow.org/replica-type=worker"
        ),
        absent,
        "keeps the Worker's `selector` only when Go's map order",
    ),
    Known(
        EVENTS.format(case=FAILED_WORKER, kind="Warning/Error"),
        messages(rf"Error pod {JOB}-worker-1 container pytorch exitCode: \d+ terminated message: "),
        absent,
        "here a Failed pod's non-zero exits are reported too",
    ),
    Known(
        EVENTS.format(
            case="worker failed, (OnFailure|ExitCode retryable)",
            kind="Warning/PyTorchJobRestarting",
        ),
        messages(RESTARTS),
        messages(STATUS_RESTARTS, RESTARTS),
        "the second `PyTorchJobRestarting` its status update sends",
    ),
    Known(
        EVENTS.format(
            case="worker failed, ExitCode permanent", kind="Warning/PyTorchJobRestarting"
        ),
        absent,
        messages(STATUS_RESTARTS),
        "exit is permanent and nothing restarts, where upstream sends it too",
    ),
    Known(
        EVENTS.format(case="ttlSecondsAfterFinished", kind="Normal/SuccessfulDeletePod"),
        absent,
        messages(r"Deleted job: l-ttl"),
        "it records on a job it deletes at the end of its TTL",
    ),
    Known(
        EVENTS.format(case="ttlSecondsAfterFinished", kind="Warning/FailedDeletePod"),
        absent,
        messages(r'Error deleting: pytorchjobs\.kubeflow\.org "l-ttl" not found'),
        "a second pass that reaches the TTL after the first deleted the job",
    ),
    Known(
        EVENTS.format(case=ANY_CASE, kind="Warning/FailedCreatePod"),
        absent,
        lambda found, **_: (
            isinstance(found, list)
            and bool(found)
            and all(
                re.fullmatch(rf'Error creating: pods "{JOB}-(master|worker)-\d+" already exists', m)
                for m in found
            )
        ),
        "once any one of its expectations is met",
    ),
    Known(
        EVENTS.format(case=ANY_CASE, kind="Warning/FailedCreateService"),
        absent,
        lambda found, **_: (
            isinstance(found, list)
            and bool(found)
            and all(
                re.fullmatch(
                    rf'Error creating: services "{JOB}-(master|worker)-\d+" already exists', m
                )
                for m in found
            )
        ),
        "once any one of its expectations is met",
    ),
    Known(
        rf"{SPREAD}\.pods\.l-spread-worker-1",
        absent,
        equal("Running"),
        "removes the workers on its least-filled nodes first",
    ),
    Known(
        rf"{SPREAD}\.pods\.l-spread-worker-2",
        equal("Running"),
        absent,
        "removes the workers on its least-filled nodes first",
    ),
    Known(
        rf"{SPREAD}\.services\[1\]",
        equal("l-spread-worker-2"),
        equal("l-spread-worker-1"),
        "removes the workers on its least-filled nodes first",
    ),
    *(
        Known(
            EVENTS.format(case="scale-down across nodes", kind=f"Normal/SuccessfulDelete{kind}")
            + r"\[0\]",
            equal(f"Deleted {kind.lower()}: l-spread-worker-1"),
            equal(f"Deleted {kind.lower()}: l-spread-worker-2"),
            "removes the workers on its least-filled nodes first",
        )
        for kind in ("Pod", "Service")
    ),
    Known(
        rf"{DEADLINE}\.status\.conditions\[Failed\]",
        equal(
            {
                "type": "Failed",
                "status": "True",
                "reason": "PyTorchJobFailed",
                "message": "Job l-deadline has failed because it was active longer than "
                "specified deadline",
            }
        ),
        absent,
        "only on the job's next event",
    ),
    Known(
        rf"{DEADLINE}\.status\.conditions\[Running\]\.status",
        equal("False"),
        equal("True"),
        "only on the job's next event",
    ),
)


def undocumented(found: list[Difference]) -> list[Difference]:
    """The differences no documented one explains."""
    return [d for d in found if not any(k.explains(d) for k in DOCUMENTED)]
