"""`recordforge build` publishing behaviour: error budget, versions, memory://."""

import gzip
import json
import random
import zlib

import fsspec
import yaml

from recordforge.pipelines import build
from recordforge.pipelines.publish import verify


def _corpus(tmp_path, rows=200, bad_every=20):
    """A CSV with 5% bad rows (a score out of range every 20th row)."""
    lines = ["id,score"] + [f"{i},{200 if i % bad_every == 0 else i % 100}" for i in range(rows)]
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(tmp_path, source, output, max_error_rate, version="1.0"):
    config = {"name": "budget", "version": version,
              "source": {"type": "csv", "path": str(source)},
              "features": {"id": {"type": "int64"},
                           "score": {"type": "int64", "min": 0, "max": 100}},
              "output": {"path": str(output), "shard_size": "1MB"},
              "dead_letter": {"max_error_rate": max_error_rate}}
    path = tmp_path / f"config-{max_error_rate}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


LOCAL = ["--", "--direct_running_mode=in_memory"]


def test_error_budget_passes_at_ten_percent(tmp_path):
    out = tmp_path / "out"
    config = _config(tmp_path, _corpus(tmp_path), out, 0.1)
    assert build.run([str(config), *LOCAL]) == 0
    manifest = json.loads((out / "1.0" / "manifest.json").read_text())
    assert manifest["dead_letter"]["num_rows"] == 10
    assert manifest["dead_letter"]["by_reason"] == {"out_of_range": 10}
    assert manifest["num_input_rows"] == 200
    assert (out / "LATEST").read_text().strip() == "1.0"


def test_error_budget_fails_at_one_percent_and_publishes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    config = _config(tmp_path, _corpus(tmp_path), out, 0.01)
    assert build.run([str(config), *LOCAL]) == 1
    err = capsys.readouterr().err
    assert "out_of_range" in err and "nothing" in err.lower()
    assert not (out / "1.0").exists() and not (out / "LATEST").exists()
    kept = list(out.glob(".failed/*/dead_letter/*.jsonl"))
    assert kept and str(kept[0].parent) in err
    assert sum(1 for _ in kept[0].open()) == 10


def test_rebuilding_a_published_version_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    config = _config(tmp_path, _corpus(tmp_path), out, 0.1)
    assert build.run([str(config), *LOCAL]) == 0
    first = (out / "1.0" / "manifest.json").read_text()
    assert build.run([str(config), *LOCAL]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "1.0" / "manifest.json").read_text() == first
    assert build.run([str(config), "--overwrite", *LOCAL]) == 0
    assert verify.verify_dataset(str(out / "1.0")).ok


def test_a_failed_build_leaves_the_last_good_version_alone(tmp_path):
    out = tmp_path / "out"
    source = _corpus(tmp_path)
    assert build.run([str(_config(tmp_path, source, out, 0.1, version="good")), *LOCAL]) == 0
    assert build.run([str(_config(tmp_path, source, out, 0.01, version="bad")), *LOCAL]) == 1
    assert (out / "LATEST").read_text().strip() == "good"
    assert not (out / "bad").exists()
    assert verify.verify_dataset(str(out)).ok


def test_build_to_an_object_store_url(tmp_path):
    # memory:// lives in this process, so the pipeline runs in_memory here.
    # The command line refuses memory:// (its data would be gone when the
    # command exits); the library builds to it, in this process.
    url = "memory://recordforge-build-test/out"
    try:
        config = _config(tmp_path, _corpus(tmp_path), url, 0.1)
        assert build.run([str(config), *LOCAL]) == 2
        build.build(str(config), beam_args=LOCAL[1:])
        fs = fsspec.filesystem("memory")
        assert fs.cat_file("/recordforge-build-test/out/LATEST").decode().strip() == "1.0"
        report = verify.verify_dataset(f"{url}/1.0", deep=True)
        assert report.ok, report.problems
    finally:
        fsspec.filesystem("memory").rm("/recordforge-build-test", recursive=True)


def test_a_shuffled_gzip_build_off_the_local_disk_verifies_and_reads_back(tmp_path):
    """Shuffled gzip shards are cut at rows, one gzip member each, checked
    as they are written (memory:// is not the local disk), and the
    published version verifies deeply and reads with Python's gzip."""
    rng = random.Random(3)
    words = [f"{rng.getrandbits(24):06x}" for _ in range(2000)]
    source = tmp_path / "text.csv"
    source.write_text("id,text\n" + "".join(
        f"{i},{' '.join(rng.choices(words, k=rng.randint(20, 60)))}\n" for i in range(30_000)))
    url = "memory://recordforge-gzip-build/out"
    config = {"name": "gzip-rows", "version": "1.0",
              "source": {"type": "csv", "path": str(source)},
              "features": {"id": {"type": "int64"}, "text": {"type": "string"}},
              "key": "id", "splits": {"train": 0.7, "test": 0.3},
              "output": {"path": url, "shard_size": "1MB", "compression": "gzip",
                         "shuffle": True},
              "dead_letter": {"max_error_rate": 0.0}}
    path = tmp_path / "gzip.yaml"
    path.write_text(yaml.safe_dump(config))
    fs = fsspec.filesystem("memory")
    try:
        build.build(str(path), beam_args=LOCAL[1:])
        report = verify.verify_dataset(f"{url}/1.0", deep=True)
        assert report.ok, report.problems
        manifest = json.loads(fs.cat_file("/recordforge-gzip-build/out/1.0/manifest.json"))
        for split, info in manifest["splits"].items():
            sizes = [shard["num_bytes"] for shard in info["shards"]]
            assert len(sizes) >= 2, (split, sizes)
            assert all(0.5e6 <= size <= 1.6e6 for size in sizes[:-1]), (split, sizes)
            for shard in info["shards"]:
                data = fs.cat_file(f"/recordforge-gzip-build/out/1.0/{shard['file']}")
                member = zlib.decompressobj(31)
                stream = member.decompress(data)
                assert member.eof and not member.unused_data  # one gzip member
                assert stream == gzip.decompress(data)
                count, position = 0, 0
                while position < len(stream):
                    position += 16 + int.from_bytes(stream[position:position + 8], "little")
                    count += 1
                assert position == len(stream) and count == shard["num_examples"]
        assert sum(info["num_examples"] for info in manifest["splits"].values()) == 30_000
    finally:
        fs.rm("/recordforge-gzip-build", recursive=True)
