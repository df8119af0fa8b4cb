"""One column's sample -> the feature that stores every sampled value exactly, or why none does.

`ColumnSample` takes a column's values one row at a time (bounded memory: a
few counters and at most `_SMALL_SET` distinct values); `propose` then picks
the feature: its type (the narrowest that holds every value: int64, float,
timestamp with the text format every value has, string, bytes), its shape
(a list column is ``[-1]``; in TFRecord input, where every value is a list,
a feature holding one value in every record is a scalar), ``required:
false`` with the null texts seen where values are missing, and a comment.
No type that would lose a sampled value is proposed: an integer wider than
int64 or a number beyond float32 in CSV text is ``string`` (with a comment
saying why); where no feature type holds the values as the source gives
them (objects inside lists, an Avro ``uuid``, integers mixed with text in
JSON) the column gets no feature and the config says why in a comment.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
from collections import Counter
from typing import Any, NamedTuple

from ...schemas.features import INT64_MAX, INT64_MIN
from .kinds import ISO, TIME_FORMATS, float32_exact, has_time, number_value, time_formats, \
    value_kind

__all__ = ["NULL_TOKENS", "ColumnSample", "Proposal", "propose"]

# Texts read as missing: pandas' default `na_values`, so that a dataset built
# from the inferred config reads back as `pandas.read_csv` reads the table.
NULL_TOKENS = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
_SMALL_SET = 10
_NUMERIC = frozenset({"int", "bool", "float", "nonfinite", "wideint", "bigfloat"})
# Kinds only a text source gives (everything in CSV is text, so any mix of
# them is stored exactly as string).
_TEXT_SOURCE_KINDS = _NUMERIC | {"text"}


class Proposal(NamedTuple):
    """A column's feature settings (None: no feature stores its values) and
    the comment written beside it (or the reason there is none)."""

    body: dict | None
    comment: str


class ColumnSample:
    """What the sample shows of one column (or nested path)."""

    def __init__(self, absent: int = 0):
        self.kinds: Counter = Counter()
        self.examples: dict[str, Any] = {}  # kind -> its first value, for comments
        self.nulls: Counter = Counter()  # null tokens (text) and None
        self.absent = absent
        self.list_lengths: set[int] = set()
        self.values: Counter = Counter()
        self.many = False
        self.low = self.high = None
        self.fractional = False  # some number is not whole
        self.wide_wholes = False  # some whole double lies beyond int64
        self.inexact_ints = False  # some integer is not exact in float32
        self.off_midnight = False  # some native time is not midnight UTC
        self.nanoseconds = False  # some native time has nanoseconds (pandas)
        self.formats: set[str] | None = None  # time formats every text value fits
        self.texts_with_time = False
        self.null_texts_are_data = False

    def add(self, value: Any, text_source: bool) -> None:
        if value is None:
            self.nulls[None] += 1
            return
        if isinstance(value, (list, tuple)):
            self.list_lengths.add(len(value))
            for item in value:
                self._element(item, text_source)
            return
        if isinstance(value, str) and value in NULL_TOKENS:
            if text_source:
                self.nulls[value] += 1
                return
            # JSON, Parquet and Avro text is data (pandas keeps "" and "NA"
            # too): the feature then reads nothing but null as missing.
            self.null_texts_are_data = True
        self._element(value, text_source)

    def _element(self, value: Any, text_source: bool) -> None:
        kind = "null" if value is None else value_kind(value, text_source)
        self.kinds[kind] += 1
        self.examples.setdefault(kind, value)
        if kind in ("int", "float"):
            self._number(number_value(value), kind)
        elif kind == "text":
            self._text(value)
        elif kind == "datetime":
            self._time(value)
        if not self.many and (text_source or kind in ("int", "text", "bool")):
            # CSV text is counted as written: a string column of numbers and
            # words shows both.
            self.values[value if text_source or kind == "text" else number_value(value)] += 1
            self.many = len(self.values) > _SMALL_SET

    def _number(self, number: Any, kind: str) -> None:
        if kind == "float":
            whole = number == int(number)
            self.fractional |= not whole
            if whole and not INT64_MIN <= int(number) <= INT64_MAX:
                self.wide_wholes = True
                self.examples.setdefault("wide_whole", number)
        elif not float32_exact(int(number)):
            self.inexact_ints = True
            self.examples.setdefault("inexact", number)
        self.low = number if self.low is None else min(self.low, number)
        self.high = number if self.high is None else max(self.high, number)

    def _text(self, text: str) -> None:
        candidates = TIME_FORMATS if self.formats is None else self.formats
        if candidates:
            self.formats = time_formats(text, candidates)
            self.texts_with_time |= len(text.strip()) > len("2024-01-01")

    def _time(self, moment: _dt.datetime) -> None:
        offset = moment.utcoffset()
        nanoseconds = bool(getattr(moment, "nanosecond", 0))
        self.nanoseconds |= nanoseconds
        self.off_midnight |= moment.time() != _dt.time(0) or bool(offset) or nanoseconds


def propose(column: ColumnSample, rows: int, source_kind: str) -> Proposal:
    """The feature for `column` sampled over `rows` rows of a `source_kind` source."""
    text_source = source_kind == "csv"
    body, why = _typed(column, text_source, source_kind)
    if body is None:
        return Proposal(None, why)
    notes = [why] if why else []
    if column.list_lengths and not (source_kind == "tfrecord" and column.list_lengths == {1}):
        body["shape"] = [-1]
    if column.null_texts_are_data:
        body["null_values"] = []
    missing = sum(column.nulls.values()) + column.absent
    if missing:
        body["required"] = False
        tokens = sorted(token for token in column.nulls if token is not None)
        if tokens and tokens != [""]:
            body["null_values"] = tokens
        seen = ", ".join(json.dumps(t, ensure_ascii=False) for t in tokens) or "none"
        notes.append(f"missing in {missing} of {rows} rows (null texts seen: {seen})")
    if column.low is not None and body["type"] in ("int64", "float"):
        # Every digit: a bound read off the comment ("min: ...") must be the value seen.
        notes.append(f"observed {column.low} .. {column.high}")
    if not column.many and column.values and body["type"] in ("int64", "string"):
        shown = ", ".join(json.dumps(v, ensure_ascii=False) if body["type"] == "string"
                          else str(v).strip() for v in sorted(column.values, key=str))
        notes.append(f"values seen: {shown}")
    return Proposal(body, "; ".join(notes))


def _typed(column: ColumnSample, text_source: bool, source_kind: str
           ) -> tuple[dict | None, str]:
    """(settings holding the type, a note) or (None, why no type fits)."""
    kinds = set(column.kinds) - {"null"}
    if "null" in column.kinds and column.list_lengths:
        return None, "its lists hold nulls, which no feature stores inside a list"
    if not kinds:
        return {"type": "string"}, "no values seen: the type is a guess"
    if text_source and kinds <= _TEXT_SOURCE_KINDS:
        return _from_text(column, kinds)
    if kinds <= _NUMERIC:
        return _numbers(column, kinds, source_kind)
    if kinds == {"text"}:
        return _text_or_time(column)
    if kinds <= {"date", "datetime"}:
        return _native_times(column, kinds)
    if kinds <= {"bytes", "text"}:
        return {"type": "bytes"}, ""
    return None, _no_type(column, kinds)


def _from_text(column: ColumnSample, kinds: set[str]) -> tuple[dict, str]:
    if kinds == {"text"}:
        return _text_or_time(column)
    if kinds <= {"int"}:
        return {"type": "int64"}, ""
    if "wideint" in kinds and kinds <= {"int", "wideint"}:
        return {"type": "string"}, (f"integers wider than int64 (e.g. "
                                    f"{column.examples['wideint'].strip()[:40]}): kept as text")
    if "bigfloat" in kinds and kinds <= _NUMERIC:
        return {"type": "string"}, (f"numbers beyond float32 (e.g. "
                                    f"{column.examples['bigfloat'].strip()[:40]}): kept as text")
    if kinds <= {"int", "float", "nonfinite"}:
        if column.inexact_ints and "float" in kinds:
            return {"type": "string"}, ("integers that float32 would round, mixed with "
                                        "fractions: kept as text")
        body = {"type": "float"}
        if "nonfinite" in kinds:
            body["allow_nan"] = True
        return body, ""
    return {"type": "string"}, ""


def _numbers(column: ColumnSample, kinds: set[str], source_kind: str
             ) -> tuple[dict | None, str]:
    """A typed source's numbers (JSON, Parquet, Avro, TFRecord values)."""
    if kinds <= {"int", "bool"}:
        return {"type": "int64"}, ""
    for wide in ("wideint", "bigfloat"):
        if wide in kinds:
            return None, (f"{_shown(column.examples[wide])} fits neither int64 nor float32, "
                          "and string features take only text")
    if (kinds <= {"int", "bool", "float"} and not column.fractional
            and source_kind in ("parquet", "avro")):
        if not column.wide_wholes:
            return {"type": "int64"}, ("every value is whole (a double column, as pandas "
                                       "writes nullable integers): int64")
        # Whole, yet beyond int64: an int64 feature would reject the row.
        return {"type": "float"}, (f"every value is whole, but "
                                   f"{_shown(column.examples['wide_whole'])} lies beyond "
                                   "int64: float")
    if column.inexact_ints:
        return None, ("integers that float32 would round (e.g. "
                      f"{_shown(column.examples['inexact'])}) mixed with fractions")
    body = {"type": "float"}
    if "nonfinite" in kinds:
        body["allow_nan"] = True
    decimal_note = ("decimal values stored as float32" if isinstance(
        column.examples.get("float"), decimal.Decimal) else "")
    return body, decimal_note


def _text_or_time(column: ColumnSample) -> tuple[dict, str]:
    if not column.formats:
        return {"type": "string"}, ""
    fmt = next(f for f in TIME_FORMATS if f in column.formats)
    timed = has_time(fmt, column.texts_with_time)
    body = {"type": "timestamp", "unit": "us" if timed else "days"}
    note = ""
    if fmt != ISO:
        body["format"] = fmt
        others = sorted(column.formats - {fmt})
        if others:
            note = f"every value also fits {', '.join(others)}: check which one is meant"
    return body, note


def _native_times(column: ColumnSample, kinds: set[str]) -> tuple[dict, str]:
    if kinds == {"date"}:
        return {"type": "timestamp", "unit": "days"}, ""
    if not column.off_midnight:
        return {"type": "timestamp", "unit": "days"}, ("every time is midnight UTC (dates "
                                                       "stored as timestamps): days")
    if column.nanoseconds:  # microseconds would drop them
        return {"type": "timestamp", "unit": "ns"}, "times with nanoseconds: ns"
    return {"type": "timestamp", "unit": "us"}, ""


def _no_type(column: ColumnSample, kinds: set[str]) -> str:
    if "object" in kinds:
        return "its lists hold objects, which no feature type stores (name their fields in " \
               "features of their own)"
    if "list" in kinds:
        return "its lists hold lists, which no feature type stores"
    others = sorted(k.split(":", 1)[1] for k in kinds if k.startswith("other:"))
    if others:
        return f"its values are Python {', '.join(others)} objects, which no feature type " \
               "takes as they come"
    return f"it mixes {', '.join(sorted(kinds))} values, which no one feature type stores " \
           "exactly (string features take only text)"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."
