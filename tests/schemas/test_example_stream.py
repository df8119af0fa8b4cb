"""`summarize_example` reads a record as a stream and agrees with `scan_example`.

Generated Examples (values of every kind, long bytes values, long lists)
and their mutations, read in pieces of generated sizes: where the scanner
returns features, the summary has the same kinds and counts and its kept
values are the scanner's first ones (long bytes values as their size and
head); where one refuses the bytes, so does the other.
"""

import io
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas.example import ExampleDecodeError, encode_example
from recordforge.schemas.example_scan import scan_example
from recordforge.schemas.example_stream import LongBytes, summarize_example

_FLOAT32 = st.floats(width=32, allow_nan=False)
_VALUES = st.one_of(
    st.tuples(st.just("bytes"), st.lists(st.binary(max_size=40), max_size=12)),
    st.tuples(st.just("float"), st.lists(_FLOAT32, max_size=12)),
    st.tuples(st.just("int64"), st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=12)))
_EXAMPLES = st.dictionaries(st.text(max_size=6), _VALUES, max_size=4)


def _pieces(data: bytes, sizes: list[int]):
    """`read(n)` over `data` that gives at most the next generated size."""
    stream, sizes = io.BytesIO(data), iter(sizes)
    return lambda n: stream.read(min(n, next(sizes, n) or 1))


def _agree(data: bytes, keep_values: int, keep_bytes: int, sizes: list[int]) -> None:
    try:
        scanned = {name: (values.kind, [bytes(v) if isinstance(v, memoryview) else v
                                        for v in values])
                   for name, values in scan_example(data).items()}
    except ExampleDecodeError:
        scanned = None
    try:
        summary = summarize_example(_pieces(data, sizes), len(data), keep_values=keep_values,
                                    keep_bytes=keep_bytes)
    except ExampleDecodeError:
        assert scanned is None, "the stream refused what the scanner reads"
        return
    assert scanned is not None, "the stream read what the scanner refuses"
    assert set(summary) == set(scanned)
    for name, (kind, values) in scanned.items():
        head = summary[name]
        assert (head.kind, head.count) == (kind, len(values))
        assert len(head.head) == min(keep_values, len(values))
        for kept, value in zip(head.head, values):
            if isinstance(kept, LongBytes):
                assert len(value) > keep_bytes
                assert kept == LongBytes(len(value), value[:keep_bytes])
            else:
                assert kept == value or (math.isnan(kept) and math.isnan(value))


_KEEP = dict(keep_values=st.integers(0, 15), keep_bytes=st.integers(0, 50),
             sizes=st.lists(st.integers(0, 40), max_size=20))


@settings(max_examples=300, deadline=None)
@given(features=_EXAMPLES, **_KEEP)
def test_summarizes_what_the_scanner_reads(features, keep_values, keep_bytes, sizes):
    _agree(encode_example(dict(features)), keep_values, keep_bytes, sizes)


@settings(max_examples=500, deadline=None)
@given(features=_EXAMPLES, data=st.data(), **_KEEP)
def test_refuses_what_the_scanner_refuses(features, data, keep_values, keep_bytes, sizes):
    original = bytearray(encode_example(dict(features)))
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        position = data.draw(st.integers(0, max(0, len(original) - 1)))
        if action == "flip" and original:
            original[position] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del original[position:]
        else:
            original[position:position] = data.draw(st.binary(min_size=1, max_size=3))
    _agree(bytes(original), keep_values, keep_bytes, sizes)


def test_a_long_record_is_summarized_in_bounded_memory():
    """A 64 MiB bytes value and 8 million packed ints: the summary holds
    their heads, and reading them allocates a few blocks, never the record."""
    import tracemalloc

    size = 64 << 20
    record = encode_example({"x": b"\x01" * size, "i": [1] * (8 << 20), "f": [0.5] * 3000})
    tracemalloc.start()
    try:
        summary = summarize_example(io.BytesIO(record).read, len(record), keep_values=1000,
                                    keep_bytes=1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary["x"].head == [LongBytes(size, b"\x01" * 1024)]
    assert (summary["i"].count, summary["i"].head) == (8 << 20, [1] * 1000)
    assert (summary["f"].count, summary["f"].head) == (3000, [0.5] * 1000)
    assert peak < 8 << 20, peak
