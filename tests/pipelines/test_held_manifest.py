"""Readers of a version that an ``--overwrite`` replaces while they read (issue 41.8).

Every reader (`ReadDataset`'s shard step, `recordforge inspect`, and the
checking `recordforge.tf` uses, `held_manifest.checked_records`) holds the
manifest it read first. Generated interleavings: a real overwrite
(begin_build + finalize) commits after the reader has taken k records. The
reader must give exactly the first version's rows, or raise "version
replaced while reading" naming a shard; it must raise whenever it opened a
shard of the new version whose bytes differ.
"""

import functools
import hashlib
import io
import json

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.pipelines import publish
from recordforge.pipelines.publish import held_manifest, inspect
from recordforge.pipelines.read_dataset import _read_shard, _Shard, resolve_version_dir
from recordforge.schemas.example import decode_example, encode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.layout import shard_file_name

FEATURES = {"id": {"type": "int64", "shape": []}}


def _shard_bytes(seed, count):
    return tfrecord.frame_records([encode_example({"id": seed * 1000 + i}) for i in range(count)])


def _stage(root, shards, overwrite):
    """A build of version v1 whose shards hold `shards` (bytes each), staged."""
    staging = publish.begin_build(str(root), "v1", overwrite)
    entries = []
    for index, data in enumerate(shards):
        file = shard_file_name("train", index, len(shards), "none")
        with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
            handle.write(data)
        count = len(list(tfrecord.iter_records(io.BytesIO(data), compression="none")))
        entries.append({"split": "train", "file": file, "num_examples": count,
                        "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({"shards": entries,
                                 "num_input_rows": sum(e["num_examples"] for e in entries),
                                 "dead_letter": {"num_rows": 0, "by_reason": {}, "files": [],
                                                 "samples": {}}}).encode())
    return functools.partial(publish.finalize, staging, name="t", compression="none",
                             features=FEATURES, vocabularies={}, config={},
                             split_names=["train"], max_error_rate=0.0, verify=False)


def _ids(record):
    return decode_example(bytes(record))["id"][1][0]


# v1: 1-3 shards of 1-3 records; v2: per shard "same bytes" or "other bytes",
# or another shard count (every name differs, so v1's names are missing).
_v1 = st.lists(st.integers(1, 3), min_size=1, max_size=3)
_v2 = st.one_of(st.lists(st.booleans(), min_size=3, max_size=3).map(lambda same: ("per", same)),
                st.integers(1, 4).map(lambda n: ("count", n)))


def _versions(counts, plan):
    old = [_shard_bytes(i, n) for i, n in enumerate(counts)]
    if plan[0] == "per":
        new = [data if same else _shard_bytes(100 + i, n)
               for i, (data, n, same) in enumerate(zip(old, counts, plan[1]))]
        changed = [not same for same in plan[1][:len(counts)]]
    else:
        new = [_shard_bytes(200 + i, 2) for i in range(plan[1])]
        changed = [True] * len(counts) if plan[1] != len(counts) else \
            [a != b for a, b in zip(old, new)]
    return old, new, changed


def _must_fail(counts, changed, k):
    """A shard is opened after the overwrite when the reader had taken at
    most its first record's index before it."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return any(change and start >= k for start, change in zip(starts, changed))


def _read_with_overwrite(records, commit, k):
    """Takes records from the iterator, committing the overwrite once k
    have been taken; returns the ids read and the error raised (or None)."""
    ids = []
    if k == 0:
        commit()
    try:
        for record in records:
            ids.append(_ids(record) if not isinstance(record, dict) else record["id"])
            if len(ids) == k:
                commit()
    except held_manifest.DatasetCorrupt as error:
        return ids, error
    return ids, None


def _check(old, counts, changed, k, ids, error):
    expected = [_ids(r) for data in old
                for r in tfrecord.iter_records(io.BytesIO(data), compression="none")]
    if error is None:
        assert ids == expected
        assert not _must_fail(counts, changed, k)
    else:
        assert isinstance(error, held_manifest.VersionReplaced), error
        assert "version replaced while reading" in str(error)
        assert "train-0000" in str(error)  # names the shard file


_SETTINGS = settings(max_examples=25, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def _fresh(tmp_path_factory, counts, plan):
    root = tmp_path_factory.mktemp("out")
    old, new, changed = _versions(counts, plan)
    _stage(root, old, overwrite=False)()
    return root, old, changed, _stage(root, new, overwrite=True)


@_SETTINGS
@given(counts=_v1, plan=_v2, data=st.data())
def test_checked_records_under_an_overwrite(tmp_path_factory, counts, plan, data):
    root, old, changed, commit = _fresh(tmp_path_factory, counts, plan)
    version = root / "v1"
    manifest = json.loads((version / "manifest.json").read_bytes())
    read_manifest = functools.partial(lambda p: p.read_bytes() if p.exists() else None,
                                      version / "manifest.json")

    def records():
        for held in held_manifest.held_shards(manifest, "train", lambda f: str(version / f)):
            yield from held_manifest.checked_records(
                functools.partial(open, held.display, "rb"), held, compression="none",
                read_manifest=read_manifest, views=data.draw(st.booleans()))

    k = data.draw(st.integers(0, sum(counts)))
    ids, error = _read_with_overwrite(records(), commit, k)
    _check(old, counts, changed, k, ids, error)
    assert (error is not None) == _must_fail(counts, changed, k)


@_SETTINGS
@given(counts=_v1, plan=_v2, data=st.data())
def test_read_dataset_under_an_overwrite(tmp_path_factory, counts, plan, data):
    root, old, changed, commit = _fresh(tmp_path_factory, counts, plan)
    url, manifest = resolve_version_dir(str(root))
    shards = [_Shard(url, held, "none")
              for held in held_manifest.held_shards(manifest, "train", str)]
    rows = (row for shard in shards for row in _read_shard(shard, manifest["features"]))
    k = data.draw(st.integers(0, sum(counts)))
    ids, error = _read_with_overwrite(rows, commit, k)
    _check(old, counts, changed, k, ids, error)
    assert (error is not None) == _must_fail(counts, changed, k)


@_SETTINGS
@given(counts=_v1, plan=_v2, data=st.data())
def test_inspect_under_an_overwrite(tmp_path_factory, counts, plan, data):
    root, old, changed, commit = _fresh(tmp_path_factory, counts, plan)
    sources, problems = inspect.shard_files(str(root))
    assert problems == []
    k = data.draw(st.integers(0, sum(counts)))
    out = _CommitAfter(commit, k)
    if k == 0:
        commit()
    code = inspect._inspect_shards(sources, None, out)
    ids = [json.loads(line)["features"]["id"][0] for line in out.getvalue().splitlines()]
    expected = [_ids(r) for d in old for r in tfrecord.iter_records(io.BytesIO(d),
                                                                     compression="none")]
    if _must_fail(counts, changed, k):
        assert code == 1
    else:
        assert code == 0 and ids == expected


class _CommitAfter(io.StringIO):
    """inspect's output; the overwrite commits once k lines are printed."""

    def __init__(self, commit, k):
        super().__init__()
        self._commit, self._k, self._lines = commit, k, 0

    def write(self, text):
        self._lines += text.count("\n")
        result = super().write(text)
        if text.endswith("\n") and self._lines == self._k:
            self._commit()
        return result


def test_inspect_says_the_version_was_replaced(tmp_path, capsys):
    old = [_shard_bytes(0, 2), _shard_bytes(1, 2)]
    _stage(tmp_path, old, overwrite=False)()
    sources, _ = inspect.shard_files(str(tmp_path))
    _stage(tmp_path, [_shard_bytes(5, 2), _shard_bytes(6, 2)], overwrite=True)()
    assert inspect._inspect_shards(sources, None, io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "train-00000-of-00002.tfrecord: version replaced while reading" in err


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=_v1, flip=st.integers(0, 10 ** 6))
def test_a_damaged_shard_the_manifest_still_lists_is_corrupt_not_replaced(
        tmp_path_factory, counts, flip):
    """Same check, other verdict: the manifest as it is now still lists the
    shard as held, so the shard itself is damaged."""
    root = tmp_path_factory.mktemp("out")
    _stage(root, [_shard_bytes(i, n) for i, n in enumerate(counts)], overwrite=False)()
    url, manifest = resolve_version_dir(str(root))
    shards = [_Shard(url, held, "none")
              for held in held_manifest.held_shards(manifest, "train", str)]
    victim = root / "v1" / shards[flip % len(shards)].held.file
    damaged = bytearray(victim.read_bytes())
    damaged[flip % len(damaged)] ^= 1
    victim.write_bytes(bytes(damaged))
    with pytest.raises(held_manifest.DatasetCorrupt) as caught:
        [row for shard in shards for row in _read_shard(shard, manifest["features"])]
    assert not isinstance(caught.value, held_manifest.VersionReplaced)
    assert victim.name in str(caught.value) and "damaged" in str(caught.value)


@_SETTINGS
@given(counts=_v1, plan=_v2, data=st.data())
def test_checked_batches_under_an_overwrite(tmp_path_factory, counts, plan, data):
    """The lists `recordforge.tf` hands to tf.data: the same records and the
    same verdict as `checked_records`, whatever the list size."""
    root, old, changed, commit = _fresh(tmp_path_factory, counts, plan)
    version = root / "v1"
    manifest = json.loads((version / "manifest.json").read_bytes())
    read_manifest = functools.partial(lambda p: p.read_bytes() if p.exists() else None,
                                      version / "manifest.json")
    max_bytes = data.draw(st.integers(1, 64))
    batches = []

    def records():
        for held in held_manifest.held_shards(manifest, "train", lambda f: str(version / f)):
            for batch in held_manifest.checked_batches(
                    functools.partial(open, held.display, "rb"), held, compression="none",
                    read_manifest=read_manifest, max_bytes=max_bytes):
                batches.append(batch)
                yield from batch

    k = data.draw(st.integers(0, sum(counts)))
    ids, error = _read_with_overwrite(records(), commit, k)
    _check(old, counts, changed, k, ids, error)
    assert (error is not None) == _must_fail(counts, changed, k)
    for batch in batches:  # a list passes max_bytes only as a single record
        assert len(batch) == 1 or sum(map(len, batch)) <= max_bytes


def _tf_records(version_dir, **options):
    import recordforge.tf as rtf

    return rtf.dataset(str(version_dir), "train", parse=False, **options)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=_v1, plan=_v2, data=st.data())
def test_recordforge_tf_under_an_overwrite(tmp_path_factory, counts, plan, data):
    """TensorFlow's iteration of `recordforge.tf.dataset`: the first version's
    records in shard order, or "version replaced while reading" naming a
    shard. tf.data reads shards ahead of the consumer, so an overwrite that
    commits mid-read may find every shard already open (then the old rows
    are right); one that commits before reading starts must be seen."""
    tf = pytest.importorskip("tensorflow")
    root, old, changed, commit = _fresh(tmp_path_factory, counts, plan)
    records = _tf_records(root / "v1")
    k = data.draw(st.integers(0, sum(counts)))
    ids = []
    if k == 0:
        commit()
    try:
        for record in records:
            ids.append(_ids(record.numpy()))
            if len(ids) == k:
                commit()
        error = None
    except tf.errors.OpError as raised:
        error = raised
    expected = [_ids(r) for d in old for r in tfrecord.iter_records(io.BytesIO(d),
                                                                     compression="none")]
    if error is None:
        assert ids == expected
        assert not (k == 0 and any(changed))
    else:
        assert "version replaced while reading" in error.message, error.message
        assert "train-0000" in error.message


def test_recordforge_tf_unchecked_reads_natively(tmp_path):
    """``check=False``: TensorFlow's TFRecordDataset, the same records."""
    pytest.importorskip("tensorflow")
    old = [_shard_bytes(0, 3), _shard_bytes(1, 2)]
    _stage(tmp_path, old, overwrite=False)()
    checked = [_ids(r.numpy()) for r in _tf_records(tmp_path)]
    unchecked = [_ids(r.numpy()) for r in _tf_records(tmp_path, check=False)]
    assert checked == unchecked == [0, 1, 2, 1000, 1001]


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(latest=st.sampled_from(["../elsewhere/v1", "/{outside}/v1", ".staging",
                               "v1/../../elsewhere/v1", "a" * 5000]))
def test_recordforge_tf_follows_only_a_latest_that_names_a_version_of_the_root(
        tmp_path_factory, latest):
    """LATEST is read as `verify` reads it: a name that leaves the root (or
    is not a version name) is refused, never followed to another version."""
    pytest.importorskip("tensorflow")
    import recordforge.tf as rtf

    base = tmp_path_factory.mktemp("roots")
    outside = base / "elsewhere"
    _stage(outside, [_shard_bytes(3, 1)], overwrite=False)()
    root = base / "root"
    _stage(root, [_shard_bytes(4, 1)], overwrite=False)()
    (root / "LATEST").write_text(latest.format(outside=str(outside).strip("/")) + "\n")
    with pytest.raises(ValueError, match="LATEST"):
        rtf.manifest(str(root))
