"""The `from:` rule (issue 38.2): a text is one top-level column, dots
included; a path into nested values is only a list of keys. Neither may
shadow the other, in the row converter, the column path or the config check."""

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.errors import ConfigError
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.row_encoder import RowEncoder
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.readers.rows import ColumnBatch, SourceRow

_key = st.text(st.sampled_from("ab._"), min_size=1, max_size=4).filter(
    lambda k: k.strip("."))


@st.composite
def _shadowing_rows(draw):
    """Keys [head, *rest] and a row holding both the column named
    "head.rest..." and the nested value at [head, *rest], each a distinct int."""
    keys = draw(st.lists(_key, min_size=2, max_size=3))
    dotted = ".".join(keys)
    nested = top = None
    for key in reversed(keys[1:]):
        nested = {key: nested if nested is not None else 8}
    top = {keys[0]: nested, dotted: 7}
    return keys, dotted, top


@settings(max_examples=200, deadline=None)
@given(_shadowing_rows())
def test_a_dotted_text_is_one_column_and_a_list_is_a_path(case):
    keys, dotted, values = case
    specs = parse_features({"col": {"type": "int64", "from": dotted},
                            "path": {"type": "int64", "from": keys}})
    encoder = RowEncoder(specs)
    assert encoder.convert(values) == {"col": [7], "path": [8]}
    # the column-at-a-time path (ColumnBatch) gives the same values
    converter = BatchConverter(specs, {}, None)
    batch = ColumnBatch("f.json", 1, {name: [value] for name, value in values.items()})
    examples, dead = converter.convert_batch(batch)
    rows_examples, rows_dead = converter.convert_batch([SourceRow("f.json", 1, values)])
    assert dead == rows_dead == [] and examples == rows_examples
    assert encoder.encode(values) == examples[0][1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(st.sampled_from("ab_"), min_size=1, max_size=3), min_size=2, max_size=3))
def test_a_dotted_text_naming_no_known_column_suggests_the_list_form(keys):
    columns = [keys[0], "other"]
    dotted = ".".join(keys)
    if dotted in columns:
        return
    with pytest.raises(ConfigError) as error:
        parse_features({"f": {"type": "int64", "from": dotted}}, known_columns=columns)
    assert error.value.key == "features.f.from"
    listed = ", ".join(keys)
    assert f"did you mean `from: [{listed}]`" in str(error.value)
    # the list form is accepted where the head is a known column
    (spec,) = parse_features({"f": {"type": "int64", "from": keys}}, known_columns=columns)
    assert spec.path == tuple(keys) and spec.column == keys[0]


def test_csv_rows_refuse_a_path_and_take_a_dotted_column():
    (spec,) = parse_features({"f": {"type": "int64", "from": "a.b"}}, known_columns=["a.b"],
                             nested=False)
    assert spec.path is None and spec.column == "a.b"
    with pytest.raises(ConfigError, match="list of keys"):
        parse_features({"f": {"type": "int64", "from": ["a", "b"]}}, nested=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6), min_size=2, max_size=4))
def test_a_path_as_messages_write_it_reads_back_as_the_same_keys_in_yaml(keys):
    # the list form a hint suggests must mean, pasted into a config, the keys
    import yaml
    from recordforge.schemas.features import path_text
    try:
        assert yaml.safe_load(f"from: {path_text(keys)}") == {"from": keys}
    except yaml.YAMLError:
        raise AssertionError(path_text(keys)) from None
