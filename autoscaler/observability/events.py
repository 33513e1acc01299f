"""Kubernetes Events about a job, built as plain objects (recorded by the operator loop)."""

import uuid
from datetime import datetime
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.timestamps import format_timestamp

JSON = dict[str, Any]
COMPONENT = c.OPERATOR_NAME


def job_event(
    job: JSON,
    *,
    type_: str,
    reason: str,
    message: str,
    now: datetime,
    component: str = COMPONENT,
) -> JSON:
    return object_event(
        job,
        api_version=c.API_VERSION,
        kind=c.KIND,
        type_=type_,
        reason=reason,
        message=message,
        now=now,
        component=component,
    )


def object_event(
    obj: JSON,
    *,
    api_version: str,
    kind: str,
    type_: str,
    reason: str,
    message: str,
    now: datetime,
    component: str = COMPONENT,
) -> JSON:
    """A core/v1 Event about `obj` (its metadata is all that is read)."""
    metadata = obj["metadata"]
    stamp = format_timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": metadata["namespace"],
        },
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata.get("uid", ""),
            "resourceVersion": metadata.get("resourceVersion", ""),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
