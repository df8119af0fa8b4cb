"""A published dataset is input too: `verify` and `inspect` on hostile versions.

Whatever LATEST, manifest.json, SHA256SUMS or a dead-letter file hold, and
whatever symbolic links sit in a version, both commands report damage (exit
1) or read the version (exit 0); they never raise, never follow a path out of
the version (a file outside it holds a secret the output must never show),
and never hash or print a file through a link.
"""

import gzip
import hashlib
import io
import json
import os

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines import publish
from recordforge.pipelines.publish import inspect, verify
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.layout import shard_file_name

SECRET = "TOPSECRET-outside-the-dataset"
HYPOTHESIS = settings(max_examples=60, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture,
                                             HealthCheck.too_slow])


def _publish(root, version="v1"):
    staging = publish.begin_build(str(root), version)
    shards = []
    for index, rows in enumerate([range(0, 3), range(3, 5)]):
        data = tfrecord.frame_records([encode_example({"id": i}) for i in rows])
        file = shard_file_name("train", index, 2, "none")
        with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
            handle.write(data)
        shards.append({"split": "train", "file": file, "num_examples": len(rows),
                       "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(f"{staging.url}/dead_letter/part-00000.jsonl", "wb") as handle:
        handle.write(b'{"reason": "out_of_range", "row": 9}\n')
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({"shards": shards, "num_input_rows": 6, "dead_letter": {
            "num_rows": 1, "by_reason": {"out_of_range": 1},
            "files": ["dead_letter/part-00000.jsonl"], "samples": {}}}).encode())
    publish.finalize(staging, name="t", compression="none",
                     features={"id": {"type": "int64", "shape": []}}, vocabularies={},
                     config={}, split_names=["train"], max_error_rate=0.5, verify=False)
    return root / version


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(a pristine published output root, a directory outside it holding
    secrets: a shard whose records print the secret, a text file, a JSONL)."""
    base = tmp_path_factory.mktemp("hostile")
    outside = base / "outside"
    outside.mkdir()
    secret_shard = tfrecord.frame_records([encode_example({"secret": SECRET})])
    (outside / "train-00000-of-00002.tfrecord").write_bytes(secret_shard)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "part-00000.jsonl").write_text(json.dumps({"secret": SECRET}) + "\n")
    (outside / "v1").mkdir()
    (outside / "v1" / "train-00000-of-00002.tfrecord").write_bytes(secret_shard)
    pristine = base / "pristine"
    _publish(pristine)
    return pristine, outside


def _copy(pristine, tmp_path, name):
    import shutil

    target = tmp_path / name
    shutil.copytree(pristine, target, symlinks=True)
    return target


def _run_both(path, capsys, deep=True):
    """(verify's exit status, inspect's exit status, everything printed)."""
    printed = []
    status_v = verify.main([str(path)] + (["--deep"] if deep else []))
    captured = capsys.readouterr()
    printed += [captured.out, captured.err]
    out = io.StringIO()
    status_i = inspect.main([str(path)], out=out)
    captured = capsys.readouterr()
    printed += [out.getvalue(), captured.out, captured.err]
    text = "\n".join(printed)
    assert SECRET not in text
    assert status_v in (0, 1) and status_i in (0, 1), text
    return status_v, status_i, text


# --- LATEST ---------------------------------------------------------------------------

_LATEST_VALUES = st.one_of(
    st.sampled_from(["", "v1", "v1\n", " v1 ", "../outside/v1", "../outside", "/etc",
                     "v1/../../outside/v1", ".staging", "LATEST", "v2", "v1/dead_letter",
                     "x" * 5000, "v1\x00", "..", "."]),
    st.text(max_size=40),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")))


@HYPOTHESIS
@given(latest=_LATEST_VALUES)
def test_any_latest_is_read_safely(world, tmp_path_factory, capsys, latest):
    pristine, outside = world
    root = _copy(pristine, tmp_path_factory.mktemp("latest"), "out")
    (root / "LATEST").write_bytes(latest.encode("utf-8", "surrogateescape"))
    status_v, status_i, text = _run_both(root, capsys)
    names_v1 = latest.strip() == "v1"
    assert (status_v, status_i) == ((0, 0) if names_v1 else (1, 1)), text


def test_latest_naming_a_link_to_a_version_outside_is_refused(world, tmp_path, capsys):
    pristine, outside = world
    root = _copy(pristine, tmp_path, "out")
    (root / "elsewhere").symlink_to(outside / "v1")
    (root / "LATEST").write_text("elsewhere\n")
    status_v, status_i, text = _run_both(root, capsys)
    assert (status_v, status_i) == (1, 1) and "symbolic link" in text


# --- manifest.json --------------------------------------------------------------------

def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


_HOSTILE_VALUES = st.one_of(
    st.sampled_from(["../outside/train-00000-of-00002.tfrecord", "/etc/passwd",
                     "../../outside/secret.txt", "dead_letter/../../outside/part-00000.jsonl",
                     "train-00000-of-00002.tfrecord", "", None, True, -1, 2 ** 70, 1e308,
                     "GZIP", [], {}, [-1], [[1]], {"base64": 3}]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda children: st.lists(children, max_size=3)
                 | st.dictionaries(st.text(max_size=5), children, max_size=3), max_leaves=8))


@HYPOTHESIS
@given(data=st.data())
def test_any_manifest_is_read_safely(world, tmp_path_factory, capsys, data):
    pristine, outside = world
    root = _copy(pristine, tmp_path_factory.mktemp("manifest"), "out")
    manifest_path = root / "v1" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(list(_paths(manifest))[1:]))
        node = manifest
        for key in path[:-1]:
            node = node[key]
        if data.draw(st.booleans()) and isinstance(node, dict):
            node.pop(path[-1], None)
        else:
            node[path[-1]] = data.draw(_HOSTILE_VALUES)
    manifest_path.write_text(json.dumps(manifest))
    _run_both(root, capsys)


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000, "\xff\xfe",
    "null", "[]", '"manifest"', "{" + " " * 1000, ""])
def test_malformed_and_deeply_nested_manifests_are_damage(world, tmp_path, capsys, text):
    pristine, _ = world
    root = _copy(pristine, tmp_path, "out")
    (root / "v1" / "manifest.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    status_v, status_i, printed = _run_both(root, capsys)
    assert (status_v, status_i) == (1, 1) and "manifest.json" in printed
    assert "Traceback" not in printed


def test_a_manifest_that_is_a_directory_is_damage(world, tmp_path, capsys):
    pristine, _ = world
    root = _copy(pristine, tmp_path, "out")
    (root / "v1" / "manifest.json").unlink()
    (root / "v1" / "manifest.json").mkdir()
    assert _run_both(root, capsys)[:2] == (1, 1)


def test_a_version_with_a_missing_shard_is_damage_for_inspect_too(world, tmp_path, capsys):
    pristine, _ = world
    root = _copy(pristine, tmp_path, "out")
    (root / "v1" / "train-00001-of-00002.tfrecord").unlink()
    status_v, status_i, text = _run_both(root, capsys)
    assert (status_v, status_i) == (1, 1) and "train-00001-of-00002.tfrecord: missing" in text


# --- symbolic links inside a version --------------------------------------------------

@pytest.mark.parametrize("link", ["train-00000-of-00002.tfrecord", "dead_letter",
                                  "dead_letter/part-00000.jsonl", "extra.txt",
                                  "SHA256SUMS", "manifest.json"])
def test_links_inside_a_version_are_reported_never_followed(world, tmp_path, capsys, link):
    """Even a link to a file with exactly the right bytes: the version would
    change whenever the target does."""
    pristine, outside = world
    root = _copy(pristine, tmp_path, "out")
    where = root / "v1" / link
    copy = tmp_path / "copy"
    if where.is_dir():
        os.rename(where, copy)
    elif where.exists():
        copy.write_bytes(where.read_bytes())
        where.unlink()
    else:
        copy.write_text(SECRET)
    where.symlink_to(copy)
    status_v, status_i, text = _run_both(root, capsys)
    assert status_v == 1 and "symbolic link" in text
    if link in ("train-00000-of-00002.tfrecord", "manifest.json"):
        assert status_i == 1
    report = verify.verify_dataset(str(root))
    assert report.files_checked <= 4


# --- dead-letter files ----------------------------------------------------------------

@HYPOTHESIS
@given(lines=st.lists(st.one_of(
    st.binary(max_size=30),
    st.sampled_from([b"[" * 100_000, b'{"a": 1}', b"{}", b"[1, 2]", b'"text"', b"\xff\xfe{}",
                     b'{"a": "\\ud800"}', b"NaN", b"   "])), max_size=5))
def test_any_dead_letter_file_is_printed_or_reported(tmp_path_factory, capsys, lines):
    path = tmp_path_factory.mktemp("dl") / "part-00000.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    out = io.StringIO()
    status = inspect.main([str(path)], out=out)
    err = capsys.readouterr().err
    assert status in (0, 1)
    assert (status == 1) == bool(err), err
    for printed in out.getvalue().splitlines():
        assert isinstance(json.loads(printed), dict)


def test_damaged_gzip_dead_letter_file_is_damage(tmp_path, capsys):
    data = gzip.compress(b'{"reason": "x"}\n' * 1000)
    path = tmp_path / "part-00000.jsonl.gz"
    path.write_bytes(data[:len(data) // 2])
    out = io.StringIO()
    assert inspect.main([str(path)], out=out) == 1
    assert "cannot be read" in capsys.readouterr().err
