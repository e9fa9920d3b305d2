"""UTC timestamps: stored naive (UTC) with millisecond precision, shown as ISO 8601 with Z."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime

# The one seam of the fault simulation (simulation/, docs/simulation.md): when set, utcnow()
# reads this virtual clock instead of the system's, so expiry, retry backoff and leases follow
# the simulation's seeded time. None in every real process; nothing but the simulation sets it.
_clock: Callable[[], datetime] | None = None


def set_clock(clock: Callable[[], datetime] | None) -> None:
    """Make utcnow() return clock() (naive UTC, millisecond precision); None restores real time."""
    global _clock
    _clock = clock


def utcnow() -> datetime:
    if _clock is not None:
        return _clock()
    now = datetime.now(UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat(timespec="milliseconds") + "Z"  # C-level; strftime showed in list profiles


def spec_timestamp(value: datetime) -> str:
    """The interface specification's reward-search form: '2024-01-01 12:00:00 UTC'."""
    return value.isoformat(sep=" ", timespec="seconds") + " UTC"


def iso_date(value: date | None) -> str | None:
    return value.isoformat() if value else None


def parse_timestamp(value: str) -> datetime:
    """Parse an ISO 8601 date or date-time (any offset) into naive UTC; ValueError otherwise."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is not None:
        try:
            parsed = parsed.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # 9999-12-31T12:00-12:00 is past year 9999 in UTC
            raise ValueError(f"{value!r} is outside the years 1 to 9999 in UTC") from None
    return parsed
