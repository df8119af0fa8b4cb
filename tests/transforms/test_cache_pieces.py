"""The build cache's pieces and names: what is written is what is read, and damage is never reused."""

from __future__ import annotations

import json
import os
import time

import fsspec
import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.schemas.stats import FeatureStatistics
from recordforge.transforms.cache.names import (file_key, key_of, parse_piece_name, piece_name,
                                                whole_files)
from recordforge.transforms.cache import pieces
from recordforge.transforms.cache.pieces import (DamagedPiece, PieceWriter, decode_value,
                                                 encode_value, read_piece)
from recordforge.transforms.cache.steps import _PlanOrReuse
from recordforge.transforms.readers import inputs as inputs_lib
from recordforge.transforms.readers.inputs import (ContentTokens, changed_inputs, content_token,
                                                   input_fingerprint, write_marks, xxh3_token)
from recordforge.transforms.writer import RunFile
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.merge_statistics import partial_to_json
from recordforge.transforms.writer import RunBuffer, ShardTuning
from recordforge.transforms.tfrecord import iter_records

LOCAL = fsspec.filesystem("file")

examples_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=300)),
    max_size=40)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                         st.floats(allow_nan=False), st.text(max_size=10))
dead_letter_strategy = st.fixed_dictionaries({
    "source": st.text(max_size=10), "row": st.one_of(st.none(), st.integers(0, 10**9)),
    "input": st.one_of(json_scalars, st.dictionaries(st.text(max_size=5), json_scalars,
                                                     max_size=4),
                       st.lists(st.text(max_size=5), max_size=4))})


NAME = "a" * 40 + ".00000-of-00001.piece"
SPLITS = (("train", 0.7), ("test", 0.3))
TUNING = ShardTuning()


def _options(shuffle: bool) -> dict:
    return {"shuffle": shuffle, "sample_every": TUNING.sample_every(),
            "prefix_len": TUNING.prefix_len, "index_every": TUNING.index_every}


def _write(tmp_path, examples, dead_letters=(), counts=(("a.csv", 3),), shuffle=True):
    writer = PieceWriter(LOCAL, str(tmp_path), NAME, SplitAssigner("d", SPLITS),
                         **_options(shuffle))
    for start in range(0, len(examples), 7):  # batches as a converter gives them
        writer.add("examples", examples[start:start + 7])
    for record in dead_letters:
        writer.add("dead_letter", record)
    for count in counts:
        writer.add("counts", count)
    return writer.commit()


def _run_bytes(paths) -> list[bytes]:
    return [open(path, "rb").read() for path in paths]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(examples=examples_strategy, dead_letters=st.lists(dead_letter_strategy, max_size=5),
       shuffle=st.booleans())
def test_a_piece_gives_back_what_was_written(tmp_path, examples, dead_letters, shuffle):
    for path in tmp_path.iterdir():
        path.unlink()
    runs, size = _write(tmp_path, examples, dead_letters, shuffle=shuffle)
    piece = read_piece(LOCAL, str(tmp_path), NAME)
    assert piece.runs == runs and piece.size == size
    assert piece.examples == len(examples)
    assert piece.values("dead_letter") == dead_letters
    assert piece.values("counts") == [("a.csv", 3)]
    assert not list(tmp_path.glob("*.tmp"))  # committed under its names, nothing left behind
    # The runs are the shard writer's own: the same bytes its spill step writes.
    buffer = RunBuffer(SplitAssigner("d", SPLITS), **_options(shuffle))
    for start in range(0, len(examples), 7):
        buffer.add(examples[start:start + 7])
    spilled = []
    for split in buffer.splits_held():
        path = tmp_path / f"spill-{split}"
        with open(path, "wb") as handle:
            buffer.write(split, handle)
        spilled.append(path)
    assert _run_bytes(run.path for run in runs) == _run_bytes(spilled)
    # Read back as ExampleBatches, every row comes back, with its key when it
    # orders the rows.
    back = [pair for batch in piece.example_batches(LOCAL, SplitAssigner("d", SPLITS).salt)
            for pair in batch]
    assert sorted(example for _, example in back) == sorted(example for _, example in examples)
    if not shuffle and all(key is not None for key, _ in examples):
        assert sorted(back) == sorted(examples)


def _merged_rows(paths) -> list:
    """Every row of the runs at `paths`, in (key, example) order."""
    return sorted((bytes(key), bytes(example)) for path in paths
                  for key, example, _ in RunFile(str(path)).stream(b"", None))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(examples=examples_strategy, shuffle=st.booleans(), run_bytes=st.integers(1, 3000))
def test_a_piece_whose_rows_pass_its_run_bytes_holds_the_same_rows_in_several_runs(
        tmp_path, examples, shuffle, run_bytes):
    import shutil

    for path in tmp_path.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    one_run = tmp_path / "one"
    one_run.mkdir()
    whole, _ = _write(one_run, examples, shuffle=shuffle)
    writer = PieceWriter(LOCAL, str(tmp_path), NAME, SplitAssigner("d", SPLITS),
                         run_bytes=run_bytes, **_options(shuffle))
    for start in range(0, len(examples), 7):
        writer.add("examples", examples[start:start + 7])
        # Never more held than a batch past the bound.
        assert writer._buffer.buffered_bytes < run_bytes + 7 * 400
    runs, size = writer.commit()
    piece = read_piece(LOCAL, str(tmp_path), NAME)
    assert piece.runs == runs and piece.size == size and piece.examples == len(examples)
    for split in {run.split for run in whole} | {run.split for run in runs}:
        ours = [run for run in runs if run.split == split]
        theirs = [run for run in whole if run.split == split]
        # The same rows of each split, counted, sized and sampled alike.
        assert _merged_rows(run.path for run in ours) == _merged_rows(run.path for run in theirs)
        assert sum(run.num_records for run in ours) == sum(run.num_records for run in theirs)
        assert sum(run.num_bytes for run in ours) == sum(run.num_bytes for run in theirs)
        assert (sorted(entry for run in ours for entry in run.sample)
                == sorted(entry for run in theirs for entry in run.sample))
    if run_bytes <= 16:  # (a framed record's least): a run per batch and split it had
        batches = [examples[start:start + 7] for start in range(0, len(examples), 7)]
        assert len(runs) == sum(len(RunBuffer(SplitAssigner("d", SPLITS), **_options(shuffle))
                                    .add(batch)) for batch in batches)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(examples=examples_strategy.filter(bool), data=st.data())
def test_any_damage_is_refused(tmp_path, examples, data):
    for path in tmp_path.iterdir():
        path.unlink()
    _write(tmp_path, examples)
    victim = data.draw(st.sampled_from(sorted(tmp_path.iterdir())), label="file")
    content = bytearray(victim.read_bytes())
    if data.draw(st.booleans(), label="truncate"):
        damaged = bytes(content[:data.draw(st.integers(0, len(content) - 1), label="length")])
    else:
        position = data.draw(st.integers(0, len(content) - 1), label="position")
        content[position] ^= data.draw(st.integers(1, 255), label="flip")
        damaged = bytes(content)
    victim.write_bytes(damaged)
    with pytest.raises(DamagedPiece, match=NAME):
        read_piece(LOCAL, str(tmp_path), NAME)


def test_a_missing_piece_or_run_is_damaged_not_an_error(tmp_path):
    with pytest.raises(DamagedPiece):
        read_piece(LOCAL, str(tmp_path), NAME)
    runs, _ = _write(tmp_path, [(None, b"x"), (None, b"y"), (None, b"z")])
    RunFile(runs[0].path)  # a complete run...
    (tmp_path / runs[0].path.rsplit("/", 1)[-1]).unlink()
    with pytest.raises(DamagedPiece, match="No such file"):  # ...gone
        read_piece(LOCAL, str(tmp_path), NAME)


def test_a_summary_cannot_name_a_file_outside_its_runs(tmp_path):
    """A summary rewritten with a valid digest still names only its own runs."""
    import hashlib
    import json

    from recordforge.transforms.tfrecord import frame_records

    _write(tmp_path, [(None, b"a")])
    (tmp_path / "secret").write_bytes(b"x")
    with open(tmp_path / NAME, "rb") as handle:
        summary = json.loads(next(iter_records(handle, compression="none"))[1:])
    for evil in ("../secret", "secret", NAME[:-6] + ".s0.run/../../secret", NAME[:-6] + ".s.run",
                 NAME[:-6] + ".s0.0.run", NAME[:-6] + ".s0.1.2.run", NAME[:-6] + ".s0..run",
                 NAME[:-6] + ".s00.run", NAME[:-6] + ".s0.01.run", NAME[:-6] + ".s0.１.run"):
        summary["runs"][0]["file"] = evil
        body = frame_records([b"j" + json.dumps(summary).encode()])
        (tmp_path / NAME).write_bytes(body + frame_records([b"s" + hashlib.sha256(body).digest()]))
        with pytest.raises(DamagedPiece, match="not one of its runs"):
            read_piece(LOCAL, str(tmp_path), NAME)


def test_an_aborted_piece_leaves_nothing(tmp_path):
    writer = PieceWriter(LOCAL, str(tmp_path), NAME, SplitAssigner("d", SPLITS),
                         **_options(True))
    writer.add("examples", [(None, b"x")])
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_summary_is_a_tfrecord_file_an_independent_reader_walks(tmp_path):
    _write(tmp_path, [(None, b"a"), (b"k", b"b")])
    with open(tmp_path / NAME, "rb") as handle:
        kinds = [record[:1] for record in iter_records(handle, compression="none")]
    assert kinds == [b"j", b"s"]


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), min_size=1,
                        max_size=6),
       texts=st.lists(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=10),
                      min_size=1, max_size=4))
def test_a_piece_keeps_the_statistics_it_is_given(tmp_path, batches, texts):
    """A unit gives its statistics once, a partial per split and feature
    (`unit_conversion.unit_outputs`): the piece keeps each as it was given
    (its JSON form, in the order given), text's and the others' alike, and
    leaves the partials going on down the pipeline as they were."""
    for path in tmp_path.iterdir():
        path.unlink()
    writer = PieceWriter(LOCAL, str(tmp_path), NAME, SplitAssigner("d", SPLITS),
                         **_options(True))
    given_partials = []
    for split, values in enumerate(batches):
        stats = FeatureStatistics.from_values("numeric", "float", len(values), values)
        given_partials.append(((f"s{split}", "price"), stats))
    for split, values in enumerate(texts):
        stats = FeatureStatistics.from_values("string", "bytes", len(values), values)
        given_partials.append(((f"s{split}", "city"), stats))
    expected = [partial_to_json(partial) for partial in given_partials]
    for partial in given_partials:
        writer.add("statistics", partial)
    writer.commit()
    stored = read_piece(LOCAL, str(tmp_path), NAME).values("statistics")
    assert [partial_to_json(partial) for partial in stored] == expected
    assert [partial_to_json(partial) for partial in given_partials] == expected

def test_values_survive_the_json_form():
    value = ("train", ("a", 3), {"x": [b"\x00", None, 1.5]}, np.arange(3))
    back = decode_value(encode_value(value))
    assert back[:3] == value[:3] and back[3].tolist() == [0, 1, 2]
    with pytest.raises(TypeError):
        encode_value(object())


def test_names_say_which_files_are_whole():
    key = file_key("enc", {"path": "/d/a.csv", "size": 10, "mtime_ns": 1})
    other = file_key("enc", {"path": "/d/b.csv", "size": 10, "mtime_ns": 1})
    assert key != file_key("enc", {"path": "/d/a.csv", "size": 10, "mtime_ns": 2})
    assert key != file_key("enc2", {"path": "/d/a.csv", "size": 10, "mtime_ns": 1})
    names = [piece_name(key, 0, 2), piece_name(key, 1, 2), piece_name(other, 0, 3),
             piece_name(other, 2, 3), piece_name(key, 0, 2) + ".abc.tmp", "README"]
    assert whole_files(names) == {key: 2}
    assert key_of(piece_name(key, 1, 2)[:-len(".piece")] + ".s3.run") == key
    assert key_of(piece_name(key, 1, 2)[:-len(".piece")] + ".s3.12.run") == key
    assert key_of(piece_name(key, 1, 2)[:-len(".piece")] + ".s3.x.run") is None
    assert key_of(piece_name(key, 0, 2) + ".abc.tmp") is None
    assert parse_piece_name(piece_name(other, 2, 3)) == (other, 2, 3)
    assert parse_piece_name("x" * 40 + ".00003-of-00002.piece") is None
    with pytest.raises(ValueError):
        piece_name(key, 2, 2)


entries = st.fixed_dictionaries({
    "path": st.sampled_from(["/d/a.csv", "gs://b/a.csv"]), "size": st.integers(0, 3),
    "content": st.sampled_from(["xxh3_128:00", "xxh3_128:01", "md5:AA==", "etag:x-2"])},
    optional={"mtime_ns": st.integers(0, 3), "generation": st.integers(0, 3),
              "etag": st.sampled_from(["e1", "e2"])})


@given(entries, entries)
def test_a_file_key_follows_the_bytes_never_the_version_token(one, two):
    # Same path, size and content: one key, whatever the mtime or generation
    # (rsync -t, cp -p, a re-exported dump); anything else: two keys.
    same = all(one[key] == two[key] for key in ("path", "size", "content"))
    assert (file_key("enc", one) == file_key("enc", two)) == same
    lines = changed_inputs({"files": [one]}, {"files": [two]})
    assert (lines == []) == same


@settings(max_examples=50, deadline=None)
@given(first=st.binary(max_size=3 << 20), second=st.binary(max_size=64),
       keep_mtime=st.booleans())
def test_local_content_tokens_are_the_bytes_hash(tmp_path_factory, first, second, keep_mtime):
    path = tmp_path_factory.mktemp("content") / "a.csv"
    path.write_bytes(first)
    fs = fsspec.filesystem("file")
    before = input_fingerprint(fs, str(path))
    assert before["content"] == "xxh3_128:" + xxhash.xxh3_128(first).hexdigest()
    stat = os.stat(path)
    path.write_bytes(first[:len(first) - len(second)] + second if second else first)
    if keep_mtime:  # what rsync -t and cp -p do
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = input_fingerprint(fs, str(path))
    assert (file_key("enc", before) == file_key("enc", after)) == (path.read_bytes() == first)


def test_object_store_checksums_are_content_tokens():
    fs = fsspec.filesystem("memory")
    assert content_token(fs, "/x", {"md5Hash": "AA==", "crc32c": "c"}) == "md5:AA=="
    # A composite GCS object: 32 bits of CRC alone could match other bytes.
    assert content_token(fs, "/x", {"crc32c": "c", "generation": 7}) == "crc32c:c@7"
    assert content_token(fs, "/x", {"ETag": '"9b2cf535f27731c974343645a3985328"'}) == (
        "etag:9b2cf535f27731c974343645a3985328")
    with fs.open("/y.csv", "wb") as out:  # a store with no checksum: its bytes are hashed
        out.write(b"id\n1\n")
    assert input_fingerprint(fs, "/y.csv")["content"] == (
        "xxh3_128:" + xxhash.xxh3_128(b"id\n1\n").hexdigest())


summary_values = st.recursive(
    json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                          st.dictionaries(st.text(max_size=5), inner,
                                                          max_size=4)), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(summary=st.dictionaries(st.text(max_size=8), summary_values, max_size=6),
       encoded=st.dictionaries(st.text(max_size=8), st.lists(summary_values, max_size=5),
                               max_size=3))
def test_the_summary_text_is_what_json_writes_for_it(summary, encoded):
    """Statistics kept as JSON text and spliced into the summary give the
    text `json.dumps` writes for the whole summary decoded: the pieces
    older code wrote and reads stay byte for byte the same."""
    whole = {**summary, **encoded}
    spliced = {**summary, **{key: pieces._Encoded(map(pieces._json_text, items))
                             for key, items in encoded.items()}}
    expected = json.dumps(whole, ensure_ascii=True, separators=(",", ":"))
    assert pieces._summary_text(spliced) == expected
    assert json.loads(pieces._summary_text(spliced)) == json.loads(expected)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.lists(st.text(max_size=6), min_size=1, max_size=40), min_size=1,
                      max_size=5),
       dead=st.lists(dead_letter_strategy, max_size=3))
def test_a_piece_is_the_bytes_the_whole_summary_json_gives(tmp_path, texts, dead):
    """A piece's summary record is `json.dumps` of the whole summary with
    every partial in its JSON form (`partial_to_json`), as pieces were
    written before statistics were kept as text: the same bytes."""
    for path in tmp_path.iterdir():
        path.unlink()
    writer = PieceWriter(LOCAL, str(tmp_path), NAME, SplitAssigner("d", SPLITS),
                         **_options(True))
    partials = [(("train", "city"), FeatureStatistics.from_values("string", "bytes",
                                                                  len(values), values))
                for values in texts]
    numeric = (("test", "price"), FeatureStatistics.from_values("numeric", "float", 2, [1.5, 2]))
    for partial in partials + [numeric]:
        writer.add("statistics", partial)
    for record in dead:
        writer.add("dead_letter", record)
    writer.add("counts", ("a.jsonl", len(texts)))
    writer.commit()
    with open(tmp_path / NAME, "rb") as handle:
        record = next(iter_records(handle, compression="none"))
    summary = json.loads(record[1:])
    assert summary["statistics"] == json.loads(json.dumps(
        [partial_to_json(partial) for partial in partials + [numeric]]))
    assert record[1:] == json.dumps(summary, ensure_ascii=True,
                                    separators=(",", ":")).encode("ascii")


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.binary(min_size=1, max_size=4096), second=st.binary(min_size=1, max_size=64),
       keep_mtime=st.booleans())
def test_a_build_hashes_a_local_file_once_until_it_is_written(tmp_path_factory, monkeypatch,
                                                              first, second, keep_mtime):
    """`ContentTokens` gives an unwritten file's token again without reading
    it, to the driver's second look and to the plan step; any write (even
    of the same size under the old mtime, as ``rsync -t`` leaves it) makes
    both read it again, and the token then names the new bytes. (Files are
    kept once settled, `SETTLED_NS`: here at once, and the rewrite comes
    after the file system's clock has ticked.)"""
    path = tmp_path_factory.mktemp("tokens") / "a.csv"
    path.write_bytes(first)
    fs = fsspec.filesystem("file")
    tokens = ContentTokens()
    hashed = []
    real_hash = inputs_lib._hash_bytes
    with monkeypatch.context() as patch:
        patch.setattr(inputs_lib, "SETTLED_NS", -1)
        before = input_fingerprint(fs, str(path), tokens)
        patch.setattr(inputs_lib, "_hash_bytes",
                      lambda fileobj: hashed.append(1) or real_hash(fileobj))
        assert input_fingerprint(fs, str(path), tokens) == before and not hashed
        plan = _PlanOrReuse(str(path), "csv", 1 << 20, None, "enc", {}, tokens.known)
        plan.setup()
        assert plan._known_version(str(path), write_marks(fs, str(path))) == before

        stat = os.stat(path)
        time.sleep(0.02)
        path.write_bytes(first[:len(first) - len(second)] + second)
        if keep_mtime:
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert plan._known_version(str(path), write_marks(fs, str(path))) is None
        after = input_fingerprint(fs, str(path), tokens)
    assert hashed and after["content"] == xxh3_token(xxhash.xxh3_128(path.read_bytes()))


def test_a_file_changed_just_now_is_hashed_at_every_look(tmp_path, monkeypatch):
    """A write within a tick of the file system's clock may leave a file's
    marks as they were: a file changed less than `SETTLED_NS` ago is not
    known, and is read at every look."""
    path = tmp_path / "a.csv"
    path.write_bytes(b"id\n1\n")
    fs = fsspec.filesystem("file")
    tokens = ContentTokens()
    hashed = []
    real_hash = inputs_lib._hash_bytes
    monkeypatch.setattr(inputs_lib, "_hash_bytes",
                        lambda fileobj: hashed.append(1) or real_hash(fileobj))
    first = input_fingerprint(fs, str(path), tokens)
    assert input_fingerprint(fs, str(path), tokens) == first
    assert len(hashed) == 2 and tokens.known == {}
