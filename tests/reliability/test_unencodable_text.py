"""Text that cannot be UTF-8 (unpaired surrogates, from JSON ``"\\ud800"``
or undecodable file names) in any column, column name or key: its row is an
``invalid_utf8`` dead letter (or a good row, when no feature reads it), and
every dead letter can be coded between Beam steps and written."""

import json
import textwrap

from apache_beam.coders import coders
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas.dead_letters import dead_letter, json_safe, printable_name
from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.dead_letter_sink import dead_letter_line
from recordforge.transforms.readers.rows import SourceRow

# Any text, lone surrogates (category Cs) included.
ANY_TEXT = st.text(alphabet=st.characters(), max_size=12)
SURROGATES = st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
                     min_size=1, max_size=3)
TEXT_WITH_SURROGATE = st.builds(lambda a, s, b: a + s + b, ANY_TEXT, SURROGATES, ANY_TEXT)

FEATURES = parse_features({"id": {"type": "string"}, "text": {"type": "string"},
                           "n": {"type": "int64", "required": False}})
_CODER = coders.FastPrimitivesCoder()


def _encodable(record: dict) -> None:
    """What happens to a dead letter between steps and in the sink."""
    assert _CODER.decode(_CODER.encode(record)) == record
    line = dead_letter_line(record)
    assert json.loads(line.encode("utf-8")) == record


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.one_of(ANY_TEXT, TEXT_WITH_SURROGATE), min_size=3, max_size=3),
       extra_name=ANY_TEXT, key_column=st.sampled_from(["id", "other", None]))
def test_rows_with_unencodable_text_anywhere(values, extra_name, key_column):
    row_values = {extra_name: values[2], "id": values[0], "text": values[1],
                  "other": values[2]}
    converter = BatchConverter(FEATURES, {}, key_column)
    rows = [SourceRow("data/part\udce9.jsonl", 7, row_values)]
    examples, letters = converter.convert_batch(rows)
    assert len(examples) + len(letters) == 1
    read = ["id", "text"] + ([key_column] if key_column else [])
    unencodable = any(_has_surrogate(row_values[column]) for column in read)
    missing = not all(row_values[column] for column in read)
    if letters:
        (letter,) = letters
        _encodable(letter)
        assert letter["source"] == "data/part\\udce9.jsonl"
        faults = {"missing_value"} if missing else set()
        faults |= {"invalid_utf8"} if unencodable else set()
        assert letter["reason"] in faults
    else:
        assert not unencodable and not missing


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.one_of(st.none(), st.integers(), ANY_TEXT, st.binary(max_size=80)),
                    lambda children: st.one_of(
                        st.lists(children, max_size=4),
                        st.dictionaries(ANY_TEXT, children, max_size=4)), max_leaves=12),
       ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_every_dead_letter_can_be_coded_and_written(value, source, message, feature):
    record = dead_letter(source=source, row=1, key=value, stage="check",
                         reason="invalid_utf8", feature=feature, message=message,
                         input={"column": value, source: value})
    _encodable(record)


def test_unencodable_text_is_shown_escaped():
    assert json_safe("x\ud800y") == "x\\ud800y"
    assert json_safe({"\udc00": ["a\udfffb"]}) == {"\\udc00": ["a\\udfffb"]}
    assert printable_name("photos/caf\udce9.jpg") == "photos/caf\\xe9.jpg"
    assert printable_name("caf\u00e9.jpg") == "caf\u00e9.jpg"
    long = "\ud800" * 5000
    assert json_safe(long) == {"chars": 5000, "head": "\\ud800" * 256}


def test_a_build_with_unencodable_text_in_columns_and_keys(tmp_path, run_build):
    lines = ['{"id": "a", "text": "ok"}', '{"id": "b", "text": "x\\ud800y"}',
             '{"id": "\\ud800", "text": "ok"}', '{"id": "c", "text": "fine", "\\udc00": 1}',
             '{"id": "d", "text": "ok"}']
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: surrogates
        version: "1.0.0"
        source: {{type: jsonl, path: {tmp_path / 'rows.jsonl'}}}
        features:
          id: {{type: string}}
          text: {{type: string}}
        key: id
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        dead_letter: {{max_error_rate: 0.5}}
        """))
    status, _, err = run_build(config)
    assert status == 0, err
    version = tmp_path / "out" / "1.0.0"
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["dead_letter"]["by_reason"] == {"invalid_utf8": 2}
    letters = [json.loads(line) for line in
               (version / "dead_letter" / "part-00000.jsonl").read_text().splitlines()]
    assert [(letter["row"], letter["key"], letter["feature"]) for letter in letters] == \
        [(2, "b", "text"), (3, "\\ud800", "id")]
