"""JSON numbers beyond a double's range are reported, never read as inf."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.readers import json_values, jsonl


@settings(max_examples=100, deadline=None)
@given(mantissa=st.decimals(min_value=1, max_value=9, places=3),
       exponent=st.integers(min_value=309, max_value=100_000),
       negative=st.booleans(), allow_nan=st.booleans())
def test_json_numbers_beyond_a_double_are_float32_overflow(tmp_path_factory, mantissa,
                                                           exponent, negative, allow_nan):
    path = tmp_path_factory.mktemp("json") / "rows.jsonl"
    literal = f"{'-' if negative else ''}{mantissa}e{exponent}"
    path.write_text(f'{{"x": {literal}}}\n{{"x": 2.5e3}}\n')
    rows = list(jsonl.iter_jsonl(str(path)))
    assert rows[1].values == {"x": 2500.0}
    converter = BatchConverter(parse_features({"x": {"type": "float", "allow_nan": allow_nan}}),
                               {}, None)
    examples, letters = converter.convert_batch(rows)
    assert len(examples) == 1
    assert [letter["reason"] for letter in letters] == ["float32_overflow"]


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_finite_json_numbers_parse_as_json_loads_does(number):
    line = json.dumps({"x": number})
    assert json_values.DECODER.decode(line) == json.loads(line)
