"""The engine's view of a job, as its unit tests build it: a running engine-sized job at 4 of
1-8 workers, created an hour before `NOW`; each test names only the fields it is about."""

from datetime import timedelta
from typing import Any

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import ManagedJob
from tests.support.clock import NOW


def managed_job(**changes: Any) -> ManagedJob:
    fields: dict[str, Any] = {
        "namespace": "ns",
        "name": "j",
        "min_replicas": 1,
        "max_replicas": 8,
        "replicas": 4,
        "active": 4,
        "owner": Owner.ENGINE,
        "created": NOW - timedelta(hours=1),
    }
    return ManagedJob(**{**fields, **changes})
