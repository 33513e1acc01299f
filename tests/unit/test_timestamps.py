"""Kubernetes timestamps: one parser and two formats, round-tripping."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from autoscaler.api.timestamps import format_micro_timestamp, format_timestamp, parse_timestamp

MOMENT = datetime(2026, 11, 30, 13, 5, 7, 250000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30T13:05:07Z", MOMENT.replace(microsecond=0)),
        ("2026-11-30T13:05:07.250000Z", MOMENT),
        ("2026-11-30T14:05:07.25+01:00", MOMENT),
    ],
)
def test_parse_gives_the_aware_moment(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text)
    assert parsed == expected
    assert parsed.utcoffset() is not None


def test_seconds_format_drops_the_fraction_and_round_trips() -> None:
    assert format_timestamp(MOMENT) == "2026-11-30T13:05:07Z"
    assert parse_timestamp(format_timestamp(MOMENT)) == MOMENT.replace(microsecond=0)


def test_micro_format_keeps_microseconds_and_round_trips() -> None:
    assert format_micro_timestamp(MOMENT) == "2026-11-30T13:05:07.250000Z"
    assert parse_timestamp(format_micro_timestamp(MOMENT)) == MOMENT


def test_an_offset_is_kept_when_parsed() -> None:
    parsed = parse_timestamp("2026-11-30T13:05:07+02:00")
    assert parsed.tzinfo == timezone(timedelta(hours=2))
