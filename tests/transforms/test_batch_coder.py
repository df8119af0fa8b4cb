"""Tests for the coder of batch-carrying steps (transforms/batch_coder.py)."""

import pickle

import apache_beam as beam
from apache_beam.coders import registry

from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.batch_coder import BatchCoder, estimated_size
from recordforge.transforms.readers.jsonl import JsonlRunBatch
from recordforge.transforms.readers.rows import ColumnBatch, SourceRow
from recordforge.transforms.splits import HashedExamples
from recordforge.transforms.sources import ReadTable
from recordforge.transforms.to_examples import RowsToExamples


class _CountingRow:
    """A row that counts how often it is pickled."""

    pickled = 0

    def __init__(self, payload: bytes):
        self.payload = payload

    def __reduce__(self):
        _CountingRow.pickled += 1
        return (_CountingRow, (self.payload,))


def _column_batch(rows: int) -> ColumnBatch:
    return ColumnBatch("t.csv", 2, {"id": [str(i) for i in range(rows)],
                                    "text": [f"row {i} " * 10 for i in range(rows)]})


def test_round_trip_keeps_every_kind_of_element():
    coder = BatchCoder()
    examples = HashedExamples([(b"k1", b"e1"), (None, b"e2")], b"salt", [b"d1", b"d2"])
    for value in (examples, _column_batch(20), [SourceRow("a.jsonl", 3, {"x": 1})],
                  ("examples", examples), {"reason": "out_of_range"}, ("a.csv", 7)):
        decoded = coder.decode(coder.encode(value))
        assert decoded == value and type(decoded) is type(value)
    decoded = coder.decode(coder.encode(examples))
    assert (decoded.salt, decoded.digests) == (b"salt", [b"d1", b"d2"])


def test_size_of_a_small_value_is_its_pickled_size():
    for value in ({"reason": "out_of_range", "row": 3}, [(b"k", b"e")] * 8, _column_batch(8)):
        assert estimated_size(value) == len(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def test_size_of_a_batch_is_estimated_close_to_its_pickled_size():
    examples = HashedExamples([(str(i).encode(), b"x" * (100 + i % 7)) for i in range(5000)])
    lines = [b'{"id": %d, "text": "%s"}' % (i, b"x" * (40 + i % 7)) for i in range(5000)]
    jsonl = JsonlRunBatch("t", lines, list(range(1, 5001)))
    for value in (examples, _column_batch(5000), jsonl):
        actual = len(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
        assert 0.8 * actual <= estimated_size(value) <= 1.25 * actual
    assert jsonl._values is None  # (estimated without parsing its rows)


def test_a_batch_is_estimated_from_a_few_rows_not_pickled_whole():
    batch = [_CountingRow(b"%04d" % (i % 10_000) * 250) for i in range(10_000)]
    _CountingRow.pickled = 0
    assert estimated_size(batch) >= 10_000 * 1000
    assert _CountingRow.pickled <= 8
    _CountingRow.pickled = 0
    assert BatchCoder().decode(BatchCoder().encode(batch))[-1].payload == b"9999" * 250
    assert _CountingRow.pickled == 10_000  # encoding still writes every row


def test_batch_steps_of_a_build_use_the_batch_coder(tmp_path):
    """The reader's and converter's outputs, which carry every row, are
    sized by BatchCoder; the coders Beam picks come from the element types."""
    table = tmp_path / "t.csv"
    table.write_text("id\n1\n2\n")
    pipeline = beam.Pipeline()
    read = pipeline | "Read" >> ReadTable(str(table), "csv")
    converted = read.rows | "ToExamples" >> RowsToExamples(
        parse_features({"id": {"type": "int64"}}), {}, "id")
    assert isinstance(registry.get_coder(read.rows.element_type), BatchCoder)
    assert isinstance(registry.get_coder(converted.examples.element_type), BatchCoder)
    tagged = converted.examples.producer.inputs[0]  # the converter's (tag, value) output
    assert isinstance(registry.get_coder(tagged.element_type).coders()[1], BatchCoder)
