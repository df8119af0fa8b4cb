"""A dead letter lists every fault of its row (``errors``), the one it names first."""

from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas.dead_letters import RowError
from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.readers.rows import ColumnBatch, SourceRow

FEATURES = parse_features({
    "id": {"type": "int64"},
    "score": {"type": "float", "min": 0, "max": 1},
    "name": {"type": "string", "max_bytes": 4},
    "color": {"type": "string", "values": ["red", "blue"]},
})
VALUES = {
    "id": st.sampled_from(["1", "x", "", "99999999999999999999"]),
    "score": st.sampled_from(["0.5", "2", "nan", "abc", ""]),
    "name": st.sampled_from(["ann", "toolong", ""]),
    "color": st.sampled_from(["red", "green", ""]),
}


def _failing(spec_name: str, value: str) -> bool:
    converter = BatchConverter(FEATURES, {}, None)._encoder.converter(spec_name)
    try:
        converter(value)
    except RowError:
        return True
    return False


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries(VALUES), st.sampled_from([None, "id"]), st.booleans())
def test_every_fault_of_a_row_is_listed(values, key_column, as_columns):
    converter = BatchConverter(FEATURES, {}, key_column)
    batch = (ColumnBatch("t.csv", 2, {name: [value] for name, value in values.items()})
             if as_columns else [SourceRow("t.csv", 2, values)])
    examples, letters = converter.convert_batch(batch)
    failing = {name for name, value in values.items() if _failing(name, value)}
    key_missing = key_column is not None and not values[key_column]
    if not failing and not key_missing:
        assert len(examples) == 1 and not letters
        return
    (letter,) = letters
    errors = letter["errors"]
    assert errors[0] == {"reason": letter["reason"], "feature": letter["feature"],
                         "message": letter["message"]}
    assert failing <= {error["feature"] for error in errors}
    assert len({(e["reason"], e["feature"], e["message"]) for e in errors}) == len(errors)
    assert all(error["feature"] in failing or error["feature"] == key_column
               for error in errors)
