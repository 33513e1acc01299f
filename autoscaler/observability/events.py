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
    metadata = job["metadata"]
    stamp = format_timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": metadata["namespace"],
        },
        "involvedObject": {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
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
