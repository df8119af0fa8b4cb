"""A published version's index files: listed in the manifest and SHA256SUMS,
checked by verify (size and sha256; --deep: every line against the
shard's records), validated by load_manifest."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tfrecord.tools.tfrecord2idx import create_index

import recordforge
from recordforge.pipelines.publish import verify
from recordforge.pipelines.publish.checksums import parse_sha256sums
from recordforge.pipelines.publish.manifest import ManifestError, load_manifest

REPO = pathlib.Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "configs" / "examples" / "flights.yaml"
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
SMALL_SHARDS = {"output.shard_size": "1MB"}


def _build(output, **overrides):
    result = recordforge.build(str(FLIGHTS), output=str(output), beam_args=IN_MEMORY,
                               overrides={**SMALL_SHARDS, **overrides})
    return pathlib.Path(result.path)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("flights") / "out")


def _manifest(version_dir):
    return json.loads((version_dir / "manifest.json").read_text())


def _shards(manifest):
    return [shard for split in manifest["splits"].values() for shard in split["shards"]]


def test_a_build_publishes_an_index_per_shard_listed_and_summed(published, tmp_path):
    manifest = _manifest(published)
    sums = parse_sha256sums((published / "SHA256SUMS").read_bytes())
    for shard in _shards(manifest):
        index = shard["index"]
        data = (published / index["file"]).read_bytes()
        assert index == {"file": shard["file"] + ".index", "num_bytes": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()}
        assert sums[index["file"]] == index["sha256"]
        create_index(str(published / shard["file"]), str(tmp_path / "reference"))
        assert data == (tmp_path / "reference").read_bytes()
    # Index files are shard entries', not the version's other files.
    assert not [entry for entry in manifest["files"] if entry["file"].endswith(".index")]
    assert verify.verify_dataset(str(published)).ok
    assert verify.verify_dataset(str(published), deep=True).ok


def test_without_an_index_the_shards_are_those_of_a_build_with_one(published, tmp_path):
    plain = _build(tmp_path / "out", **{"output.index": False})
    manifest = _manifest(plain)
    assert all("index" not in shard for shard in _shards(manifest))
    assert not list(plain.glob("*.index"))
    assert [{key: value for key, value in shard.items() if key != "index"}
            for shard in _shards(_manifest(published))] == _shards(manifest)
    assert verify.verify_dataset(str(plain), deep=True).ok


def _copy(published, tmp_path_factory):
    version = tmp_path_factory.mktemp("copy") / "v"
    shutil.copytree(published, version)
    return version


def _index_of_first_shard(version):
    return version / _shards(_manifest(version))[0]["index"]["file"]


damage_st = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("truncate"), st.integers(min_value=1), st.just(b"")),
    st.tuples(st.just("extend"), st.just(0), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("line"), st.integers(min_value=0), st.tuples(
        st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6))),
)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=damage_st)
def test_verify_finds_a_damaged_index(published, tmp_path_factory, damage):
    version = _copy(published, tmp_path_factory)
    path = _index_of_first_shard(version)
    data = bytearray(path.read_bytes())
    kind, where, what = damage
    if kind == "flip":
        data[where % len(data)] ^= what
    elif kind == "truncate":
        del data[-(1 + where % len(data)):]
    elif kind == "extend":
        data += what
    else:  # one line replaced by another offset and length
        lines = data.splitlines(keepends=True)
        line = where % len(lines)
        replacement = b"%d %d\n" % what
        if lines[line] == replacement:
            return
        lines[line] = replacement
        data = bytearray(b"".join(lines))
    path.write_bytes(bytes(data))
    plain = verify.verify_dataset(str(version))
    assert {(problem.file, problem.code) for problem in plain.problems} >= {
        (path.name, "sha256")}
    deep = verify.verify_dataset(str(version), deep=True)
    (found,) = [problem for problem in deep.problems if problem.code == "index"]
    assert found.file == path.name and "disagrees with" in found.message


def test_a_missing_index_is_damage(published, tmp_path_factory):
    version = _copy(published, tmp_path_factory)
    path = _index_of_first_shard(version)
    path.unlink()
    report = verify.verify_dataset(str(version), deep=True)
    assert (path.name, "missing") in {(problem.file, problem.code) for problem in report.problems}


def test_an_index_the_manifest_does_not_list_is_damage(published, tmp_path_factory):
    version = _copy(published, tmp_path_factory)
    manifest = _manifest(version)
    shard = _shards(manifest)[0]
    del shard["index"]
    (version / "manifest.json").write_text(json.dumps(manifest))
    report = verify.verify_dataset(str(version))
    problems = {(problem.file, problem.code) for problem in report.problems}
    assert (shard["file"] + ".index", "unexpected") in problems
    # Listed in SHA256SUMS or not, an extra index is never taken as a plain file.
    (version / "SHA256SUMS").write_text("".join(
        line for line in (version / "SHA256SUMS").read_text().splitlines(keepends=True)
        if not line.endswith(shard["file"] + ".index\n")))
    (version / "stray.tfrecord.index").write_bytes(b"0 16\n")
    report = verify.verify_dataset(str(version))
    problems = {(problem.file, problem.code) for problem in report.problems}
    assert {(shard["file"] + ".index", "unexpected"),
            ("stray.tfrecord.index", "unexpected")} <= problems


def test_sha256sums_must_list_each_index(published, tmp_path_factory):
    version = _copy(published, tmp_path_factory)
    name = _index_of_first_shard(version).name
    (version / "SHA256SUMS").write_text("".join(
        line for line in (version / "SHA256SUMS").read_text().splitlines(keepends=True)
        if not line.endswith(name + "\n")))
    report = verify.verify_dataset(str(version))
    assert [str(problem) for problem in report.problems] == [
        f"SHA256SUMS: does not list index {name}"]


@pytest.mark.parametrize("change, field", [
    (lambda index: index.update(file="other.tfrecord.index"), "index.file"),
    (lambda index: index.update(num_bytes=-1), "index.num_bytes"),
    (lambda index: index.update(num_bytes=True), "index.num_bytes"),
    (lambda index: index.update(sha256="ab"), "index.sha256"),
    (lambda index: index.update(extra=1), "index"),
    (lambda index: index.pop("sha256"), "index"),
])
def test_load_manifest_checks_an_index_entry_as_strictly_as_a_shard(published, change, field):
    manifest = _manifest(published)
    load_manifest(json.dumps(manifest))
    change(manifest["splits"]["train"]["shards"][0]["index"])
    with pytest.raises(ManifestError) as raised:
        load_manifest(json.dumps(manifest))
    assert raised.value.field == f"splits.train.shards[0].{field}"


def test_a_gzip_manifest_with_an_index_is_refused(published):
    manifest = _manifest(published)
    manifest["compression"] = "GZIP"
    for shard in _shards(manifest):
        shard["file"] += ".gz"
        shard["index"]["file"] = shard["file"] + ".index"
    with pytest.raises(ManifestError, match="gzip shard has no index"):
        load_manifest(json.dumps(manifest))
