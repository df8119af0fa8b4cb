"""Optional features and defaults: what the manifest states, what `verify
--deep` accepts, and the README's TensorFlow reading snippet, for generated
schemas and rows.

The README's snippet runs here against a stand-in for TensorFlow's parse
specs; each record is then parsed by TensorFlow's rules for
`parse_single_example` (a FixedLenFeature without a default must be present
with exactly its number of values; a VarLenFeature may be absent), reading
the records with the `tfrecord` package's independent Example class.
"""

import hashlib
import json
import math
import re
import struct
import types
from pathlib import Path

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines import publish
from recordforge.pipelines.publish import manifest as manifest_lib
from recordforge.pipelines.publish import verify
from recordforge.schemas.checks import stored_defaults
from recordforge.schemas.dead_letters import RowError
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.features import manifest_features
from recordforge.schemas.row_encoder import RowEncoder
from recordforge.transforms import tfrecord
from recordforge.transforms.layout import shard_file_name

README = Path(__file__).resolve().parents[2] / "README.md"
VOCABULARY = ["cat", "dog", "eel"]


# --- generated schemas and rows -------------------------------------------------------

def _value(kind, draw):
    if kind == "int64":
        return draw(st.integers(-5, 5))
    if kind == "float":
        return draw(st.sampled_from([0.1, -2.5, 1e30, 3.0]))
    if kind == "label":
        return draw(st.sampled_from(VOCABULARY))
    return draw(st.sampled_from(["", "a", "é", "long text"]))


@st.composite
def schemas(draw):
    features = {}
    for index in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["int64", "float", "string", "bytes", "label"]))
        shape = draw(st.sampled_from([[], [2], [-1]]))
        body = {"type": "int64" if kind == "label" else kind, "shape": shape,
                "required": draw(st.booleans())}
        if kind == "label":
            body["vocabulary"] = VOCABULARY
        if draw(st.booleans()):
            count = 1 if not shape else 2 if shape == [2] else draw(st.integers(1, 3))
            values = [_value(kind, draw) for _ in range(count)]
            body["default"] = values[0] if not shape else values
        features[f"f{index}"] = (kind, body)
    return features


@st.composite
def rows(draw, schema):
    found = []
    for number in range(draw(st.integers(1, 6))):
        row = {}
        for name, (kind, body) in schema.items():
            if number and draw(st.integers(0, 2)) == 0:
                continue  # missing: default, absent, or a dead letter (never in row 0)
            shape = body["shape"]
            count = 1 if not shape else 2 if shape == [2] else draw(st.integers(0, 3))
            values = [_value(kind, draw) for _ in range(count)]
            if not shape and values == [""]:
                values = ["x"]  # "" is a missing value for a scalar
            row[name] = values[0] if not shape else values
        found.append(row)
    return found


def _publish(root, features_config, rows_):
    """Encodes the rows as a build does and publishes them (one shard, with
    the staged version verified deeply by `verify`). Returns the number of
    rows that became examples."""
    specs = parse_features(features_config)
    encoder = RowEncoder(specs)
    records, dead = [], 0
    for row in rows_:
        try:
            records.append(encoder.encode(row))
        except RowError:
            dead += 1
    staging = publish.begin_build(root, "1")
    data = tfrecord.frame_records(records)
    shards = []
    if records:
        file = shard_file_name("train", 0, 1, "none")
        with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
            handle.write(data)
        shards.append({"split": "train", "file": file, "num_examples": len(records),
                       "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({"shards": shards, "num_input_rows": len(rows_),
                                 "dead_letter": {"num_rows": dead, "by_reason": {},
                                                 "files": [], "samples": {}}}).encode())
    features = manifest_features(specs, stored_defaults(specs))
    publish.finalize(staging, name="opt", compression="none", features=features,
                     vocabularies={}, config={"features": features_config},
                     split_names=["train"], max_error_rate=1.0, verify=False)
    return len(records)


# --- TensorFlow's parsing rules, on a stand-in for its parse specs ---------------------

class _FixedLen:
    def __init__(self, shape, dtype, default_value=None):
        self.shape, self.dtype, self.default_value = list(shape), dtype, default_value


class _VarLen:
    def __init__(self, dtype):
        self.dtype = dtype


def _fake_tensorflow(seen):
    class Dataset:
        def __init__(self, files, compression_type=""):
            seen["files"], seen["compression"] = files, compression_type

        def map(self, function):
            seen["map"] = function
            return self

    def parse_single_example(record, spec):
        seen["spec"] = spec
        return record

    tf = types.SimpleNamespace(int64="int64", float32="float", string="bytes")
    tf.io = types.SimpleNamespace(FixedLenFeature=_FixedLen, VarLenFeature=_VarLen,
                                  parse_single_example=parse_single_example)
    tf.data = types.SimpleNamespace(TFRecordDataset=Dataset)
    return tf


def _readme_snippet() -> str:
    text = README.read_text()
    section = text[text.index("## Reading a dataset in TensorFlow"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run_readme_snippet(root: Path, monkeypatch) -> dict:
    seen = {}
    code = _readme_snippet().replace("import base64, json, tensorflow as tf",
                                     "import base64, json")
    assert "tensorflow" not in code.replace("tf_type", "")  # only the import was taken out
    monkeypatch.chdir(root)
    namespace = {"tf": _fake_tensorflow(seen)}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    seen["map"](b"")  # the lambda hands the spec to parse_single_example
    return seen


def _tf_parse(record: bytes, spec: dict) -> None:
    """Raises AssertionError where `tf.io.parse_single_example` would fail."""
    from tfrecord import example_pb2

    features = example_pb2.Example.FromString(record).features.feature
    for name, parse in spec.items():
        feature = features.get(name) if name in features else None
        kind = feature.WhichOneof("kind") if feature is not None else None
        values = list(getattr(feature, kind).value) if kind else []
        if kind is not None:
            assert kind == {"int64": "int64_list", "float": "float_list",
                            "bytes": "bytes_list"}[parse.dtype], (name, kind, parse.dtype)
        if isinstance(parse, _VarLen):
            continue
        size = math.prod(parse.shape)
        if feature is None:
            assert parse.default_value is not None, \
                f"Feature: {name} is required but could not be found"
            default = parse.default_value if parse.shape else [parse.default_value]
            assert len(default) == size
            for value in default:
                if parse.dtype == "bytes":
                    assert isinstance(value, (str, bytes))
                elif parse.dtype == "int64":
                    assert isinstance(value, int)
                else:
                    assert isinstance(value, float)
            continue
        assert len(values) == size, f"Key: {name}. Can't parse serialized Example"


# --- the properties -------------------------------------------------------------------

@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_published_schema_verifies_deeply_and_reads_with_the_readme_snippet(
        data, tmp_path_factory, monkeypatch):
    schema = data.draw(schemas())
    features_config = {name: body for name, (_, body) in schema.items()}
    workdir = tmp_path_factory.mktemp("ds")
    root = workdir / "out" / "flowers"
    examples = _publish(str(root), features_config, data.draw(rows(schema)))

    manifest = json.loads((root / "1" / "manifest.json").read_text())
    manifest_lib.load_manifest((root / "1" / "manifest.json").read_bytes())
    for name, body in features_config.items():
        stated = manifest["features"][name]
        optional = body["required"] is False and "default" not in body
        assert stated.get("required", True) is (not optional)
        assert ("default" in stated) is ("default" in body)
    report = verify.verify_dataset(str(root), deep=True)
    assert report.ok, report.problems
    assert report.records_checked == examples

    seen = _run_readme_snippet(workdir, monkeypatch)
    assert set(seen["spec"]) == set(features_config)
    for record in tfrecord.read_records(str(root / "1" / shard_file_name("train", 0, 1, "none"))) \
            if examples else ():
        _tf_parse(record, seen["spec"])


def test_the_manifest_states_optionality_and_defaults_as_stored():
    specs = parse_features({
        "opt": {"type": "string", "required": False},
        "opt_list": {"type": "float", "shape": [-1], "required": False},
        "with_default": {"type": "int64", "required": False, "default": "7"},
        "label": {"type": "int64", "vocabulary": VOCABULARY, "default": "eel"},
        "pair": {"type": "float", "shape": [2], "default": [0.1, "inf"], "allow_nan": True},
        "raw": {"type": "bytes", "default": b"\xff\x00"},
        "text": {"type": "string", "default": "é"},
        "plain": {"type": "int64"},
    })
    block = manifest_features(specs, stored_defaults(specs))
    assert block["opt"] == {"type": "bytes", "shape": [], "text": True, "required": False}
    assert block["opt_list"] == {"type": "float", "shape": [-1], "required": False}
    assert block["with_default"] == {"type": "int64", "shape": [], "default": 7}
    assert block["label"] == {"type": "int64", "shape": [], "default": 2}
    # Floats as stored (float32), infinities as text JSON can hold.
    assert block["pair"]["default"] == [struct.unpack("<f", struct.pack("<f", 0.1))[0], "inf"]
    assert block["raw"]["default"] == {"base64": "/wA="}
    assert block["text"]["default"] == "é"
    assert block["plain"] == {"type": "int64", "shape": []}
    for name, entry in block.items():
        manifest_lib._check_default(entry["default"], entry["type"], entry["shape"], name) \
            if "default" in entry else None
    assert manifest_lib.dumps_manifest({"features": block})  # strict JSON: no NaN tokens


def test_an_absent_required_feature_is_still_damage(tmp_path):
    """`verify --deep` accepts exactly what the schema allows: a feature not
    declared optional, a list of any length included, must be in every record."""
    config = {"a": {"type": "int64"}, "b": {"type": "float", "shape": [-1], "required": False}}
    _publish(str(tmp_path), config, [{"a": 1}, {"a": 2, "b": [1.0]}])
    assert verify.verify_dataset(str(tmp_path), deep=True).ok
    manifest_path = tmp_path / "1" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["features"]["b"].pop("required")
    manifest["config"] = {}  # nothing left that declares `b` optional
    manifest_path.write_text(json.dumps(manifest))
    report = verify.verify_dataset(str(tmp_path), deep=True)
    assert [p.record_index for p in report.problems if p.code == "example"] == [0]
    assert "'b' is missing" in report.problems[0].message


def test_a_manifest_from_before_required_was_stated_verifies_by_its_config(tmp_path):
    config = {"a": {"type": "int64"}, "b": {"type": "string", "required": False}}
    _publish(str(tmp_path), config, [{"a": 1}, {"a": 2, "b": "x"}])
    manifest_path = tmp_path / "1" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["features"]["b"].pop("required")
    manifest_path.write_text(json.dumps(manifest))
    assert verify.verify_dataset(str(tmp_path), deep=True).ok


@pytest.mark.parametrize("entry, field", [
    ({"type": "int64", "shape": [], "required": "no"}, "features.x.required"),
    ({"type": "int64", "shape": [], "default": "7"}, "features.x.default"),
    ({"type": "int64", "shape": [2], "default": [1]}, "features.x.default"),
    ({"type": "int64", "shape": [], "default": [1]}, "features.x.default"),
    ({"type": "float", "shape": [], "default": "fast"}, "features.x.default"),
    ({"type": "bytes", "shape": [], "default": {"hex": "00"}}, "features.x.default"),
    ({"type": "int64", "shape": [], "default": True}, "features.x.default"),
])
def test_malformed_optionality_and_defaults_are_manifest_errors(tmp_path, entry, field):
    _publish(str(tmp_path), {"x": {"type": "int64"}}, [{"x": 1}])
    manifest = json.loads((tmp_path / "1" / "manifest.json").read_text())
    manifest["features"]["x"] = entry
    with pytest.raises(manifest_lib.ManifestError) as raised:
        manifest_lib.load_manifest(json.dumps(manifest))
    assert raised.value.field == field


# --- the build paths write it ---------------------------------------------------------

_E2E_FEATURES = {
    "id": {"type": "int64"},
    "note": {"type": "string", "required": False},
    "count": {"type": "int64", "required": False, "default": 5},
    "kind": {"type": "int64", "vocabulary": ["a", "b"], "default": "b"},
}
_E2E_ROWS = [{"id": 1, "note": "x", "count": 2, "kind": "a"}, {"id": 2}, {"id": 3, "note": ""}]


def _check_built(version_dir: Path):
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert manifest["features"]["note"]["required"] is False
    assert manifest["features"]["count"]["default"] == 5
    assert manifest["features"]["kind"]["default"] == 1
    assert "required" not in manifest["features"]["id"]
    assert verify.verify_dataset(str(version_dir), deep=True).ok


def test_a_cli_build_states_optionality_and_defaults(tmp_path):
    from recordforge.pipelines import build

    table = tmp_path / "rows.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in _E2E_ROWS))
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "name": "opt", "version": "1", "source": {"type": "jsonl", "path": str(table)},
        "features": _E2E_FEATURES, "output": {"path": str(tmp_path / "out")}}))
    assert build.run([str(config), "--", "--direct_running_mode=in_memory",
                      "--direct_num_workers=1"]) == 0
    _check_built(tmp_path / "out" / "1")


def test_write_dataset_states_optionality_and_defaults(tmp_path):
    import apache_beam as beam

    import recordforge

    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create(_E2E_ROWS)
             | recordforge.WriteDataset({"name": "opt", "version": "1",
                                         "features": _E2E_FEATURES,
                                         "output": {"path": str(tmp_path / "out")}}))
    _check_built(tmp_path / "out" / "1")
