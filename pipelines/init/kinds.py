"""What one sampled value is, in the terms of the feature types that could store it.

A value's kind says which feature types store it exactly, by the rules the
build itself applies (`schemas.values`, `schemas.timestamps`): ``int`` fits
int64; ``wideint`` is an integer beyond int64 (stored exactly only as text);
``float`` is a finite number below float32's overflow; ``bigfloat`` one
beyond it (a `float32_overflow` dead letter as float); ``nonfinite`` NaN or
an infinity; ``date`` / ``datetime`` native dates and times; ``text``,
``bytes``, ``bool``; ``object`` and ``list`` (a value inside a list that is
itself an object or a list: no feature stores it); ``other:NAME`` any other
Python type (an Avro ``uuid``: no feature stores it as it comes).

Text from a CSV file is typed by what it spells (an integer, a number,
otherwise text); text from any source may be a date or time: the formats of
`TIME_FORMATS` that the build's own parser accepts for it.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
import struct
from typing import Any

from ...schemas.features import INT64_MAX, INT64_MIN
from ...schemas.timestamps import timestamp_converter
from ...schemas.values import BYTES_LIKE, FLOAT32_OVERFLOW

__all__ = ["ISO", "TIME_FORMATS", "float32_exact", "has_time", "number_value", "time_formats",
           "value_kind"]

ISO = "iso8601"
# The text formats init recognises, in order of preference where several fit
# every value: month-first before day-first, as pandas reads "01/02/2020".
TIME_FORMATS = (
    ISO, "%Y/%m/%d", "%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S",
    "%m/%d/%Y", "%d/%m/%Y", "%m/%d/%Y %H:%M", "%d/%m/%Y %H:%M",
    "%m/%d/%Y %H:%M:%S", "%d/%m/%Y %H:%M:%S", "%d.%m.%Y", "%d.%m.%Y %H:%M",
    "%d.%m.%Y %H:%M:%S", "%b %d %Y", "%b %d, %Y", "%B %d %Y", "%B %d, %Y",
    "%d %b %Y", "%d %B %Y", "%d-%b-%Y", "%b %d %Y %H:%M", "%b %d %Y %H:%M:%S")
# ISO text as init proposes it: a date, optionally a time, optionally an
# offset. (Python's own ISO parser also takes "20240101" and week dates,
# which are more likely numbers or codes than dates.)
_ISO_RE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
                     r"(Z|[+-]\d{2}:?\d{2})?)?")
_ASCII_INT = re.compile(r"[+-]?[0-9]+")
# int64 has 19 digits; more is always wider (and int() of thousands of
# digits is refused by Python, so the length is looked at first).
_INT64_DIGITS = 19
_LONGEST_TIME_TEXT = 40


class _NotATime(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)


_PARSERS = {fmt: timestamp_converter("us", fmt, "UTC", _NotATime) for fmt in TIME_FORMATS}


def value_kind(value: Any, text_source: bool) -> str:
    """The kind of one non-null value (see the module)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if INT64_MIN <= value <= INT64_MAX else "wideint"
    if isinstance(value, (float, decimal.Decimal)):
        return _number_kind(value)
    if isinstance(value, _dt.datetime):
        return "datetime"
    if isinstance(value, _dt.date):
        return "date"
    if isinstance(value, BYTES_LIKE):
        return "bytes"
    if isinstance(value, str):
        return _text_kind(value) if text_source else "text"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "list"
    if hasattr(value, "item"):  # numpy scalars
        return value_kind(value.item(), text_source)
    return f"other:{type(value).__name__}"


def _number_kind(value: float | decimal.Decimal) -> str:
    if not value.is_finite() if isinstance(value, decimal.Decimal) else not math.isfinite(value):
        return "nonfinite"
    return "float" if abs(value) < FLOAT32_OVERFLOW else "bigfloat"


def _text_kind(text: str) -> str:
    """The kind of CSV text, as the build's int64 and float parsers read it:
    ASCII digits only, no "_" separators."""
    stripped = text.strip()
    if not stripped.isascii() or "_" in stripped:
        return "text"
    if _ASCII_INT.fullmatch(stripped):
        digits = stripped.lstrip("+-").lstrip("0")
        if len(digits) > _INT64_DIGITS:
            return "wideint"
        return "int" if INT64_MIN <= int(stripped) <= INT64_MAX else "wideint"
    try:
        number = float(stripped)
    except ValueError:
        return "text"
    if math.isinf(number) and stripped.lower().lstrip("+-") not in ("inf", "infinity"):
        return "bigfloat"  # a finite literal beyond even a double: 1e400
    return _number_kind(number)


def number_value(value: Any) -> float | int | decimal.Decimal:
    """A numeric value as a number (CSV text is parsed)."""
    if isinstance(value, str):
        stripped = value.strip()
        return int(stripped) if _ASCII_INT.fullmatch(stripped) else float(stripped)
    if hasattr(value, "item") and not isinstance(value, (int, float, decimal.Decimal)):
        return value.item()
    return value


def float32_exact(number: int) -> bool:
    """True when the integer `number` is stored exactly by a float feature."""
    if abs(number) <= 1 << 24:
        return True
    try:
        return struct.unpack("f", struct.pack("f", float(number)))[0] == number
    except (OverflowError, struct.error):
        return False


def time_formats(text: str, candidates) -> set[str]:
    """The formats among `candidates` in which the build reads `text` as a date or time."""
    stripped = text.strip()
    if not stripped or len(stripped) > _LONGEST_TIME_TEXT or not any(
            ch.isdigit() for ch in stripped):
        return set()
    found = set()
    for fmt in candidates:
        if fmt == ISO and not _ISO_RE.fullmatch(stripped):
            continue
        try:
            _PARSERS[fmt](stripped)
        except _NotATime:
            continue
        found.add(fmt)
    return found


def has_time(fmt: str, texts_with_time: bool) -> bool:
    """True when values read with `fmt` carry a time of day."""
    return texts_with_time if fmt == ISO else "%H" in fmt
