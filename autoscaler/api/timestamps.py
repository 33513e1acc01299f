"""Kubernetes timestamps: RFC 3339 in UTC with a `Z`, as the API server writes them.

`metav1.Time` (object stamps, conditions, Events) has whole seconds; `metav1.MicroTime` (Lease
`renewTime`, `acquireTime`) has microseconds. Both parse with `parse_timestamp`.
"""

from datetime import datetime

SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MICROSECONDS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def parse_timestamp(text: str) -> datetime:
    """An aware datetime from `2026-11-30T00:00:00Z` (or with fractions or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_timestamp(moment: datetime) -> str:
    """`metav1.Time`: whole seconds, `Z` (the moment is taken to be in UTC)."""
    return moment.strftime(SECONDS_FORMAT)


def format_micro_timestamp(moment: datetime) -> str:
    """`metav1.MicroTime`: microseconds, `Z` (the moment is taken to be in UTC)."""
    return moment.strftime(MICROSECONDS_FORMAT)
