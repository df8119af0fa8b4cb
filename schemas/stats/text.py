"""A batch's text partial: what `FeatureStatistics` adds for a string feature, native or Python.

`text_parts` gives, for one batch of a string feature's values (str, UTF-8
bytes, or a `TextColumn` from the table kernels), its
frequent values (`frequent.FrequentValues`) and its theta sketch (the
kernel's as its bytes, `distinct.SerializedTheta`): in one
pass of the native kernel (`recordforge._native.text_partial`,
native/src/text_stats.rs) where the extension runs and the batch is a
fresh partial (the case of every text partial: they are made per batch,
`batches.StatisticsAccumulator`), else as the Python path counts them
(`python_text_parts`, the reference the kernel is held to by
tests/native/test_text_partials.py). The kernel hands back only what the
frequent values keep, as the index of each value's first occurrence, so
no Python object is made per value or per distinct value.
"""

from __future__ import annotations

import collections
import logging
from typing import Sequence

import numpy as np

from ..native import kernels
from ..text_column import TextColumn
from .distinct import THETA_LG_K, SerializedTheta, add_texts, text_sketch
from .frequent import FREQUENT_CAPACITY, MAX_VALUE_BYTES, FrequentValues, bounded_texts

__all__ = ["native_text_parts", "python_text_parts", "text_parts"]

_LOG = logging.getLogger(__name__)


def text_parts(values: Sequence, frequent: FrequentValues | None = None, theta=None):
    """(frequent values, theta sketch) of `frequent` and `theta` (None, or
    those of earlier values) with the batch's `values` (str, or UTF-8
    bytes; at least one) added."""
    if frequent is None and theta is None:
        parts = native_text_parts(values)
        if parts is not None:
            return parts
    return python_text_parts(values, frequent, theta)


def python_text_parts(values: Sequence, frequent: FrequentValues | None = None, theta=None):
    """`text_parts` as Python counts: the reference."""
    counts = collections.Counter(values)
    # A batch's values are all text (the column path's raw strings) or
    # all bytes (converted again): one type test, not one per value.
    # Long values are counted (and their distinct hashes taken) as a
    # bounded key, never copied whole (`bounded_text`).
    texts = bounded_texts(counts, max(map(len, counts)))
    counts = dict(zip(texts, counts.values()))
    batch = FrequentValues.of(counts)
    frequent = batch if frequent is None else frequent.merge(batch)
    # A batch's own partial (the common case) takes its sketch whole
    # from the kernel where it runs: the same compact sketch.
    fresh = text_sketch(texts) if theta is None else None
    return frequent, fresh if fresh is not None else add_texts(theta, texts)


def native_text_parts(values: Sequence):
    """`text_parts` of a batch alone by the kernel: the same frequent
    values and the same compact sketch as `python_text_parts`. None where
    the kernel does not run or declines (values that are not all str or
    all UTF-8 bytes, or one longer than `MAX_VALUE_BYTES`, whose bounded
    key only Python makes): then Python's. A `TextColumn` goes to the
    kernel as its buffers."""
    native = kernels()
    if native is None:
        return None
    try:
        if isinstance(values, TextColumn):  # (taken whole: no str made but the kept values')
            done = native.text_column_partial(values.data, values.offsets, FREQUENT_CAPACITY,
                                              MAX_VALUE_BYTES, THETA_LG_K)
        else:
            done = native.text_partial(values, FREQUENT_CAPACITY, MAX_VALUE_BYTES, THETA_LG_K)
    except Exception:  # a bug must cost speed, never the statistics
        _LOG.warning("native text statistics failed; taking the Python path", exc_info=True)
        return None
    if done is None:
        return None
    kept, offset, sketch = done
    if kept and isinstance(values, TextColumn):
        # (the kept texts cut from one buffer together: a batch of unique
        # text keeps every row's, which one at a time would cost a lookup each)
        texts = values.take(np.array([first for first, _ in kept], dtype=np.int64))
        counts = dict(zip(texts, (count for _, count in kept)))
    elif kept and type(values[0]) is bytes:
        counts = {values[first].decode("utf-8"): count for first, count in kept}
    else:
        counts = {values[first]: count for first, count in kept}
    return FrequentValues(counts, offset), SerializedTheta(sketch)
