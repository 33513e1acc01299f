"""The instant the unit tests take as now, where any fixed one will do."""

from datetime import UTC, datetime

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
