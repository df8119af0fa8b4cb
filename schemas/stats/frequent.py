"""Frequent values: the top values of text, a mergeable Misra-Gries summary."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = ["FREQUENT_CAPACITY", "MAX_VALUE_BYTES", "TOP_VALUES", "FrequentValues",
           "bounded_text", "bounded_texts", "top_values"]

# Top values of text: exact while a split holds at most this many distinct
# values; above, counts carry bounds (FrequentValues).
FREQUENT_CAPACITY = 1024
# The top values stats.json lists per text or vocabulary feature.
TOP_VALUES = 50
# Text of at most this many UTF-8 bytes is counted (and listed) whole; a
# longer value as `bounded_text`'s key, so a 200 MB field costs stats.json
# and report.html about this much, not its size again (issue 41.9).
MAX_VALUE_BYTES = 1024


def bounded_text(value: "str | bytes") -> str:
    """The text statistics count for a value (text, or its UTF-8 bytes):
    the value itself when it is at most `MAX_VALUE_BYTES` bytes long, else
    its first bytes (whole characters only), "…", its length and sha256:
    ``"abc…… [209715200 bytes, sha256 <hex>]"``. That key is always longer
    than `MAX_VALUE_BYTES` bytes, so it never equals a value kept whole,
    and two long values share it only if their sha256 do."""
    if isinstance(value, bytes):
        raw = value
        if len(raw) <= MAX_VALUE_BYTES:
            return raw.decode("utf-8")
    else:
        if len(value) <= MAX_VALUE_BYTES // 4:  # 4 bytes a character at most
            return value
        raw = value.encode("utf-8", "surrogatepass")
        if len(raw) <= MAX_VALUE_BYTES:
            return value
    # errors="ignore" drops only a character the cut split in two: the
    # value is valid UTF-8 (it was decoded, or checked, before).
    head = raw[:MAX_VALUE_BYTES].decode("utf-8", "ignore")
    return f"{head}… [{len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}]"


def bounded_texts(values: Iterable["str | bytes"], longest: int) -> list[str]:
    """`bounded_text` of each value; `longest` (the largest len() among
    them) spares ordinary text the call per value: text of at most
    MAX_VALUE_BYTES // 4 characters is kept as it is."""
    values = list(values)
    if not values:
        return []
    if type(values[0]) is str and longest <= MAX_VALUE_BYTES // 4:
        return values
    if type(values[0]) is bytes and longest <= MAX_VALUE_BYTES:
        return [value.decode("utf-8") for value in values]
    return list(map(bounded_text, values))


class FrequentValues:
    """The most frequent values of text: a Misra-Gries summary, merged as in
    Agarwal et al., "Mergeable summaries" (2012).

    counts: value -> count, at most `FREQUENT_CAPACITY` of them; offset: the
    total subtracted by purges. A value's true count lies between its count
    (0 when not held) and count + offset; while a split holds at most
    FREQUENT_CAPACITY distinct values nothing is purged and every count is
    exact. Merging adds the counts and, above the capacity, subtracts the
    (capacity + 1)-th largest count from all and drops those left at 0 or
    less. The summary is a plain value (its dict order plays no part), and
    merging two is symmetric, but not associative once purges happen: a
    canonical merge order (`merge_partials`) makes the result one thing.
    """

    __slots__ = ("counts", "offset")

    def __init__(self, counts: dict[str, int], offset: int = 0):
        self.counts, self.offset = counts, offset

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> "FrequentValues":
        """The summary of values counted exactly (value -> count)."""
        return cls._purged(counts, 0)

    @classmethod
    def _purged(cls, counts: Mapping[str, int], offset: int) -> "FrequentValues":
        if len(counts) <= FREQUENT_CAPACITY:
            return cls(dict(counts), offset)
        # The (capacity + 1)-th largest count is 1 when at most `capacity`
        # counts are above 1, as when the excess over 1 of all counts (each
        # at least 1) is at most that: mostly distinct values (free text)
        # need no partition, and values each seen once are all dropped.
        excess = sum(counts.values()) - len(counts)
        if not excess:
            return cls({}, offset + 1)
        # The threshold, and the counts above it, with numpy: a batch of
        # text may hold thousands of distinct values.
        numbers = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
        if excess <= FREQUENT_CAPACITY:
            threshold = 1
        else:
            cut = len(numbers) - FREQUENT_CAPACITY - 1
            threshold = int(np.partition(numbers, cut)[cut])
        kept = numbers > threshold
        return cls(dict(zip(itertools.compress(counts, kept.tolist()),
                            (numbers[kept] - threshold).tolist())), offset + threshold)

    def merge(self, other: "FrequentValues") -> "FrequentValues":
        """The summary of both summaries' values (neither is changed)."""
        counts = dict(self.counts)
        get = counts.get
        for value, count in other.counts.items():
            counts[value] = get(value, 0) + count
        return self._purged(counts, self.offset + other.offset)

    def to_state(self) -> dict:
        # Sorted by value alone (values are distinct, so the order of the
        # [value, count] pairs is the same): sorting the str keys takes
        # CPython's homogeneous-str fast path, where comparing the pairs
        # compares lists item by item, ~5x the time for a batch of free text.
        counts = self.counts
        return {"offset": self.offset,
                "items": [[value, counts[value]] for value in sorted(counts)]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "FrequentValues":
        return cls({value: count for value, count in state["items"]}, state["offset"])

    def __eq__(self, other) -> bool:
        return (isinstance(other, FrequentValues) and self.offset == other.offset
                and self.counts == other.counts)

    def __repr__(self) -> str:
        return f"FrequentValues({len(self.counts)} values, offset {self.offset})"


def top_values(frequent: "FrequentValues | None") -> tuple[list[dict], bool]:
    if frequent is None or not frequent.counts:
        return [], True
    exact = frequent.offset == 0
    ranked = sorted(frequent.counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_VALUES]
    top = []
    for item, lower in ranked:
        entry = {"value": item, "count": lower + frequent.offset}
        if not exact:
            entry["lower_bound"], entry["upper_bound"] = lower, lower + frequent.offset
        top.append(entry)
    return top, exact
