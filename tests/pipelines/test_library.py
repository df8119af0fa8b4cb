"""recordforge as a library, called as a user calls it: `import recordforge`,
`build`, `WriteDataset` in a user's pipeline (DirectRunner and Dask),
`ReadDataset`, the README's snippet, the examples, and the descriptions
every version carries (Croissant checked by mlcroissant, TFDS metadata,
`recordforge.tf`)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import pathlib
import random
import re
import subprocess
import sys

import apache_beam as beam
import pytest
import yaml
from apache_beam.testing.util import assert_that, equal_to

import recordforge
from recordforge.pipelines import build as build_cli
from recordforge.pipelines.publish import verify

REPO = pathlib.Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "configs" / "examples" / "flights.yaml"
FLIGHTS_CSV = REPO / "examples" / "tables" / "flights.csv"
FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"
ROWS_OF_NOTES = 14000


def _shard_digests(version_dir: pathlib.Path) -> dict[str, str]:
    files = sorted(p for p in version_dir.glob("*.tfrecord*") if p.suffix != ".index")
    assert files, f"no shards in {version_dir}"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _flights_config() -> dict:
    """The flights config as a dict, without its source (the rows are given)."""
    config = yaml.safe_load(FLIGHTS.read_text())
    del config["source"]
    return config


def _read_back(path: pathlib.Path, tmp_path: pathlib.Path, split: str | None = None) -> list:
    """The rows `ReadDataset` gives, through text files (a pipeline's
    functions are pickled, so they cannot append to a list of the test)."""
    prefix = tmp_path / "read-back" / "rows"
    with beam.Pipeline() as p:
        _ = (p | recordforge.ReadDataset(str(path), split=split)
             | beam.Map(json.dumps, sort_keys=True) | beam.io.WriteToText(str(prefix)))
    return [json.loads(line) for file in sorted(prefix.parent.glob("rows*"))
            for line in file.read_text().splitlines()]


def _parse_csv_line(line: str, header: list[str]) -> dict:
    return dict(zip(header, next(csv.reader([line]))))


@pytest.fixture(scope="module")
def cli_flights(tmp_path_factory):
    """The flights sample built by the command line, as the reference."""
    out = tmp_path_factory.mktemp("cli") / "flights"
    assert build_cli.run([str(FLIGHTS), "--output", str(out), "--",
                          "--direct_running_mode=in_memory"]) == 0
    return out / "1.0.0"


# --- import recordforge -----------------------------------------------------------

def test_import_recordforge_exposes_the_api_without_importing_beam():
    code = ("import sys, recordforge; print('apache_beam' in sys.modules); "
            "print(sorted(recordforge.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "False"
    for name in ("build", "load_config", "WriteDataset", "ReadDataset", "BuildResult",
                 "ConfigError", "VersionExistsError", "BuildFailed", "verify"):
        assert name in out[1]
    for name in recordforge.__all__:
        value = getattr(recordforge, name)
        assert name == "__version__" or value.__doc__, f"recordforge.{name} has no docstring"
    assert (REPO / "py.typed").exists()
    with pytest.raises(AttributeError):
        recordforge.no_such_name  # noqa: B018


# --- build() ----------------------------------------------------------------------

def test_load_config_takes_a_path_a_mapping_or_a_loaded_config(monkeypatch):
    monkeypatch.chdir(REPO)  # the flights source path is relative
    loaded = recordforge.load_config(str(FLIGHTS))
    assert loaded.source.type == "csv" and loaded.output.shard_size == 10**6
    assert recordforge.load_config(loaded) is loaded
    again = recordforge.load_config(loaded, {"output.shard_size": "2MB",
                                             "splits": {"train": 0.5, "test": 0.5}})
    assert again.output.shard_size == 2 * 10**6 and again.splits == (("train", 0.5),
                                                                      ("test", 0.5))
    assert again.source == loaded.source and again.features == loaded.features
    as_strings = recordforge.load_config(str(FLIGHTS), ["output.shuffle=false"])
    assert as_strings.output.shuffle is False
    given = recordforge.load_config({**_flights_config(), "source": {"type": "csv",
                                                                     "path": "nowhere.csv"}},
                                    rows_given=True)
    assert given.source is None  # a pipeline's rows: the source section is not read
    with pytest.raises(recordforge.ConfigError, match="source"):
        recordforge.load_config(_flights_config())


def test_build_returns_the_published_version_and_matches_the_cli(tmp_path, cli_flights):
    result = recordforge.build(str(FLIGHTS), overrides={"output.path": str(tmp_path / "f")},
                               beam_args=["--direct_running_mode=in_memory"])
    assert result.version == "1.0.0"
    assert result.path == str(tmp_path / "f" / "1.0.0")
    assert result.splits == {"train": 272, "test": 24}
    assert result.num_examples == 296 and result.dead_letter_rows == 4
    assert result.manifest["num_input_rows"] == 300 and result.latest_updated
    assert _shard_digests(tmp_path / "f" / "1.0.0") == _shard_digests(cli_flights)

    with pytest.raises(recordforge.VersionExistsError, match="already published"):
        recordforge.build(str(FLIGHTS), output=str(tmp_path / "f"))


def test_build_raises_typed_errors_with_the_cli_messages(tmp_path, capsys):
    with pytest.raises(recordforge.ConfigError) as caught:
        recordforge.build(str(FLIGHTS), overrides={"output.shard_size": "1KB"},
                          output=str(tmp_path / "a"))
    assert caught.value.key == "output.shard_size"
    with pytest.raises(recordforge.BuildFailed, match="error budget|max_errors") as failed:
        recordforge.build(_flights_config() | {"source": {"type": "csv",
                                                          "path": str(FLIGHTS_CSV)}},
                          overrides={"dead_letter.max_errors": 1},
                          output=str(tmp_path / "b"))
    assert not (tmp_path / "b" / "1.0.0").exists() and not (tmp_path / "b" / "LATEST").exists()
    # The command line prints the same message after its prefix, exit 1.
    assert build_cli.run([str(FLIGHTS), "--output", str(tmp_path / "c"),
                          "--set", "dead_letter.max_errors=1"]) == 1
    assert str(failed.value).splitlines()[0] in capsys.readouterr().err


# --- WriteDataset -----------------------------------------------------------------

def test_write_dataset_from_a_text_source_gives_the_cli_bytes(tmp_path, cli_flights):
    """A user's pipeline with Beam's own text reader and CSV parsing."""
    header = FLIGHTS_CSV.read_text().splitlines()[0].split(",")
    out = tmp_path / "flights"
    with beam.Pipeline() as p:
        rows = (p | beam.io.ReadFromText(str(FLIGHTS_CSV), skip_header_lines=1)
                | beam.Map(_parse_csv_line, header))
        written = rows | recordforge.WriteDataset(_flights_config(), **{"output.path": str(out)})
        assert_that(written.dead_letters | beam.Map(lambda d: d["stage"]),
                    equal_to(["check"] * 4), label="DeadLetters")
        assert_that(written.published | beam.Map(lambda s: (s["version"], s["splits"])),
                    equal_to([("1.0.0", {"train": 272, "test": 24})]), label="Published")
    # Published when the pipeline completed, with no call after it.
    assert (out / "LATEST").read_text() == "1.0.0\n"
    assert _shard_digests(out / "1.0.0") == _shard_digests(cli_flights)
    assert verify.verify_dataset(str(out / "1.0.0"), deep=True).ok
    assert list((out / ".staging").iterdir()) == []


def _notes(count: int) -> list[dict]:
    """Rows of words and hex that gzip shrinks about 2x (some more, some less)."""
    rng = random.Random(11)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    return [{"id": i, "text": " ".join(rng.choice(words) for _ in range(rng.randint(5, 60))),
             "blob": rng.randbytes(rng.randint(1, 100)).hex()} for i in range(count)]


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "key order"])
@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_write_dataset_gives_the_cli_bytes_in_every_output_mode(tmp_path, shuffle, compression):
    """Several shards in each mode. Shuffled gzip: a split's shard count
    comes from a ratio sample; when a build sized the sample to its input
    and `WriteDataset`, which cannot know its input, assumed 1 GiB, these
    rows gave 2 shards through the command line and 3 through
    `WriteDataset`."""
    rows = _notes(ROWS_OF_NOTES)
    table = tmp_path / "notes.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {"name": "notes", "version": "1.0.0", "key": "id", "splits": {"train": 1.0},
              "features": {"id": {"type": "int64"}, "text": {"type": "string"},
                           "blob": {"type": "string"}},
              "output": {"compression": compression, "shard_size": "1MB", "shuffle": shuffle}}
    built = recordforge.build({**config, "source": {"type": "jsonl", "path": str(table)},
                               "output": {**config["output"], "path": str(tmp_path / "cli")}},
                              beam_args=["--direct_running_mode=in_memory"])
    with beam.Pipeline() as p:
        _ = p | beam.Create(rows) | recordforge.WriteDataset(
            config, **{"output.path": str(tmp_path / "lib")})
    cli = _shard_digests(tmp_path / "cli" / "1.0.0")
    assert len(cli) > 1 and built.splits == {"train": len(rows)}
    assert _shard_digests(tmp_path / "lib" / "1.0.0") == cli


def test_write_dataset_of_created_dicts_and_a_non_mapping(tmp_path):
    rows = [{"id": i, "score": i / 4, "tag": f"t{i % 3}"} for i in range(40)] + ["oops"]
    config = {"name": "scores", "version": "2.0.0", "key": "id",
              "features": {"id": {"type": "int64"}, "score": {"type": "float", "max": 9.4},
                           "tag": {"type": "string", "values": ["t0", "t1", "t2"]}},
              "dead_letter": {"max_error_rate": 0.2}}
    out = tmp_path / "scores"
    with beam.Pipeline() as p:
        written = p | beam.Create(rows) | recordforge.WriteDataset(
            config, **{"output.path": str(out), "output.compression": "gzip"})
        assert_that(written.dead_letters | beam.Map(lambda d: (d["reason"], d["row"])),
                    equal_to([("not_a_mapping", None), ("out_of_range", None),
                              ("out_of_range", None)]))
    manifest = json.loads((out / "2.0.0" / "manifest.json").read_text())
    assert manifest["num_input_rows"] == 41 and manifest["dead_letter"]["num_rows"] == 3
    assert manifest["tool"]["runner"] == "DirectRunner"
    assert manifest["compression"] == "GZIP" and manifest["config"]["source"] is None
    # gzip output: TFDS cannot read it, so of the descriptions only Croissant's is written.
    assert [f["file"] for f in manifest["files"]] == [
        "croissant.json", "drift.json", "report.html", "stats.json"]
    back = _read_back(out, tmp_path)
    assert sorted(row["id"] for row in back) == list(range(38))
    row = next(row for row in back if row["id"] == 6)
    assert row == {"id": 6, "score": 1.5, "tag": "t0"}


def test_write_dataset_over_the_error_budget_fails_and_publishes_nothing(tmp_path):
    config = {"name": "bad", "version": "1.0.0", "features": {"n": {"type": "int64", "max": 5}},
              "output": {"path": str(tmp_path / "bad")}}
    with pytest.raises(Exception, match="error budget|dead-letter rate|max_error_rate") as caught:
        with beam.Pipeline() as p:
            _ = p | beam.Create([{"n": n} for n in range(20)]) | recordforge.WriteDataset(config)
    assert "nothing was published" in str(caught.value) or "exceed" in str(caught.value)
    assert not (tmp_path / "bad" / "1.0.0").exists()
    assert not (tmp_path / "bad" / "LATEST").exists()
    assert list((tmp_path / "bad" / ".staging").iterdir()) == []


def test_write_dataset_refuses_a_bad_config_before_the_pipeline_runs(tmp_path):
    with pytest.raises(recordforge.ConfigError) as caught:
        recordforge.WriteDataset(_flights_config(), **{"output.path": str(tmp_path),
                                                       "output.shufle": True})
    assert caught.value.key == "output.shufle"
    config = _flights_config()
    config["features"]["carrier_id"]["vocabulary"] = "auto"
    with pytest.raises(recordforge.ConfigError, match="list the values"):
        recordforge.WriteDataset(config, **{"output.path": str(tmp_path)})
    # A key sample must hold rows like the input's, checked before any run.
    with pytest.raises(TypeError, match="key_sample row 2 is a str, not a mapping"):
        recordforge.WriteDataset(_flights_config(), key_sample=iter([{"flight_id": "1"}, "2"]),
                                 **{"output.path": str(tmp_path)})


def test_publish_step_run_again_after_it_committed_returns_the_same_summary(tmp_path):
    """A runner retrying the last step after it published: nothing changes."""
    from recordforge.pipelines.write_dataset import publish_staged

    config = {"name": "tiny", "version": "1.0.0", "features": {"n": {"type": "int64"}},
              "output": {"path": str(tmp_path / "t")}}
    write = recordforge.WriteDataset(config)
    with beam.Pipeline() as p:
        _ = p | beam.Create([{"n": n} for n in range(10)]) | write
    manifest_path = tmp_path / "t" / "1.0.0" / "manifest.json"
    before = manifest_path.read_bytes()
    manifest = json.loads(before)
    # What the step was handed: the gathered shard metadata.
    parts = (None, [("shard", {**shard, "split": name}) for name, split in
                    manifest["splits"].items() for shard in split["shards"]])
    again = publish_staged(parts, write._job)
    assert again["version"] == "1.0.0" and again["num_examples"] == 10
    assert manifest_path.read_bytes() == before
    # Not this run's shards: the retry refuses to call it published.
    other = (None, [("shard", {"file": "train-00000-of-00001.tfrecord", "sha256": "0" * 64})])
    with pytest.raises(recordforge.BuildFailed, match="already ended without publishing"):
        publish_staged(other, write._job)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["shuffled", "key order with a key sample"])
def test_write_dataset_on_the_dask_runner_gives_the_cli_bytes(tmp_path, cli_flights, order):
    """Shuffled, and key-ordered with a key sample: bounds known before the
    run spare the rows the lane join (no JoinPlan step) and change no byte."""
    distributed = pytest.importorskip("dask.distributed")
    from apache_beam.options.pipeline_options import PipelineOptions

    header = FLIGHTS_CSV.read_text().splitlines()[0].split(",")
    rows = [dict(zip(header, r)) for r in csv.reader(io.StringIO(FLIGHTS_CSV.read_text()))][1:]
    out = tmp_path / "flights"
    settings, write_options = {"output.path": str(out)}, {}
    reference = cli_flights
    if order != "shuffled":
        settings["output.shuffle"] = False
        write_options["key_sample"] = iter(rows[::3])
        assert build_cli.run([str(FLIGHTS), "--output", str(tmp_path / "cli"), "--set",
                              "output.shuffle=false", "--",
                              "--direct_running_mode=in_memory"]) == 0
        reference = tmp_path / "cli" / "1.0.0"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        options = PipelineOptions(["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                                   f"--dask_client_address={cluster.scheduler_address}"])
        pipeline = beam.Pipeline(options=options)
        _ = pipeline | beam.Create(rows) | recordforge.WriteDataset(
            _flights_config(), **write_options, **settings)
        steps = [transform.unique_name
                 for transform in pipeline.to_runner_api().components.transforms.values()]
        assert any(step.endswith("/Exchange/Pack") for step in steps)
        assert not any(step.endswith("/Exchange/JoinPlan") for step in steps)
        result = pipeline.run()
        try:
            result.wait_until_finish()
        finally:
            result.client.close()  # the runner's own client to the cluster
    assert _shard_digests(out / "1.0.0") == _shard_digests(reference)
    manifest = json.loads((out / "1.0.0" / "manifest.json").read_text())
    assert manifest["tool"]["runner"] == "DaskRunner"


# --- ReadDataset ------------------------------------------------------------------

def test_read_dataset_gives_the_rows_and_checks_checksums(tmp_path, cli_flights):
    import shutil

    version = tmp_path / "1.0.0"
    shutil.copytree(cli_flights, version)
    (tmp_path / "LATEST").write_text("1.0.0\n")
    got = _read_back(tmp_path, tmp_path, split="test")
    assert len(got) == 24
    good = {row["flight_id"]: row for row in csv.DictReader(FLIGHTS_CSV.open())}
    for row in got:
        source = good[str(row["flight_id"])]
        assert row["carrier"] == source["carrier"] and row["date"] == source["date"]
        assert row["dep_delay_min"] == ([] if source["dep_delay_min"] == "" else
                                        [pytest.approx(float(source["dep_delay_min"]))])
    # One flipped byte in a shard: the read fails naming the file, before any row.
    shard = version / "test-00000-of-00001.tfrecord"
    data = bytearray(shard.read_bytes())
    data[100] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match="test-00000-of-00001.tfrecord.*sha256"):
        with beam.Pipeline() as p:
            _ = p | recordforge.ReadDataset(str(version), split="test")
    with pytest.raises(ValueError, match="no split 'validation'"):
        with beam.Pipeline() as p:
            _ = p | recordforge.ReadDataset(str(version), split="validation")


# --- descriptions for other readers -----------------------------------------------

def test_every_description_is_in_the_manifest_and_sha256sums(cli_flights):
    manifest = json.loads((cli_flights / "manifest.json").read_text())
    listed = {f["file"]: f for f in manifest["files"]}
    assert set(listed) == {"croissant.json", "dataset_info.json", "features.json",
                           "drift.json", "report.html", "stats.json"}
    sums = dict(line.split("  ")[::-1] for line in
                (cli_flights / "SHA256SUMS").read_text().splitlines())
    for name, entry in listed.items():
        data = (cli_flights / name).read_bytes()
        assert entry["num_bytes"] == len(data)
        assert entry["sha256"] == sums[name] == hashlib.sha256(data).hexdigest()


def test_verify_finds_a_changed_description(cli_flights, tmp_path):
    import shutil

    version = tmp_path / "1.0.0"
    shutil.copytree(cli_flights, version)
    croissant = version / "croissant.json"
    croissant.write_text(croissant.read_text().replace("flights", "flightz", 1))
    report = recordforge.verify(str(version))
    assert not report.ok and any("croissant.json" in str(p) for p in report.problems)
    # SHA256SUMS rewritten to match: the manifest's own list still disagrees.
    sums = version / "SHA256SUMS"
    digest = hashlib.sha256(croissant.read_bytes()).hexdigest()
    sums.write_text(re.sub(r"^\w+  croissant.json$", f"{digest}  croissant.json",
                           sums.read_text(), flags=re.M))
    report = recordforge.verify(str(version))
    assert [str(p) for p in report.problems if "croissant" in str(p)] == [
        next(str(p) for p in report.problems if "manifest says" in str(p))]
    croissant.unlink()
    report = recordforge.verify(str(version))
    assert any("croissant.json" in str(p) and "missing" in str(p) for p in report.problems)


def test_croissant_passes_mlcroissant_validation(cli_flights):
    mlc = pytest.importorskip("mlcroissant")
    dataset = mlc.Dataset(jsonld=str(cli_flights / "croissant.json"))
    metadata = dataset.metadata
    assert metadata.ctx.is_v1_1()
    assert not metadata.ctx.issues.errors
    assert metadata.name == "flights" and metadata.version == "1.0.0"
    manifest = json.loads((cli_flights / "manifest.json").read_text())
    files = {d.name: d for d in metadata.distribution if isinstance(d, mlc.FileObject)}
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            assert files[shard["file"]].sha256 == shard["sha256"]
            assert files[shard["file"]].content_size == f"{shard['num_bytes']} B"
    fields = {f.name: f for f in metadata.record_sets[0].fields}
    assert set(fields) == set(manifest["features"])
    assert str(fields["flight_id"].data_types[0]).endswith("Int64")
    assert str(fields["dep_delay_min"].data_types[0]).endswith("Float32")
    assert fields["dep_delay_min"].is_array


def test_tfds_metadata_names_every_shard_and_feature(cli_flights):
    """What `tfds.builder_from_directory` reads: checked here against the
    manifest; loaded by TFDS itself in the tests below when it is installed."""
    info = json.loads((cli_flights / "dataset_info.json").read_text())
    features = json.loads((cli_flights / "features.json").read_text())
    manifest = json.loads((cli_flights / "manifest.json").read_text())
    assert info["fileFormat"] == "tfrecord" and info["version"] == "1.0.0"
    for split in info["splits"]:
        template = split["filepathTemplate"]
        shards = manifest["splits"][split["name"]]["shards"]
        names = [template.replace("{SPLIT}", split["name"]).replace("{FILEFORMAT}", "tfrecord")
                 .replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{len(shards):05d}")
                 for i in range(len(shards))]
        assert names == [s["file"] for s in shards]
        assert split["shardLengths"] == [str(s["num_examples"]) for s in shards]
    tfds_features = features["featuresDict"]["features"]
    assert set(tfds_features) == set(manifest["features"])
    assert tfds_features["dep_delay_min"]["tensor"] == {
        "shape": {"dimensions": ["-1"]}, "dtype": "float32", "encoding": "none"}
    assert tfds_features["carrier"]["tensor"]["dtype"] == "string"


_TF_READ = """
import json, sys
import tensorflow_datasets as tfds
import recordforge.tf as rtf

out = {}
for version_dir in sys.argv[1:]:
    builder = tfds.builder_from_directory(version_dir)
    splits = {}
    for split in builder.info.splits:
        examples = list(builder.as_dataset(split=split))
        parsed = list(rtf.dataset(version_dir, split))
        first = examples[0]
        splits[split] = {"tfds": len(examples), "tf": len(parsed),
                         "dtypes": {k: [v.dtype.name, list(v.shape)] for k, v in first.items()}}
    out[version_dir] = splits
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def flowers_plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("flowers") / "flowers"
    assert build_cli.run([str(FLOWERS), "--output", str(out), "--set",
                          "output.compression=none", "--",
                          "--direct_running_mode=in_memory"]) == 0
    return out / "1.0.0"


@pytest.mark.slow
def test_tfds_and_tensorflow_read_the_bundled_sample_and_a_table(cli_flights, flowers_plain,
                                                                  tmp_path):
    """TFDS itself (`builder_from_directory`) and `recordforge.tf`, in a Python
    that has TensorFlow: this one, or the one RECORDFORGE_TF_PYTHON names
    (TensorFlow is never a dependency of recordforge)."""
    import os

    python = os.environ.get("RECORDFORGE_TF_PYTHON")
    if python is None:
        pytest.importorskip("tensorflow_datasets")
        python = sys.executable
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "recordforge").symlink_to(REPO)
    run = subprocess.run([python, "-c", _TF_READ, str(cli_flights), str(flowers_plain)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(shim),
                              "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    flights, flowers = got[str(cli_flights)], got[str(flowers_plain)]
    assert {s: (v["tfds"], v["tf"]) for s, v in flights.items()} == {
        "train": (272, 272), "test": (24, 24)}
    dtypes = flights["train"]["dtypes"]
    assert dtypes["flight_id"] == ["int64", []] and dtypes["carrier"] == ["string", []]
    assert dtypes["dep_delay_min"][0] == "float32" and len(dtypes["dep_delay_min"][1]) == 1
    manifest = json.loads((flowers_plain / "manifest.json").read_text())
    assert {s: v["tfds"] for s, v in flowers.items()} == {
        s: v["num_examples"] for s, v in manifest["splits"].items()}
    image = flowers["train"]["dtypes"]["image/encoded"]
    assert image[0] == "uint8" and image[1][2] == 3  # decoded by TFDS


def test_no_tfds_metadata_for_gzip_output(tmp_path):
    from recordforge.pipelines.publish.tfds_metadata import tfds_files

    manifest = {"compression": "GZIP"}
    assert tfds_files(manifest) == {}


def test_recordforge_tf_parses_the_flights_version(cli_flights):
    pytest.importorskip("tensorflow")
    import recordforge.tf as rtf

    spec = rtf.feature_spec(str(cli_flights))
    assert type(spec["dep_delay_min"]).__name__ == "VarLenFeature"
    rows = list(rtf.dataset(str(cli_flights), "test"))
    assert len(rows) == 24


def test_recordforge_tf_without_tensorflow_says_how_to_install_it(cli_flights):
    try:
        import tensorflow  # noqa: F401
        pytest.skip("TensorFlow is installed")
    except ImportError:
        pass
    import recordforge.tf as rtf

    with pytest.raises(ImportError, match=r"recordforge\[tf\]"):
        rtf.feature_spec(str(cli_flights))


# --- README and examples ----------------------------------------------------------

def test_readme_python_snippet_runs(tmp_path):
    import os
    import shutil

    readme = (REPO / "README.md").read_text()
    section = readme.split("## Use it from Python/Beam", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    for relative in ("configs/examples/flights.yaml", "examples/tables/flights.csv"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    run = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "flights 1.0.0 {'train': 272, 'test': 24}" in run.stdout
    assert "rows: 100" in run.stdout
    assert (tmp_path / "out" / "scores" / "LATEST").read_text() == "1.0.0\n"


def test_parquet_example_publishes_with_writedataset(tmp_path, cli_flights):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    header = FLIGHTS_CSV.read_text().splitlines()[0].split(",")
    rows = [dict(zip(header, r)) for r in csv.reader(io.StringIO(FLIGHTS_CSV.read_text()))][1:]
    rows = [row for row in rows if len(row) == len(header)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "flights.parquet")
    run = subprocess.run([sys.executable, str(REPO / "examples" / "parquet_to_dataset.py"),
                          str(tmp_path / "flights.parquet"), str(tmp_path / "out")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "dead letter: " in run.stdout
    assert _shard_digests(tmp_path / "out" / "1.0.0") == _shard_digests(cli_flights)
