"""What `croissant.json`, `features.json` and `dataset_info.json` say of a
version: everything the manifest knows (vocabularies as labels, timestamp
units) and the config's ``dataset:`` section (description, license,
citation), checked with generated manifests and, for Croissant, by
mlcroissant itself (no errors, no warnings)."""

from __future__ import annotations

import json
import logging
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines.config import load_config
from recordforge.pipelines.publish.croissant import croissant
from recordforge.pipelines.publish.tfds_metadata import dataset_info, features_json
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.features import TIMESTAMP_UNITS

FLIGHTS_CSV = pathlib.Path(__file__).resolve().parents[2] / "examples" / "tables" / "flights.csv"
# Configs are only loaded, never built: the output is never written.
OUT = "/nonexistent/recordforge-out"
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Feature names as a config holds them (the Croissant ids are built from them).
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
# Free text: any printable character, quotes, markup and newlines included.
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\n\t"),
               min_size=1, max_size=60).filter(str.strip)
LABELS = st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1,
                          max_size=12), min_size=1, max_size=12, unique=True)


# License and citation given, so that mlcroissant has nothing to recommend.
ABOUT = {"description": "Things.", "license": "CC-BY-4.0", "citation": "Things (2026)."}


def _manifest(features: dict, vocabularies: dict, about: dict | None = None) -> dict:
    shard = {"file": "train-00000-of-00001.tfrecord", "num_examples": 3, "num_bytes": 120,
             "sha256": "0" * 64}
    return {"name": "things", "version": "1.0.0", "created": "2026-01-02T03:04:05Z",
            "compression": "NONE", "features": features, "vocabularies": vocabularies,
            "splits": {"train": {"num_examples": 3, "num_bytes": 120, "shards": [shard]}},
            "config": {"dataset": about} if about is not None else {}}


def _mlcroissant_issues(document: dict) -> tuple[set, set]:
    mlc = pytest.importorskip("mlcroissant")
    logging.getLogger("absl").setLevel(logging.ERROR)
    metadata = mlc.Dataset(jsonld=json.loads(json.dumps(document))).metadata
    return metadata.ctx.issues.errors, metadata.ctx.issues.warnings


# --- the dataset: section -----------------------------------------------------------

@SETTINGS
@given(description=TEXT, license=TEXT, citation=TEXT)
def test_dataset_section_reaches_croissant_and_tfds(description, license, citation):
    config = load_config({
        "name": "things", "version": "1.0.0", "features": {"x": {"type": "int64"}},
        "output": {"path": OUT},
        "dataset": {"description": description, "license": license, "citation": citation}},
        rows_given=True)
    assert (config.about.description, config.about.license, config.about.citation) == (
        description, license, citation)
    manifest = _manifest({"x": {"type": "int64", "shape": []}}, {}, config.resolved["dataset"])
    document = croissant(manifest)
    assert document["license"] == license and document["citeAs"] == citation
    assert document["description"].startswith(description)
    assert _mlcroissant_issues(document) == (set(), set())
    info = dataset_info(manifest)
    assert info["citation"] == citation
    assert info["redistributionInfo"] == {"license": license}
    assert info["description"].startswith(description)


@SETTINGS
@given(key=st.sampled_from(["description", "license", "citation"]),
       value=st.one_of(st.integers(), st.booleans(), st.lists(st.text(), max_size=2),
                       st.just(""), st.just("  \n")))
def test_dataset_section_refuses_what_is_not_text(key, value):
    with pytest.raises(ConfigError) as error:
        load_config({"name": "things", "version": "1.0.0", "features": {"x": {"type": "int64"}},
                     "output": {"path": OUT}, "dataset": {key: value}},
                    rows_given=True)
    assert error.value.key == f"dataset.{key}"


def test_dataset_section_refuses_an_unknown_key():
    with pytest.raises(ConfigError) as error:
        load_config({"name": "things", "version": "1.0.0", "features": {"x": {"type": "int64"}},
                     "output": {"path": OUT}, "dataset": {"licence": "MIT"}},
                    rows_given=True)
    assert error.value.key == "dataset.licence" and "license" in str(error.value)


def test_without_a_dataset_section_nothing_is_invented():
    document = croissant(_manifest({"x": {"type": "int64", "shape": []}}, {}))
    assert "license" not in document and "citeAs" not in document
    info = dataset_info(_manifest({"x": {"type": "int64", "shape": []}}, {}))
    assert "citation" not in info and "redistributionInfo" not in info


# --- vocabularies and timestamps ----------------------------------------------------

@SETTINGS
@given(vocabularies=st.dictionaries(NAMES, LABELS, min_size=1, max_size=3),
       plain=st.lists(NAMES, max_size=2))
def test_a_vocabulary_feature_keeps_its_labels(vocabularies, plain):
    features = {name: {"type": "int64", "shape": []} for name in [*vocabularies, *plain]}
    manifest = _manifest(features, vocabularies, ABOUT)
    tfds = features_json(manifest)["featuresDict"]["features"]
    for name, labels in vocabularies.items():
        entry = tfds[name]
        assert entry["pythonClassName"].endswith("class_label_feature.ClassLabel")
        assert entry["classLabel"] == {"numClasses": str(len(labels))}
        assert json.loads(entry["description"].split(": ", 1)[1]) == labels
    for name in set(plain) - set(vocabularies):
        assert tfds[name]["pythonClassName"].endswith("tensor_feature.Tensor")
    document = croissant(manifest)
    sets = {record_set["@id"]: record_set for record_set in document["recordSet"]}
    for name, labels in vocabularies.items():
        listed = sets[f"labels/{name}"]
        assert listed["dataType"] == "sc:Enumeration"
        assert [row[f"labels/{name}/label"] for row in listed["data"]] == labels
        assert [row[f"labels/{name}/id"] for row in listed["data"]] == list(range(len(labels)))
        field = next(f for f in sets["train"]["field"] if f["name"] == name)
        assert field["references"] == {"field": {"@id": f"labels/{name}/id"}}
    assert _mlcroissant_issues(document) == (set(), set())


@SETTINGS
@given(unit=st.sampled_from(TIMESTAMP_UNITS), timezone=st.sampled_from(["UTC", "Europe/Paris"]),
       name=NAMES)
def test_a_timestamp_says_its_unit(unit, timezone, name):
    spec = {"type": "int64", "shape": [], "timestamp": {"unit": unit, "timezone": timezone}}
    manifest = _manifest({name: spec}, {}, ABOUT)
    words = {"s": "seconds", "ms": "milliseconds", "us": "microseconds",
             "ns": "nanoseconds", "days": "days"}[unit]
    described = features_json(manifest)["featuresDict"]["features"][name]["description"]
    assert f"{words} since 1970-01-01T00:00:00Z" in described and timezone in described
    field = croissant(manifest)["recordSet"][0]["field"][0]
    assert f"{words} since 1970-01-01T00:00:00Z" in field["description"]
    assert _mlcroissant_issues(croissant(manifest)) == (set(), set())


@SETTINGS
@given(names=st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1,
                              max_size=10), min_size=1, max_size=5, unique=True),
       labelled=st.data())
def test_croissant_validates_whatever_the_feature_names(names, labelled):
    vocabularies = {name: ["a", "b"] for name in names if labelled.draw(st.booleans())}
    manifest = _manifest({name: {"type": "int64", "shape": []} for name in names},
                         vocabularies, ABOUT)
    document = croissant(manifest)
    assert _mlcroissant_issues(document) == (set(), set())
    fields = document["recordSet"][0]["field"]
    assert [field["name"] for field in fields] == names
    assert [field["source"]["extract"]["column"] for field in fields] == names
    ids = [field["@id"] for field in fields]
    assert len(set(ids)) == len(ids)


@SETTINGS
@given(first=st.fixed_dictionaries({}, optional={"description": TEXT, "license": TEXT,
                                                 "citation": TEXT}),
       second=st.fixed_dictionaries({}, optional={"description": TEXT, "license": TEXT,
                                                  "citation": TEXT}))
def test_the_dataset_section_leaves_the_build_cache_valid(first, second):
    from recordforge.pipelines.cache import encoding_key

    def key(about):
        config = load_config({"name": "things", "version": "1.0.0",
                              "source": {"type": "csv", "path": str(FLIGHTS_CSV)},
                              "features": {"flight_id": {"type": "int64"}},
                              "output": {"path": OUT},
                              "dataset": about})
        return encoding_key(config, {})

    assert key(first) == key(second)
