"""Dates and times -> int64 counts of a unit since the Unix epoch (``type: timestamp``).

A timestamp feature stores one int64 per value: the whole number of `unit`s
(``s``, ``ms``, ``us``, ``ns`` or ``days``) from 1970-01-01T00:00:00Z to the
instant, rounded down (towards the past), so that ``days`` of an instant is
its UTC date. Values come as:

- ``datetime.datetime`` (Parquet and Avro timestamps, pandas Timestamps):
  naive values are in the feature's `timezone`;
- ``datetime.date`` (Parquet ``date32``/``date64``, Avro ``date``): midnight
  in the feature's `timezone`;
- text: ISO 8601 (``format: iso8601``, the default: ``2024-03-01``,
  ``2024-03-01T12:30:00.123456+02:00``, a trailing ``Z``) or a strptime
  pattern; text without an offset is in the feature's `timezone`.

Integers are refused rather than guessed (seconds? milliseconds?); store
such a column as ``int64``. Arithmetic is exact integer arithmetic
(nanoseconds of pandas Timestamps are kept).
"""

from __future__ import annotations

import datetime as _dt
import functools
from typing import Any, Callable

__all__ = ["UNIT_NANOS", "timestamp_converter", "zone"]

UNIT_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "days": 86400 * 10**9}
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@functools.lru_cache(maxsize=64)
def zone(name: str) -> _dt.tzinfo:
    """The tzinfo of an IANA zone name (``UTC``, ``Europe/Paris``); raises
    ValueError naming the zone when it is unknown."""
    if name in ("UTC", "utc", "Z"):
        return _dt.timezone.utc
    import zoneinfo
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}; use an IANA name such as UTC, "
                         "Europe/Paris or America/New_York") from None


def _nanos(moment: _dt.datetime, tz: _dt.tzinfo) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    delta = moment - _EPOCH
    nanos = (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    return nanos + int(getattr(moment, "nanosecond", 0) or 0)


def timestamp_converter(unit: str, time_format: str, timezone: str,
                        bad: Callable[[str, str], Exception]) -> Callable[[Any], int]:
    """raw value -> int64 count of `unit`s since the epoch; raises
    ``bad(reason, detail)`` (reason ``type_mismatch`` or ``invalid_timestamp``)."""
    per = UNIT_NANOS[unit]
    tz = zone(timezone)
    iso = time_format == "iso8601"

    def parse_text(text: str) -> _dt.datetime:
        text = text.strip()
        try:
            if iso:
                if text.endswith(("Z", "z")):
                    text = text[:-1] + "+00:00"
                return _dt.datetime.fromisoformat(text)
            return _dt.datetime.strptime(text, time_format)
        except ValueError:
            expected = "an ISO 8601 date or time" if iso else f"the pattern {time_format!r}"
            raise bad("invalid_timestamp", f"{text[:64]!r} is not {expected}") from None

    def convert(raw: Any) -> int:
        if isinstance(raw, _dt.datetime):
            moment = raw
        elif isinstance(raw, _dt.date):
            moment = _dt.datetime(raw.year, raw.month, raw.day)
        elif isinstance(raw, str):
            moment = parse_text(raw)
        elif isinstance(raw, (bytes, bytearray)):
            try:
                moment = parse_text(bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:
                raise bad("type_mismatch", "bytes that are not UTF-8 text") from None
        else:
            raise bad("type_mismatch", f"expected a date, a time or text, got "
                      f"{type(raw).__name__} {raw!r:.64}; a column of epoch numbers is int64")
        return _nanos(moment, tz) // per

    return convert
