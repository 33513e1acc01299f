"""A policy file for the engine (`policy.name: <this path>`) whose decisions follow from the
snapshot alone: every job it may hold back gets 0 while another job that may not is in the
snapshot, every other job keeps its count. Drives queueing deterministically (tests only)."""

from collections.abc import Sequence
from datetime import datetime

from autoscaler.policies.contract import Decision, PolicyConfig, PolicyPlugin, Snapshot


class QueueFirstComeConfig(PolicyConfig):
    pass


class QueueBehindOthers:
    def __init__(self, config: QueueFirstComeConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        decisions = []
        for job in snapshot.jobs:
            others = [o for o in snapshot.jobs if o.key != job.key and not o.preemptible]
            if job.preemptible and others:
                names = ", ".join(o.name for o in others)
                decisions.append(Decision(job.namespace, job.name, 0, "Queued", f"behind {names}"))
            else:
                decisions.append(Decision(job.namespace, job.name, job.replicas, "Kept", "kept"))
        return decisions


PLUGIN = PolicyPlugin(
    name="queue-behind-others",
    summary="holds back preemptible jobs while any other job runs (tests only)",
    config_model=QueueFirstComeConfig,
    build=QueueBehindOthers,
)
