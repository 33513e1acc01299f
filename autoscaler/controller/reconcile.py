"""The reconcile step as a pure function: (job, observed objects, now) -> a plan of writes.

Mirrors upstream's `Reconcile` (kubeflow/training-operator v1.9, `pkg/controller.v1/common`
and `pytorchjob_controller.go`): HPA first, then finished/suspended/failed
handling, then pods and services slot by slot, then status. The loop in `runner.py` applies
the plan through `autoscaler.clients`; nothing here does I/O or reads the clock.
"""

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.defaults import default_job
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.api.timestamps import format_timestamp, parse_timestamp
from autoscaler.controller import conditions as cond
from autoscaler.controller import rendezvous, torchft
from autoscaler.controller.builders import (
    UPSTREAM_DEFAULTS,
    PodSettings,
    desired_hpa,
    desired_pod,
    desired_service,
)
from autoscaler.controller.gang import (
    CUSTOM_SCHEDULER_MESSAGE,
    PODGROUP_KIND,
    GangScheduler,
    bound_pods,
    custom_scheduler_set,
    desired_podgroup,
    min_member,
    pods_may_start,
)
from autoscaler.controller.naming import replica_selector
from autoscaler.controller.pods import (
    container_statuses,
    exit_code,
    is_terminating,
    latest_condition,
    phase,
    replica_index,
    replica_type_of,
    restart_count,
)
from autoscaler.controller.status import by_value, count_replicas, is_subset

TEMPLATE_RESTART_MESSAGE = (
    "Restart policy in pod template will be overwritten by restart policy in replica spec"
)
RETRYABLE_EXIT = 128  # ExitCode policy: codes >= 128 (signals) and "no exit code" are retried


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    # Set for an Event about a fact that stays visible pass after pass (a terminated container):
    # the runner sends it once per key, as client-go's event correlator folds repeats into one.
    once: str | None = None


@dataclass(frozen=True)
class Observed:
    """The job's pods and services (controlled by it), and the HPA named like it, if any.

    With gang scheduling: the PodGroup named like the job, whether the API server serves
    PodGroups at all, and the value of each PriorityClass (for the group's minResources).
    """

    pods: list[JSON] = field(default_factory=list)
    services: list[JSON] = field(default_factory=list)
    hpa: JSON | None = None
    podgroup: JSON | None = None
    podgroup_api_missing: bool = False
    priorities: Mapping[str, int] = field(default_factory=dict)
    # Under the Kueue integration: the Worker count of a scale-up Kueue has not admitted yet.
    queued_workers: int | None = None


@dataclass
class Plan:
    create: list[JSON] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    update: list[JSON] = field(default_factory=list)
    status: JSON | None = None  # the new status, only when it changed
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # What upstream's job counters count in this pass: "created", "successful", "failed" when
    # that condition becomes true, "restarted" per restart; "deleted" is the runner's, on
    # `delete_job` done.
    lifecycle: list[str] = field(default_factory=list)
    # The Failed pods this pass saw (uids), for upstream's `failed_pods_total`: the runner counts
    # each pod once, where upstream counts it again on every pass until it is gone.
    failed_pods: list[str] = field(default_factory=list)

    @property
    def writes(self) -> int:
        changes = len(self.create) + len(self.delete) + len(self.update) + len(self.events)
        return changes + (self.status is not None) + self.delete_job


def plan(
    job: JSON,
    observed: Observed,
    *,
    now: datetime,
    settings: PodSettings = UPSTREAM_DEFAULTS,
    gang: GangScheduler | None = None,
) -> Plan:
    """Everything the operator should write for `job` now, given what exists; `gang`: the
    `--gang-scheduler-name` setting, None without gang scheduling."""
    parsed = PyTorchJob.model_validate(job)
    managed_by = parsed.spec.run_policy.managed_by
    if managed_by not in (None, c.MANAGED_BY_TRAINING_OPERATOR):
        return Plan()
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return Plan()
    status = job.get("status") or {}
    planner = _Planner(
        default_job(parsed), observed, now=now, status=status, settings=settings, gang=gang
    )
    return planner.run()


class _Planner:
    def __init__(
        self,
        job: PyTorchJob,
        observed: Observed,
        *,
        now: datetime,
        status: JSON,
        settings: PodSettings,
        gang: GangScheduler | None,
    ) -> None:
        self.job, self.observed, self.now = job, observed, now
        self.settings, self.gang = settings, gang
        self.fault_tolerant = torchft.requested(job)
        self.own_store = rendezvous.requested(job)
        self.old_status = status
        self.status: dict[str, Any] = copy.deepcopy(status)
        self.status["conditions"] = list(self.status.get("conditions") or [])
        self.result = Plan()

    # -- the pass ----------------------------------------------------------------------------

    def run(self) -> Plan:
        if not self.status["conditions"]:
            self.condition(
                cond.CREATED, "True", "Created", f"PyTorchJob {self.job.name} is created."
            )
            self.warn_deprecated()
        self.reconcile_hpa()
        if self.gang is None:  # left by an earlier run with gang scheduling
            self.status["conditions"] = cond.set_side_condition(
                self.status["conditions"], None, now=self.now, type_=cond.GANG_CONDITION
            )
        self.report_queued_scale_up()
        invalid = self.check_fault_tolerance() | self.check_rendezvous()
        if cond.is_finished(self.status["conditions"]):
            self.finish()
        elif self.job.spec.run_policy.suspend:
            self.suspend()
        else:
            self.resume_if_suspended()
            self.abnormal_pod_warnings()
            failure = self.past_limits()
            if failure:
                self.fail_job(failure)
            elif not invalid:  # held as it is until the annotation is fixed
                self.reconcile_replicas()
        return self.done()

    def report_queued_scale_up(self) -> None:
        """`QuotaAdmitted=False` while a scale-up waits for Kueue to admit its Workload slice."""
        queued = self.observed.queued_workers
        new = None
        if queued is not None:
            message = (
                f"the scale-up to {queued} workers waits for Kueue to admit its Workload slice"
            )
            new = cond.Condition(
                type=cond.QUOTA_CONDITION,
                status="False",
                reason="WorkloadSlicePending",
                message=message,
            )
        self.status["conditions"] = cond.set_side_condition(
            self.status["conditions"], new, now=self.now, type_=cond.QUOTA_CONDITION
        )

    def check_fault_tolerance(self) -> bool:
        """A Warning and a False `FaultTolerance` condition while the torchft settings are
        invalid (True: invalid)."""
        return self.side_problem(
            torchft.problem(self.job), type_=cond.FAULT_TOLERANCE, reason="InvalidFaultTolerance"
        )

    def check_rendezvous(self) -> bool:
        """A Warning and a False `Rendezvous` condition while the rendezvous store annotation
        cannot be run (True: it cannot)."""
        problem = rendezvous.problem(self.job)
        if problem is None and self.own_store and self.fault_tolerant:
            problem = f"{rendezvous.ANNOTATION} is for torchrun: a torchft job has no rendezvous"
        return self.side_problem(problem, type_=cond.RENDEZVOUS, reason="InvalidRendezvous")

    def side_problem(self, problem: str | None, *, type_: str, reason: str) -> bool:
        """The side condition `type_` False with `reason` while `problem` stands, a Warning when
        it first does (True: it stands)."""
        before = self.status["conditions"]
        new = None
        if problem is not None:
            message = f"{problem}; no pods are created until it is fixed"
            new = cond.Condition(type=type_, status="False", reason=reason, message=message)
        self.status["conditions"] = cond.set_side_condition(before, new, now=self.now, type_=type_)
        if new is not None and self.status["conditions"] != before:
            self.event("Warning", new.reason, new.message)
        return problem is not None

    def done(self) -> Plan:
        new = {key: value for key, value in self.status.items() if value not in (None, [], {})}
        old = {key: value for key, value in self.old_status.items() if value not in (None, [], {})}
        if new != old:
            self.result.status = new
        self.result.lifecycle = lifecycle(
            self.old_status.get("conditions") or [], self.status["conditions"], self.result.events
        )
        return self.result

    # -- HPA (owned by the job; removed with `metrics`) -----------------------------------------

    def reconcile_hpa(self) -> None:
        desired = None if self.job.spec.run_policy.suspend else desired_hpa(self.job)
        current = self.observed.hpa
        if current is not None and not self.owns(current):
            if desired is not None:
                self.hpa_not_owned(current)
            return
        self.status["conditions"] = cond.set_side_condition(
            self.status["conditions"], None, now=self.now
        )
        if desired is None:
            if current is not None:
                self.result.delete.append(("HorizontalPodAutoscaler", self.job.name))
        elif current is None:
            self.result.create.append(desired)
        elif not is_subset(by_value(desired["spec"]), by_value(current.get("spec") or {})):
            resource_version = current["metadata"].get("resourceVersion")
            desired["metadata"]["resourceVersion"] = resource_version
            self.result.update.append(desired)

    def hpa_not_owned(self, hpa: JSON) -> None:
        message = (
            f"HorizontalPodAutoscaler {self.job.name} exists and is not owned by this job: "
            "it is left alone, so elasticPolicy.metrics are not applied"
        )
        before = self.status["conditions"]
        new = cond.Condition(
            type=cond.HPA_CONDITION, status="False", reason="HPANotOwned", message=message
        )
        self.status["conditions"] = cond.set_side_condition(before, new, now=self.now)
        if self.status["conditions"] != before:
            self.event("Warning", "HPANotOwned", message)

    def owns(self, obj: JSON) -> bool:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        return any(
            ref.get("controller") and ref.get("uid") == self.job.metadata.uid for ref in refs
        )

    # -- finished, suspended, failed -----------------------------------------------------------

    def finish(self) -> None:
        policy = self.job.spec.run_policy.clean_pod_policy
        if policy == "All":
            self.delete_everything()
        elif policy == "Running":
            for pod in self.observed.pods:
                if phase(pod) in ("Running", "Pending"):
                    self.delete_pod_and_service(pod)
        self.delete_lighthouse()  # whatever cleanPodPolicy says: it would run forever
        self.delete_store()  # likewise
        self.delete_podgroup()
        if cond.has_condition(self.status["conditions"], cond.SUCCEEDED):
            for counts in (self.status.get("replicaStatuses") or {}).values():
                counts["succeeded"] = counts.get("succeeded", 0) + counts.pop("active", 0)
        self.expire_after_ttl()

    def expire_after_ttl(self) -> None:
        ttl = self.job.spec.run_policy.ttl_seconds_after_finished
        completed = self.status.get("completionTime")
        if ttl is None or completed is None:
            return
        remaining = (parse_timestamp(completed) + timedelta(seconds=ttl) - self.now).total_seconds()
        if remaining <= 0:
            self.result.delete_job = True
        else:
            self.result.requeue_after = remaining

    def suspend(self) -> None:
        self.delete_everything()
        self.delete_podgroup()
        for counts in (self.status.get("replicaStatuses") or {}).values():
            counts.pop("active", None)
        message = f"PyTorchJob {self.job.name} is suspended."
        if cond.has_condition(self.status["conditions"], cond.RUNNING):
            self.condition(cond.RUNNING, "False", "Suspended", message)
        if not cond.has_condition(self.status["conditions"], cond.SUSPENDED):
            self.condition(cond.SUSPENDED, "True", "Suspended", message)
            self.event("Normal", cond.reason("Suspended"), message)

    def resume_if_suspended(self) -> None:
        if cond.has_condition(self.status["conditions"], cond.SUSPENDED):
            message = f"PyTorchJob {self.job.name} is resumed."
            self.condition(cond.SUSPENDED, "False", "Resumed", message)
            self.event("Normal", cond.reason("Resumed"), message)
            self.status["startTime"] = format_timestamp(self.now)

    def past_limits(self) -> str | None:
        """Why the job must fail now (backoff limit or deadline), else None."""
        policy = self.job.spec.run_policy
        if policy.backoff_limit is not None and self.past_backoff_limit(policy.backoff_limit):
            return "it has reached the specified backoff limit"
        deadline, started = policy.active_deadline_seconds, self.status.get("startTime")
        if deadline is not None and started is not None:
            remaining = deadline - (self.now - parse_timestamp(started)).total_seconds()
            if remaining <= 0:
                return "it was active longer than specified deadline"
            self.result.requeue_after = remaining
        return None

    def past_backoff_limit(self, limit: int) -> bool:
        restarting = {
            name
            for name, spec in self.job.spec.pytorch_replica_specs.items()
            if spec.restart_policy != "Never"
        }
        pods = [pod for pod in self.observed.pods if replica_type_of(pod) in restarting]
        restarts = sum(restart_count(pod) for pod in pods if phase(pod) == "Running")
        if restarts >= limit if limit > 0 else restarts > 0:
            return True
        # New whole-pod failures count only against a limit of 0 (upstream's requeue counter).
        failed_now = sum(phase(pod) == "Failed" for pod in self.observed.pods)
        failed_before = sum(
            s.get("failed", 0) for s in (self.status.get("replicaStatuses") or {}).values()
        )
        return limit == 0 and failed_now > failed_before

    def fail_job(self, why: str) -> None:
        """Failed first, then cleaned up as a finished job, so `cleanPodPolicy` holds (upstream
        v1.9.4; v1.9.3 deleted every pod whatever the policy)."""
        self.status.setdefault("completionTime", format_timestamp(self.now))
        message = f"Job {self.job.name} has failed because {why}"
        self.condition(cond.FAILED, "True", "Failed", message)
        self.event("Normal", cond.reason("Failed"), message)
        self.finish()

    # -- pods and services, slot by slot --------------------------------------------------------

    def reconcile_replicas(self) -> None:
        if self.gang is not None and not self.reconcile_podgroup(self.gang):
            return  # upstream: no pods, services or replica statuses until the group allows
        lighthouse = self.reconcile_lighthouse() if self.fault_tolerant else None
        if self.own_store:
            self.reconcile_store()
        statuses: dict[str, JSON] = {}
        for replica_type in c.REPLICA_TYPES:
            spec = self.job.spec.pytorch_replica_specs.get(replica_type)
            if spec is not None:
                statuses[replica_type] = self.reconcile_type(
                    replica_type, replicas=spec.replicas or 0, lighthouse=lighthouse
                )
                self.reconcile_services(replica_type, replicas=spec.replicas or 0)
        self.status.setdefault("startTime", format_timestamp(self.now))
        self.status["replicaStatuses"] = statuses
        self.update_conditions(statuses)
        if self.fault_tolerant:
            lighthouses = [pod for pod in self.observed.pods if torchft.is_lighthouse(pod)]
            statuses[torchft.STATUS_KEY] = count_replicas(lighthouses)
        if self.own_store:
            stores = [pod for pod in self.observed.pods if rendezvous.is_store(pod)]
            statuses[rendezvous.STATUS_KEY] = count_replicas(stores)
        if self.gang is not None:
            self.report_gang_placement()

    # -- gang scheduling (upstream `SyncPodGroup` and the Volcano gate) ---------------------------

    def reconcile_podgroup(self, gang: GangScheduler) -> bool:
        """Create or update the job's PodGroup; True when the job's pods may be reconciled."""
        if self.observed.podgroup_api_missing:
            api = gang.api
            message = (
                f"--gang-scheduler-name={gang.name} needs the PodGroup CRD of "
                f"{api.api_version}, which the API server does not serve: install it, or run "
                "the operator without the flag. No pods are created until then."
            )
            self.gang_condition("False", "PodGroupCRDMissing", message, warn=True)
            return False
        current = self.observed.podgroup
        priorities = self.observed.priorities
        desired = desired_podgroup(self.job, gang, priorities=priorities, current=current)
        if current is None:
            self.result.create.append(desired)
        elif desired["spec"] != current.get("spec"):
            self.result.update.append({**current, "spec": desired["spec"]})
        if pods_may_start(gang, current):
            return True
        phase = ((current or {}).get("status") or {}).get("phase") or "unset"
        message = (
            f"PodGroup {self.job.name} is not admitted by Volcano yet (phase {phase}): "
            "the job's pods are created once it is"
        )
        self.gang_condition("False", "PodGroupPending", message)
        return False

    def report_gang_placement(self) -> None:
        """True once a scheduler placed the gang's minimum (pods bound to nodes)."""
        members, bound = min_member(self.job), bound_pods(self.observed.pods)
        placed = f"{bound} of the job's pods placed; its gang needs {members}"
        if bound >= members:
            self.gang_condition("True", "GangScheduled", placed)
        else:
            self.gang_condition("False", "GangPending", f"{placed}: waiting for the scheduler")

    def gang_condition(self, status: str, reason: str, message: str, *, warn: bool = False) -> None:
        before = self.status["conditions"]
        new = cond.Condition(
            type=cond.GANG_CONDITION, status=status, reason=reason, message=message
        )
        self.status["conditions"] = cond.set_side_condition(before, new, now=self.now)
        if warn and self.status["conditions"] != before:
            self.event("Warning", reason, message)

    def delete_podgroup(self) -> None:
        """Upstream deletes the PodGroup when the job finishes, fails or is suspended."""
        if self.gang is not None and self.observed.podgroup is not None:
            self.event("Normal", "JobTerminated", "Job has been terminated. Deleting PodGroup")
            self.result.delete.append((PODGROUP_KIND, self.job.name))

    def reconcile_type(
        self, replica_type: str, *, replicas: int, lighthouse: str | None = None
    ) -> JSON:
        """`lighthouse`: in torchft mode, the uid of the job's live lighthouse (None: none yet)."""
        slots = self.slots(self.observed.pods, replica_type)
        self.note_failed(pod for pods in slots.values() for pod in pods)
        if self.fault_tolerant:
            self.restart_detached_workers(slots, lighthouse=lighthouse)
        elif self.lost_rendezvous_host(replica_type, slots):
            return self.restart_group(replica_type, slots)
        in_range: list[JSON] = []
        for index in range(max(replicas, max(slots, default=-1) + 1)):
            pods = slots.get(index, [])
            if not pods:
                if index < replicas and (lighthouse is not None or not self.fault_tolerant):
                    self.create_pod(replica_type, index=index, lighthouse=lighthouse)
                continue
            if index >= replicas:  # scale-down: highest indices go; never counted as failures
                for pod in pods:
                    self.delete(pod)
                continue
            in_range.extend(pods)
            for pod in pods:
                self.container_events(pod)
            self.handle_exit(pods[0], replica_type)
        return {**count_replicas(in_range), **self.selector_of(replica_type)}

    def note_failed(self, pods: Iterable[JSON]) -> None:
        self.result.failed_pods.extend(
            pod["metadata"].get("uid") or pod["metadata"]["name"]
            for pod in pods
            if phase(pod) == "Failed"
        )

    def lost_rendezvous_host(self, replica_type: str, slots: dict[int, list[JSON]]) -> bool:
        """Worker-0 of an elastic job is gone (failed or deleted) while others remain."""
        if replica_type != c.WORKER or self.job.spec.elastic_policy is None:
            return False
        others = [pod for index, pods in slots.items() if index > 0 for pod in pods]
        worker_0 = slots.get(0, [])
        if not worker_0:
            return bool(others)
        restart = self.job.spec.pytorch_replica_specs[c.WORKER].restart_policy != "Never"
        return restart and phase(worker_0[0]) == "Failed" and bool(others)

    def restart_group(self, replica_type: str, slots: dict[int, list[JSON]]) -> JSON:
        for pods in slots.values():
            for pod in pods:
                self.delete(pod)
        message = (
            f"PyTorchJob {self.job.name} is restarting all workers because worker-0, "
            "the rendezvous host, was lost."
        )
        if not cond.has_condition(self.status["conditions"], cond.RESTARTING):
            self.event("Warning", cond.reason("Restarting"), message)
        self.condition(cond.RESTARTING, "True", "Restarting", message)
        return self.selector_of(replica_type)

    def handle_exit(self, pod: JSON, replica_type: str) -> None:
        if phase(pod) != "Failed":
            return
        policy = self.job.spec.pytorch_replica_specs[replica_type].restart_policy
        code = exit_code(pod)
        retry = policy in ("OnFailure", "Always") or (
            policy == "ExitCode" and (code is None or code >= RETRYABLE_EXIT)
        )
        if retry:
            self.delete(pod)
            message = f"job {self.job.name} is restarting because {replica_type} replica(s) failed."
            self.event("Warning", cond.reason("Restarting"), message)
            self.condition(cond.RESTARTING, "True", "Restarting", message)
        elif policy == "ExitCode":
            self.status.setdefault("completionTime", format_timestamp(self.now))
            message = (
                f'job "{self.job.name}" is failing because "{replica_type}" replica(s) failed.'
            )
            self.event("Warning", cond.reason("Failed"), message)
            self.condition(cond.FAILED, "True", "Failed", message)

    def container_events(self, pod: JSON) -> None:
        """Upstream's `ExitedWithCode` for a terminated `pytorch` container, once per run."""
        meta = pod["metadata"]
        where = f"{meta.get('namespace')}.{meta['name']}"
        for container in container_statuses(pod):
            done = (container.get("state") or {}).get("terminated")
            name = container.get("name")
            if done and name == c.DEFAULT_CONTAINER_NAME:
                run = done.get("containerID") or done.get("finishedAt")
                message = f"Pod: {where} exited with code {done.get('exitCode')}"
                self.event("Normal", "ExitedWithCode", message, f"{meta.get('uid')}/{name}/{run}")

    # -- torchft mode: the lighthouse, and the workers attached to it --------------------------

    def reconcile_lighthouse(self) -> str | None:
        """Keep one live lighthouse and its Service; its uid, once it exists. A lighthouse that
        ended is deleted first and replaced when it is gone (the name is reused)."""
        if not any(torchft.is_lighthouse(svc) for svc in self.observed.services):
            self.result.create.append(torchft.desired_lighthouse_service(self.job))
        pods = [pod for pod in self.observed.pods if torchft.is_lighthouse(pod)]
        live = [p for p in pods if not is_terminating(p) and phase(p) in ("Pending", "Running")]
        for pod in pods:
            if pod not in live and not is_terminating(pod):
                name = pod["metadata"]["name"]
                message = f"torchft lighthouse {name} ended ({phase(pod)}): it is replaced"
                self.event("Warning", "TorchftLighthouseLost", message)
                self.delete(pod)
        if live:
            return str(live[0]["metadata"].get("uid") or "")
        if not pods:
            self.result.create.append(torchft.desired_lighthouse_pod(self.job))
        return None

    def restart_detached_workers(
        self, slots: dict[int, list[JSON]], *, lighthouse: str | None
    ) -> None:
        """Workers of a lighthouse that is gone are restarted: torchft cannot move them to a new
        one, so they resume from the job's checkpoint."""
        detached = [
            pod
            for pods in slots.values()
            for pod in pods
            if not is_terminating(pod) and torchft.lighthouse_uid(pod) != lighthouse
        ]
        for pod in detached:
            self.delete(pod)
        if detached:
            message = (
                f"PyTorchJob {self.job.name} is restarting {len(detached)} worker(s): their "
                "torchft lighthouse was lost."
            )
            self.event("Warning", cond.reason("Restarting"), message)
            self.condition(cond.RESTARTING, "True", "Restarting", message)

    def delete_lighthouse(self) -> None:
        for pod in self.observed.pods:
            if torchft.is_lighthouse(pod):
                self.delete(pod)
        for svc in self.observed.services:
            if torchft.is_lighthouse(svc):
                self.remove("Service", svc["metadata"]["name"])

    # -- the rendezvous store pod ------------------------------------------------------------

    def reconcile_store(self) -> None:
        """Keep one live rendezvous store and its Service. A store that ended is deleted first
        and replaced when it is gone (the name is reused); the agents' failed rendezvous
        restarts them, and they join the new one."""
        if not any(rendezvous.is_store(svc) for svc in self.observed.services):
            self.result.create.append(rendezvous.desired_store_service(self.job))
        pods = [pod for pod in self.observed.pods if rendezvous.is_store(pod)]
        live = [p for p in pods if not is_terminating(p) and phase(p) in ("Pending", "Running")]
        for pod in pods:
            if pod not in live and not is_terminating(pod):
                name = pod["metadata"]["name"]
                message = f"rendezvous store {name} ended ({phase(pod)}): it is replaced"
                self.event("Warning", "RendezvousStoreLost", message)
                self.delete(pod)
        if not pods:
            self.result.create.append(rendezvous.desired_store_pod(self.job))

    def delete_store(self) -> None:
        for pod in self.observed.pods:
            if rendezvous.is_store(pod):
                self.delete(pod)
        for svc in self.observed.services:
            if rendezvous.is_store(svc):
                self.remove("Service", svc["metadata"]["name"])

    # -- upstream's abnormal-pod Warnings (v1.9 `RecordAbnormalPods`, `pkg/core/job.go`) ----------

    def abnormal_pod_warnings(self) -> None:
        """A Warning for a container waiting with a message (an image it cannot pull, a crash
        loop, a missing Secret key), for one terminated with a non-zero code (its reason, e.g.
        `OOMKilled`), and for a pod without container statuses whose latest condition is not
        True (e.g. `Unschedulable`), with upstream's reasons and wording.

        Upstream sends them on every pass and lets its event recorder fold the repeats; here
        each is sent once per occurrence. Upstream looks at active pods only; a Failed pod's
        terminated containers are reported here too, so a worker killed for memory says so.
        """
        for pod in self.observed.pods:
            if is_terminating(pod) or phase(pod) == "Succeeded":
                continue
            statuses = container_statuses(pod)
            for container in statuses:
                self.terminated_warning(pod, container)
                self.waiting_warning(pod, container)
            if not statuses and phase(pod) != "Failed":
                self.condition_warning(pod)

    def terminated_warning(self, pod: JSON, container: JSON) -> None:
        done = (container.get("state") or {}).get("terminated") or {}
        if not done.get("exitCode"):
            return
        name, meta = container.get("name"), pod["metadata"]
        message = (
            f"Error pod {meta['name']} container {name} exitCode: {done['exitCode']} "
            f"terminated message: {done.get('message') or ''}"
        )
        run = done.get("containerID") or done.get("finishedAt")
        self.event(
            "Warning", done.get("reason") or "", message, f"{meta.get('uid')}/{name}/{run}/exit"
        )

    def waiting_warning(self, pod: JSON, container: JSON) -> None:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if not waiting.get("message"):  # e.g. ContainerCreating: on its way, nothing to report
            return
        name, meta, reason = container.get("name"), pod["metadata"], waiting.get("reason") or ""
        message = f"Error pod {meta['name']} container {name} waiting message: {waiting['message']}"
        # A crash loop comes back after every restart: one Warning per restart, not per pass.
        once = f"{meta.get('uid')}/{name}/{reason}/{container.get('restartCount', 0)}"
        self.event("Warning", reason, message, once)

    def condition_warning(self, pod: JSON) -> None:
        latest = latest_condition(pod)
        if latest is None or latest.get("status") == "True":
            return
        meta, reason = pod["metadata"], latest.get("reason") or ""
        message = f"Error pod {meta['name']} condition message: {latest.get('message') or ''}"
        since = latest.get("lastTransitionTime")
        once = f"{meta.get('uid')}/{latest.get('type')}/{latest.get('status')}/{reason}/{since}"
        self.event("Warning", reason, message, once)

    def reconcile_services(self, replica_type: str, *, replicas: int) -> None:
        slots = self.slots(self.observed.services, replica_type)
        for index in range(max(replicas, max(slots, default=-1) + 1)):
            services = slots.get(index, [])
            if not services and index < replicas:
                self.result.create.append(
                    desired_service(self.job, replica_type=replica_type, index=index)
                )
            elif index >= replicas:
                self.result.delete.extend(("Service", svc["metadata"]["name"]) for svc in services)

    def update_conditions(self, statuses: dict[str, JSON]) -> None:
        """Upstream `UpdateJobStatus`: Running, Succeeded (elastic: any worker), failures."""
        for replica_type, counts in statuses.items():
            spec = self.job.spec.pytorch_replica_specs[replica_type]
            replicas, succeeded = spec.replicas or 0, counts.get("succeeded", 0)
            running, failed = counts.get("active", 0), counts.get("failed", 0)
            if self.update_lifecycle(
                replica_type, replicas=replicas, running=running, succeeded=succeeded
            ):
                return
            if failed > 0 and replicas > succeeded + running:
                self.replica_failures(
                    replica_type, failed=failed, never=spec.restart_policy == "Never"
                )

    def update_lifecycle(
        self, replica_type: str, *, replicas: int, running: int, succeeded: int
    ) -> bool:
        """Running/Succeeded for the type that drives the job; True when a Master completed."""
        name, expected = self.job.name, replicas - succeeded
        if self.job.master is not None:
            if replica_type != c.MASTER:
                return False
            if running > 0:
                self.condition(cond.RUNNING, "True", "Running", f"PyTorchJob {name} is running.")
            if expected == 0:
                self.succeed(f"PyTorchJob {name} is successfully completed.")
                return True
            return False
        qualified = f"{self.job.metadata.namespace}/{name}"
        elastic_done = self.job.spec.elastic_policy is not None and succeeded > 0
        if expected == 0 or elastic_done:
            self.succeed(f"PyTorchJob {qualified} successfully completed.")
        elif running > 0:
            self.condition(cond.RUNNING, "True", "Running", f"PyTorchJob {qualified} is running.")
        return False

    def succeed(self, message: str) -> None:
        if not cond.has_condition(self.status["conditions"], cond.SUCCEEDED):
            self.event("Normal", cond.reason("Succeeded"), message)
        self.status.setdefault("completionTime", format_timestamp(self.now))
        self.condition(cond.SUCCEEDED, "True", "Succeeded", message)

    def replica_failures(self, replica_type: str, *, failed: int, never: bool) -> None:
        what = f"because {failed} {replica_type} replica(s) failed."
        if never:
            message = f"PyTorchJob {self.job.name} is failed {what}"
            if not cond.has_condition(self.status["conditions"], cond.FAILED):
                self.event("Normal", cond.reason("Failed"), message)
            self.status.setdefault("completionTime", format_timestamp(self.now))
            self.condition(cond.FAILED, "True", "Failed", message)
        else:
            self.condition(
                cond.RESTARTING,
                "True",
                "Restarting",
                f"PyTorchJob {self.job.name} is restarting {what}",
            )

    def create_pod(self, replica_type: str, *, index: int, lighthouse: str | None = None) -> None:
        pod = desired_pod(
            self.job,
            replica_type=replica_type,
            index=index,
            settings=self.settings,
            gang=self.gang,
            lighthouse_uid=lighthouse,
        )
        self.result.create.append(pod)
        if self.gang is not None and custom_scheduler_set(self.job, self.gang):
            self.event("Warning", "SetPodTemplateSchedulerName", CUSTOM_SCHEDULER_MESSAGE)
        template = self.job.spec.pytorch_replica_specs[replica_type].template or {}
        if (template.get("spec") or {}).get("restartPolicy"):
            self.event("Warning", "SetPodTemplateRestartPolicy", TEMPLATE_RESTART_MESSAGE)

    def warn_deprecated(self) -> None:
        """Upstream's webhook warns at admission; a CRD cannot, so the job gets an Event."""
        policy = self.job.spec.elastic_policy
        if policy is not None and policy.n_proc_per_node is not None:
            message = "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"
            self.event("Warning", "DeprecatedField", message)

    # -- helpers ---------------------------------------------------------------------------------

    def slots(self, objects: list[JSON], replica_type: str) -> dict[int, list[JSON]]:
        slots: dict[int, list[JSON]] = {}
        for obj in objects:
            index = replica_index(obj)
            if replica_type_of(obj) == replica_type and index is not None:
                slots.setdefault(index, []).append(obj)
        return slots

    def selector_of(self, replica_type: str) -> JSON:
        """The replica status's `selector`, which the scale subresource serves to the HPA."""
        return {"selector": replica_selector(job_name=self.job.name, replica_type=replica_type)}

    def delete(self, pod: JSON) -> None:
        if not is_terminating(pod):
            self.remove("Pod", pod["metadata"]["name"])

    def remove(self, kind: str, name: str) -> None:
        """Plan one delete of the object, however many rules ask for it (a lighthouse is both
        a Running pod for cleanPodPolicy and a lighthouse to remove)."""
        if (kind, name) not in self.result.delete:
            self.result.delete.append((kind, name))

    def delete_everything(self) -> None:
        """Every pod and every service of the job (suspend, failure, cleanPodPolicy All)."""
        for pod in self.observed.pods:
            self.delete(pod)
        for svc in self.observed.services:
            self.remove("Service", svc["metadata"]["name"])

    def delete_pod_and_service(self, pod: JSON) -> None:
        self.delete(pod)
        name = pod["metadata"]["name"]
        if any(svc["metadata"]["name"] == name for svc in self.observed.services):
            self.remove("Service", name)

    def condition(self, type_: str, status: str, reason_suffix: str, message: str) -> None:
        new = cond.Condition(
            type=type_, status=status, reason=cond.reason(reason_suffix), message=message
        )
        self.status["conditions"] = cond.set_condition(self.status["conditions"], new, now=self.now)

    def event(self, type_: str, reason: str, message: str, once: str | None = None) -> None:
        self.result.events.append(Event(type=type_, reason=reason, message=message, once=once))


COUNTED_CONDITIONS = {cond.CREATED: "created", cond.SUCCEEDED: "successful", cond.FAILED: "failed"}


def lifecycle(before: list[JSON], after: list[JSON], events: list[Event]) -> list[str]:
    """Upstream's job counters this pass moves: a condition that became true, each restart."""
    became = [
        counted
        for type_, counted in COUNTED_CONDITIONS.items()
        if cond.has_condition(after, type_) and not cond.has_condition(before, type_)
    ]
    restarts = sum(event.reason == cond.reason("Restarting") for event in events)
    return [*became, *["restarted"] * restarts]
