"""`recordforge init` on the TFRecord files of a recordforge (or TFDS) output:
typed by the manifest / features.json beside them, scalar where every record
holds one value, named after the dataset's folder, and building what was
read back unchanged (checked with the independent `tfrecord` package)."""

import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_iterator

from recordforge.pipelines.cli import main

# Each example runs three builds: no shrinking (a failure prints its rows).
_SETTINGS = dict(max_examples=3, deadline=None, phases=(Phase.explicit, Phase.generate),
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])


def _records(folder: Path) -> list[dict]:
    rows = []
    for shard in sorted(folder.glob("*.tfrecord")):
        for raw in tfrecord_iterator(str(shard)):
            example = example_pb2.Example()
            example.ParseFromString(bytes(raw))
            rows.append({name: list(getattr(f, f.WhichOneof("kind")).value)
                         for name, f in example.features.feature.items()})
    return sorted(rows, key=lambda row: row["id"])


def _init_and_build(tmp_path: Path, source: Path, tag: str) -> tuple[dict, list[dict]]:
    config, out = tmp_path / f"{tag}.yaml", tmp_path / f"out_{tag}"
    assert main(["init", str(source), "-o", str(config), "--output-path", str(out)]) == 0
    assert main(["build", str(config)]) == 0
    return yaml.safe_load(config.read_text()), _records(out / "1.0.0")


_ROWS = st.lists(st.tuples(st.integers(-2 ** 63, 2 ** 63 - 1),
                           st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E,
                                                 blacklist_characters='",'), min_size=1,
                                   max_size=5),
                           st.dates().map(lambda d: d.isoformat()),
                           st.one_of(st.just(""), st.integers(0, 9).map(str))),
                 min_size=1, max_size=12)


@pytest.mark.slow
@settings(**_SETTINGS)
@given(rows=_ROWS)
def test_init_on_an_output_reads_its_metadata_and_rebuilds_the_same_records(tmp_path, rows):
    for child in tmp_path.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    table = tmp_path / "cities.csv"
    table.write_text("id,name,day,maybe\n" + "".join(
        f"{i},{name},{day},{maybe}\n" for i, (_, name, day, maybe) in enumerate(rows)))
    first, records = _init_and_build(tmp_path, table, "first")
    version = tmp_path / "out_first" / "1.0.0"

    # Beside its manifest: the writer's names, types and shapes.
    again, copied = _init_and_build(tmp_path, version, "again")
    assert again["name"] == first["name"] == "cities"
    assert again["source"]["type"] == "tfrecord"
    written = {name: feature["type"] for name, feature in first["features"].items()}
    for name in ("id", "name", "day"):  # a timestamp is stored as int64
        stored = "int64" if written[name] == "timestamp" else written[name]
        assert again["features"][name] == {"type": stored}, (name, again, first)
    if any(maybe for *_, maybe in rows):
        assert again["features"]["maybe"].get("required", True) == \
            first["features"]["maybe"].get("required", True)
    else:  # no record holds it: the build would refuse it, so a comment names it
        assert "maybe" not in again["features"]
        assert "# maybe: no feature: declared {type: " in (tmp_path / "again.yaml").read_text()
    assert copied == records

    # TFDS's metadata only (features.json, dataset_info.json): its dtypes
    # (text is TFDS `string`, bytes here) and the dataset's name.
    tfds = tmp_path / "tfds_copy" / "1.0.0"
    shutil.copytree(version, tfds)
    (tfds / "manifest.json").unlink()
    from_tfds, via_tfds = _init_and_build(tmp_path, tfds, "tfds")
    assert from_tfds["name"] == "cities"
    assert "features.json" in (tmp_path / "tfds.yaml").read_text()
    assert from_tfds["features"]["id"] == {"type": "int64"}
    assert via_tfds == records

    # Without metadata, in a folder of its own: named after the folder, and
    # scalar where every record holds one value.
    bare = tmp_path / "mydata"
    bare.mkdir()
    for shard in version.glob("*.tfrecord"):
        shutil.copy(shard, bare / shard.name)
    shard = next(bare.glob("*.tfrecord"))
    alone, rebuilt = _init_and_build(tmp_path, shard, "alone")
    assert alone["name"] == "mydata"
    assert alone["features"]["id"] == {"type": "int64"}
    assert alone["features"]["name"] == {"type": {"string": "bytes"}.get(written["name"],
                                                                         "int64")}
    assert all("shape" not in feature for feature in alone["features"].values())
    assert rebuilt == records
