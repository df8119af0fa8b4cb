"""Config loading: every mistake is a ConfigError naming its key, before any run."""

from __future__ import annotations

import copy
import json
import os
import warnings

import pytest
import yaml

from recordforge.pipelines import config as config_lib
from recordforge.pipelines.config import (
    ConfigWarning, apply_override, config_from_dict, load_config,
    load_runner_profile, parse_size, runner_profile_names)
from recordforge.schemas.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A working directory holding a CSV table and an image folder."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("id,name,score\n1,a,0.5\n2,b,0.25\n")
    (tmp_path / "imgs" / "cats").mkdir(parents=True)
    from PIL import Image
    Image.new("RGB", (4, 3), (200, 10, 10)).save(tmp_path / "imgs" / "cats" / "c.png")
    (tmp_path / "labels.csv").write_text("file,label\ncats/c.png,cats\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


TABLE = {
    "name": "tbl",
    "version": "1.0.0",
    "source": {"type": "csv", "path": "data/t.csv"},
    "features": {"id": {"type": "int64"}, "score": {"type": "float"}},
    "splits": {"train": 0.75, "test": 0.25},
    "key": "id",
    "output": {"path": "out/tbl", "compression": "gzip", "shard_size": "2MB"},
    "dead_letter": {"max_error_rate": 0.1},
}

IMAGES = {
    "name": "img",
    "version": "{date}",
    "source": {"type": "images", "path": "imgs", "image": {"decode": "full",
                                                          "resize": {"max_side": 32}}},
    "features": {"image/encoded": {"type": "bytes", "from": "image"},
                 "label": {"type": "int64", "vocabulary": "auto"}},
    "key": "path",
    "output": {"path": "out/img"},
}


def _with(base: dict, path: str, value=None, *, delete: bool = False) -> dict:
    data = copy.deepcopy(base)
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[part]
    if delete:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return data


# (case id, config, key the error must name, words the message must hold)
BROKEN = [
    ("unknown-top-key", _with(TABLE, "dead_letters", {"max_error_rate": 0.1}),
     "dead_letters", "did you mean `dead_letter`"),
    ("unknown-output-key", _with(TABLE, "output.shard_sise", "1MB"),
     "output.shard_sise", "did you mean `shard_size`"),
    ("missing-name", _with(TABLE, "name", delete=True), "name", "missing"),
    ("bad-name", _with(TABLE, "name", "my data"), "name", "not a valid dataset name"),
    ("version-number", _with(TABLE, "version", 1.0), "version", "quote it"),
    ("version-unquoted-date", _with(TABLE, "version", {"date": None}), "version", "quote it"),
    ("version-placeholder", _with(TABLE, "version", "v{build}"), "version", "placeholder"),
    ("version-slash", _with(TABLE, "version", "a/b"), "version", "separator"),
    ("bad-source-type", _with(TABLE, "source.type", "cvs"), "source.type", "did you mean `csv`"),
    ("missing-source-path", _with(TABLE, "source.path", "data/nope.csv"), "source.path",
     "does not exist"),
    ("glob-matches-nothing", _with(TABLE, "source.path", "data/*.parquet"), "source.path",
     "matches no files"),
    ("labels-on-table", _with(TABLE, "source.labels", "directory"), "source.labels",
     "image sources only"),
    ("feature-unknown-column", _with(TABLE, "features.nme", {"type": "string"}),
     "features.nme.from", "did you mean `name`"),
    ("feature-bad-type", _with(TABLE, "features.id", {"type": "integer32"}),
     "features.id.type", "unknown type"),
    ("key-unknown-column", _with(TABLE, "key", "ident"), "key", "no column 'ident'"),
    ("splits-sum", _with(TABLE, "splits", {"train": 0.8, "test": 0.1}), "splits", "sum to 1"),
    ("splits-negative", _with(TABLE, "splits", {"train": 1.2, "test": -0.2}), "splits.test",
     "greater than 0"),
    ("split-name", _with(TABLE, "splits", {"Train": 0.5, "test": 0.5}), "splits.Train",
     "lower-case"),
    ("split-name-bool", _with(TABLE, "splits", {False: 0.5, "test": 0.5}), "splits.False",
     "quote it"),
    ("bad-size-unit", _with(TABLE, "output.shard_size", "256XB"), "output.shard_size",
     "unknown unit"),
    ("size-not-a-size", _with(TABLE, "output.shard_size", "big"), "output.shard_size",
     "not a size"),
    ("shard-too-small", _with(TABLE, "output.shard_size", "999KB"), "output.shard_size",
     "minimum of 1MB"),
    ("compression", _with(TABLE, "output.compression", "zlib"), "output.compression",
     "gzip or none"),
    ("shuffle-not-bool", _with(TABLE, "output.shuffle", "maybe"), "output.shuffle",
     "true or false"),
    ("missing-output-path", _with(TABLE, "output.path", delete=True), "output.path", "missing"),
    ("error-rate-range", _with(TABLE, "dead_letter.max_error_rate", 1.5),
     "dead_letter.max_error_rate", "between 0 and 1"),
    ("max-errors-negative", _with(TABLE, "dead_letter.max_errors", -1),
     "dead_letter.max_errors", "non-negative"),
    ("image-on-table", _with(TABLE, "source.image", {"decode": "full"}), "source.image",
     "image sources only"),
    ("image-decode", _with(IMAGES, "source.image.decode", "pixels"), "source.image.decode",
     "header"),
    ("image-min-over-max", _with(IMAGES, "source.image.min_size", [10000, 10]),
     "source.image.min_size", "larger than max_size"),
    ("image-resize-both", _with(IMAGES, "source.image.resize", {"max_side": 3, "size": [2, 2]}),
     "source.image.resize", "exactly one"),
    ("image-encode-quality", _with(IMAGES, "source.image.encode", {"format": "JPEG",
                                                                  "quality": 101}),
     "source.image.encode.quality", "1 to 100"),
    ("image-encode-format", _with(IMAGES, "source.image.encode", {"format": "BMP"}),
     "source.image.encode.format", "not supported"),
    ("images-path-is-file", _with(IMAGES, "source.path", "data/t.csv"), "source.path",
     "is a file"),
    ("image-feature-unknown-column", _with(IMAGES, "features.label.from", "class"),
     "features.label.from", "no column 'class'"),
    ("image-key-unknown", _with(IMAGES, "key", "filename"), "key", "no column"),
    ("labels-table-missing", _with(IMAGES, "source.labels", "nope.csv"), "source.labels",
     "does not exist"),
    ("image-unknown-key", _with(IMAGES, "source.image.max_sise", [1, 1]),
     "source.image.max_sise", "did you mean `max_size`"),
    ("extensions-type", _with(TABLE, "source.extensions", [3]), "source.extensions",
     "not a file suffix"),
    ("features-missing", _with(TABLE, "features", delete=True), "features", "non-empty mapping"),
    ("source-not-mapping", _with(TABLE, "source", "data/t.csv"), "source", "must be a mapping"),
]


@pytest.mark.parametrize("case,data,key,words", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_config_names_the_key(workdir, case, data, key, words):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.key == key, str(info.value)
    assert words in str(info.value)
    assert str(info.value).startswith(f"{key}: ")


def test_broken_configs_fail_the_same_way_from_a_yaml_file(workdir):
    for case, data, key, _ in BROKEN[:20]:
        path = workdir / f"{case}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        with pytest.raises(ConfigError) as info:
            load_config(str(path))
        assert info.value.key == key, (case, str(info.value))


def test_table_config_is_parsed_into_frozen_dataclasses(workdir):
    cfg = config_from_dict(TABLE)
    assert cfg.name == "tbl" and cfg.version == "1.0.0"
    assert cfg.source.type == "csv" and cfg.source.path == str(workdir / "data" / "t.csv")
    assert cfg.source.extensions == (".csv",) and cfg.source.labels is None
    assert cfg.source.image is None
    assert [spec.name for spec in cfg.features] == ["id", "score"]
    assert cfg.splits == (("train", 0.75), ("test", 0.25))
    assert cfg.split_names == ("train", "test")
    assert cfg.key == "id"
    assert cfg.output.path == str(workdir / "out" / "tbl")
    assert (cfg.output.compression, cfg.output.shard_size, cfg.output.shuffle) == \
        ("gzip", 2_000_000, True)
    assert (cfg.dead_letter.max_error_rate, cfg.dead_letter.max_errors) == (0.1, None)
    with pytest.raises(Exception):
        cfg.output.path = "elsewhere"  # frozen


def test_resolved_config_is_plain_json_with_paths_as_written(workdir):
    cfg = config_from_dict(TABLE)
    assert json.loads(json.dumps(cfg.resolved)) == cfg.resolved
    assert cfg.resolved["source"]["path"] == "data/t.csv"
    assert cfg.resolved["output"] == {"path": "out/tbl", "format": "tfrecord",
                                      "compression": "gzip", "shard_size": 2_000_000,
                                      "shuffle": True, "index": False,
                                      "shard_count_multiple": 1}
    assert cfg.resolved["splits"] == {"train": 0.75, "test": 0.25}
    assert cfg.resolved["features"] == TABLE["features"]


def test_defaults(workdir):
    data = {"name": "d", "version": "1", "source": {"type": "csv", "path": "data"},
            "features": {"id": {"type": "int64"}}, "output": {"path": "o"}}
    cfg = config_from_dict(data)
    assert cfg.splits == (("train", 1.0),)
    assert cfg.key is None
    assert cfg.output.compression == "none"
    assert cfg.output.shard_size == config_lib.DEFAULT_SHARD_SIZE == 256 * 10**6
    assert cfg.output.shuffle is True
    assert cfg.dead_letter.max_error_rate == 0.01 and cfg.dead_letter.max_errors is None


def test_image_config_builds_image_options(workdir):
    cfg = config_from_dict(IMAGES)
    image = cfg.source.image
    assert cfg.source.labels == "directory"
    assert cfg.source.extensions == (".jpg", ".jpeg", ".png")
    assert image.formats == ("JPEG", "PNG") and image.decode == "full"
    assert image.resize_max_side == 32 and image.resize_size is None
    assert image.min_size == (1, 1) and image.max_size == (8192, 8192)
    assert cfg.resolved["source"]["image"]["resize"] == {"max_side": 32}


def test_image_labels_table_and_extension_normalisation(workdir):
    data = _with(IMAGES, "source.labels", "labels.csv")
    data["source"]["extensions"] = ["PNG", ".Jpg"]
    cfg = config_from_dict(data)
    assert cfg.source.labels == str(workdir / "labels.csv")
    assert cfg.source.extensions == (".png", ".jpg")
    (workdir / "bad_labels.csv").write_text("path,class\nx,y\n")
    with pytest.raises(ConfigError) as info:
        config_from_dict(_with(IMAGES, "source.labels", "bad_labels.csv"))
    assert info.value.key == "source.labels" and "file and label" in str(info.value)


def test_remote_paths_are_not_checked_and_columns_unknown(workdir):
    data = _with(TABLE, "source.path", "gs://bucket/tables/*.csv")
    data["features"]["anything"] = {"type": "string"}
    data["key"] = "anything"
    cfg = config_from_dict(data)
    assert cfg.source.path == "gs://bucket/tables/*.csv"


def test_jsonl_columns_are_not_knowable(workdir):
    (workdir / "data" / "rows.jsonl").write_text('{"a": 1}\n')
    data = {"name": "j", "version": "1", "source": {"type": "jsonl", "path": "data/rows.jsonl"},
            "features": {"whatever": {"type": "int64"}}, "key": "other", "output": {"path": "o"}}
    assert config_from_dict(data).key == "other"


def test_parquet_columns_come_from_the_schema(workdir):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"x": [1, 2], "y": ["a", "b"]}), workdir / "data" / "p.parquet")
    base = {"name": "p", "version": "1", "source": {"type": "parquet", "path": "data"},
            "features": {"x": {"type": "int64"}}, "output": {"path": "o"}}
    assert config_from_dict(base).source.extensions == (".parquet",)
    with pytest.raises(ConfigError) as info:
        config_from_dict(_with(base, "features.z", {"type": "int64"}))
    assert info.value.key == "features.z.from" and "x, y" in str(info.value)


def test_csv_columns_are_the_union_of_headers_in_a_directory(workdir):
    (workdir / "data" / "u.csv").write_text("id,extra\n3,x\n")
    data = _with(TABLE, "source.path", "data")
    data["features"]["extra"] = {"type": "string"}
    assert [s.name for s in config_from_dict(data).features] == ["id", "score", "extra"]


@pytest.mark.parametrize("text,expected", [
    (1_000_000, 1_000_000), ("1MB", 10**6), ("1 MiB", 2**20), ("256mb", 256 * 10**6),
    ("1.5GB", 1_500_000_000), ("2GiB", 2 * 2**30), ("512KB", 512_000), ("4096", 4096),
    ("10B", 10), (3.0e6, 3_000_000),
])
def test_sizes(text, expected):
    assert parse_size(text, "k") == expected


@pytest.mark.parametrize("text", ["256XB", "MB", "-1MB", "1,5MB", True, 1.5, "0", None, [1]])
def test_bad_sizes(text):
    with pytest.raises(ConfigError) as info:
        parse_size(text, "output.shard_size")
    assert info.value.key == "output.shard_size"


def test_huge_shards_warn_but_load(workdir):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = config_from_dict(_with(TABLE, "output.shard_size", "5GiB"))
    assert cfg.output.shard_size == 5 * 2**30
    assert any(issubclass(w.category, ConfigWarning) and "4 GiB" in str(w.message)
               for w in caught)


# --- overrides ------------------------------------------------------------------------


def test_overrides_are_yaml_values_applied_before_validation(workdir):
    cfg = config_from_dict(TABLE, overrides=[
        "output.shuffle=false", "output.shard_size=3MB", "splits={a: 0.5, b: 0.5}",
        "dead_letter.max_errors=7", "features.id.max=100", 'version="{datetime}"'])
    assert cfg.output.shuffle is False and cfg.output.shard_size == 3_000_000
    assert cfg.splits == (("a", 0.5), ("b", 0.5))
    assert cfg.dead_letter.max_errors == 7
    assert cfg.features[0].max == 100
    assert cfg.version == "{datetime}"
    assert "shuffle" not in TABLE["output"] and "max" not in TABLE["features"]["id"]  # untouched


def test_override_errors_are_config_errors(workdir):
    with pytest.raises(ConfigError) as info:
        config_from_dict(TABLE, overrides=["output.compression=brotli"])
    assert info.value.key == "output.compression"
    with pytest.raises(ConfigError) as info:
        config_from_dict(TABLE, overrides=["output.shuffle"])
    assert info.value.key == "--set"
    with pytest.raises(ConfigError) as info:
        config_from_dict(TABLE, overrides=["name.first=x"])
    assert info.value.key == "name" and "not a mapping" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_from_dict(TABLE, overrides=["output.path=[unclosed"])
    assert "invalid YAML" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_from_dict(TABLE, overrides=["version={date}"])
    assert info.value.key == "version" and "quote it" in str(info.value)


def test_override_finds_dotted_feature_names_and_creates_sections(workdir):
    data = {"features": {"img.v2": {"type": "int64"}}}
    out = apply_override(data, "features.img.v2.max=3")
    assert out == {"features": {"img.v2": {"type": "int64", "max": 3}}}
    assert apply_override({}, "dead_letter.max_errors=2") == {"dead_letter": {"max_errors": 2}}
    assert data == {"features": {"img.v2": {"type": "int64"}}}


def test_output_flag_replaces_output_path(workdir):
    cfg = config_from_dict(TABLE, output="memory://bucket/ds")
    assert cfg.output.path == "memory://bucket/ds"
    assert cfg.resolved["output"]["path"] == "memory://bucket/ds"
    data = _with(TABLE, "output", delete=True)
    assert config_from_dict(data, output="x").output.path == str(workdir / "x")


# --- files ----------------------------------------------------------------------------


def test_yaml_problems_name_the_file_and_line(workdir):
    bad = workdir / "bad.yaml"
    bad.write_text("name: x\nsource: {type: csv\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(bad))
    assert str(bad) in str(info.value) and "invalid YAML" in str(info.value)
    dup = workdir / "dup.yaml"
    dup.write_text("name: a\nversion: '1'\nname: b\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(dup))
    assert "'name' appears twice" in str(info.value) and ":3:" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(str(workdir / "missing.yaml"))
    assert "does not exist" in str(info.value)
    (workdir / "empty.yaml").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        load_config(str(workdir / "empty.yaml"))
    (workdir / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_config(str(workdir / "list.yaml"))


def test_yaml_is_loaded_safely(workdir):
    evil = workdir / "evil.yaml"
    evil.write_text("name: !!python/object/apply:os.system ['echo owned > owned.txt']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(str(evil))
    assert not (workdir / "owned.txt").exists()


@pytest.mark.parametrize("name", ["flowers", "flights"])
def test_shipped_example_configs_load(name, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = load_config(os.path.join("configs", "examples", f"{name}.yaml"))
    assert cfg.name == name
    assert cfg.output.path == os.path.join(REPO, "out", name)
    assert cfg.resolved["output"]["path"].startswith("out/")


# --- runner profiles ------------------------------------------------------------------


def test_shipped_runner_profiles():
    assert {"direct", "dataflow", "flink", "dask"} <= set(runner_profile_names())
    assert load_runner_profile("direct", environ={}) == [
        "--runner=DirectRunner", "--direct_running_mode=multi_processing",
        "--direct_num_workers=0"]
    assert load_runner_profile("direct", environ={"RECORDFORGE_WORKERS": "3"})[-1] == \
        "--direct_num_workers=3"
    env = {"GCP_PROJECT": "p1", "GCP_REGION": "europe-west1", "GCS_TEMP": "gs://b/tmp"}
    dataflow = load_runner_profile("dataflow", environ=env)
    assert "--runner=DataflowRunner" in dataflow and "--project=p1" in dataflow
    assert "--setup_file=./setup.py" in dataflow and "--temp_location=gs://b/tmp" in dataflow
    flink = load_runner_profile("flink", environ={"FLINK_MASTER": "jm:8081"})
    assert "--flink_master=jm:8081" in flink and "--runner=FlinkRunner" in flink
    # An unset optional variable drops the flag, so Dask starts a LocalCluster.
    dask = load_runner_profile("dask", environ={})
    assert not any(a.startswith("--dask_client_address") for a in dask)
    assert "--dask_client_address=tcp://s:8786" in load_runner_profile(
        "dask", environ={"DASK_SCHEDULER": "tcp://s:8786"})


def test_runner_profiles_are_beam_options():
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    args = load_runner_profile("flink", environ={"FLINK_MASTER": "jm:8081"})
    options = PipelineOptions(args)
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    assert options.get_all_options()["flink_master"] == "jm:8081"


def test_runner_profile_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_runner_profile("dataflow", environ={})
    assert info.value.key == "args[1]" and "GCP_PROJECT" in str(info.value)
    with pytest.raises(ConfigError, match="unknown runner profile"):
        load_runner_profile("nope")
    custom = tmp_path / "mine.yaml"
    custom.write_text("args: [--runner=DirectRunner, direct_num_workers=2]\n")
    with pytest.raises(ConfigError) as info:
        load_runner_profile(str(custom))
    assert info.value.key == "args[1]"
    custom.write_text("description: x\nargs: ['--runner=${RUNNER:-DirectRunner}']\n")
    assert load_runner_profile(str(custom), environ={}) == ["--runner=DirectRunner"]
