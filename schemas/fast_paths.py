"""The common case in one call: a scalar of the expected type that passes every check.

`fast_path` gives a feature's converter for that case, falling back to
the complete rules (`checks`) for anything else; `fast_bounds` gives what
such a value must satisfy, shared by this row path and the column path
(`columns`), so both accept exactly the same values. Every value the fast
path takes converts as under the complete rules.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

from .features import INT64_MAX, INT64_MIN, FeatureSpec
from .values import FLOAT32_OVERFLOW

__all__ = ["FastBounds", "fast_bounds", "fast_path"]

_FLOAT32_LARGEST_OK = math.nextafter(FLOAT32_OVERFLOW, 0.0)


class FastBounds(NamedTuple):
    """What a scalar value of the expected type must satisfy to skip the
    complete rules: lo <= value <= hi (numbers), len(value) <= limit (bytes
    and text, encoded), and membership of `allowed` when it is not None."""

    lo: Any
    hi: Any
    limit: float
    allowed: frozenset | None


def fast_bounds(spec: FeatureSpec) -> FastBounds:
    """The fast-path bounds of a feature without a vocabulary (shared by the
    row and the column path, so both accept exactly the same values)."""
    if spec.stored_kind == "int64":
        lo = INT64_MIN if spec.min is None else spec.min
        hi = INT64_MAX if spec.max is None else spec.max
        allowed = frozenset(spec.values) if spec.values is not None else None
        return FastBounds(lo, hi, math.inf, allowed)
    if spec.stored_kind == "float":
        lo = -_FLOAT32_LARGEST_OK if spec.min is None else max(spec.min, -_FLOAT32_LARGEST_OK)
        hi = _FLOAT32_LARGEST_OK if spec.max is None else min(spec.max, _FLOAT32_LARGEST_OK)
        allowed = frozenset(float(v) for v in spec.values) if spec.values is not None else None
        return FastBounds(lo, hi, math.inf, allowed)
    limit = spec.max_bytes if spec.max_bytes is not None else math.inf
    allowed = frozenset(v.encode("utf-8") for v in spec.values) if spec.values is not None else None
    return FastBounds(None, None, limit, allowed)


def fast_path(spec: FeatureSpec, vocabulary: Sequence[str] | None,
              full: Callable[[Any], Any], finish: Callable[[Any], Any] | None = None):
    """A converter for the common case (a scalar of the expected Python type that
    passes every check); anything else goes to `full`, the complete rules. It
    is one function rather than a wrapper because a Python call per feature is
    a measurable share of the per-row cost.

    finish: None to return ``[value]``, or a function of the checked value
    whose result is returned instead (an encoded Example entry)."""
    if spec.shape or spec.null_values is not None or spec.type == "timestamp":
        return None  # list shapes, declared null texts and timestamps take the full rules
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


def _number_fast_path(number: type, lo, hi, allowed, full: Callable[[Any], Any],
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
