"""Tests for the dead-letter sink (transforms/dead_letter_sink.py)."""

import json
import os
import random

import apache_beam as beam
import fsspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from recordforge.schemas.dead_letters import dead_letter
from recordforge.transforms.dead_letter_sink import (WriteDeadLetters, dead_letter_line,
                                                     sort_key)


def record(source, row, reason, feature="x", message="bad", **input_values):
    return dead_letter(source=source, row=row, key=None, stage="check", reason=reason,
                       feature=feature, message=message, input=input_values or {"x": row})


RECORDS = [
    record("b.csv", 7, "out_of_range"),
    record("a.csv", 12, "type_mismatch"),
    record("a.csv", 3, "type_mismatch"),
    record("a.csv", 3, "missing_value", feature="y"),
    dead_letter(source="images", row=None, key="cat/1.jpg", stage="decode",
                reason="image_truncated", feature=None, message="ends early",
                input={"path": "cat/1.jpg"}),
    record("b.csv", 1, "out_of_range", message="ünïcode ✓", x="é"),
]


def written_lines(directory):
    lines = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            lines += f.read().splitlines()
    return lines


def _save_summary(summary, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f)


def run_sink(records, directory, options=None, records_per_file=100_000, batches=1,
             summary_path=None):
    """Runs the sink; returns the summary (read back from a file: the
    pipeline's workers do not share this process's objects)."""
    with TestPipeline(options=options) as pipeline:
        source = pipeline | "Records" >> beam.Create(records)
        if batches > 1:  # other bundling: records arrive through a reshuffle
            source = source | "Reshuffle" >> beam.Reshuffle(num_buckets=batches)
        summary = source | "Sink" >> WriteDeadLetters(str(directory), records_per_file)
        assert_that(summary | "Count" >> beam.combiners.Count.Globally(), equal_to([1]),
                    label="one_summary")
        summary | "Save" >> beam.Map(_save_summary, str(summary_path))
    with open(summary_path, encoding="utf-8") as f:
        return json.load(f)


def test_writes_sorted_jsonl_and_summary(tmp_path):
    directory = tmp_path / "v1" / "dead_letter"
    expected_summary = {
        "num_rows": 6,
        "by_reason": {"image_truncated": 1, "missing_value": 1, "out_of_range": 2,
                      "type_mismatch": 2},
        "uncounted": 0,
        "files": ["dead_letter/part-00000.jsonl"],
        "samples": {"image_truncated": RECORDS[4], "missing_value": RECORDS[3],
                    "out_of_range": RECORDS[5], "type_mismatch": RECORDS[2]},
    }
    with TestPipeline() as pipeline:
        summary = (pipeline | beam.Create(RECORDS)
                   | WriteDeadLetters(str(directory)))
        assert_that(summary, equal_to([expected_summary]), label="summary")
    assert os.listdir(directory) == ["part-00000.jsonl"]
    raw = (directory / "part-00000.jsonl").read_bytes()
    assert raw.endswith(b"\n") and "ünïcode ✓".encode() in raw  # UTF-8, not \u escapes
    lines = raw.decode("utf-8").splitlines()
    parsed = [json.loads(line) for line in lines]
    # order: source, row (images without a row number first), stage, reason, ...
    assert [(r["source"], r["row"], r["reason"]) for r in parsed] == [
        ("a.csv", 3, "missing_value"), ("a.csv", 3, "type_mismatch"),
        ("a.csv", 12, "type_mismatch"), ("b.csv", 1, "out_of_range"),
        ("b.csv", 7, "out_of_range"), ("images", None, "image_truncated")]
    assert sorted(map(json.dumps, parsed)) == sorted(map(json.dumps, RECORDS))
    assert list(parsed[0]) == ["source", "row", "key", "stage", "reason", "feature", "message",
                               "input", "errors"]


def test_no_dead_letters_gives_a_summary_and_no_files(tmp_path):
    directory = tmp_path / "dead_letter"
    with TestPipeline() as pipeline:
        summary = pipeline | beam.Create([]) | WriteDeadLetters(str(directory))
        assert_that(summary, equal_to([{"num_rows": 0, "by_reason": {}, "uncounted": 0, "files": [],
                                        "samples": {}}]))
    assert not directory.exists()


def many_records(n):
    rng = random.Random(7)
    return [record(f"file-{rng.randrange(5)}.jsonl", rng.randrange(1, 50),
                   rng.choice(["type_mismatch", "out_of_range", "json_invalid"]),
                   message=f"m{i % 3}", x=i % 11) for i in range(n)]


def test_same_files_whatever_the_order_and_bundling(tmp_path):
    records = many_records(40)
    shuffled = list(records)
    random.Random(1).shuffle(shuffled)
    first = run_sink(records, tmp_path / "one" / "dead_letter", records_per_file=12,
                     summary_path=tmp_path / "one.json")
    second = run_sink(shuffled, tmp_path / "two" / "dead_letter", records_per_file=12,
                      batches=3, summary_path=tmp_path / "two.json")
    assert first == second
    summary = first
    assert summary["num_rows"] == 40
    assert sum(summary["by_reason"].values()) == 40
    assert summary["files"] == [f"dead_letter/part-{i:05d}.jsonl" for i in range(4)]
    names = sorted(os.listdir(tmp_path / "one" / "dead_letter"))
    assert ["dead_letter/" + name for name in names] == summary["files"]
    assert names == sorted(os.listdir(tmp_path / "two" / "dead_letter"))
    for name in names:
        assert ((tmp_path / "one" / "dead_letter" / name).read_bytes()
                == (tmp_path / "two" / "dead_letter" / name).read_bytes())
    lines = written_lines(tmp_path / "one" / "dead_letter")
    assert [len(part) for part in (lines[:12], lines[12:24], lines[24:36], lines[36:])] == [
        12, 12, 12, 4]
    # sorted across all parts, and exactly the records given
    entries = [json.loads(line) for line in lines]
    assert [sort_key(r) for r in entries] == sorted(sort_key(r) for r in records)
    assert sorted(lines) == sorted(dead_letter_line(r) for r in records)
    first = min(records, key=lambda r: (sort_key(r), dead_letter_line(r)))
    assert summary["samples"][first["reason"]] == first


def test_multi_processing_matches_in_memory(tmp_path):
    records = many_records(25)
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    first = run_sink(records, tmp_path / "mp" / "dead_letter", options=options,
                     records_per_file=10, summary_path=tmp_path / "mp.json")
    second = run_sink(records, tmp_path / "mem" / "dead_letter", records_per_file=10,
                      summary_path=tmp_path / "mem.json")
    assert first == second and first["num_rows"] == 25
    names = sorted(os.listdir(tmp_path / "mem" / "dead_letter"))
    assert names == sorted(os.listdir(tmp_path / "mp" / "dead_letter"))
    for name in names:
        assert ((tmp_path / "mp" / "dead_letter" / name).read_bytes()
                == (tmp_path / "mem" / "dead_letter" / name).read_bytes())


def test_writes_through_fsspec_urls(tmp_path):
    url = "memory://recordforge-test/v2/dead_letter"
    summary = run_sink(RECORDS[:2], url, summary_path=tmp_path / "summary.json")
    assert summary["files"] == ["dead_letter/part-00000.jsonl"]
    fs = fsspec.filesystem("memory")
    assert fs.ls("/recordforge-test/v2/dead_letter", detail=False) == [
        "/recordforge-test/v2/dead_letter/part-00000.jsonl"]
    with fs.open("/recordforge-test/v2/dead_letter/part-00000.jsonl", "rb") as f:
        assert len(f.read().splitlines()) == 2
    fs.rm("/recordforge-test", recursive=True)


def test_unpaired_surrogates_stay_valid_json():
    # dead_letter() shows text that cannot be UTF-8 escaped (docs/reasons.md)
    bad = record("a.jsonl", 1, "invalid_utf8", x="\ud800 text")
    line = dead_letter_line(bad)
    line.encode("utf-8")
    assert json.loads(line)["input"]["x"] == "\\ud800 text"
    assert dead_letter_line(record("a", 1, "read_error", x="é")).count("é") == 1


def test_records_per_file_must_be_positive():
    with pytest.raises(ValueError):
        WriteDeadLetters("out", records_per_file=0)


def _join(summary, num_examples):
    return {"num_examples": num_examples, **summary}


def test_rows_to_dead_letters_on_the_dask_runner(tmp_path):
    # Beam's Dask runner (2.77) computes only the pipeline's last leaf and has
    # bugs with multi-output ParDos and side inputs; both transforms avoid them.
    from apache_beam.runners.dask.dask_runner import DaskRunner
    from dask.distributed import Client, LocalCluster

    from recordforge.schemas.feature_config import parse_features
    from recordforge.transforms.readers.rows import SourceRow
    from recordforge.transforms.to_examples import RowsToExamples

    specs = parse_features({"id": {"type": "int64"},
                            "label": {"type": "int64", "vocabulary": ["a", "b"]}})
    batches = [[SourceRow("f.csv", 10 * i + j, {"id": str(10 * i + j),
                                                "label": "zz" if j == 3 else "ab"[j % 2]})
                for j in range(5)] for i in range(4)]
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    try:
        options = PipelineOptions([f"--dask_client_address={cluster.scheduler_address}"])
        pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
        examples, dead, _, _ = (pipeline | beam.Create(batches)
                                | RowsToExamples(specs, {}, key_column="id"))
        count = examples | beam.Map(len) | "Sum" >> beam.CombineGlobally(sum)
        (dead
         | WriteDeadLetters(str(tmp_path / "dead_letter"), records_per_file=3)
         | "Join" >> beam.Map(_join, beam.pvalue.AsSingleton(count))
         | "Save" >> beam.Map(_save_summary, str(tmp_path / "summary.json")))
        result = pipeline.run()
        try:
            result.wait_until_finish()
        finally:
            result.client.close()  # the runner's own client to the cluster
    finally:
        client.close()
        cluster.close()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_examples"] == 16
    assert summary["num_rows"] == 4 and summary["by_reason"] == {"unknown_label": 4}
    assert summary["files"] == ["dead_letter/part-00000.jsonl", "dead_letter/part-00001.jsonl"]
    lines = written_lines(tmp_path / "dead_letter")
    assert [json.loads(line)["row"] for line in lines] == [3, 13, 23, 33]


def _run_parts(parts, directory, summary_path):
    """The sink fed `parts` (lists of records) as a tuple of PCollections."""
    with TestPipeline() as pipeline:
        pcolls = tuple(pipeline | f"Part{index}" >> beam.Create(part)
                       for index, part in enumerate(parts))
        summary = pcolls | "Sink" >> WriteDeadLetters(str(directory), 2)
        summary | "Save" >> beam.Map(_save_summary, str(summary_path))
    with open(summary_path, encoding="utf-8") as f:
        return json.load(f)


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, len(RECORDS)), min_size=1, max_size=3))
def test_parts_given_as_a_tuple_write_what_one_collection_writes(tmp_path_factory, cuts):
    """The build hands the sink its dead letters of reading and checking
    unflattened (a Flatten is a runner stage of its own): any split of the
    records into parts, some empty, writes the same files and summary."""
    bounds = [0, *sorted(cuts), len(RECORDS)]
    parts = [RECORDS[start:end] for start, end in zip(bounds, bounds[1:])]
    whole_dir, parts_dir = tmp_path_factory.mktemp("whole"), tmp_path_factory.mktemp("parts")
    whole = run_sink(RECORDS, whole_dir / "dead_letter", records_per_file=2,
                     summary_path=whole_dir / "summary.json")
    split = _run_parts(parts, parts_dir / "dead_letter", parts_dir / "summary.json")
    assert split == whole
    assert sorted(os.listdir(parts_dir / "dead_letter")) == \
        sorted(os.listdir(whole_dir / "dead_letter"))
    assert written_lines(parts_dir / "dead_letter") == written_lines(whole_dir / "dead_letter")
