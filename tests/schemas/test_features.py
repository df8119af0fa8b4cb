"""Tests for the feature schema model (schemas/features.py)."""

import pytest
import yaml

from recordforge.schemas.errors import ConfigError
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.features import FeatureSpec, manifest_features, resolve_vocabularies


def test_parses_the_spec_example_in_order():
    config = yaml.safe_load("""
    features:
      image/encoded:  {type: bytes, from: image}
      image/height:   {type: int64, from: height, min: 1}
      image/format:   {type: string, from: format, values: [JPEG, PNG]}
      label:          {type: int64, from: label, vocabulary: auto}
      label/text:     {type: string, from: label}
      tags:           {type: string, shape: [-1], required: false}
      box:            {type: float, shape: [4], allow_nan: true, default: [0, 0, 1, 1]}
    """)
    specs = parse_features(config["features"])
    assert [s.name for s in specs] == ["image/encoded", "image/height", "image/format", "label",
                                      "label/text", "tags", "box"]
    by_name = {s.name: s for s in specs}
    assert by_name["image/encoded"] == FeatureSpec(name="image/encoded", type="bytes",
                                                   source="image")
    assert by_name["image/height"].min == 1 and by_name["image/height"].max is None
    assert by_name["image/format"].values == ("JPEG", "PNG")
    assert by_name["label"].vocabulary == "auto"
    assert by_name["tags"].source == "tags" and by_name["tags"].shape == (-1,)
    assert by_name["tags"].required is False
    assert by_name["box"].default == (0, 0, 1, 1) and by_name["box"].allow_nan
    assert [s.stored_kind for s in specs] == ["bytes", "int64", "bytes", "int64", "bytes",
                                             "bytes", "float"]
    assert [s.is_text for s in specs] == [False, False, True, False, True, True, False]
    hash(by_name["box"])  # frozen and hashable: specs can be set members / dict keys


def test_int64_bounds_given_as_whole_floats_become_ints():
    (spec,) = parse_features({"n": {"type": "int64", "min": 0.0, "max": 10.0}})
    assert (spec.min, spec.max) == (0, 10)
    assert type(spec.min) is int


def test_known_columns_accepts_existing_columns():
    specs = parse_features({"h": {"type": "int64", "from": "height"}},
                           known_columns=["height", "width"])
    assert specs[0].source == "height"


# (features mapping, key path in the error, words the message must contain)
CONFIG_ERRORS = [
    (None, "features", "non-empty mapping"),
    ({}, "features", "non-empty mapping"),
    ([{"type": "int64"}], "features", "non-empty mapping"),
    ({1: {"type": "int64"}}, "features.1", "non-empty text"),
    ({"x": "int64"}, "features.x", "{type: int64}"),
    ({"x": ["int64"]}, "features.x", "mapping of settings"),
    ({"x": {"from": "a"}}, "features.x.type", "missing"),
    ({"x": {"type": "int"}}, "features.x.type", "did you mean `int64`"),
    ({"x": {"type": "str"}}, "features.x.type", "did you mean `string`"),
    ({"x": {"type": "double"}}, "features.x.type", "did you mean `float`"),
    ({"x": {"type": "strng"}}, "features.x.type", "did you mean `string`"),
    ({"x": {"type": 5}}, "features.x.type", "unknown type"),
    ({"x": {"type": "int64", "vocab": ["a"]}}, "features.x.vocab",
     "did you mean `vocabulary`"),
    ({"x": {"type": "int64", "source": "a"}}, "features.x.source", "did you mean `from`"),
    ({"x": {"type": "int64", "mni": 1}}, "features.x.mni", "did you mean `min`"),
    ({"x": {"type": "int64", "zzz": 1}}, "features.x.zzz", "valid keys: type, from"),
    ({"x": {"type": "int64", "from": ""}}, "features.x.from", "source column"),
    ({"x": {"type": "int64", "from": 3}}, "features.x.from", "source column"),
    ({"x": {"type": "int64", "shape": 3}}, "features.x.shape", "must be a list"),
    ({"x": {"type": "int64", "shape": [0]}}, "features.x.shape", "[N] with N > 0"),
    ({"x": {"type": "int64", "shape": [-2]}}, "features.x.shape", "[-1]"),
    ({"x": {"type": "int64", "shape": [True]}}, "features.x.shape", "invalid shape"),
    ({"x": {"type": "int64", "shape": ["3"]}}, "features.x.shape", "invalid shape"),
    ({"x": {"type": "int64", "shape": [2, 3]}}, "features.x.shape", "multi-dimensional"),
    ({"x": {"type": "int64", "required": "yes"}}, "features.x.required", "true or false"),
    ({"x": {"type": "float", "allow_nan": 1}}, "features.x.allow_nan", "true or false"),
    ({"x": {"type": "int64", "allow_nan": True}}, "features.x.allow_nan", "float features only"),
    ({"x": {"type": "int64", "max_bytes": 3}}, "features.x.max_bytes",
     "bytes and string features only"),
    ({"x": {"type": "bytes", "max_bytes": 0}}, "features.x.max_bytes", "positive integer"),
    ({"x": {"type": "bytes", "max_bytes": "1KB"}}, "features.x.max_bytes", "positive integer"),
    ({"x": {"type": "string", "max": 3}}, "features.x.max", "use max_bytes"),
    ({"x": {"type": "int64", "min": "0"}}, "features.x.min", "must be a number"),
    ({"x": {"type": "int64", "min": True}}, "features.x.min", "must be a number"),
    ({"x": {"type": "int64", "min": 0.5}}, "features.x.min", "must be an integer"),
    ({"x": {"type": "int64", "max": 2 ** 63}}, "features.x.max", "does not fit in int64"),
    ({"x": {"type": "float", "min": float("nan")}}, "features.x.min", "not NaN"),
    ({"x": {"type": "int64", "min": 5, "max": 1}}, "features.x.min", "greater than max"),
    ({"x": {"type": "float", "min": 0.5, "max": 0.25}}, "features.x.min", "swap them"),
    ({"x": {"type": "string", "vocabulary": ["a"]}}, "features.x.vocabulary",
     "must be `type: int64`"),
    ({"x": {"type": "float", "vocabulary": "auto"}}, "features.x.vocabulary",
     "use `values:` instead"),
    ({"x": {"type": "int64", "vocabulary": []}}, "features.x.vocabulary", "`auto` or a non-empty"),
    ({"x": {"type": "int64", "vocabulary": "a,b"}}, "features.x.vocabulary",
     "`auto` or a non-empty"),
    ({"x": {"type": "int64", "vocabulary": ["a", 1]}}, "features.x.vocabulary", "quote it"),
    ({"x": {"type": "int64", "vocabulary": ["a", "b", "a"]}}, "features.x.vocabulary",
     "appears twice"),
    ({"x": {"type": "int64", "vocabulary": ["a"], "min": 0}}, "features.x.min",
     "cannot be combined with a vocabulary"),
    ({"x": {"type": "int64", "vocabulary": ["a"], "values": ["a"]}}, "features.x.values",
     "cannot be combined with a vocabulary"),
    ({"x": {"type": "int64", "values": []}}, "features.x.values", "non-empty list"),
    ({"x": {"type": "int64", "values": 3}}, "features.x.values", "non-empty list"),
    ({"x": {"type": "int64", "values": [1, "2"]}}, "features.x.values", "must be a number"),
    ({"x": {"type": "int64", "values": [1.5]}}, "features.x.values", "must be an integer"),
    ({"x": {"type": "int64", "values": [2 ** 64]}}, "features.x.values", "does not fit"),
    ({"x": {"type": "float", "values": [float("nan")]}}, "features.x.values", "allow_nan"),
    ({"x": {"type": "string", "values": ["a", 1]}}, "features.x.values", "quote it"),
    ({"x": {"type": "string", "values": ["abcd"], "max_bytes": 3}}, "features.x.values",
     "longer than max_bytes"),
    ({"x": {"type": "int64", "values": [1, 50], "max": 10}}, "features.x.values",
     "outside min/max"),
    ({"x": {"type": "int64", "default": "abc"}}, "features.x.default", "type_mismatch"),
    ({"x": {"type": "int64", "default": 11, "max": 10}}, "features.x.default", "out_of_range"),
    ({"x": {"type": "int64", "default": [1, 2]}}, "features.x.default", "wrong_length"),
    ({"x": {"type": "int64", "shape": [3], "default": [1, 2]}}, "features.x.default",
     "wrong_length"),
    ({"x": {"type": "string", "default": "toolong", "max_bytes": 3}}, "features.x.default",
     "too_long"),
    ({"x": {"type": "string", "default": "c", "values": ["a", "b"]}}, "features.x.default",
     "not_allowed"),
    ({"x": {"type": "int64", "default": "zebra", "vocabulary": ["cat", "dog"]}},
     "features.x.default", "unknown_label"),
    ({"x": {"type": "float", "default": "nan"}}, "features.x.default", "nan_or_inf"),
]


@pytest.mark.parametrize("mapping, key, words", CONFIG_ERRORS,
                         ids=[f"{i}-{case[1]}" for i, case in enumerate(CONFIG_ERRORS)])
def test_config_errors_name_the_key_and_the_fix(mapping, key, words):
    with pytest.raises(ConfigError) as raised:
        parse_features(mapping)
    assert raised.value.key == key
    assert words in raised.value.problem
    assert str(raised.value).startswith(f"{key}: ")


def test_key_path_prefix_is_used():
    with pytest.raises(ConfigError) as raised:
        parse_features({"x": {"type": "nope"}}, key_path="datasets.0.features")
    assert raised.value.key == "datasets.0.features.x.type"


def test_unknown_from_column_is_named_with_a_suggestion():
    with pytest.raises(ConfigError) as raised:
        parse_features({"h": {"type": "int64", "from": "heigth"}},
                       known_columns=["height", "width"])
    assert raised.value.key == "features.h.from"
    assert "'heigth'" in raised.value.problem
    assert "did you mean `height`" in raised.value.problem
    assert "columns: height, width" in raised.value.problem


def test_feature_name_used_as_column_is_explained():
    with pytest.raises(ConfigError) as raised:
        parse_features({"label/text": {"type": "string"}}, known_columns=["label"])
    assert raised.value.key == "features.label/text.from"
    assert "feature's name is used" in raised.value.problem


def test_manifest_features_block():
    specs = parse_features({
        "tags": {"type": "string", "shape": [-1]},
        "label": {"type": "int64", "vocabulary": ["a", "b"]},
        "image/encoded": {"type": "bytes", "from": "image"},
        "box": {"type": "float", "shape": [4]},
    })
    assert manifest_features(specs) == {
        "box": {"type": "float", "shape": [4]},
        "image/encoded": {"type": "bytes", "shape": []},
        "label": {"type": "int64", "shape": []},
        "tags": {"type": "bytes", "shape": [-1], "text": True},
    }
    assert list(manifest_features(specs)) == ["box", "image/encoded", "label", "tags"]


def test_resolve_vocabularies():
    specs = parse_features({
        "label": {"type": "int64", "vocabulary": "auto"},
        "kind": {"type": "int64", "from": "k", "vocabulary": ["z", "a"]},
        "plain": {"type": "int64"},
    })
    resolved = resolve_vocabularies(specs, {"label": ["tulips", "daisy", "roses", "daisy"]})
    assert resolved == {"label": ("daisy", "roses", "tulips"), "kind": ("z", "a")}
    # keyed by feature name works too, and wins over the source column
    specs = parse_features({"y": {"type": "int64", "from": "label", "vocabulary": "auto"}})
    assert resolve_vocabularies(specs, {"y": ["b", "a"], "label": ["q"]}) == {"y": ("a", "b")}


@pytest.mark.parametrize("known", [{}, {"label": []}])
def test_auto_vocabulary_without_known_values_is_a_config_error(known):
    specs = parse_features({"label": {"type": "int64", "vocabulary": "auto"}})
    with pytest.raises(ConfigError) as raised:
        resolve_vocabularies(specs, known)
    assert raised.value.key == "features.label.vocabulary"
    assert "list the labels explicitly" in raised.value.problem
