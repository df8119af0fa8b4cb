"""Long text values in statistics: counted and listed as a bounded prefix plus a digest (issue 41.9).

Text of at most `MAX_VALUE_BYTES` UTF-8 bytes is kept whole, so stats.json
of ordinary data does not change; a longer value is listed as its head, its
length and its sha256, whether the batch gave it as text or as bytes.
"""

import collections
import hashlib

from hypothesis import given, settings, strategies as st

from recordforge.schemas.stats import FeatureStatistics
from recordforge.schemas.stats.frequent import MAX_VALUE_BYTES, bounded_text

# Lengths around the bound (in characters of 1 to 4 UTF-8 bytes).
_text = st.builds(lambda char, n: char * n,
                  st.sampled_from(["a", "é", "€", "😀", "\x00"]),
                  st.integers(0, 3 * MAX_VALUE_BYTES))
_mixed = st.lists(st.text(max_size=40), max_size=20).map("".join)


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(_text, _mixed, st.tuples(_mixed, _text).map("".join)))
def test_a_value_is_kept_whole_up_to_the_bound_and_bounded_above(value):
    raw = value.encode("utf-8")
    key = bounded_text(value)
    assert bounded_text(raw) == key  # text and bytes batches count it alike
    if len(raw) <= MAX_VALUE_BYTES:
        assert key == value
    else:
        assert MAX_VALUE_BYTES < len(key.encode("utf-8")) <= MAX_VALUE_BYTES + 100
        assert key.endswith(f"… [{len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}]")
        assert raw.startswith(key[:key.index("…")].encode("utf-8"))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(_text, _mixed), min_size=1, max_size=12),
       as_bytes=st.booleans())
def test_top_values_list_short_values_whole_and_long_ones_bounded(values, as_bytes):
    given_values = [v.encode("utf-8") for v in values] if as_bytes else values
    section = FeatureStatistics.from_values("string", "bytes", len(values),
                                            given_values).to_json()["string"]
    expected = collections.Counter(bounded_text(v) for v in values)
    assert {item["value"]: item["count"] for item in section["top_values"]} == dict(expected)
    # (DataSketches ignores an empty string, as it always has here)
    assert section["distinct"] == len([key for key in expected if key])
    for item in section["top_values"]:
        assert len(item["value"].encode("utf-8")) <= MAX_VALUE_BYTES + 100
