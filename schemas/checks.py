"""Row checks: raw input values -> checked feature values -> serialized Example.

`RowEncoder(specs, vocabularies)` compiles one converter per feature once, so
per row the work is a dict lookup and a few type tests per feature.
`.convert(row_values)` gives ``{feature name: [stored values]}`` or raises
`RowError` with a stable reason code; `.encode(row_values)` also serializes the
Example.

Conversion rules (also in docs/reasons.md):
- Missing: a column that is absent, None, or the empty text "" (for int64 and
  float also whitespace-only text). A missing value takes the feature's
  `default`; without one it is `missing_value` if `required`, else the feature
  is left out of the Example. Use `default: ""` to store empty strings.
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
- Shapes: a scalar feature takes one value or a one-element list; [N] and [-1]
  take a list (a single value counts as a list of one).
- min/max apply to every element; NaN (with allow_nan) is not compared.
  `values` compares the converted value (floats before float32 rounding).
"""

from __future__ import annotations

import decimal
import math
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .columns import FLOAT32_OVERFLOW, ColumnEncoder, fast_bounds
from .dead_letters import RowError
from .errors import ConfigError
from .example import (ExampleEncoder, ExampleValueError,
                                         example_from_entries, example_head,
                                         scalar_entry_encoder)
from .features import INT64_MAX, INT64_MIN, FeatureSpec

__all__ = ["RowEncoder", "compile_entry", "compile_feature", "validate_default",
           "FLOAT32_OVERFLOW"]

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_BOOL_TEXT = {"true": 1, "false": 0}
_BYTES_LIKE = (bytes, bytearray, memoryview)
_SHOW_LIMIT = 60

# A feature converter takes the raw column value and returns the values to
# store (a list or tuple), or None when an optional feature is absent.
Converter = Callable[[Any], "Sequence | None"]


class _Invalid(Exception):
    """One element failed; the feature's converter adds the feature context."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[:_SHOW_LIMIT] + "..."


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


# --- element converters: raw value -> stored Python value, or raise _Invalid -------


def _int_from_text(text: str) -> int:
    stripped = text.strip()
    if not stripped:
        raise _Invalid("type_mismatch", f"{_show(text)} is empty, not an integer")
    if not stripped.isascii() or "_" in stripped:
        raise _Invalid("type_mismatch", f"{_show(text)} is not an integer (only ASCII digits, "
                       "no '_' separators)")
    flag = _BOOL_TEXT.get(stripped.lower())
    if flag is not None:
        return flag
    if _INT_TEXT.fullmatch(stripped):
        try:
            return int(stripped)
        except ValueError:  # more digits than Python converts: far outside int64
            raise _Invalid("int64_overflow", f"{_show(text)} does not fit in int64") from None
    try:
        number = decimal.Decimal(stripped)
    except decimal.InvalidOperation:
        raise _Invalid("type_mismatch", f"{_show(text)} is not an integer") from None
    return _int_from_decimal(number, text)


def _int_from_decimal(number: decimal.Decimal, raw: Any) -> int:
    if not number.is_finite():
        raise _Invalid("type_mismatch", f"{_show(raw)} is not an integer")
    if number == 0:
        return 0
    # adjusted() is the exponent of the leading digit; checking it first keeps
    # "1e999999999" from building a gigantic int.
    if number.adjusted() > 18:
        raise _Invalid("int64_overflow", f"{_show(raw)} does not fit in int64")
    if number != number.to_integral_value():
        raise _Invalid("type_mismatch", f"{_show(raw)} is not a whole number (int64 features "
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
            raise _Invalid("type_mismatch", f"{_show(raw)} is not a whole number (int64 "
                           "features accept 3 or 3.0, not 3.5)")
        return int(raw)
    if isinstance(raw, decimal.Decimal):
        return _int_from_decimal(raw, raw)
    if isinstance(raw, _BYTES_LIKE):
        return _int_from_text(_text_from_bytes(raw, "type_mismatch"))
    if hasattr(raw, "item") and not isinstance(raw, (list, tuple, dict)):  # numpy scalars
        return _to_int(raw.item())
    raise _Invalid("type_mismatch", f"{_kind_of(raw)} ({_show(raw)}) cannot be an int64")


def _float_from_text(text: str) -> float:
    stripped = text.strip()
    if not stripped:
        raise _Invalid("type_mismatch", f"{_show(text)} is empty, not a number")
    if not stripped.isascii() or "_" in stripped:
        raise _Invalid("type_mismatch", f"{_show(text)} is not a number (only ASCII digits, "
                       "no '_' separators)")
    lowered = stripped.lower()
    flag = _BOOL_TEXT.get(lowered)
    if flag is not None:
        return float(flag)
    try:
        number = float(stripped)
    except ValueError:
        raise _Invalid("type_mismatch", f"{_show(text)} is not a number") from None
    if math.isinf(number) and lowered.lstrip("+-") not in ("inf", "infinity"):
        # A finite literal such as 1e400 that double precision already overflows.
        raise _Invalid("float32_overflow", f"{_show(text)} is too large for float32")
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
            raise _Invalid("float32_overflow", f"{_show(raw)} is too large for float32") from None
    if isinstance(raw, decimal.Decimal):
        number = float(raw)
        if math.isinf(number) and raw.is_finite():
            raise _Invalid("float32_overflow", f"{_show(raw)} is too large for float32")
        return number
    if isinstance(raw, _BYTES_LIKE):
        return _float_from_text(_text_from_bytes(raw, "type_mismatch"))
    if hasattr(raw, "item") and not isinstance(raw, (list, tuple, dict)):
        return _to_float(raw.item())
    raise _Invalid("type_mismatch", f"{_kind_of(raw)} ({_show(raw)}) cannot be a float")


def _text_from_bytes(raw: Any, reason: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Invalid(reason, f"{_show(bytes(raw))} is not valid UTF-8 (byte "
                       f"{error.start})") from None


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:  # lone surrogates, e.g. JSON "\ud800"
        raise _Invalid("invalid_utf8", f"{_show(text)} is not valid UTF-8 text (unpaired "
                       f"surrogate at character {error.start})") from None


def _to_text_bytes(raw: Any) -> bytes:
    """string features: UTF-8 bytes of text; bytes input must already be UTF-8."""
    if type(raw) is str:
        return _utf8(raw)
    if isinstance(raw, str):
        return _utf8(str(raw))
    if isinstance(raw, _BYTES_LIKE):
        data = bytes(raw)
        _text_from_bytes(data, "invalid_utf8")
        return data
    raise _Invalid("type_mismatch", f"{_kind_of(raw)} ({_show(raw)}) is not text; quote it in "
                   "the source or declare the feature int64/float")


def _to_bytes(raw: Any) -> bytes:
    if isinstance(raw, _BYTES_LIKE):
        return bytes(raw)
    if isinstance(raw, str):
        return _utf8(raw)
    raise _Invalid("type_mismatch", f"{_kind_of(raw)} ({_show(raw)}) is not bytes or text")


def _int_element(spec: FeatureSpec) -> Callable[[Any], int]:
    lo = INT64_MIN if spec.min is None else spec.min
    hi = INT64_MAX if spec.max is None else spec.max
    allowed = frozenset(spec.values) if spec.values is not None else None

    def element(raw):
        value = _to_int(raw)
        if not INT64_MIN <= value <= INT64_MAX:
            raise _Invalid("int64_overflow", f"{_show(raw)} does not fit in int64")
        if not lo <= value <= hi:
            raise _Invalid("out_of_range", f"{value} is outside [{spec.min}, {spec.max}]")
        if allowed is not None and value not in allowed:
            raise _Invalid("not_allowed", f"{value} is not one of {list(spec.values)}")
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
            raise _Invalid("nan_or_inf", f"{_show(raw)} is NaN (set allow_nan: true to keep it)")
        if math.isinf(value):
            if not allow_nan:
                raise _Invalid("nan_or_inf", f"{_show(raw)} is infinite (set allow_nan: true "
                               "to keep it)")
        elif not -FLOAT32_OVERFLOW < value < FLOAT32_OVERFLOW:
            raise _Invalid("float32_overflow", f"{_show(raw)} is too large for float32 "
                           f"(it would be stored as inf)")
        if not lo <= value <= hi:
            raise _Invalid("out_of_range", f"{value!r} is outside [{spec.min}, {spec.max}]")
        if allowed is not None and value not in allowed:
            raise _Invalid("not_allowed", f"{value!r} is not one of {list(spec.values)}")
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
            raise _Invalid("too_long", f"{len(value)} bytes is longer than max_bytes ({limit})")
        if allowed is not None and value not in allowed:
            raise _Invalid("not_allowed", f"{_show(raw)} is not one of {list(spec.values)}")
        return value

    return element


def _label_element(spec: FeatureSpec, vocabulary: Sequence[str]) -> Callable[[Any], int]:
    ids = {label: i for i, label in enumerate(vocabulary)}

    def element(raw):
        if isinstance(raw, str):
            label = raw
        elif isinstance(raw, _BYTES_LIKE):
            label = _text_from_bytes(raw, "invalid_utf8")
        else:
            raise _Invalid("type_mismatch", f"{_kind_of(raw)} ({_show(raw)}) is not a label; "
                           "vocabulary labels are text")
        found = ids.get(label)
        if found is None:
            raise _Invalid("unknown_label", f"{_show(raw)} is not in the vocabulary"
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


# --- one feature: shape, missing values, fast paths --------------------------------


def _missing_value(raw: Any, numeric: bool) -> bool:
    if raw is None:
        return True
    if type(raw) is str:
        return not raw.strip() if numeric else not raw
    return False


def _as_list(raw: Any) -> list | None:
    if isinstance(raw, (list, tuple)):
        return list(raw)
    if hasattr(raw, "tolist") and not isinstance(raw, (str, dict) + _BYTES_LIKE):
        listed = raw.tolist()  # numpy / pyarrow arrays
        return listed if isinstance(listed, list) else None
    return None


def compile_feature(spec: FeatureSpec, vocabulary: Sequence[str] | None = None,
                    ) -> tuple[Converter, Callable[[Any], list]]:
    """Builds the converters of one feature.

    Returns (convert, convert_present): convert(raw) -> values to store, or None
    for an absent optional feature, raising RowError; convert_present does the
    same without the missing-value rule (used for defaults).
    vocabulary: the resolved labels of an int64 feature with a vocabulary.
    """
    convert, convert_present = _compile_rules(spec, vocabulary)
    fast = _fast_path(spec, vocabulary, convert)
    return (convert if fast is None else fast), convert_present


def compile_entry(spec: FeatureSpec, vocabulary: Sequence[str] | None,
                  list_entry: Callable[[Sequence], bytes],
                  scalar_entry: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """Builds a function raw value -> the feature's encoded Example map entry
    (b"" for an absent optional feature), raising RowError as `convert` does.

    list_entry: values -> entry (`ExampleEncoder.entry_encoder`); scalar_entry:
    one checked value -> entry (`scalar_entry_encoder`). The common case (one
    value of the expected type that passes every check) goes from the raw
    value to the entry bytes in one call, without the list and the dict of
    converted values in between.
    """
    convert, _ = _compile_rules(spec, vocabulary)

    def complete(raw):
        values = convert(raw)
        return b"" if values is None else list_entry(values)

    fast = _fast_path(spec, vocabulary, complete, finish=scalar_entry)
    return complete if fast is None else fast


def _compile_rules(spec: FeatureSpec, vocabulary: Sequence[str] | None,
                   ) -> tuple[Converter, Callable[[Any], list]]:
    """(convert, convert_present) with the complete rules (see compile_feature)."""
    if spec.vocabulary is not None:
        if vocabulary is None:
            raise ValueError(f"feature {spec.name!r} needs its resolved vocabulary")
        element = _label_element(spec, vocabulary)
    elif spec.stored_kind == "int64":
        element = _int_element(spec)
    elif spec.stored_kind == "float":
        element = _float_element(spec)
    else:
        element = _bytes_element(spec)
    name, source, shape = spec.name, spec.source, spec.shape
    numeric = spec.vocabulary is None and spec.stored_kind != "bytes"

    def fail(reason: str, detail: str):
        raise RowError(reason, f"feature {name!r} (column {source!r}): {detail}", feature=name)

    def convert_present(raw):
        items = _as_list(raw)
        try:
            if not shape:
                if items is None:
                    return [element(raw)]
                if len(items) != 1:
                    fail("wrong_length", f"expected one value, got a list of {len(items)}")
                if items[0] is None:
                    fail("type_mismatch", "the list's only element is null")
                return [element(items[0])]
        except _Invalid as bad:
            fail(bad.reason, bad.detail)
        if items is None:
            items = [raw]
        if shape[0] != -1 and len(items) != shape[0]:
            fail("wrong_length", f"expected {shape[0]} values, got {len(items)}")
        converted = []
        for index, item in enumerate(items):
            if item is None:
                fail("type_mismatch", f"element {index} is null")
            try:
                converted.append(element(item))
            except _Invalid as bad:
                fail(bad.reason, f"element {index}: {bad.detail}")
        return converted

    default = None
    if spec.default is not None:
        default = tuple(convert_present(spec.default))
    required = spec.required

    def convert(raw):
        if _missing_value(raw, numeric):
            if default is not None:
                return default
            if required:
                fail("missing_value", "no value" + ("" if raw is None else f" ({_show(raw)})"))
            return None
        return convert_present(raw)

    return convert, convert_present


def _number_fast_path(number: type, lo, hi, allowed, full: Converter,
                      finish: Callable[[Any], Any] | None):
    """The fast path of an int64 (`number` int) or float (`number` float)
    scalar: text or a value of exactly that type, in range and allowed."""
    def convert(raw):
        kind = type(raw)
        if kind is str:
            try:
                value = number(raw)
            except ValueError:
                return full(raw)
            # int()/float() also read "1_000" and non-ASCII digits, which the
            # rules reject.
            if "_" in raw or not raw.isascii():
                return full(raw)
        elif kind is number:
            value = raw
        else:
            return full(raw)
        # NaN and inf fail this comparison and take the full rules.
        if lo <= value <= hi and (allowed is None or value in allowed):
            return [value] if finish is None else finish(value)
        return full(raw)
    return convert


def _fast_path(spec: FeatureSpec, vocabulary: Sequence[str] | None, full: Converter,
               finish: Callable[[Any], Any] | None = None):
    """A converter for the common case (a scalar of the expected Python type that
    passes every check); anything else goes to `full`, the complete rules. It
    is one function rather than a wrapper because a Python call per feature is
    a measurable share of the per-row cost.

    finish: None to return ``[value]``, or a function of the checked value
    whose result is returned instead (an encoded Example entry)."""
    if spec.shape:
        return None
    if spec.vocabulary is not None:
        if finish is not None:
            # Every label's result is known up front: one lookup per row.
            get = {label: finish(i) for i, label in enumerate(vocabulary)}.get

            def label_finished(raw):
                if type(raw) is str:
                    found = get(raw)
                    if found is not None:
                        return found
                return full(raw)
            return label_finished
        get = {label: i for i, label in enumerate(vocabulary)}.get

        def label(raw):
            if type(raw) is str:
                found = get(raw)
                if found is not None:
                    return [found]
            return full(raw)
        return label
    lo, hi, limit, allowed = fast_bounds(spec)
    if spec.stored_kind == "int64":
        return _number_fast_path(int, lo, hi, allowed, full, finish)
    if spec.stored_kind == "float":
        return _number_fast_path(float, lo, hi, allowed, full, finish)
    if spec.is_text:
        def text(raw):
            if type(raw) is str and raw:
                try:
                    value = raw.encode("utf-8")
                except UnicodeEncodeError:
                    return full(raw)
                if len(value) <= limit and (allowed is None or value in allowed):
                    return [value] if finish is None else finish(value)
            return full(raw)
        return text

    def data(raw):
        if type(raw) is bytes and len(raw) <= limit and (allowed is None or raw in allowed):
            return [raw] if finish is None else finish(raw)
        return full(raw)
    return data


def validate_default(spec: FeatureSpec, *, key_path: str) -> None:
    """Raises ConfigError when the spec's default fails the feature's own checks.

    A default for an `auto` vocabulary is checked once the vocabulary is known
    (`RowEncoder`)."""
    if spec.default is None or spec.vocabulary == "auto":
        return
    vocabulary = spec.vocabulary if isinstance(spec.vocabulary, tuple) else None
    _compile_checked(spec, vocabulary, key_path)


def _compile_checked(spec: FeatureSpec, vocabulary, key_path: str):
    try:
        return compile_feature(spec, vocabulary)[0]
    except RowError as error:
        raise ConfigError(key_path, f"the default {spec.default!r} fails this feature's own "
                          f"checks ({error.reason}: {error.message}); fix the default or "
                          f"the checks") from None


class RowEncoder:
    """Checks raw rows against the schema and encodes them as Examples.

    specs: the parsed features. vocabularies: feature name -> labels in id order
    (from `resolve_vocabularies`); explicit vocabulary lists need no entry.
    Pickles as its constructor arguments (the compiled converters are closures).
    """

    def __init__(self, specs: Sequence[FeatureSpec],
                 vocabularies: Mapping[str, Sequence[str]] | None = None):
        self._specs = tuple(specs)
        self._vocabularies = dict(vocabularies or {})
        plan = []
        for spec in self._specs:
            vocabulary = self._vocabularies.get(spec.name)
            if vocabulary is None and isinstance(spec.vocabulary, tuple):
                vocabulary = spec.vocabulary
            if spec.vocabulary == "auto" and vocabulary is None:
                raise ConfigError(f"features.{spec.name}.vocabulary",
                                  "`auto` has not been resolved; call resolve_vocabularies "
                                  "with the values known before the run")
            convert = _compile_checked(spec, vocabulary, f"features.{spec.name}.default")
            plan.append((spec.name, spec.source, convert, vocabulary))
        self._plan = tuple((name, source, convert) for name, source, convert, _ in plan)
        self._encoder = ExampleEncoder({spec.name: spec.stored_kind for spec in self._specs})
        by_name = {spec.name: (spec, vocabulary) for spec, (*_, vocabulary)
                   in zip(self._specs, plan)}
        # (source column, raw value -> encoded entry), in the order entries are
        # written, and the same per feature for whole columns.
        entries, columns = [], []
        for name in self._encoder.names:
            spec, vocabulary = by_name[name]
            scalar_entry = scalar_entry_encoder(name, spec.stored_kind)
            row_entry = compile_entry(spec, vocabulary, self._encoder.entry_encoder(name),
                                      scalar_entry)
            entries.append((spec.source, row_entry))
            columns.append((name, spec.source,
                            ColumnEncoder(spec, vocabulary, row_entry, scalar_entry)))
        self._entries = tuple(entries)
        self._columns = tuple(columns)

    def __reduce__(self):
        return (RowEncoder, (self._specs, self._vocabularies))

    @property
    def specs(self) -> tuple[FeatureSpec, ...]:
        return self._specs

    def convert(self, values: Mapping[str, Any]) -> dict[str, Sequence]:
        """Raw row (column -> value) -> {feature name: values to store}.

        Absent optional features are left out. Raises RowError(reason, ...)."""
        get = values.get
        out = {}
        for name, source, convert in self._plan:
            converted = convert(get(source))
            if converted is not None:
                out[name] = converted
        return out

    def converter(self, name: str) -> Converter:
        """The compiled converter of feature `name` (raw value -> values)."""
        for feature, _, convert in self._plan:
            if feature == name:
                return convert
        raise KeyError(name)

    def source_of(self, name: str) -> str:
        """The column feature `name` reads."""
        for feature, source, _ in self._plan:
            if feature == name:
                return source
        raise KeyError(name)

    def encode(self, values: Mapping[str, Any]) -> bytes:
        """Raw row -> serialized tf.train.Example. Raises RowError.

        Same bytes as ``encode_converted(convert(values))``, one call per
        feature. On any failure the row is converted again feature by feature
        in schema order, so the error reported is the one `convert` raises
        (entries are made in key order, which may meet another bad feature
        first)."""
        get = values.get
        try:
            entries = b"".join([entry(get(source)) for source, entry in self._entries])
        except (RowError, ExampleValueError):
            return self._encoder.encode(self.convert(values))
        return example_from_entries(entries)

    def encode_many(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list, dict[str, list]]:
        """Raw rows -> (examples, checked), a column at a time (see
        `encode_columns`)."""
        return self.encode_columns(lambda source: [row.get(source) for row in rows], len(rows))

    def encode_columns(self, column: Callable[[str], list], count: int
                       ) -> tuple[list, dict[str, list]]:
        """`count` raw rows, given as column(name) -> the column's raw values
        (None where a row lacks it) -> (examples, checked), a column at a time.

        examples[i]: row i's serialized Example, the bytes `encode` gives, or
        None where `encode` must take the row (it fails, or needs the
        complete rules). checked: feature name -> its checked values, one
        per row, for each feature whose whole column took the column path."""
        if not count:
            return [], {}
        columns = []
        checked = {}
        to_row_path: set[int] = set()
        sizes = np.zeros(count, dtype=np.int64)
        for name, source, encode_column in self._columns:
            entries, values = encode_column(column(source))
            if values is not None:
                checked[name] = values
            elif None in entries:
                to_row_path.update(i for i, entry in enumerate(entries) if entry is None)
                entries = [b"" if entry is None else entry for entry in entries]
            sizes += np.fromiter(map(len, entries), dtype=np.int64, count=count)
            columns.append(entries)
        sizes = sizes.tolist()
        head_of = {size: example_head(size) for size in set(sizes)}
        examples = list(map(b"".join, zip(map(head_of.__getitem__, sizes), *columns)))
        for row in to_row_path:
            examples[row] = None
        return examples, checked

    def encode_converted(self, converted: Mapping[str, Sequence]) -> bytes:
        """The output of `convert` -> serialized tf.train.Example."""
        return self._encoder.encode(converted)
