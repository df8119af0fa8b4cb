"""One value: a raw input value -> the int, float or bytes a feature stores, or why it cannot be.

`element_converter(spec, vocabulary)` gives the function that converts and
checks one element of a feature (its type, range, allowed set, size limit
or vocabulary), raising `BadValue` with a stable reason code; the
feature's converter (`checks`) adds shapes, missing values and the feature's
name. The rules (also in docs/reasons.md):

- int64 from text: optional sign and ASCII digits, surrounding whitespace
  ignored; "1.0" / "1e3" are accepted only when the number is whole
  (exactly, no rounding); "true"/"false" (any case) are 1/0; no "_", no hex, no
  non-ASCII digits. From JSON/Parquet: int, bool (1/0), a whole float.
- float from text: anything Python's float() reads except "_" separators and
  non-ASCII digits; "nan"/"inf" are `nan_or_inf` unless `allow_nan`; a finite
  number too large for float32 (it would round to inf) is `float32_overflow`.
  From JSON/Parquet: float, int, bool (1.0/0.0), Decimal.
- string: text (must be encodable as UTF-8) or bytes that are valid UTF-8.
  Numbers and booleans are `type_mismatch` (they have no single text form).
  Whitespace is kept: text is data.
- bytes: bytes as given; text is stored as its UTF-8 encoding.
- vocabulary (int64 + vocabulary): text or UTF-8 bytes, matched exactly
  (case and whitespace count) and replaced by the label's id.
- min/max apply to every element; NaN (with allow_nan) is not compared.
  `values` compares the converted value (floats before float32 rounding).
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any, Callable, Mapping, Sequence

from .timestamps import timestamp_converter
from .features import INT64_MAX, INT64_MIN, FeatureSpec

__all__ = ["BYTES_LIKE", "FLOAT32_OVERFLOW", "BadValue", "element_converter", "shown"]

# The smallest double that rounds to inf as float32 (round-to-nearest-even:
# halfway between FLT_MAX and 2**128 rounds up). Everything below it stores as
# a finite float32, so this is exactly where `float32_overflow` starts.
FLOAT32_OVERFLOW = (2.0 - 2.0 ** -24) * 2.0 ** 127

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_BOOL_TEXT = {"true": 1, "false": 0}
BYTES_LIKE = (bytes, bytearray, memoryview)
_SHOW_LIMIT = 60


class BadValue(Exception):
    """One element failed; the feature's converter adds the feature context."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def shown(value: Any) -> str:
    """A raw value as error messages quote it (its repr, cut short)."""
    text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[:_SHOW_LIMIT] + "..."


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


# --- conversions: raw value -> int, float or bytes, or raise BadValue --------------


def _int_from_text(text: str) -> int:
    stripped = text.strip()
    if not stripped:
        raise BadValue("type_mismatch", f"{shown(text)} is empty, not an integer")
    if not stripped.isascii() or "_" in stripped:
        raise BadValue("type_mismatch", f"{shown(text)} is not an integer (only ASCII digits, "
                       "no '_' separators)")
    flag = _BOOL_TEXT.get(stripped.lower())
    if flag is not None:
        return flag
    if _INT_TEXT.fullmatch(stripped):
        try:
            return int(stripped)
        except ValueError:  # more digits than Python converts: far outside int64
            raise BadValue("int64_overflow", f"{shown(text)} does not fit in int64") from None
    try:
        number = decimal.Decimal(stripped)
    except decimal.InvalidOperation:
        raise BadValue("type_mismatch", f"{shown(text)} is not an integer") from None
    return _int_from_decimal(number, text)


def _int_from_decimal(number: decimal.Decimal, raw: Any) -> int:
    if not number.is_finite():
        raise BadValue("type_mismatch", f"{shown(raw)} is not an integer")
    if number == 0:
        return 0
    # adjusted() is the exponent of the leading digit; checking it first keeps
    # "1e999999999" from building a gigantic int.
    if number.adjusted() > 18:
        raise BadValue("int64_overflow", f"{shown(raw)} does not fit in int64")
    if number != number.to_integral_value():
        raise BadValue("type_mismatch", f"{shown(raw)} is not a whole number (int64 features "
                       "accept 3 or 3.0, not 3.5)")
    return int(number)


def _to_int(raw: Any) -> int:
    kind = type(raw)
    if kind is int:
        return raw
    if kind is str:
        return _int_from_text(raw)
    if isinstance(raw, int):  # bool and int subclasses (IntEnum ...)
        return int(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw) or not raw.is_integer():
            raise BadValue("type_mismatch", f"{shown(raw)} is not a whole number (int64 "
                           "features accept 3 or 3.0, not 3.5)")
        return int(raw)
    if isinstance(raw, decimal.Decimal):
        return _int_from_decimal(raw, raw)
    if isinstance(raw, BYTES_LIKE):
        return _int_from_text(_text_from_bytes(raw, "type_mismatch"))
    if hasattr(raw, "item") and not isinstance(raw, (list, tuple, dict)):  # numpy scalars
        return _to_int(raw.item())
    raise BadValue("type_mismatch", f"{_kind_of(raw)} ({shown(raw)}) cannot be an int64")


def _float_from_text(text: str) -> float:
    stripped = text.strip()
    if not stripped:
        raise BadValue("type_mismatch", f"{shown(text)} is empty, not a number")
    if not stripped.isascii() or "_" in stripped:
        raise BadValue("type_mismatch", f"{shown(text)} is not a number (only ASCII digits, "
                       "no '_' separators)")
    lowered = stripped.lower()
    flag = _BOOL_TEXT.get(lowered)
    if flag is not None:
        return float(flag)
    try:
        number = float(stripped)
    except ValueError:
        raise BadValue("type_mismatch", f"{shown(text)} is not a number") from None
    if math.isinf(number) and lowered.lstrip("+-") not in ("inf", "infinity"):
        # A finite literal such as 1e400 that double precision already overflows.
        raise BadValue("float32_overflow", f"{shown(text)} is too large for float32")
    return number


def _to_float(raw: Any) -> float:
    kind = type(raw)
    if kind is float:
        return raw
    if kind is str:
        return _float_from_text(raw)
    if isinstance(raw, float):
        return float(raw)
    if isinstance(raw, int):  # int and bool
        try:
            return float(raw)
        except OverflowError:
            raise BadValue("float32_overflow", f"{shown(raw)} is too large for float32") from None
    if isinstance(raw, decimal.Decimal):
        number = float(raw)
        if math.isinf(number) and raw.is_finite():
            raise BadValue("float32_overflow", f"{shown(raw)} is too large for float32")
        return number
    if isinstance(raw, BYTES_LIKE):
        return _float_from_text(_text_from_bytes(raw, "type_mismatch"))
    if hasattr(raw, "item") and not isinstance(raw, (list, tuple, dict)):
        return _to_float(raw.item())
    raise BadValue("type_mismatch", f"{_kind_of(raw)} ({shown(raw)}) cannot be a float")


def _text_from_bytes(raw: Any, reason: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadValue(reason, f"{shown(bytes(raw))} is not valid UTF-8 (byte "
                       f"{error.start})") from None


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:  # lone surrogates, e.g. JSON "\ud800"
        raise BadValue("invalid_utf8", f"{shown(text)} is not valid UTF-8 text (unpaired "
                       f"surrogate at character {error.start})") from None


def _to_text_bytes(raw: Any) -> bytes:
    """string features: UTF-8 bytes of text; bytes input must already be UTF-8."""
    if type(raw) is str:
        return _utf8(raw)
    if isinstance(raw, str):
        return _utf8(str(raw))
    if isinstance(raw, BYTES_LIKE):
        data = bytes(raw)
        _text_from_bytes(data, "invalid_utf8")
        return data
    raise BadValue("type_mismatch", f"{_kind_of(raw)} ({shown(raw)}) is not text; quote it in "
                   "the source or declare the feature int64/float")


def _to_bytes(raw: Any) -> bytes:
    if isinstance(raw, BYTES_LIKE):
        return bytes(raw)
    if isinstance(raw, str):
        return _utf8(raw)
    raise BadValue("type_mismatch", f"{_kind_of(raw)} ({shown(raw)}) is not bytes or text")


# --- one element of a feature: converted, then checked -----------------------------


def element_converter(spec: FeatureSpec, vocabulary: Sequence[str] | None
                      ) -> Callable[[Any], Any]:
    """raw element -> the value feature `spec` stores, raising
    `BadValue`. vocabulary: the resolved labels of an int64 feature
    with a vocabulary (required for one)."""
    if spec.vocabulary is not None:
        if vocabulary is None:
            raise ValueError(f"feature {spec.name!r} needs its resolved vocabulary")
        return _label_element(spec, vocabulary)
    if spec.type == "timestamp":
        return _timestamp_element(spec)
    if spec.stored_kind == "int64":
        return _int_element(spec)
    if spec.stored_kind == "float":
        return _float_element(spec)
    return _bytes_element(spec)


def _int_element(spec: FeatureSpec) -> Callable[[Any], int]:
    lo = INT64_MIN if spec.min is None else spec.min
    hi = INT64_MAX if spec.max is None else spec.max
    allowed = frozenset(spec.values) if spec.values is not None else None

    def element(raw):
        value = _to_int(raw)
        if not INT64_MIN <= value <= INT64_MAX:
            raise BadValue("int64_overflow", f"{shown(raw)} does not fit in int64")
        if not lo <= value <= hi:
            raise BadValue("out_of_range", f"{value} is outside [{spec.min}, {spec.max}]")
        if allowed is not None and value not in allowed:
            raise BadValue("not_allowed", f"{value} is not one of {list(spec.values)}")
        return value

    return element


def _timestamp_element(spec: FeatureSpec) -> Callable[[Any], int]:
    convert = timestamp_converter(spec.unit or "s", spec.format or "iso8601",
                                  spec.timezone or "UTC", BadValue,
                                  spec.ambiguous or "error")
    allowed = frozenset(spec.values) if spec.values is not None else None

    def element(raw):
        value = convert(raw)
        if not INT64_MIN <= value <= INT64_MAX:
            raise BadValue("int64_overflow", f"{shown(raw)} in {spec.unit} does not fit in int64")
        if allowed is not None and value not in allowed:
            raise BadValue("not_allowed", f"{value} is not one of {list(spec.values)}")
        return value

    return element


def _float_element(spec: FeatureSpec) -> Callable[[Any], float]:
    lo = -math.inf if spec.min is None else spec.min
    hi = math.inf if spec.max is None else spec.max
    allowed = frozenset(float(v) for v in spec.values) if spec.values is not None else None
    allow_nan = spec.allow_nan

    def element(raw):
        value = _to_float(raw)
        if value != value:  # NaN: never compared with min/max/values
            if allow_nan:
                return value
            raise BadValue("nan_or_inf", f"{shown(raw)} is NaN (set allow_nan: true to keep it)")
        if math.isinf(value):
            if not allow_nan:
                raise BadValue("nan_or_inf", f"{shown(raw)} is infinite (set allow_nan: true "
                               "to keep it)")
        elif not -FLOAT32_OVERFLOW < value < FLOAT32_OVERFLOW:
            raise BadValue("float32_overflow", f"{shown(raw)} is too large for float32 "
                           f"(it would be stored as inf)")
        if not lo <= value <= hi:
            raise BadValue("out_of_range", f"{value!r} is outside [{spec.min}, {spec.max}]")
        if allowed is not None and value not in allowed:
            raise BadValue("not_allowed", f"{value!r} is not one of {list(spec.values)}")
        return value

    return element


def _bytes_element(spec: FeatureSpec) -> Callable[[Any], bytes]:
    convert = _to_text_bytes if spec.is_text else _to_bytes
    limit = spec.max_bytes
    allowed = (frozenset(v.encode("utf-8") for v in spec.values)
               if spec.values is not None else None)

    def element(raw):
        value = convert(raw)
        if limit is not None and len(value) > limit:
            raise BadValue("too_long", f"{len(value)} bytes is longer than max_bytes ({limit})")
        if allowed is not None and value not in allowed:
            raise BadValue("not_allowed", f"{shown(raw)} is not one of {list(spec.values)}")
        return value

    return element


def _label_element(spec: FeatureSpec, vocabulary: Sequence[str]) -> Callable[[Any], int]:
    ids = {label: i for i, label in enumerate(vocabulary)}

    def element(raw):
        if isinstance(raw, str):
            label = raw
        elif isinstance(raw, BYTES_LIKE):
            label = _text_from_bytes(raw, "invalid_utf8")
        else:
            raise BadValue("type_mismatch", f"{_kind_of(raw)} ({shown(raw)}) is not a label; "
                           "vocabulary labels are text")
        found = ids.get(label)
        if found is None:
            raise BadValue("unknown_label", f"{shown(raw)} is not in the vocabulary"
                           + _near_label(label, ids))
        return found

    return element


def _near_label(label: str, ids: Mapping[str, int]) -> str:
    # Only in the error path: point at the near miss a data engineer would make.
    for candidate in (label.strip(), label.strip().lower()):
        if candidate in ids:
            return f" (did you mean {candidate!r}? labels match exactly)"
    lowered = {known.lower(): known for known in ids}
    if label.strip().lower() in lowered:
        return f" (did you mean {lowered[label.strip().lower()]!r}? labels match exactly)"
    return ""
