"""Tests for rows -> Examples (transforms/to_examples.py)."""

import collections
import json
import math
import struct

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st
from tfrecord import example_pb2

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.features import label_text
from recordforge.schemas.keys import sortable_key
from recordforge.transforms.readers.rows import SourceRow
from recordforge.transforms.splits import HashedExamples, SplitAssigner, assign_split
from recordforge.transforms.int_labels import IntLabels
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.to_examples import (LabelCounting, RowsToExamples, _ConvertBatchesFn,
                                               label_counts)

# --- sortable_key -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(1 << 900), max_value=1 << 900), min_size=2))
def test_int_keys_sort_numerically(values):
    assert sorted(values, key=sortable_key) == sorted(values)
    assert len({sortable_key(v) for v in values}) == len(set(values))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False), min_size=2))
def test_float_keys_sort_numerically(values):
    keys = [sortable_key(v) for v in values]
    for a, key_a in zip(values, keys):
        for b, key_b in zip(values, keys):
            assert (key_a < key_b) == (a < b)
            assert (key_a == key_b) == (a == b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), min_size=2))
def test_text_keys_sort_by_code_point(values):
    assert sorted(values, key=sortable_key) == sorted(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(), min_size=2))
def test_bytes_keys_sort_raw(values):
    assert sorted(values, key=sortable_key) == sorted(values)


def test_key_edge_cases():
    assert sortable_key(-0.0) == sortable_key(0.0)
    assert sortable_key(math.inf) < sortable_key(math.nan)
    assert sortable_key(float("-nan")) == sortable_key(math.nan)
    assert sortable_key(-math.inf) < sortable_key(-1e308)
    assert sortable_key(-1) < sortable_key(0) < sortable_key(1)
    assert sortable_key(-256) < sortable_key(-255) < sortable_key(-1)
    assert sortable_key(255) < sortable_key(256)
    # one type tag each: equal-looking values of different types never collide
    keys = {sortable_key(v) for v in (1, 1.0, "1", b"1", True)}
    assert len(keys) == 5
    assert sortable_key(False) < sortable_key(True)
    assert sortable_key(bytearray(b"ab")) == sortable_key(b"ab")


@pytest.mark.parametrize("value, error", [(None, TypeError), ([1], TypeError),
                                          ({"a": 1}, TypeError), (1 << 2000, ValueError),
                                          (-(1 << 2000), ValueError), ("\ud800", ValueError)])
def test_unsupported_keys_raise(value, error):
    with pytest.raises(error):
        sortable_key(value)


# --- BatchConverter (plain, no Beam) -------------------------------------------------

SPECS = parse_features({
    "id": {"type": "int64"},
    "score": {"type": "float", "min": 0},
    "name": {"type": "string", "max_bytes": 10},
    "label": {"type": "int64", "vocabulary": ["cat", "dog"]},
})


def row(n, **values):
    base = {"id": str(n), "score": "0.5", "name": f"row{n}", "label": "dog"}
    base.update(values)
    return SourceRow("data/part-1.csv", n + 1, base)


def decoded(example: bytes) -> dict:
    """Feature name -> values, parsed by the tfrecord package's own generated code."""
    message = example_pb2.Example()
    message.ParseFromString(example)
    out = {}
    for name, feature in message.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = list(getattr(feature, kind).value)
    return out


def test_converts_good_rows_with_numeric_keys():
    converter = BatchConverter(SPECS, {}, key_column="id")
    examples, dead = converter.convert_batch([row(10), row(9), row(-3, label="cat")])
    assert dead == []
    assert [key for key, _ in examples] == [sortable_key(10), sortable_key(9), sortable_key(-3)]
    # the key column feeds an int64 feature, so CSV text keys order as numbers
    assert sorted(key for key, _ in examples) == [sortable_key(n) for n in (-3, 9, 10)]
    assert decoded(examples[2][1]) == {"id": [-3], "score": [0.5], "name": [b"row-3"],
                                      "label": [0]}


def test_raw_key_without_numeric_feature_and_no_key():
    converter = BatchConverter(SPECS, {}, key_column="name")
    [(key, _)] = converter.convert_batch([row(1)])[0]
    assert key == sortable_key("row1")
    converter = BatchConverter(SPECS, {}, key_column=None)
    [(key, example)] = converter.convert_batch([row(1)])[0]
    assert key is None and decoded(example)["id"] == [1]


# (row values changed, key column, reason, feature, stage)
DEAD_LETTER_CASES = [
    ({"score": "abc"}, "id", "type_mismatch", "score", "check"),
    ({"score": "-1"}, "id", "out_of_range", "score", "check"),
    ({"label": "bird"}, "id", "unknown_label", "label", "check"),
    ({"name": "x" * 11}, "id", "too_long", "name", "check"),
    ({"id": ""}, "id", "missing_value", "id", "check"),
    ({"id": None}, "id", "missing_value", "id", "check"),
    ({"id": "  "}, "id", "missing_value", "id", "check"),
    ({"key": [1, 2]}, "key", "type_mismatch", "key", "check"),
    ({"key": "\udc80"}, "key", "invalid_utf8", "key", "check"),
]


@pytest.mark.parametrize("change, key_column, reason, feature, stage", DEAD_LETTER_CASES)
def test_bad_rows_become_dead_letters(change, key_column, reason, feature, stage):
    converter = BatchConverter(SPECS, {}, key_column=key_column)
    bad = row(5, **change)
    examples, dead = converter.convert_batch([row(1, key="a"), bad])
    assert len(examples) == 1
    [record] = dead
    assert (record["source"], record["row"], record["stage"], record["reason"],
            record["feature"]) == ("data/part-1.csv", 6, stage, reason, feature)
    assert record["input"]["id"] == bad.values["id"]
    json.dumps(record)  # JSON-safe, whatever the input held


def test_unexpected_error_is_an_internal_error_dead_letter():
    class Exploding:
        def tolist(self):
            raise RuntimeError("boom")

    converter = BatchConverter(SPECS, {}, key_column=None)
    examples, dead = converter.convert_batch([row(1, score=Exploding()), row(2)])
    assert len(examples) == 1
    [record] = dead
    assert (record["reason"], record["stage"], record["row"]) == ("internal_error", "encode", 2)
    assert "Traceback" in record["message"] and "RuntimeError: boom" in record["message"]
    # the value cannot be rendered for the record either: its type stands in
    assert record["input"]["score"] == "<Exploding>" and record["input"]["id"] == "1"


def test_image_bytes_are_left_out_of_dead_letters():
    specs = parse_features({"image/encoded": {"type": "bytes", "from": "image"},
                            "label": {"type": "int64", "vocabulary": ["a"]}})
    converter = BatchConverter(specs, {}, key_column="path")
    image_row = SourceRow("gs://bucket/flowers", None,
                          {"image": b"\xff\xd8" * 5000, "path": "b/1.jpg", "label": "b"})
    _, [record] = converter.convert_batch([image_row])
    assert record["input"] == {"path": "b/1.jpg", "label": "b"}
    assert record["key"] == "b/1.jpg" and record["row"] is None
    assert record["reason"] == "unknown_label"


# --- RowsToExamples under Beam -------------------------------------------------------

BATCHES = [
    [row(1), row(2, score="abc"), row(3, label="cat")],
    [row(4, id=""), row(5, name="€" * 4), row(6)],
]
EXPECTED_GOOD = [
    [(sortable_key(1), {"id": [1], "score": [0.5], "name": [b"row1"], "label": [1]}),
     (sortable_key(3), {"id": [3], "score": [0.5], "name": [b"row3"], "label": [0]})],
    [(sortable_key(6), {"id": [6], "score": [0.5], "name": [b"row6"], "label": [1]})],
]
EXPECTED_DEAD = [("data/part-1.csv", 3, "2", "type_mismatch", "score"),
                 ("data/part-1.csv", 5, "", "missing_value", "id"),
                 ("data/part-1.csv", 6, "5", "too_long", "name")]


def _decode_batch(batch):
    return [(key, decoded(example)) for key, example in batch]


def _dead_summary(record):
    return record["source"], record["row"], record["key"], record["reason"], record["feature"]


COUNTING = LabelCounting("label", ("cat", "dog"), "pets", (("train", 0.5), ("test", 0.5)))


def _expected_label_counts(examples, counting):
    """(split, label) -> examples, from the serialized examples: decoded by
    the tfrecord package and split by the writer's own `assign_split`."""
    counts = {}
    for key, example in examples:
        values = decoded(example).get(counting.feature)
        if values:
            label = values[0]
            name = (counting.vocabulary[label] if counting.vocabulary
                    else label.decode() if isinstance(label, bytes) else str(label))
            split = assign_split(example if key is None else key, counting.dataset_name,
                                 counting.splits)
            counts[split, name] = counts.get((split, name), 0) + 1
    return counts


def _total_label_counts(per_batch):
    counts = {}
    for batch in per_batch:
        for split, label, count in batch:
            counts[split, label] = counts.get((split, label), 0) + count
    return counts


def _run_rows_to_examples(pipeline):
    examples, dead, label_counts, _ = (
        pipeline
        | "Rows" >> beam.Create(BATCHES)
        | "ToExamples" >> RowsToExamples(SPECS, {}, key_column="id", count_labels=COUNTING))
    assert_that(examples | "Decode" >> beam.Map(_decode_batch), equal_to(EXPECTED_GOOD),
                label="good")
    assert_that(dead | "Summarize" >> beam.Map(_dead_summary), equal_to(EXPECTED_DEAD),
                label="dead")
    good, _ = BatchConverter(SPECS, {}, "id").convert_batch(
        [one_row for batch in BATCHES for one_row in batch])
    assert_that(label_counts | "All" >> beam.combiners.ToList()
                | "Total" >> beam.Map(_total_label_counts),
                equal_to([_expected_label_counts(good, COUNTING)]), label="labels")


def test_rows_to_examples_outputs_and_metrics():
    pipeline = TestPipeline()
    _run_rows_to_examples(pipeline)
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("recordforge"))["counters"]}
    assert counters == {"rows_converted": 3, "dead_letters": 3,
                        "dead_letter.type_mismatch": 1, "dead_letter.missing_value": 1,
                        "dead_letter.too_long": 1}


def test_rows_to_examples_multi_processing():
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    with TestPipeline(options=options) as pipeline:
        _run_rows_to_examples(pipeline)


def test_main_output_is_reachable_by_name():
    with TestPipeline() as pipeline:
        result = (pipeline | beam.Create([[row(1)]])
                  | RowsToExamples(SPECS, {}, key_column=None))
        assert_that(result.examples | beam.Map(len), equal_to([1]), label="examples")
        assert_that(result.dead_letter, equal_to([]), label="dead")
        assert_that(result.label_counts, equal_to([]), label="no counting asked")


@pytest.mark.parametrize("key_column", ["id", None])
@pytest.mark.parametrize("feature, vocabulary", [("label", ("cat", "dog")), ("name", None),
                                                 ("id", None)])
def test_label_counts_match_the_examples_written(key_column, feature, vocabulary):
    rows = [row(n, label="cat" if n % 3 else "dog", name=f"n{n % 4}") for n in range(300)]
    rows += [row(900, score="bad"), row(901, id="")]  # dead letters are not counted
    converter = BatchConverter(SPECS, {}, key_column)
    examples, labels, dead = converter.convert_labelled_batch(rows, feature, vocabulary)
    assert len(examples) == len(labels) == 300 and len(dead) == 2
    counting = LabelCounting(feature, vocabulary, "pets", (("train", 0.7), ("test", 0.3)))
    with TestPipeline() as pipeline:
        counts = (pipeline | beam.Create([rows[:150], rows[150:]])
                  | RowsToExamples(SPECS, {}, key_column=key_column,
                                   count_labels=counting)).label_counts
        assert_that(counts | beam.combiners.ToList() | beam.Map(_total_label_counts),
                    equal_to([_expected_label_counts(examples, counting)]))
    assert {split for split, _ in _expected_label_counts(examples, counting)} == {"train",
                                                                                  "test"}


def test_label_counting_names_an_existing_feature():
    with pytest.raises(ValueError, match="no feature 'species'"):
        RowsToExamples(SPECS, {}, key_column="id",
                       count_labels=COUNTING._replace(feature="species"))


def test_bad_schema_fails_at_construction():
    specs = parse_features({"label": {"type": "int64", "vocabulary": "auto"}})
    with pytest.raises(ValueError, match="features.label.vocabulary"):
        RowsToExamples(specs, {}, key_column=None)


def test_float_bits_of_the_independent_reader_match():
    # float32 rounding happens in the Example; the reader sees the float32 value
    converter = BatchConverter(parse_features({"x": {"type": "float"}}), {}, None)
    [(_, example)] = converter.convert_batch([SourceRow("s", 1, {"x": "0.1"})])[0]
    assert decoded(example)["x"] == [struct.unpack("<f", struct.pack("<f", 0.1))[0]]


def test_blank_numeric_key_is_missing_even_with_a_default():
    specs = parse_features({"id": {"type": "int64", "default": 0}})
    converter = BatchConverter(specs, {}, key_column="id")
    _, [record] = converter.convert_batch([SourceRow("s.csv", 2, {"id": "  "})])
    assert (record["reason"], record["feature"]) == ("missing_value", "id")
    assert "key column 'id' has no value" in record["message"]
    [(key, _)] = converter.convert_batch([SourceRow("s.csv", 3, {"id": " 12 "})])[0]
    assert key == sortable_key(12)


def test_remembered_label_texts_equal_a_fresh_conversion_for_every_raw_value():
    # Label texts are remembered per raw value and its type: 1, 1.0, "1",
    # " 1" and lists (unhashable) must each get exactly the text a fresh
    # conversion gives.
    specs = parse_features({"id": {"type": "int64"},
                            "tags": {"type": "int64", "shape": [-1]},
                            "code": {"type": "int64"}})
    raws = [1, 1.0, "1", " 1", 2, "2", 1, 1.0, "1"]
    rows = [SourceRow("t.jsonl", n, {"id": n, "tags": [raw, 3] if n % 2 else raw, "code": raw})
            for n, raw in enumerate(raws * 3)]
    converter = BatchConverter(specs, {}, key_column="id")
    for feature in ("code", "tags"):
        examples, labels, dead = converter.convert_labelled_batch(rows, feature)
        fresh = BatchConverter(specs, {}, key_column="id")._encoder.converter(feature)
        good = [row for row in rows if not any(d["row"] == row.row for d in dead)]
        assert len(good) == len(examples) == len(labels) > len(rows) // 2
        for row, label in zip(good, labels):
            stored = fresh(row.values[feature])
            assert label == (str(stored[0]) if stored else None), row


def test_a_label_read_from_a_nested_path_names_the_value_its_feature_stores():
    # The label's raw value is the one at the feature's path, not whatever
    # the row holds under its read key (none): a required feature must not
    # fail there, nor an optional one be labelled None, on either path.
    specs = parse_features({"id": {"type": "int64"},
                            "score": {"type": "float", "from": ["m", "score"]},
                            "kind": {"type": "string", "from": ["m", "kind"],
                                     "required": False}}, nested=True)
    rows = [SourceRow("t.jsonl", n, {"id": n, "m": {"score": n / 2, "kind": f"k{n}"}})
            for n in range(3)]
    bad = SourceRow("t.jsonl", 3, {"id": "x", "m": {"score": 1, "kind": "k"}})
    for converter in (BatchConverter(specs, {}, "id"),
                      row_by_row(BatchConverter(specs, {}, "id"))):
        for batch in (rows, rows + [bad]):
            for label, expected in (("score", ["0.0", "0.5", "1.0"]),
                                    ("kind", ["k0", "k1", "k2"])):
                examples, labels, dead = converter.convert_labelled_batch(batch, label)
                assert len(examples) == 3 and labels == expected
                assert [letter["row"] for letter in dead] == [3] * (len(batch) - 3)


# --- the column path against the row path -------------------------------------------

MIXED_SPECS = parse_features({
    "id": {"type": "int64"},
    "score": {"type": "float", "min": 0},
    "name": {"type": "string", "max_bytes": 10},
    "label": {"type": "int64", "vocabulary": ["cat", "dog"]},
    "code": {"type": "int64", "required": False},
    "tag": {"type": "bytes", "required": False},
})
# column -> values to draw from (most good, some bad or taking the complete rules)
MIXED_VALUES = {
    "id": ["1", "-7", "300", "2", 5, 2 ** 40, "", "  ", None, "x", "1_0", 2.0, [3]],
    "score": ["0.5", "0", 1.5, "-1", "nan", None],
    "name": ["a", "row", "\u00fcber", "x" * 11, "", 3, "\udc80"],
    "label": ["cat", "dog", "bird", None],
    "code": ["1", 2, None, ""],
    "tag": [b"t", b"", "text", None],
}


def row_by_row(converter: BatchConverter) -> BatchConverter:
    """The same converter with the column path switched off."""
    converter._column_path = lambda column, count, label, vocabulary: (
        [None] * count, [], None, {})
    return converter


@pytest.mark.parametrize("key_column", ["id", "name", "code", None])
@pytest.mark.parametrize("label", [None, "label", "name", "id", "score"])
def test_column_path_converts_batches_like_the_row_path(key_column, label):
    import random

    rng = random.Random(f"{key_column}/{label}")
    vocabulary = ("cat", "dog") if label == "label" else None
    fast = BatchConverter(MIXED_SPECS, {}, key_column)
    slow = row_by_row(BatchConverter(MIXED_SPECS, {}, key_column))
    bad_rows = good_rows = 0
    for batch_number in range(60):
        # Early batches are clean (whole columns take the column path).
        clean = batch_number < 20
        rows = [SourceRow("t.csv", n, {
            column: values[n % 4] if clean else rng.choice(values[:4] if rng.random() < 0.8
                                                           else values)
            for column, values in MIXED_VALUES.items()})
            for n in range(rng.choice([1, 3, 17]))]
        if clean:
            for n, source_row in enumerate(rows):
                source_row.values["id"] = str(batch_number * 100 + n)
        expected = slow.convert_labelled_batch(rows, label, vocabulary)
        assert fast.convert_labelled_batch(rows, label, vocabulary) == expected
        good_rows += len(expected[0])
        bad_rows += len(expected[2])
    assert good_rows > 50 and bad_rows > 30


def test_a_failing_column_path_leaves_every_row_to_the_row_path(caplog):
    converter = BatchConverter(SPECS, {}, key_column="id")
    converter._encoder = type("Broken", (), {
        "encode_columns": lambda self, column, count: 1 / 0,
        "encode": converter._encoder.encode, "converter": converter._encoder.converter})()
    examples, dead = converter.convert_batch([row(1), row(2, score="-1")])
    assert [key for key, _ in examples] == [sortable_key(1)] and len(dead) == 1
    assert "column path failed" in caplog.text


# --- digests handed to the shard writer -----------------------------------------------

def test_counted_batches_carry_the_digests_the_writer_would_compute():
    import pickle

    fn = _ConvertBatchesFn(SPECS, {}, "id", COUNTING)
    fn.setup()
    tagged = list(fn.process([row(n) for n in range(20)]))
    [batch] = [value for tag, value in tagged if tag == "examples"]
    assert isinstance(batch, HashedExamples) and len(batch) == 20
    assigner = SplitAssigner(COUNTING.dataset_name, COUNTING.splits)
    keys = [key for key, _ in batch]
    assert batch.digests == assigner.hash_rows(keys)[0]
    assert assigner.hash_batch(batch, keys)[0] is batch.digests
    # The digests back to back and the columns go on with the batch as made.
    assert assigner.hash_batch(batch, keys)[1] is batch.joined == b"".join(batch.digests)
    assert batch.columns == (keys, [example for _, example in batch])
    copy = pickle.loads(pickle.dumps(batch))
    assert copy == batch and copy.digests == batch.digests and copy.salt == batch.salt


def test_the_writer_takes_digests_only_made_with_its_salt():
    assigner = SplitAssigner("pets", (("train", 1.0),))
    rows = [(b"k%d" % n, b"example") for n in range(3)]
    keys = [key for key, _ in rows]
    marked = [bytes([n]) * 16 for n in range(3)]
    own = HashedExamples(rows, assigner.salt, marked)
    assert assigner.hash_batch(own, keys)[0] == marked
    assert (assigner.hash_batch(own, keys)[2][:, 0] == [0, 0x0101010101010101,
                                                       0x0202020202020202]).all()
    # Joined digests that do not fit the rows are not taken for them.
    for joined in (None, b"short"):
        own.joined = joined
        assert assigner.hash_batch(own, keys)[1] == b"".join(marked)
    for other in (HashedExamples(rows, b"another dataset", marked), list(rows),
                  HashedExamples(rows, assigner.salt, marked[:2])):
        assert assigner.hash_batch(other, keys)[0] == assigner.hash_rows(keys)[0] != marked


@settings(max_examples=300, deadline=None)
@given(splits=st.integers(1, 3), rows=st.lists(
    st.tuples(st.integers(0, 2), st.one_of(st.none(), st.sampled_from(["a", "b", "é", ""]))),
    max_size=40))
def test_label_counts_count_each_split_and_label(splits, rows):
    """The counts of a batch's (split, label) pairs, by a plain Counter of
    the pairs; rows without a label are not counted."""
    names = ["train", "validation", "test"][:splits]
    split_of = np.array([split % splits for split, _ in rows], dtype=np.intp)
    labels = [label for _, label in rows]
    pairs = collections.Counter(zip(split_of.tolist(), labels))
    assert label_counts(names, split_of, labels) == tuple(sorted(
        (names[split], label, count) for (split, label), count in pairs.items()
        if label is not None))


@settings(max_examples=300, deadline=None)
@given(splits=st.integers(1, 3), vocabulary=st.lists(
    st.sampled_from(["a", "b", "é", "", "7"]), min_size=1, max_size=6),
    rows=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), max_size=40))
def test_label_ids_count_as_their_texts(splits, vocabulary, rows):
    """Labels held as vocabulary ids (the native kernel's) give the counts,
    and the texts row by row, of the list of their texts (a vocabulary
    repeating a text included)."""
    names = ["train", "validation", "test"][:splits]
    rows = [(split % splits, label_id % len(vocabulary)) for split, label_id in rows]
    split_of = np.array([split for split, _ in rows], dtype=np.intp)
    ids = np.array([label_id for _, label_id in rows], dtype=np.int64)
    labels = IntLabels.of(ids, vocabulary)
    texts = [vocabulary[label_id] for label_id in ids.tolist()]
    assert list(labels) == texts and labels[:3] == texts[:3]
    assert label_counts(names, split_of, labels) == label_counts(names, split_of, texts)


@settings(max_examples=300, deadline=None)
@given(splits=st.integers(1, 3),
       vocabulary=st.none() | st.lists(st.sampled_from(["a", "b", "é", "", "7", "-1"]),
                                       min_size=1, max_size=6),
       rows=st.lists(st.tuples(st.integers(0, 2), st.one_of(
           st.integers(-3, 9), st.integers(-2**63, 2**63 - 1),
           st.sampled_from([-2**63, 2**63 - 1, -2**63 + 1, 2**63 - 2]))), max_size=40))
def test_int_labels_count_as_their_texts(splits, vocabulary, rows):
    """Int labels (the kernel's array: vocabulary ids in range or not, or
    plain numbers of any span, the int64 limits included) give the counts,
    and the texts row by row, of the list of their texts; two values of one
    text (the vocabulary's "7" and the number 7) count together."""
    names = ["train", "validation", "test"][:splits]
    split_of = np.array([split % splits for split, _ in rows], dtype=np.intp)
    values = np.array([value for _, value in rows], dtype=np.int64)
    labels = IntLabels.of(values, vocabulary)
    texts = [label_text(value, vocabulary) for value in values.tolist()]
    assert list(labels) == texts and labels[:3] == texts[:3]
    assert label_counts(names, split_of, labels) == label_counts(names, split_of, texts)


def test_int_labels_take_int64_arrays_only():
    """Values that are not int64 (floats, whose texts keep -0.0 apart) are
    left to the list of texts."""
    assert IntLabels.of(np.array([0.0]), ["a"]) is None
    assert IntLabels.of(np.array([0], dtype=np.int32), None) is None
    assert len(IntLabels.of(np.zeros(0, dtype=np.int64), ["a"])) == 0
    assert IntLabels.of(np.zeros(0, dtype=np.int64), None).counts(np.zeros(0, np.intp), 2) == [{}, {}]
