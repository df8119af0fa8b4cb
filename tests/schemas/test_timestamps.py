"""Tests for timestamp features (schemas/timestamps.py): exact fractions of a
second, daylight-saving gaps and overlaps, and the messages of refused text
and refused keys. Expected values come from integer arithmetic on the
generated parts and from pandas, never from the code under test."""

import calendar
import datetime as dt
import fractions
import functools
import re
import zoneinfo

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.checks import checked_converter
from recordforge.schemas.dead_letters import RowError
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.features import FEATURE_TYPES

UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "days": 86400 * 10**9}
EPOCH = dt.datetime(1970, 1, 1)


def converter(**settings_):
    spec, = parse_features({"t": {"type": "timestamp", "from": "c", **settings_}})
    return checked_converter(spec, None, "features.t")


# --- 38.4: fractions of a second, exactly, rounded towards the past ---------------


@settings(max_examples=300, deadline=None)
@given(seconds=st.integers(-(2**63) // 10**9 + 86400, (2**63 - 1) // 10**9 - 86400),
       digits=st.text("0123456789", min_size=1, max_size=15),
       unit=st.sampled_from(sorted(UNITS)),
       offset_minutes=st.integers(-14 * 60, 14 * 60),
       separator=st.sampled_from(["T", " "]), comma=st.booleans())
def test_iso_fraction_is_exact_in_every_unit(seconds, digits, unit, offset_minutes,
                                             separator, comma):
    # The instant, as written in a zone `offset_minutes` east of UTC.
    local = EPOCH + dt.timedelta(seconds=seconds + offset_minutes * 60)
    sign = "+" if offset_minutes >= 0 else "-"
    offset = f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"
    text = (local.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + ("," if comma else ".")
            + digits + offset)
    exact = fractions.Fraction(seconds) + fractions.Fraction(int(digits), 10 ** len(digits))
    expected = int(exact * 10**9 // UNITS[unit])  # floor: towards the past
    assert converter(unit=unit)(text) == [expected]


@settings(max_examples=200, deadline=None)
@given(nanos=st.integers(-(10**15), 10**15), unit=st.sampled_from(sorted(UNITS)))
def test_pandas_nanoseconds_round_towards_the_past(nanos, unit):
    moment = pd.Timestamp(nanos, unit="ns")
    assert converter(unit=unit)(moment) == [nanos // UNITS[unit]]
    text = moment.isoformat() + "Z"  # pandas writes all nine digits
    assert converter(unit=unit)(text) == [nanos // UNITS[unit]]


def test_nanoseconds_example_of_the_issue():
    assert converter(unit="ns")("2024-01-01T00:00:00.123456789Z") == [1704067200123456789]
    assert converter(unit="ns")("1969-12-31T23:59:59.999999999Z") == [-1]


@settings(max_examples=100, deadline=None)
@given(day=st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)), unit=st.sampled_from(sorted(UNITS)))
def test_what_int64_cannot_hold_is_a_dead_letter(day, unit):
    # In ns int64 ends in 1677 and 2262; the other units hold every date.
    exact = (dt.datetime.combine(day, dt.time()) - EPOCH) // dt.timedelta(microseconds=1) * 1000
    expected = exact // UNITS[unit]
    convert = converter(unit=unit)
    if -(2**63) <= expected < 2**63:
        assert convert(day.isoformat()) == [expected]
    else:
        with pytest.raises(RowError) as info:
            convert(day.isoformat())
        assert info.value.reason == "int64_overflow"


@settings(max_examples=100, deadline=None)
@given(hour=st.integers(0, 23), minute=st.integers(0, 59), digits=st.text("0123456789",
                                                                      min_size=1, max_size=6),
       with_minutes=st.booleans())
def test_a_fraction_of_an_hour_or_minute_is_refused_not_misread(hour, minute, digits,
                                                               with_minutes):
    # datetime reads 12:30.5 as 12:30:00.5; ISO 8601 means 12:30:30.
    time = f"{hour:02d}:{minute:02d}" if with_minutes else f"{hour:02d}"
    with pytest.raises(RowError) as info:
        converter(unit="ns")(f"2024-01-01T{time}.{digits}")
    assert info.value.reason == "invalid_timestamp"
    assert "must follow the seconds" in str(info.value)


# --- 38.21: daylight-saving gaps and overlaps ----------------------------------------

ZONES = ["Europe/Paris", "America/New_York", "Australia/Sydney", "America/Santiago"]


@functools.lru_cache(maxsize=None)
def transitions(zone_name):
    """UTC instants in 2000-2030 where the zone's offset changes (to the minute)."""
    tz = zoneinfo.ZoneInfo(zone_name)
    utc = dt.timezone.utc
    found = []
    day = dt.datetime(2000, 1, 1, tzinfo=utc)
    previous = day.astimezone(tz).utcoffset()
    while day.year < 2031:
        later = day + dt.timedelta(days=1)
        now = later.astimezone(tz).utcoffset()
        if now != previous:
            lo, hi = day, later  # bisect to the minute
            while hi - lo > dt.timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(tz).utcoffset() == previous:
                    lo = mid
                else:
                    hi = mid
            found.append(hi.replace(second=0, microsecond=0))
        day, previous = later, now
    return tuple(found)


@st.composite
def near_a_transition(draw):
    """(zone, naive local wall time within 90 minutes of a clock change)."""
    zone_name = draw(st.sampled_from(ZONES))
    instant = draw(st.sampled_from(transitions(zone_name)))
    wall = instant.astimezone(zoneinfo.ZoneInfo(zone_name)).replace(tzinfo=None)
    shift = dt.timedelta(minutes=draw(st.integers(-90, 90)), seconds=draw(st.integers(0, 59)))
    return zone_name, wall + shift


def pandas_reading(zone_name, wall, ambiguous):
    """What pandas' tz_localize makes of a naive local time: seconds, or the
    name of the error it raises."""
    choice = {"error": "raise", "earlier": True, "later": False}[ambiguous]
    try:
        moment = pd.Timestamp(wall).tz_localize(zone_name, ambiguous=choice,
                                                nonexistent="raise")
    except ValueError as error:  # pandas 3 says which in the message only
        return "nonexistent_time" if "nonexistent" in str(error) else "ambiguous_time"
    return moment.value // 10**9


@settings(max_examples=400, deadline=None)
@given(case=near_a_transition(), ambiguous=st.sampled_from(["error", "earlier", "later"]),
       as_text=st.booleans())
def test_local_times_at_clock_changes_follow_pandas(case, ambiguous, as_text):
    zone_name, wall = case
    expected = pandas_reading(zone_name, wall, ambiguous)
    convert = converter(unit="s", timezone=zone_name, ambiguous=ambiguous)
    raw = wall.isoformat() if as_text else wall
    if isinstance(expected, str):
        with pytest.raises(RowError) as info:
            convert(raw)
        assert info.value.reason == expected
        assert zone_name in str(info.value)
    else:
        assert convert(raw) == [expected]


@pytest.mark.parametrize("bad", ["raise", "first", True, None, ["earlier"]])
def test_ambiguous_takes_only_its_choices(bad):
    with pytest.raises(ConfigError, match=r"features\.t\.ambiguous"):
        parse_features({"t": {"type": "timestamp", "ambiguous": bad}})


def test_ambiguous_is_for_timestamps_only():
    with pytest.raises(ConfigError, match=r"features\.t\.ambiguous.*timestamp features only"):
        parse_features({"t": {"type": "int64", "ambiguous": "earlier"}})


# --- 38.18: messages ---------------------------------------------------------------

PATTERNS = ["%Y/%m/%d", "%d.%m.%Y", "%m-%d-%Y %H:%M", "iso8601"]


@settings(max_examples=200, deadline=None)
@given(year=st.integers(1, 9999), month=st.integers(1, 12), extra=st.integers(1, 3),
       pattern=st.sampled_from(PATTERNS))
def test_an_impossible_day_is_named_as_such(year, month, extra, pattern):
    day = calendar.monthrange(year, month)[1] + extra
    if day > 31:
        return
    fmt = "%Y-%m-%d" if pattern == "iso8601" else pattern
    text = (fmt.replace("%Y", f"{year:04d}").replace("%m", f"{month:02d}")
            .replace("%d", f"{day:02d}").replace("%H", "10").replace("%M", "30"))
    with pytest.raises(RowError) as info:
        converter(format=pattern)(text)
    assert info.value.reason == "invalid_timestamp"
    assert "day is out of range" in str(info.value), str(info.value)


BOUND_KEYS = {"min": 0, "max": 10, "max_bytes": 4}


@given(ftype=st.sampled_from(FEATURE_TYPES), key=st.sampled_from(sorted(BOUND_KEYS)))
def test_a_refused_bound_suggests_only_keys_the_type_takes(ftype, key):
    body = {"type": ftype, key: BOUND_KEYS[key]}
    try:
        parse_features({"f": body})
        return  # the type takes the key
    except ConfigError as error:
        message = str(error)
    for suggested in re.findall(r"use (min/max|max_bytes)", message):
        for other in suggested.split("/"):  # each must be accepted
            parse_features({"f": {"type": ftype, other: BOUND_KEYS[other]}})
    if ftype == "timestamp":
        assert "takes no bounds" in message


@settings(max_examples=100, deadline=None)
@given(digit=st.characters(categories=["Nd"]).filter(lambda c: not c.isascii()),
       position=st.integers(0, 5))
def test_a_fraction_with_digits_of_another_script_is_refused(digit, position):
    # int() reads them; ISO 8601 and the original datetime parser do not.
    digits = list("123456")
    digits[position] = digit
    with pytest.raises(RowError) as info:
        converter(unit="ns")(f"2024-01-01T00:00:00.{''.join(digits)}Z")
    assert info.value.reason == "invalid_timestamp"
    assert "Z" in str(info.value) and "+00:00" not in str(info.value)
