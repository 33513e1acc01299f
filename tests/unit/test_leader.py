"""Who acts on the lease, as a table (client-go's rules)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.clients.leader import lease_action

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def lease(holder: str, *, renewed_ago: float, duration: int = 15) -> dict[str, Any]:
    renew = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration}
    }


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (None, "create"),
        (lease("me", renewed_ago=1), "renew"),
        (lease("me", renewed_ago=60), "renew"),  # still ours: renew, even late
        (lease("other", renewed_ago=1), "wait"),
        (lease("other", renewed_ago=14.9), "wait"),
        (lease("other", renewed_ago=15), "acquire"),  # expired exactly at renew + duration
        (lease("", renewed_ago=1), "acquire"),  # released by its holder at shutdown
        ({"spec": {}}, "acquire"),
    ],
)
def test_lease_action(current: dict[str, Any] | None, expected: str) -> None:
    assert lease_action(current, identity="me", now=NOW) == expected
