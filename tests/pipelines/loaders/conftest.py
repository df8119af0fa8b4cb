"""Published samples the reader tests share: several shards, every kind of
feature, with index files (uncompressed output) and without (gzip output);
and an independent reading of their records (the `tfrecord` package's
reader and protobuf, no recordforge code)."""

from __future__ import annotations

import json
import pathlib
import random
import shutil

import numpy as np
import pytest
from tfrecord.reader import tfrecord_loader

import recordforge

ROWS = 2400


def sample_rows(count: int = ROWS) -> list[dict]:
    rng = random.Random(7)
    rows = []
    for i in range(count):
        row = {"id": i, "label": i % 10, "vec": [rng.uniform(-1, 1) for _ in range(3)],
               "name": f"row-{i}", "blob": rng.randbytes(600).hex()}
        if i % 3:
            row["tags"] = [float(n) for n in range(i % 4)]
        if i % 5:
            row["opt"] = i * 7
        rows.append(row)
    return rows


CONFIG = {"name": "sample", "version": "1.0.0", "key": "id", "splits": {"train": 0.8, "test": 0.2},
          "features": {"id": {"type": "int64"}, "label": {"type": "int64"},
                       "vec": {"type": "float", "shape": [3]},
                       "tags": {"type": "float", "shape": [-1], "required": False},
                       "opt": {"type": "int64", "required": False},
                       "name": {"type": "string"}, "blob": {"type": "string"}},
          "output": {"shard_size": "1MB", "shuffle": True}}


def _build(root: pathlib.Path, compression: str, **output) -> pathlib.Path:
    table = root / "rows.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in sample_rows()))
    recordforge.build({**CONFIG, "source": {"type": "jsonl", "path": str(table)},
                       "output": {**CONFIG["output"], "compression": compression,
                                  "path": str(root / "out"), **output}},
                      beam_args=["--direct_running_mode=in_memory"])
    return root / "out"


@pytest.fixture(scope="session")
def built_sample(tmp_path_factory) -> pathlib.Path:
    """An output root (LATEST -> 1.0.0) of the sample, uncompressed, with
    the index files the build writes."""
    return _build(tmp_path_factory.mktemp("indexed"), "none")


@pytest.fixture
def indexed(built_sample, tmp_path) -> pathlib.Path:
    """A copy of `built_sample` a test may damage."""
    return pathlib.Path(shutil.copytree(built_sample, tmp_path / "copy"))


@pytest.fixture(scope="session")
def array_record_sample(tmp_path_factory) -> pathlib.Path:
    """The sample with ``output.format: array_record``: the same records,
    in the same shards and order, as `built_sample`'s."""
    pytest.importorskip("array_record.python.array_record_module")
    return _build(tmp_path_factory.mktemp("array_record"), "none", format="array_record")


@pytest.fixture(scope="session")
def gzip_sample(tmp_path_factory) -> pathlib.Path:
    return _build(tmp_path_factory.mktemp("gzip"), "gzip")


def _independent_rows(version: pathlib.Path, split: str) -> list[dict]:
    """The split's records in shard order as the `tfrecord` package reads
    them (its own reader and Example message)."""
    manifest = json.loads((version / "manifest.json").read_text())
    rows = []
    for shard in manifest["splits"][split]["shards"]:
        compression = "gzip" if shard["file"].endswith(".gz") else None
        for record in tfrecord_loader(str(version / shard["file"]), None, None,
                                      compression_type=compression):
            rows.append(record)
    return rows


def _same_row(ours: dict, theirs: dict) -> bool:
    """Our decoded row equals the independent reading (absent optional
    features read as empty there and here)."""
    for name in ("id", "label", "vec", "tags", "opt"):
        expected = theirs.get(name)
        expected = np.array([] if expected is None else expected).reshape(-1)
        if not np.array_equal(np.asarray(ours[name]).reshape(-1), expected):
            return False
    return ours["name"] == bytes(theirs["name"]) and ours["blob"] == bytes(theirs["blob"])


class Oracle:
    """The independent reading, for tests: `rows(version, split)` and
    `same(ours, theirs)`; `row_count` rows in each sample."""

    row_count = ROWS
    rows = staticmethod(_independent_rows)
    same = staticmethod(_same_row)


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    return Oracle()
