"""The reconcile step as a pure function: (job, observed objects, now) -> a plan of writes.

Mirrors upstream's `Reconcile` (kubeflow/training-operator v1.9, `pkg/controller.v1/common`
and `pytorchjob_controller.go`): HPA first, then finished/suspended/failed
handling, then pods and services slot by slot, then status. The loop in `runner.py` applies
the plan through `autoscaler.clients`; nothing here does I/O or reads the clock.

This module is the plan's core: the pass, the replicas slot by slot and the status they give.
Each feature beside it has a module of its own: the HPA (`reconcile_hpa.py`), `runPolicy`
(`reconcile_run_policy.py`), gang scheduling (`reconcile_gang.py`), torchft
(`reconcile_torchft.py`), the rendezvous store (`reconcile_rendezvous.py`) and the Events about
pods (`reconcile_pod_events.py`); the state they share is `reconcile_pass.py`'s.
"""

from collections.abc import Iterable
from datetime import datetime

from autoscaler.api import coordinates as c
from autoscaler.api.defaults import default_job
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.api.timestamps import format_timestamp
from autoscaler.controller import conditions as cond
from autoscaler.controller import placement, rendezvous, torchft
from autoscaler.controller.builders import (
    UPSTREAM_DEFAULTS,
    PodSettings,
    desired_pod,
    desired_service,
)
from autoscaler.controller.gang import GangScheduler
from autoscaler.controller.naming import replica_selector
from autoscaler.controller.pods import exit_code, phase, replica_index, replica_type_of
from autoscaler.controller.reconcile_gang import (
    forget_gang_condition,
    reconcile_podgroup,
    report_gang_placement,
    warn_custom_scheduler,
)
from autoscaler.controller.reconcile_hpa import reconcile_hpa
from autoscaler.controller.reconcile_pass import Event, Observed, Plan, PlanningPass
from autoscaler.controller.reconcile_pod_events import abnormal_pod_warnings, container_events
from autoscaler.controller.reconcile_rendezvous import (
    check_rendezvous,
    reconcile_store,
)
from autoscaler.controller.reconcile_run_policy import (
    fail_job,
    finish,
    past_limits,
    resume_if_suspended,
    suspend,
)
from autoscaler.controller.reconcile_torchft import (
    check_fault_tolerance,
    reconcile_lighthouse,
    restart_detached_workers,
)
from autoscaler.controller.status import count_replicas

TEMPLATE_RESTART_MESSAGE = (
    "Restart policy in pod template will be overwritten by restart policy in replica spec"
)
RETRYABLE_EXIT = 128  # ExitCode policy: codes >= 128 (signals) and "no exit code" are retried


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


class _Planner(PlanningPass):
    """The core steps of one pass; the features' steps are called with it as their pass."""

    # -- the pass ----------------------------------------------------------------------------

    def run(self) -> Plan:
        if not self.status["conditions"]:
            self.condition(
                cond.CREATED, "True", "Created", f"PyTorchJob {self.job.name} is created."
            )
            self.warn_deprecated()
        reconcile_hpa(self)
        if self.gang is None:  # left by an earlier run with gang scheduling
            forget_gang_condition(self)
        self.report_queued_scale_up()
        invalid = check_fault_tolerance(self) | check_rendezvous(self)
        if cond.is_finished(self.status["conditions"]):
            finish(self)
        elif self.job.spec.run_policy.suspend:
            suspend(self)
        else:
            resume_if_suspended(self)
            abnormal_pod_warnings(self)
            failure = past_limits(self)
            if failure:
                fail_job(self, failure)
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
        self.side_condition(new, type_=cond.QUOTA_CONDITION)

    def done(self) -> Plan:
        new = {key: value for key, value in self.status.items() if value not in (None, [], {})}
        old = {key: value for key, value in self.old_status.items() if value not in (None, [], {})}
        if new != old:
            self.result.status = new
        self.result.lifecycle = lifecycle(
            self.old_status.get("conditions") or [], self.status["conditions"], self.result.events
        )
        return self.result

    # -- pods and services, slot by slot --------------------------------------------------------

    def reconcile_replicas(self) -> None:
        if self.gang is not None and not reconcile_podgroup(self, self.gang):
            return  # upstream: no pods, services or replica statuses until the group allows
        lighthouse = reconcile_lighthouse(self) if self.fault_tolerant else None
        if self.own_store:
            reconcile_store(self)
        statuses: dict[str, JSON] = {}
        for replica_type in c.REPLICA_TYPES:
            spec = self.job.spec.pytorch_replica_specs.get(replica_type)
            if spec is not None:
                slots = self.slots(self.observed.pods, replica_type)
                wanted = self.wanted_indices(replica_type, slots, replicas=spec.replicas or 0)
                statuses[replica_type] = self.reconcile_type(
                    replica_type, slots, wanted=wanted, lighthouse=lighthouse
                )
                self.reconcile_services(replica_type, wanted=wanted)
        self.status.setdefault("startTime", format_timestamp(self.now))
        self.status["replicaStatuses"] = statuses
        self.update_conditions(statuses)
        if self.fault_tolerant:
            statuses[torchft.STATUS_KEY] = self.counts_of(torchft.is_lighthouse)
        if self.own_store:
            statuses[rendezvous.STATUS_KEY] = self.counts_of(rendezvous.is_store)
        if self.gang is not None:
            report_gang_placement(self)

    def wanted_indices(
        self, replica_type: str, slots: dict[int, list[JSON]], *, replicas: int
    ) -> set[int]:
        """The indices whose pods and services should exist: upstream's 0..replicas-1, or for an
        elastic torchrun job's workers those present less the ones a scale-down removes, then
        the lowest free (`placement.kept_indices`)."""
        if not placement.empties_least_filled(
            self.job, replica_type=replica_type, fault_tolerant=self.fault_tolerant
        ):
            return set(range(replicas))
        return placement.kept_indices(slots, replicas=replicas)

    def reconcile_type(
        self,
        replica_type: str,
        slots: dict[int, list[JSON]],
        *,
        wanted: set[int],
        lighthouse: str | None = None,
    ) -> JSON:
        """`slots`: the type's pods by index; `lighthouse`: in torchft mode, the uid of the job's
        live lighthouse (None: none yet)."""
        self.note_failed(pod for pods in slots.values() for pod in pods)
        if self.fault_tolerant:
            restart_detached_workers(self, slots, lighthouse=lighthouse)
        elif self.lost_rendezvous_host(replica_type, slots):
            return self.restart_group(replica_type, slots)
        in_range: list[JSON] = []
        for index in sorted(wanted | set(slots)):
            pods = slots.get(index, [])
            if not pods:
                if index in wanted and (lighthouse is not None or not self.fault_tolerant):
                    self.create_pod(replica_type, index=index, lighthouse=lighthouse)
                continue
            if index not in wanted:  # scale-down: never counted as failures
                for pod in pods:
                    self.delete(pod)
                continue
            in_range.extend(pods)
            for pod in pods:
                container_events(self, pod)
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

    def reconcile_services(self, replica_type: str, *, wanted: set[int]) -> None:
        """Each wanted index has its service; no other index keeps one."""
        slots = self.slots(self.observed.services, replica_type)
        for index in sorted(wanted | set(slots)):
            services = slots.get(index, [])
            if not services and index in wanted:
                self.result.create.append(
                    desired_service(self.job, replica_type=replica_type, index=index)
                )
            elif index not in wanted:
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
        if self.gang is not None:
            warn_custom_scheduler(self, self.gang)
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
