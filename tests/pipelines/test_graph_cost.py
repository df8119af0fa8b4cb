"""The fixed cost of a build's graph: runner stages and steps only for the features that are on.

Every multi-input Flatten and every GroupByKey is a stage of its own on
Beam's portable runners (~10 ms each on a small build, and every ParDo
costs its construction and setup), so the graph of a small build is kept
to what it uses: no statistics steps with ``validation.statistics: false``,
no duplicate detection without ``validation.duplicates``,
no label counting without a label, no column watch without optional
features, and dead letters flattened once. Nor does a build import what
it does not use: a table build never loads Pillow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.pipelines.cache import CacheState
from recordforge.pipelines.config import config_from_dict
from recordforge.pipelines.graph import build_pipeline, known_vocabularies

REPO = Path(__file__).resolve().parents[2]

# The runner stages of a build with every optional feature off, per source
# (the stages of reading, converting, the shard writer, dead letters and the
# result), and what each feature adds at most.
# (With one local worker, Beam's default here: the read's and the shard
# writer's Reshuffles are left out, `graph.spreads`.)
BASE_STAGES = {"csv": 10, "images": 10}
# The source's step: a table's units are read and converted in one
READ_STEP = {"csv": "ReadAndConvert", "images": "Read"}
STATISTICS_STAGES = 1  # the CombinePerKey's GroupByKey
DUPLICATES_STAGES = 1  # the digest buckets' GroupByKey
# Image sources: near-duplicate images (FindNearDuplicates' bucket sizes,
# side input and buckets, and the one summary of its pairs).
NEAR_DUPLICATE_STAGES = 5


def _config(source: str, statistics: bool, label: bool, optional: bool,
            duplicates: bool = False) -> dict:
    if source == "csv":
        features = {"flight_id": {"type": "int64", "min": 0},
                    "origin": {"type": "string", "max_bytes": 3}}
        if label:
            features["carrier_id"] = {"type": "int64", "from": "carrier",
                                      "vocabulary": ["AF", "BA", "DL", "KL", "LH", "UA"]}
        if optional:
            features["dep_delay_min"] = {"type": "float", "shape": [-1], "required": False}
        data = {"source": {"type": "csv", "path": str(REPO / "examples/tables/flights.csv")},
                "key": "flight_id"}
    else:
        features = {"image/encoded": {"type": "bytes", "from": "image"}}
        if label:
            features["label"] = {"type": "int64", "from": "label", "vocabulary": "auto"}
        if optional:
            features["note"] = {"type": "string", "from": "path", "default": ""}
        data = {"source": {"type": "images", "path": str(REPO / "examples/flowers"),
                           "labels": "directory"}}
    return {"name": "cost", "version": "v1", **data, "features": features,
            "output": {"path": "/nonexistent/out"},
            "validation": {"statistics": statistics, "duplicates": duplicates}}


def _graph(raw: dict) -> tuple[list[str], int]:
    """The unique names of the build's transforms and its runner stages."""
    config = config_from_dict(raw)
    pipeline = beam.Pipeline(options=PipelineOptions([]))
    build_pipeline(pipeline, config, staging_url="/nonexistent/staging",
                   vocabularies=known_vocabularies(config))
    proto = pipeline.to_runner_api()
    names = [t.unique_name for t in proto.components.transforms.values()]
    _, stages = FnApiRunner().create_stages(proto)
    return names, len(stages)


def _pardos(raw: dict, cached: bool = False) -> list[str]:
    """The unique names of the build's ParDos (each costs ~7 ms of CPU on a
    small build: Beam inspects its DoFn ~8 times, pickles and sets it up);
    cached: a table build that uses an empty build cache."""
    config = config_from_dict(raw)
    pipeline = beam.Pipeline(options=PipelineOptions([]))
    cache = CacheState("/nonexistent/cache", "key", {}, frozenset(), 0) if cached else None
    build_pipeline(pipeline, config, staging_url="/nonexistent/staging",
                   vocabularies=known_vocabularies(config), cache=cache)
    transforms = pipeline.to_runner_api().components.transforms.values()
    return [t.unique_name for t in transforms if t.spec.urn == "beam:transform:pardo:v1"]


@pytest.mark.parametrize("source", ["csv", "images"])
def test_the_result_and_the_statistics_take_no_step_of_their_own_per_part(source):
    """A part of the result is tagged and keyed for the one GroupByKey that
    gathers it in the step that makes it, and a merged statistic is made a
    part by the step that ends its merge: statistics add 3 ParDos (the
    converter's filter of its partials, the CombinePerKey's and the
    finish)."""
    off = _pardos(_config(source, statistics=False, label=True, optional=False))
    on = _pardos(_config(source, statistics=True, label=True, optional=False))
    assert not [name for name in on if name.startswith(("OneKey", "TagStatistics"))]
    assert len(on) - len(off) == 3, sorted(set(on) - set(off))
    assert _has(on, "MergeStatistics/Finish")


@pytest.mark.parametrize("source,cached", [("csv", False), ("csv", True), ("images", False)])
def test_the_outputs_only_the_result_reads_are_gathered_in_one_step(source, cached):
    """Label counts, columns seen, rows read (and with the build cache,
    the cache use) reach the result's GroupByKey from one step that keeps
    them all (`tagged.select_keyed`), not a filter and a keying step each:
    a label or a watched column adds no step, and the whole takes one step
    of a table's read (which converts its units, with the cache or
    without), or for images one of the converter and one of the read."""
    plain = _pardos(_config(source, statistics=False, label=False, optional=False), cached)
    full = _pardos(_config(source, statistics=False, label=True, optional=True), cached)
    assert sorted(plain) == sorted(full)
    gathering = [name for name in full if name.endswith(("/Gather", "/GatherParts", "RowsRead"))]
    assert sorted(gathering) == (["ReadAndConvert/Gather"] if source == "csv"
                                 else ["RowsRead", "ToExamples/GatherParts"])
    assert not [name for name in full
                if name.startswith(("TagLabelCounts", "TagColumnsSeen", "TagCacheUse"))]


@pytest.mark.parametrize("source", ["csv", "images"])
def test_the_shards_and_the_dead_letter_summary_are_tagged_by_the_steps_that_make_them(source):
    """The shard writer's last step gives each shard's metadata, and the
    dead-letter sink's the summary, already tagged and keyed for the
    result's GroupByKey (their `finish`), not through a ParDo each."""
    names = _pardos(_config(source, statistics=False, label=False, optional=False))
    assert not [name for name in names if name.startswith(("TagShards", "TagDeadLetters"))]
    assert "WriteShards/Cleanup" in names and "WriteDeadLetters/WriteParts" in names


@pytest.mark.parametrize("source", ["csv", "images"])
def test_the_shard_writer_and_the_dead_letter_sink_share_one_trigger(source):
    """The element that makes the shard writer's cleanup and the
    dead-letter summary run even with nothing to write comes from one
    Create (a runner stage and two ParDos), not one each."""
    names = _pardos(_config(source, statistics=False, label=False, optional=False))
    assert _has(names, "Trigger")
    assert not _has(names, "WriteShards/CleanupTrigger")
    assert not _has(names, "WriteDeadLetters/Marker")


def _has(names: list[str], step: str) -> bool:
    return any(name == step or name.startswith(f"{step}/") for name in names)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=st.sampled_from(["csv", "images"]), statistics=st.booleans(),
       label=st.booleans(), optional=st.booleans(), duplicates=st.booleans())
def test_a_build_has_steps_only_for_the_features_that_are_on(source, statistics, label,
                                                             optional, duplicates):
    names, stages = _graph(_config(source, statistics, label, optional, duplicates))
    # (a table's units are converted where they are read)
    converter = "ToExamples/Select" if source == "images" else "ReadAndConvert/"
    assert _has(names, "FindDuplicates") == duplicates
    assert _has(names, f"{converter}Fingerprints") == duplicates
    assert _has(names, "MergeStatistics") == statistics
    assert _has(names, f"{converter}Statistics") == statistics
    # A build's own graph hands the dead letters to the sink unflattened.
    assert not _has(names, "AllDeadLetters")
    assert _has(names, "FindNearImages") == (duplicates and source == "images")
    near = NEAR_DUPLICATE_STAGES if source == "images" else 0
    assert stages <= (BASE_STAGES[source] + STATISTICS_STAGES * statistics
                      + (DUPLICATES_STAGES + near) * duplicates), names


@pytest.mark.slow
@pytest.mark.parametrize("duplicates", [False, True])
def test_a_table_build_does_not_import_pillow(tmp_path, duplicates):
    """Pillow is loaded where an image is opened: a CSV build (with duplicate
    detection, whose config checks import the near-duplicate code, or
    without) publishes without importing it."""
    raw = _config("csv", statistics=True, label=True, optional=True, duplicates=duplicates)
    raw["output"]["path"] = str(tmp_path / "out")
    config = tmp_path / "cost.json"  # JSON is YAML
    config.write_text(json.dumps(raw))
    code = ("import sys; from recordforge.pipelines import cli; "
            f"status = cli.main(['build', {str(config)!r}, '--', "
            "'--direct_running_mode=in_memory', '--direct_num_workers=1']); "
            "print(status, 'PIL' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert run.stdout.split()[-2:] == ["0", "False"], run.stderr[-2000:]



def test_an_image_build_lists_its_directory_once_per_question(tmp_path, monkeypatch):
    """Listing 3,000 images costs ~30 ms of CPU, so a build lists its
    directory once per question: the config's checks (files there, class
    folders apart by more than case), ``vocabulary: auto``'s classes, the
    fingerprints before the run (whose sizes also choose the local running
    mode), the run's own plan, and the fingerprints after it."""
    from recordforge.pipelines import build
    from recordforge.transforms.readers import listing

    roots = []
    walk = listing._walk

    def counting(fs, root, hidden):
        roots.append(root)
        return walk(fs, root, hidden)

    monkeypatch.setattr(listing, "_walk", counting)
    raw = _config("images", statistics=False, label=True, optional=False)
    raw["output"]["path"] = str(tmp_path / "out")
    raw["dead_letter"] = {"max_error_rate": 1.0}  # the sample holds broken images on purpose
    result = build.build(raw)
    assert result.num_examples > 0
    assert len(roots) == 5, roots


def _names(raw: dict, beam_args: list[str], cache=None) -> list[str]:
    config = config_from_dict(raw)
    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    build_pipeline(pipeline, config, staging_url="/nonexistent/staging",
                   vocabularies=known_vocabularies(config), cache=cache)
    return [t.unique_name for t in pipeline.to_runner_api().components.transforms.values()]


@pytest.mark.parametrize("source", ["csv", "images"])
@pytest.mark.parametrize("beam_args, spread", [
    ([], False), (["--direct_num_workers=1", "--direct_running_mode=multi_processing"], False),
    (["--direct_num_workers=2"], True), (["--direct_num_workers=0"], True),
    (["--runner=PortableRunner"], True)])
def test_the_read_reshuffles_only_where_there_are_workers_to_spread_over(source, beam_args,
                                                                          spread):
    """A Reshuffle costs ~40 ms of CPU on a small build; with one local
    worker it spreads nothing, so the read has none."""
    names = _names(_config(source, statistics=False, label=False, optional=False), beam_args)
    reshuffles = {name.split("/")[1] for name in names
                  if name.startswith(f"{READ_STEP[source]}/Reshuffle") and name.count("/") == 1}
    expected = {"csv": {"ReshuffleFiles", "ReshuffleUnits"}, "images": {"ReshuffleBatches"}}
    assert reshuffles == (expected[source] if spread else set())


@pytest.mark.parametrize("source", ["csv", "images"])
@pytest.mark.parametrize("beam_args", [[], ["--direct_num_workers=2"]])
def test_the_read_flattens_nothing(source, beam_args):
    """The listing's dead letters and counts travel with the units through
    the plan and read steps, so the read's outputs have one origin each and
    no Flatten (a runner stage each on Beam's portable runners)."""
    config = config_from_dict(_config(source, statistics=False, label=False, optional=False))
    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    build_pipeline(pipeline, config, staging_url="/nonexistent/staging",
                   vocabularies=known_vocabularies(config))
    transforms = pipeline.to_runner_api().components.transforms.values()
    flattens = [t.unique_name for t in transforms if t.spec.urn == "beam:transform:flatten:v1"]
    assert flattens and not [name for name in flattens
                             if name.startswith(f"{READ_STEP[source]}/")], flattens


@pytest.mark.parametrize("beam_args, spread", [
    ([], False), (["--direct_num_workers=1", "--direct_running_mode=multi_processing"], False),
    (["--direct_num_workers=2"], True), (["--runner=PortableRunner"], True)])
def test_the_cached_read_reshuffles_only_where_there_are_workers_to_spread_over(beam_args,
                                                                                 spread):
    """A table build reads through the cache by default
    (`ConvertTablesWithCache`): its two Reshuffles, too, only where there
    are workers to spread the files and units over."""
    from recordforge.pipelines.cache import CacheState

    cache = CacheState(url="/nonexistent/cache", encoding_key="0" * 64, whole_files={},
                       pieces=frozenset(), num_bytes=0)
    names = _names(_config("csv", statistics=False, label=False, optional=False), beam_args,
                   cache=cache)
    assert any(name.startswith("ReadAndConvert/ConvertUnits") for name in names)
    reshuffles = {name.split("/")[1] for name in names
                  if name.startswith("ReadAndConvert/Reshuffle") and name.count("/") == 1}
    assert reshuffles == ({"ReshuffleFiles", "ReshuffleUnits"} if spread else set())


@pytest.mark.parametrize("beam_args", [[], ["--direct_num_workers=2"]])
def test_the_cached_read_flattens_nothing(beam_args):
    """As the uncached read: the listing's dead letters and counts travel
    with the files through PlanOrReuse and ConvertUnits, so the cached
    read's outputs have one origin each and no Flatten."""
    from recordforge.pipelines.cache import CacheState

    cache = CacheState(url="/nonexistent/cache", encoding_key="0" * 64, whole_files={},
                       pieces=frozenset(), num_bytes=0)
    config = config_from_dict(_config("csv", statistics=False, label=False, optional=False))
    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    build_pipeline(pipeline, config, staging_url="/nonexistent/staging",
                   vocabularies=known_vocabularies(config), cache=cache)
    transforms = pipeline.to_runner_api().components.transforms.values()
    flattens = [t.unique_name for t in transforms if t.spec.urn == "beam:transform:flatten:v1"]
    assert flattens and not [name for name in flattens if name.startswith("ReadAndConvert/")]


@pytest.mark.parametrize("source", ["csv", "images"])
@pytest.mark.parametrize("beam_args, spread", [
    ([], False), (["--direct_num_workers=1", "--direct_running_mode=multi_processing"], False),
    (["--direct_num_workers=2"], True), (["--direct_num_workers=0"], True)])
def test_the_shard_writer_reshuffles_only_where_there_are_workers_to_spread_over(
        source, beam_args, spread):
    """The file exchange's SpreadBuckets and SpreadShards (~40 ms of CPU
    each on a small build) spread the buckets and shards over several
    local workers, and are left out with one."""
    names = _names(_config(source, statistics=False, label=False, optional=False), beam_args)
    prefix = "WriteShards/FileExchange/"
    reshuffles = {name[len(prefix):] for name in names
                  if name.startswith(f"{prefix}Spread") and name.count("/") == 2}
    assert reshuffles == ({"SpreadBuckets", "SpreadShards"} if spread else set())
    assert _has(names, f"{prefix}MeasureBuckets") and _has(names, f"{prefix}WriteShardFiles")


@pytest.mark.slow
@pytest.mark.parametrize("source", ["csv", "images"])
def test_one_worker_without_the_reshuffles_writes_what_two_workers_write(tmp_path, source):
    """The same bytes whether the read reshuffles (two workers) or not
    (one): shards, dead letters, stats.json (read back by the tests of
    the publish with the real readers; here byte for byte)."""
    from recordforge.pipelines import build

    digests = []
    for workers in ("1", "2"):
        raw = _config(source, statistics=True, label=True, optional=True)
        raw["output"]["path"] = str(tmp_path / workers)
        raw["dead_letter"] = {"max_error_rate": 1.0}  # the flowers hold broken images
        result = build.build(raw, beam_args=[f"--direct_num_workers={workers}",
                                             "--direct_running_mode=multi_threading"])
        version = Path(result.path)
        files = sorted(p for p in version.rglob("*") if p.is_file() and (
            p.suffix in (".tfrecord", ".jsonl") or p.name == "stats.json"))
        assert any(p.suffix == ".tfrecord" for p in files)
        digests.append({str(p.relative_to(version)): p.read_bytes() for p in files})
    assert digests[0] == digests[1]


@pytest.mark.parametrize("beam_args", [[], ["--direct_num_workers=2"],
                                       ["--runner=PortableRunner"]])
def test_the_statistics_merge_is_one_combine_on_every_runner(beam_args):
    """Every partial, text's too, merges in one CombinePerKey whatever the
    workers (`MergingStatistics`): no tree of GroupByKeys holding them."""
    names = _names(_config("csv", statistics=True, label=False, optional=False), beam_args)
    steps = {name for name in names
             if name.startswith("MergeStatistics/") and name.count("/") == 1}
    assert steps == {"MergeStatistics/MergePerKey", "MergeStatistics/Finish"}
