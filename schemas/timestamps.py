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
such a column as ``int64``. Arithmetic is exact integer arithmetic: an ISO
fraction of a second is read to the nanosecond by hand (datetime keeps
microseconds), nanoseconds of pandas Timestamps are kept, and digits below
a nanosecond round down like the rest.

A local time (no offset, in a zone with daylight saving) that the clocks
skip is a ``nonexistent_time`` error; one they repeat is an
``ambiguous_time`` error unless the feature's ``ambiguous`` is ``earlier``
or ``later`` (pandas' ``tz_localize`` refuses both by default too).
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from typing import Any, Callable

__all__ = ["AMBIGUOUS", "UNIT_NANOS", "timestamp_converter", "zone"]

# How a local time that a daylight-saving change repeats is read.
AMBIGUOUS = ("error", "earlier", "later")
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


def _nanos(moment: _dt.datetime) -> int:
    """Exact nanoseconds from the epoch to an aware `moment` (timedelta's
    parts are integers; a pandas Timestamp adds its `nanosecond`)."""
    delta = moment - _EPOCH
    nanos = (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    return nanos + int(getattr(moment, "nanosecond", 0) or 0)


def _place(moment: _dt.datetime, tz: _dt.tzinfo, ambiguous: str,
           bad: Callable[[str, str], Exception]) -> _dt.datetime:
    """A naive wall-clock `moment` made aware in `tz`. A time a daylight-saving
    change skips is refused (``nonexistent_time``), as pandas refuses it; a
    time it repeats is refused (``ambiguous_time``) unless `ambiguous` picks
    its ``earlier`` or ``later`` instant. zoneinfo alone would silently pick
    one for both (its ``fold``)."""
    first, second = moment.replace(tzinfo=tz, fold=0), moment.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first
    # In a gap the UTC instant of either fold reads back as another wall time.
    back = first.astimezone(_dt.timezone.utc).astimezone(tz).replace(tzinfo=None)
    if back != moment.replace(fold=0):
        raise bad("nonexistent_time", f"{moment.isoformat()} does not exist in {tz} "
                  f"(the clocks skip it at a daylight-saving change)")
    if ambiguous == "error":
        raise bad("ambiguous_time", f"{moment.isoformat()} happens twice in {tz} (the "
                  f"clocks repeat it at a daylight-saving change); set the feature's "
                  f"`ambiguous: earlier` or `later` to choose")
    # fold 0 is the first of the two (PEP 495); aware datetimes of one zone
    # compare by wall time, so min/max could not tell them apart.
    return first if ambiguous == "earlier" else second


# ISO 8601 text's fraction of a second, read by hand: datetime keeps only
# microseconds (123456789 ns would become 123456000, and -1 ns before 1970
# -1000). Dates hold no '.' or ',', so the first one starts the fraction.
# ASCII digits only: \d would take other scripts' digits, which int() reads.
_FRACTION = re.compile(r"^(?P<head>[^.,]*?)[.,](?P<digits>[0-9]+)(?P<tail>.*)$", re.S)
# Where a fraction is one of a second: after hh:mm:ss or hhmmss.
_SECONDS = re.compile(r"(?:^|[^0-9:])(?:[0-9]{2}:[0-9]{2}:[0-9]{2}|[0-9]{6})$")
_NO_MATCH = ("time data", "Invalid isoformat", "unconverted data")


def _split_fraction(text: str) -> tuple[str, int] | None:
    """(ISO text without its fraction of a second, that fraction in whole
    nanoseconds, rounded down); None when the fraction is not one of a
    second (ISO's fractions of an hour or minute, which datetime misreads as
    seconds)."""
    match = _FRACTION.match(text)
    if match is None:
        return text, 0
    if not _SECONDS.search(match["head"]):
        return None
    # Digits past the ninth are below a nanosecond: dropping them rounds down.
    digits = match["digits"][:9]
    return match["head"] + match["tail"], int(digits) * 10 ** (9 - len(digits))


def _text_reader(time_format: str, bad: Callable[[str, str], Exception]
                 ) -> Callable[[str], tuple[_dt.datetime, int]]:
    """text -> (datetime, nanoseconds to add that datetime cannot hold)."""
    iso = time_format == "iso8601"
    expected = "an ISO 8601 date or time" if iso else f"the pattern {time_format!r}"

    def refuse(text: str, error: ValueError | None) -> Exception:
        if error is None:
            return bad("invalid_timestamp", f"{text[:64]!r} is not {expected}: a fraction "
                       "must follow the seconds (hh:mm:ss.fff)")
        if str(error).startswith(_NO_MATCH):
            return bad("invalid_timestamp", f"{text[:64]!r} is not {expected}")
        # The text has the pattern's shape, one field is impossible: say which.
        return bad("invalid_timestamp", f"{text[:64]!r} is not a valid date or time: {error}")

    def read(text: str) -> tuple[_dt.datetime, int]:
        text = text.strip()
        iso_text = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
        split = _split_fraction(iso_text) if iso else (text, 0)
        if split is None:
            raise refuse(text, None)
        try:
            if not iso:
                return _dt.datetime.strptime(text, time_format), 0
            return _dt.datetime.fromisoformat(split[0]), split[1]
        except ValueError as error:
            raise refuse(text, error) from None

    return read


def timestamp_converter(unit: str, time_format: str, timezone: str,
                        bad: Callable[[str, str], Exception],
                        ambiguous: str = "error") -> Callable[[Any], int]:
    """raw value -> int64 count of `unit`s since the epoch, rounded down;
    raises ``bad(reason, detail)`` (reason ``type_mismatch``,
    ``invalid_timestamp``, ``nonexistent_time`` or ``ambiguous_time``).
    ambiguous: one of `AMBIGUOUS`, for local times a daylight-saving
    change repeats."""
    per = UNIT_NANOS[unit]
    tz = zone(timezone)
    read_text = _text_reader(time_format, bad)

    def moment_of(raw: Any) -> tuple[_dt.datetime, int]:
        if isinstance(raw, _dt.datetime):
            return raw, 0
        if isinstance(raw, _dt.date):
            return _dt.datetime(raw.year, raw.month, raw.day), 0
        if isinstance(raw, str):
            return read_text(raw)
        if isinstance(raw, (bytes, bytearray)):
            try:
                return read_text(bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:
                raise bad("type_mismatch", "bytes that are not UTF-8 text") from None
        raise bad("type_mismatch", f"expected a date, a time or text, got "
                  f"{type(raw).__name__} {raw!r:.64}; a column of epoch numbers is int64")

    def convert(raw: Any) -> int:
        moment, extra = moment_of(raw)
        if moment.tzinfo is None:
            moment = _place(moment, tz, ambiguous, bad)
        # Floor division rounds towards the past on both sides of 1970.
        return (_nanos(moment) + extra) // per

    return convert
