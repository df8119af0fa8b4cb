"""Build progress: staging-directory polling, Beam counters, the summary table."""

from __future__ import annotations

import io
import logging
import os
import time

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics

from recordforge.pipelines import progress
from recordforge.pipelines.progress import BuildProgress, format_summary, scan_cache, scan_staging


def _file(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_scan_staging_reports_bytes_shards_and_phase(tmp_path):
    assert scan_staging(str(tmp_path)) == (0, 0, "starting")
    assert scan_staging(str(tmp_path / "not-yet")) == (0, 0, "starting")
    _file(tmp_path / "_tmp" / "w1" / "runs" / "0-0.run", 1000)
    assert scan_staging(str(tmp_path)) == (1000, 0, "reading")
    _file(tmp_path / "_tmp" / "w1" / "buckets" / "b0", 500)
    assert scan_staging(str(tmp_path)) == (1500, 0, "sorting")
    _file(tmp_path / "train-00000-of-00002.tfrecord.gz", 300)
    _file(tmp_path / "dead_letter" / "part-00000.jsonl", 7)
    assert scan_staging(str(tmp_path)) == (1807, 1, "writing shards")


def test_a_cached_build_shows_what_it_writes_into_the_cache(tmp_path):
    cache = tmp_path / "cache"
    _file(cache / "old.piece", 999)
    os.utime(cache / "old.piece", (1, 1))  # an earlier build's piece: not this build's work
    stream = _Stream(tty=False)
    watcher = BuildProgress(str(tmp_path / "staging"), stream=stream, interval=0.05,
                            cache_url=str(cache))
    with watcher:
        _file(cache / "new.s0.run", 4000)
        snapshot = watcher.snapshot(rescan=True)
    assert (snapshot.staged_bytes, snapshot.phase) == (4000, "reading")
    assert scan_cache(str(cache), since=0) == 4999
    assert scan_cache("s3://bucket/cache", since=0) == 0


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_plain_lines_while_files_appear(tmp_path):
    stream = _Stream(tty=False)
    with BuildProgress(str(tmp_path), stream=stream, interval=0.05):
        _file(tmp_path / "_tmp" / "a.run", 2_500_000)
        time.sleep(0.3)
        _file(tmp_path / "test-00000-of-00001.tfrecord", 500_000)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and "\r" not in stream.getvalue()
    assert "reading" in lines[1] and "2.5 MB written" in lines[1]
    assert "writing shards" in lines[-1] and "3.0 MB written" in lines[-1]
    assert "1 shards" in lines[-1] and "/s" in lines[-1]


def test_tty_redraws_one_line(tmp_path):
    stream = _Stream(tty=True)
    watcher = BuildProgress(str(tmp_path), stream=stream, interval=0.02)
    assert watcher._interval == 0.02
    with watcher:
        time.sleep(0.15)
    out = stream.getvalue()
    assert out.count("\r") >= 2 and out.endswith("\n") and out.count("\n") == 1
    assert BuildProgress(str(tmp_path), stream=_Stream(tty=True))._interval == 0.5
    assert BuildProgress(str(tmp_path), stream=_Stream(tty=False))._interval == 30.0


def test_disabled_progress_prints_nothing(tmp_path):
    stream = _Stream(tty=True)
    with BuildProgress(str(tmp_path), stream=stream, interval=0.01, enabled=False):
        time.sleep(0.05)
    assert stream.getvalue() == ""


class _Count(beam.DoFn):
    def setup(self):
        self.converted = Metrics.counter(progress.METRICS_NAMESPACE, "rows_converted")
        self.dead = Metrics.counter(progress.METRICS_NAMESPACE, "dead_letters")
        self.written = Metrics.counter(progress.METRICS_NAMESPACE, "examples_written")

    def process(self, batch):
        good = [x for x in batch if x % 3]
        self.converted.inc(len(good))
        self.dead.inc(len(batch) - len(good))
        self.written.inc(len(good))
        yield len(good)


def test_counters_of_an_attached_result_reach_the_final_line(tmp_path):
    stream = _Stream(tty=False)
    with BuildProgress(str(tmp_path), stream=stream, interval=60) as watcher:
        pipeline = beam.Pipeline(runner="DirectRunner")
        _ = (pipeline | beam.Create([list(range(0, 10)), list(range(10, 30))])
             | beam.ParDo(_Count()))
        result = pipeline.run()
        watcher.attach(result)
        result.wait_until_finish()
    final = stream.getvalue().splitlines()[-1]
    # 30 rows: 10 multiples of 3 failed, 20 became examples.
    assert "30 rows read" in final and "20 examples written" in final
    assert "10 dead letters" in final


def test_update_sets_counts(tmp_path):
    watcher = BuildProgress(str(tmp_path), stream=_Stream(False))
    watcher.update(rows_read=1234, examples_written=1200, dead_letters=34)
    line = progress.format_line(watcher.snapshot())
    assert "1,234 rows read | 1,200 examples written | 34 dead letters" in line


MANIFEST = {
    "name": "flowers", "version": "20260101", "compression": "GZIP",
    "splits": {
        "train": {"num_examples": 8000, "num_bytes": 3_000_000,
                  "shards": [{"num_bytes": 1_000_000}] * 3},
        "test": {"num_examples": 1000, "num_bytes": 400_000, "shards": [{"num_bytes": 400_000}]},
    },
    "num_input_rows": 9012,
    "dead_letter": {"num_rows": 12, "by_reason": {"image_truncated": 2, "out_of_range": 10}},
}


def test_summary_table():
    text = format_summary(MANIFEST, output="out/flowers/20260101", wall_seconds=90)
    lines = text.splitlines()
    assert lines[0] == "flowers 20260101 (GZIP)"
    assert lines[1].split() == ["split", "examples", "shards", "bytes", "mean", "shard"]
    assert lines[3].split() == ["train", "8,000", "3", "3.0", "MB", "1.0", "MB"]
    assert lines[4].split() == ["test", "1,000", "1", "400.0", "KB", "400.0", "KB"]
    assert lines[6].split() == ["total", "9,000", "4", "3.4", "MB", "850.0", "KB"]
    assert "dead letters: 12 (0.13% of 9,012 input rows)" in text
    # Reasons by count, largest first.
    assert text.index("out_of_range") < text.index("image_truncated")
    assert "wall time: 1:30, 100 examples/s" in text
    assert lines[-1] == "output: out/flowers/20260101"


@pytest.fixture()
def restore_logging():
    root = logging.getLogger()
    beam_logger = logging.getLogger("apache_beam")
    state = (list(root.filters), root.level, beam_logger.level, list(root.handlers))
    yield
    root.filters[:] = state[0]
    root.setLevel(state[1])
    beam_logger.setLevel(state[2])
    root.handlers[:] = state[3]


def test_hide_beam_noise(restore_logging):
    args = progress.hide_beam_noise(False)
    assert args == ["--default_sdk_harness_log_level=60"]
    progress.hide_beam_noise(False)  # idempotent
    root = logging.getLogger()
    assert root.filters.count(progress._ROOT_FILTER) == 1
    assert not logging.getLogger("apache_beam.runners.worker").isEnabledFor(logging.WARNING)
    # A failing step's traceback is logged at ERROR; the build's verdict names it.
    assert not logging.getLogger("apache_beam.runners.common").isEnabledFor(logging.ERROR)
    assert logging.getLogger("apache_beam.runners.worker").isEnabledFor(logging.CRITICAL)

    def record(path, level):
        return logging.LogRecord("root", level, path, 1, "m", None, None)

    beam_file = "/venv/lib/python3.11/site-packages/apache_beam/io/gcp/x.py"
    assert not root.filter(record(beam_file, logging.WARNING))
    assert root.filter(record(beam_file, logging.ERROR))
    assert root.filter(record("/work/main/pipelines/build.py", logging.WARNING))
    assert progress.hide_beam_noise(True) == []
    assert progress._ROOT_FILTER not in root.filters
    assert logging.getLogger("apache_beam.runners.worker").isEnabledFor(logging.INFO)
