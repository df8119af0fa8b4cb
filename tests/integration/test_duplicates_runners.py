"""Duplicates on Beam's Prism runner: the same duplicates.json bytes, shards and dead
letters as the DirectRunner, with the later copies removed (the removals reach the
step before the shard writer as a side input, which Prism runs as a stage of its own),
and the same near-duplicate images."""

from __future__ import annotations

import json
import pathlib
import random

import fsspec
import pytest

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"


def _table(directory, rows: int = 3000):
    """id, text, n: (text, n) drawn from few values, so duplicates fall
    within and across splits; the first 20 rows repeated whole at the end."""
    rng = random.Random(11)
    lines = ["id,text,n"] + [f"{i},t{rng.randrange(400)},{rng.randrange(3)}" for i in range(rows)]
    (directory / "t.csv").write_text("\n".join(lines + lines[1:21]) + "\n")
    config = {"name": "dups", "version": "1.0.0",
              "source": {"type": "csv", "path": str(directory / "t.csv")},
              "features": {"id": {"type": "int64"}, "text": {"type": "string"},
                           "n": {"type": "int64"}},
              "splits": {"train": 0.6, "validation": 0.2, "test": 0.2}, "key": "id",
              "output": {"path": str(directory / "unused"), "shard_size": "1MB"},
              "dead_letter": {"max_error_rate": 1.0},
              "validation": {"duplicates": {"features": ["text", "n"],
                                            "dedupe": "across_splits"}}}
    path = directory / "dups.json"
    path.write_text(json.dumps(config))
    return path


def test_prism_finds_and_removes_the_direct_runners_duplicates(prism_binary, tmp_path,
                                                              support):
    config = _table(tmp_path)
    env = support.base_env()
    support.run_recordforge("build", config, "--output", tmp_path / "direct", env=env)
    profile = support.run_recordforge("runner-args", "prism", env=env).stdout.split()
    support.run_recordforge("build", config, "--output", tmp_path / "prism", "--", *profile,
                            env=env)
    direct, prism = (tmp_path / "direct/1.0.0", tmp_path / "prism/1.0.0")
    assert (prism / "duplicates.json").read_bytes() == (direct / "duplicates.json").read_bytes()
    document = json.loads((direct / "duplicates.json").read_text())
    assert document["removed"] == document["duplicate_rows"] > 20
    assert document["left"]["duplicate_rows"] == 0
    fs = fsspec.filesystem("file")
    assert support.digests(fs, str(prism)) == support.digests(fs, str(direct))
    manifest = json.loads((prism / "manifest.json").read_text())
    assert manifest["tool"]["runner"] == "PrismRunner"
    assert manifest["dead_letter"]["by_reason"] == {"duplicate": document["removed"]}


def test_prism_finds_the_direct_runners_near_duplicate_images(prism_binary, tmp_path, support):
    """The bundled flowers with re-encoded copies of a few: the image hashes
    and the banded search give the same duplicates.json on Prism."""
    from PIL import Image
    images = tmp_path / "flowers"
    for source in sorted((REPO / "examples/flowers").rglob("*")):
        target = images / source.relative_to(REPO / "examples/flowers")
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
    for index, source in enumerate(sorted((REPO / "examples/flowers").rglob("*.jpg"))[:40]):
        target = images / source.relative_to(REPO / "examples/flowers")
        target.write_bytes(source.read_bytes())
        if index % 4 == 0 and "_0" in source.name:  # not the broken samples
            with Image.open(source) as im:
                im.convert("RGB").save(target.with_name(f"copy_{target.name}"), quality=60)
    env = support.base_env()
    overrides = ["--set", "validation.duplicates=true", "--set",
                 f"source.path={images}", "--set", "dead_letter.max_error_rate=0.5"]
    support.run_recordforge("build", FLOWERS, "--output", tmp_path / "direct", *overrides,
                            env=env)
    profile = support.run_recordforge("runner-args", "prism", env=env).stdout.split()
    support.run_recordforge("build", FLOWERS, "--output", tmp_path / "prism", *overrides,
                            "--", *profile, env=env)
    direct = (tmp_path / "direct/1.0.0/duplicates.json").read_bytes()
    assert (tmp_path / "prism/1.0.0/duplicates.json").read_bytes() == direct
    assert json.loads(direct)["near_duplicates"]["pairs"] >= 10
