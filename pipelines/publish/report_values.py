"""How the report shows a feature's values: numbers, and timestamps as ISO 8601 dates in their unit.

A timestamp feature stores int64 counts of its unit since
1970-01-01T00:00:00Z (`schemas.timestamps`); the report shows them as the
dates they are, exact to the unit (``2024-03-01T12:30:00.123Z`` for
``ms``, ``2024-03-01`` for ``days``), and spreads (a standard deviation)
as lengths of time. Values no date can show stay numbers.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any, Callable, Mapping

from ...schemas.timestamps import UNIT_NANOS

__all__ = ["number", "span", "timestamp_units", "value_formatter"]


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


_EPOCH = _dt.datetime(1970, 1, 1)
_FRACTION_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def timestamp_units(features: Mapping[str, Any]) -> dict[str, str]:
    """feature -> unit, for the timestamp features of a manifest's ``features``."""
    units = {}
    for name, spec in (features or {}).items():
        stamp = spec.get("timestamp") if isinstance(spec, Mapping) else None
        if isinstance(stamp, Mapping) and stamp.get("unit") in UNIT_NANOS:
            units[name] = stamp["unit"]
    return units


def _iso(count: int, unit: str) -> str | None:
    """`count` units since 1970-01-01T00:00:00Z as ISO 8601, exact to the
    unit (a date for ``days``); None beyond what `datetime` holds (years
    1 to 9999)."""
    try:
        if unit == "days":
            return (_EPOCH + _dt.timedelta(days=count)).date().isoformat()
        seconds, nanos = divmod(count * UNIT_NANOS[unit], 10**9)
        text = (_EPOCH + _dt.timedelta(seconds=seconds)).isoformat(timespec="seconds")
    except OverflowError:
        return None
    digits = _FRACTION_DIGITS[unit]
    return text + (f".{nanos:09d}"[:digits + 1] if digits else "") + "Z"


def span(count: float, unit: str) -> str:
    """A length of time given in `unit`s, in the largest unit that fits."""
    seconds = count * UNIT_NANOS[unit] / 10**9
    for size, name in ((86400, "days"), (3600, "h"), (60, "min"), (1, "s")):
        if abs(seconds) >= size:
            return f"{seconds / size:.4g} {name}"
    return f"{seconds:.4g} s"


def value_formatter(unit: str | None) -> Callable[[Any], str]:
    """How a feature's values are shown: numbers, or for a timestamp
    feature (`unit` given) ISO 8601 dates; a value no date can show (out of
    range, not a number) stays a number."""
    if unit is None:
        return number

    def shown(value: Any) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value):
            iso = _iso(int(round(value)), unit)
            if iso is not None:
                return iso
        return number(value)

    return shown
