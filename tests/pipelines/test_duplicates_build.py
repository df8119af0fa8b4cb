"""Exact duplicates through `recordforge build`: planted duplicates counted exactly against
pandas and the published shards, the same duplicates.json bytes on 1 and 2 workers,
the gates failing a build before it publishes, and `verify` reading duplicates.json."""

from __future__ import annotations

import hashlib
import json
import random

import pandas as pd
import pytest

from recordforge.pipelines import build
from recordforge.pipelines.config import config_from_dict
from recordforge.pipelines.publish.verify import verify_dataset
from recordforge.schemas.errors import ConfigError


def _write_table(path, seed: int, rows: int = 300) -> pd.DataFrame:
    """id (unique), text and n drawn from a few values: duplicates on (text, n)
    are planted within and across splits; `note` differs on every row."""
    rng = random.Random(seed)
    frame = pd.DataFrame({"id": range(rows),
                          "text": [f"t{rng.randrange(60)}" for _ in range(rows)],
                          "n": [rng.randrange(3) for _ in range(rows)],
                          "note": [f"row {i}" for i in range(rows)]})
    frame.to_csv(path, index=False)
    return frame


def _config(table, out, **duplicates):
    return {"name": "dups", "version": "v1",
            "source": {"type": "csv", "path": str(table)},
            "features": {"id": {"type": "int64"}, "text": {"type": "string"},
                         "n": {"type": "int64"}, "note": {"type": "string"}},
            "splits": {"train": 0.6, "validation": 0.2, "test": 0.2}, "key": "id",
            "output": {"path": str(out), "shard_size": "1MB"},
            "validation": {"duplicates": {"features": ["text", "n"], **duplicates}}}


def _run(tmp_path, config, *extra, workers=1, name="c.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    mode = "in_memory" if workers == 1 else "multi_processing"
    return build.run([str(path), *extra, "--", f"--direct_running_mode={mode}",
                      f"--direct_num_workers={workers}"])


def _split_of_ids(version_dir) -> dict[int, str]:
    """id -> split, read back from the published shards with protobuf."""
    from tfrecord import example_pb2
    from recordforge.transforms.tfrecord import read_records
    manifest = json.loads((version_dir / "manifest.json").read_text())
    found = {}
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            for record in read_records(str(version_dir / shard["file"])):
                example = example_pb2.Example.FromString(record)
                found[example.features.feature["id"].int64_list.value[0]] = split
    return found


def _expected(frame: pd.DataFrame, split_of: dict[int, str], splits: list[str]) -> dict:
    """Every count by its definition, with pandas: groups of equal (text, n)."""
    frame = frame.assign(split=frame["id"].map(split_of),
                         order=frame["id"].map(split_of).map(splits.index))
    within = {split: 0 for split in splits}
    across = {f"{a}/{b}": 0 for i, a in enumerate(splits) for b in splits[i + 1:]}
    duplicate = cross = 0
    for _, group in frame.groupby(["text", "n"]):
        duplicate += len(group) - 1
        for split, rows in group.groupby("split"):
            within[split] += len(rows) - 1
        present = sorted(set(group["order"]))
        cross += int((group["order"] > present[0]).sum())
        for i, a in enumerate(present):
            for b in present[i + 1:]:
                across[f"{splits[a]}/{splits[b]}"] += int((group["order"] == b).sum())
    return {"within_split": within, "across_splits": across, "duplicate_rows": duplicate,
            "cross_split_rows": cross}


@pytest.mark.parametrize("seed", [1, 2])
def test_planted_duplicates_are_counted_exactly_and_the_same_on_two_workers(tmp_path, seed,
                                                                           capsys):
    frame = _write_table(tmp_path / "t.csv", seed)
    assert _run(tmp_path, _config(tmp_path / "t.csv", tmp_path / "one")) == 0
    summary = capsys.readouterr().err
    assert _run(tmp_path, _config(tmp_path / "t.csv", tmp_path / "two"), workers=2) == 0
    one = (tmp_path / "one/v1/duplicates.json").read_bytes()
    assert one == (tmp_path / "two/v1/duplicates.json").read_bytes()
    document = json.loads(one)
    splits = ["train", "validation", "test"]
    expected = _expected(frame, _split_of_ids(tmp_path / "one/v1"), splits)
    assert {key: document[key] for key in expected} == expected
    assert list(document["within_split"]) == splits  # configured order
    assert document["num_examples"] == document["rows_checked"] == len(frame)
    assert document["duplicate_rows"] > 0 and document["cross_split_rows"] > 0
    assert (f"duplicates: {document['duplicate_rows']:,} rows equal an earlier row"
            in summary)  # the build summary's line
    # Each pair's rows are equal, and the earlier one has the smaller key.
    by_id = frame.set_index("id")
    for pair in document["pairs"]:
        earlier, later = pair["earlier"]["key"], pair["later"]["key"]
        assert tuple(by_id.loc[earlier, ["text", "n"]]) == tuple(by_id.loc[later, ["text", "n"]])
        assert earlier < later or pair["kind"] == "across_splits"
    # Listed in the manifest and SHA256SUMS, and verified.
    manifest = json.loads((tmp_path / "one/v1/manifest.json").read_text())
    listed = {entry["file"]: entry["sha256"] for entry in manifest["files"]}
    assert listed["duplicates.json"] == hashlib.sha256(one).hexdigest()
    assert f"{hashlib.sha256(one).hexdigest()}  duplicates.json" in (
        tmp_path / "one/v1/SHA256SUMS").read_text()
    assert verify_dataset(str(tmp_path / "one/v1")).ok
    page = (tmp_path / "one/v1/report.html").read_text()
    assert "id='duplicates'" in page and "across_splits" in page


def test_a_crossed_gate_fails_the_build_and_leaves_latest(tmp_path, capsys):
    _write_table(tmp_path / "t.csv", 3)
    out = tmp_path / "out"
    assert _run(tmp_path, _config(tmp_path / "t.csv", out)) == 0
    gated = {**_config(tmp_path / "t.csv", out, max_cross_split=0), "version": "v2"}
    assert _run(tmp_path, gated) == 1
    err = capsys.readouterr().err
    assert "validation.duplicates.max_cross_split: cross_split_rows" in err
    assert (out / "LATEST").read_text().strip() == "v1" and not (out / "v2").exists()
    failed = next((out / ".failed").iterdir())
    kept = json.loads((failed / "duplicates.json").read_text())
    assert kept["gates"][0]["passed"] is False
    assert "duplicate gate(s) failed" in (failed / "report.html").read_text()
    # Relaxed for one run with --set: the build publishes.
    assert _run(tmp_path, gated, "--set", "validation.duplicates.max_cross_split=null") == 0
    assert (out / "LATEST").read_text().strip() == "v2"
    assert _run(tmp_path, {**gated, "version": "v3"},
                "--set", "validation.duplicates.max_fraction=0.001") == 1


def test_keyless_rows_are_named_by_their_row_digest(tmp_path):
    rows = ["a,1"] * 6 + ["b,2"] * 3 + [f"u{i},{i}" for i in range(20)]
    (tmp_path / "t.csv").write_text("text,n\n" + "\n".join(rows) + "\n")
    config = _config(tmp_path / "t.csv", tmp_path / "out")
    config.update(key=None, features={"text": {"type": "string"}, "n": {"type": "int64"}},
                  splits={"train": 0.5, "test": 0.5})
    config["validation"] = {"duplicates": True}
    assert _run(tmp_path, config) == 0
    document = json.loads((tmp_path / "out/v1/duplicates.json").read_text())
    # Identical rows share a split (their Example picks it): 5 + 2 within.
    assert document["duplicate_rows"] == 7 and document["cross_split_rows"] == 0
    assert sum(document["within_split"].values()) == 7
    assert document["features"] is None
    assert all(pair["later"]["key"] is None and len(pair["later"]["row_digest"]) == 32
               for pair in document["pairs"])


def test_verify_reads_duplicates_json_as_untrusted_input(tmp_path):
    _write_table(tmp_path / "t.csv", 4, rows=60)
    assert _run(tmp_path, _config(tmp_path / "t.csv", tmp_path / "out")) == 0
    version = tmp_path / "out/v1"
    original = (version / "duplicates.json").read_bytes()
    document = json.loads(original)
    for bad in (b"[" * 5000 + b"]" * 5000, b"\xff", json.dumps({**document, "format": 2}),
                json.dumps({**document, "num_examples": 61}),
                json.dumps({**document, "within_split": {"train": -1}}),
                json.dumps({**document, "pairs": [1]})):
        data = bad.encode() if isinstance(bad, str) else bad
        (version / "duplicates.json").write_bytes(data)
        problems = verify_dataset(str(version)).problems
        assert any(p.code == "duplicates" for p in problems), bad[:40]
    (version / "duplicates.json").write_bytes(original)
    assert verify_dataset(str(version)).ok


@pytest.mark.parametrize("duplicates, key, message", [
    ({"features": ["nope"]}, "validation.duplicates.features", "no feature 'nope'"),
    ({"features": []}, "validation.duplicates.features", "non-empty list"),
    ({"max_fraction": 2}, "validation.duplicates.max_fraction", "between 0 and 1"),
    ({"max_cross_split": -1}, "validation.duplicates.max_cross_split", "0 or more"),
    ({"max_cross_split": 0.5}, "validation.duplicates.max_cross_split", "whole number"),
    ({"max_fractoin": 0.1}, "validation.duplicates.max_fractoin", "did you mean"),
    ({"near_views": "yes"}, "validation.duplicates.near_views", "true or false"),
])
def test_config_mistakes_name_the_key(tmp_path, duplicates, key, message):
    _write_table(tmp_path / "t.csv", 5, rows=5)
    config = _config(tmp_path / "t.csv", tmp_path / "out")
    config["validation"]["duplicates"] = duplicates
    with pytest.raises(ConfigError) as caught:
        config_from_dict(config)
    assert caught.value.key == key and message in str(caught.value)


@pytest.mark.parametrize("mode", ["within_split", "across_splits"])
def test_dedupe_removes_the_later_copies_as_dead_letters(tmp_path, mode):
    frame = _write_table(tmp_path / "t.csv", 6)
    # Rows equal in key and content too: told apart by their row number.
    pd.concat([frame, frame.iloc[:5]]).to_csv(tmp_path / "t.csv", index=False)
    config = _config(tmp_path / "t.csv", tmp_path / "out", dedupe=mode, max_cross_split=0
                     if mode == "across_splits" else None)
    config["dead_letter"] = {"max_error_rate": 1.0}
    assert _run(tmp_path, config) == 0
    version = tmp_path / "out/v1"
    document = json.loads((version / "duplicates.json").read_text())
    manifest = json.loads((version / "manifest.json").read_text())
    examples = sum(split["num_examples"] for split in manifest["splits"].values())
    # The count identity: rows read = examples + dead letters, all of them duplicates.
    assert manifest["num_input_rows"] == len(frame) + 5 == examples + manifest["dead_letter"][
        "num_rows"]
    assert manifest["dead_letter"]["by_reason"] == {"duplicate": document["removed"]}
    assert document["rows_checked"] == len(frame) + 5 and document["num_examples"] == examples
    left = document["left"]
    if mode == "across_splits":
        assert document["removed"] == document["duplicate_rows"]
        assert left["duplicate_rows"] == left["cross_split_rows"] == 0
    else:
        assert document["removed"] == sum(document["within_split"].values())
        assert sum(left["within_split"].values()) == 0
    # No removed row is in a shard; what is left, read back, has no duplicate of its kind.
    from tfrecord import example_pb2
    from recordforge.transforms.tfrecord import read_records
    kept = []
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            for record in read_records(str(version / shard["file"])):
                feature = example_pb2.Example.FromString(record).features.feature
                kept.append((split, feature["text"].bytes_list.value[0],
                             feature["n"].int64_list.value[0]))
    assert len(kept) == examples
    contents = [(text, n) for _, text, n in kept] if mode == "across_splits" else kept
    assert len(set(contents)) == len(contents)
    records = [json.loads(line) for file in manifest["dead_letter"]["files"]
               for line in (version / file).read_text().splitlines()]
    assert len(records) == document["removed"]
    by_id = frame.set_index("id")
    for record in records:
        assert record["reason"] == "duplicate" and record["source"].endswith("t.csv")
        kept_row = record["input"]["duplicate_of"]
        assert tuple(by_id.loc[kept_row["key"], ["text", "n"]]) == tuple(
            by_id.loc[record["key"], ["text", "n"]])
        assert (kept_row["key"], kept_row["split"]) != (record["key"], None)
    assert verify_dataset(str(version)).ok


def test_write_dataset_refuses_removal_it_cannot_do(tmp_path):
    from recordforge.pipelines.write_dataset import WriteDataset
    config = _config(tmp_path / "t.csv", tmp_path / "out", dedupe="within_split")
    del config["source"]
    with pytest.raises(ConfigError) as caught:
        WriteDataset(config)
    assert caught.value.key == "validation.duplicates.dedupe"
