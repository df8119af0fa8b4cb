"""A large shard's sha256 computed on a thread of its own (issue 39): same checks, same errors.

`held_manifest.checked_records` hashes a shard of at least `_THREAD_FROM`
bytes on a background thread, fed chunks of `_HASH_CHUNK`. Generated
shards, chunk sizes and damage: the background path must yield the same
records and raise the same error at the same point as the inline path (the
reference), hash off the reading thread, and leave no thread behind when
its reader stops early or fails.
"""

import hashlib
import io
import threading

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.pipelines.publish import held_manifest
from recordforge.transforms import tfrecord

_records = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=12)

# What is wrong with the shard read: nothing, a flipped byte, bytes cut from
# its end, bytes added, or another shard of the same size (valid records,
# so only the sha256 can tell).
_faults = st.one_of(st.just(("intact", 0)), st.tuples(st.just("flip"), st.integers(0, 10 ** 6)),
                    st.tuples(st.just("cut"), st.integers(1, 40)),
                    st.tuples(st.just("extra"), st.integers(1, 40)),
                    st.just(("other", 0)))


def _damaged(data: bytes, fault) -> bytes:
    kind, amount = fault
    if kind == "flip":
        out = bytearray(data)
        out[amount % len(out)] ^= 1
        return bytes(out)
    if kind == "cut":
        return data[:max(0, len(data) - amount)]
    if kind == "extra":
        return data + b"\0" * amount
    if kind == "other":  # one record of the same framed size (16 bytes of framing)
        return tfrecord.frame_records([b"x" * (len(data) - 16)])
    return data


def _read(data: bytes, held, *, stop=None):
    """(records read, the error's type and text or None)."""
    records = held_manifest.checked_records(
        lambda: io.BytesIO(data), held, compression="none", read_manifest=lambda: None)
    got = []
    try:
        for record in records:
            got.append(bytes(record))
            if stop is not None and len(got) == stop:
                records.close()
                break
    except held_manifest.DatasetCorrupt as error:
        return got, (type(error), str(error))
    except tfrecord.TFRecordError as error:
        return got, (type(error), str(error))
    return got, None


def _held(data: bytes) -> held_manifest.HeldShard:
    return held_manifest.HeldShard("train-0.tfrecord", "out/train-0.tfrecord", len(data),
                                   hashlib.sha256(data).hexdigest())


@settings(max_examples=60, deadline=None)
@given(records=_records, fault=_faults, chunk=st.integers(1, 700), block=st.integers(1, 500))
def test_background_hashing_reads_and_fails_as_inline_hashing(records, fault, chunk, block):
    written = tfrecord.frame_records(records)
    held, data = _held(written), _damaged(written, fault)
    with pytest.MonkeyPatch.context() as patch:
        # Small reads, so that records, reads and chunks straddle each other.
        patch.setattr("recordforge.transforms.tfrecord.reading.READ_BLOCK", block)
        inline = _read(data, held)
        patch.setattr(held_manifest, "_THREAD_FROM", 0)
        patch.setattr(held_manifest, "_HASH_CHUNK", chunk)
        background = _read(data, held)
    assert (inline[1] is None) == (data == written)  # damage always raises
    if inline[1] is None:
        assert inline == background == (records, None)
    elif "holds more than" in inline[1][1]:
        # Read ahead, a shard longer than its entry is refused sooner.
        assert background[1][0] is inline[1][0]
        assert background[0] == inline[0][:len(background[0])]
    else:
        assert background == inline


class _RecordingSha256:
    """hashlib.sha256 that notes the threads its updates ran on."""

    threads: set = set()

    def __init__(self):
        self._digest = hashlib.sha256()

    def update(self, block):
        _RecordingSha256.threads.add(threading.get_ident())
        self._digest.update(block)

    def hexdigest(self):
        return self._digest.hexdigest()


def _sha256_threads(monkeypatch, size: int) -> set:
    data = tfrecord.frame_records([b"r" * 1000] * (size // 1016 + 1))
    monkeypatch.setattr(held_manifest, "hashlib",
                        type("hashlib", (), {"sha256": _RecordingSha256}))
    _RecordingSha256.threads = set()
    assert _read(data, _held(data)) == (list(tfrecord.iter_records(io.BytesIO(data))), None)
    return _RecordingSha256.threads


def test_a_large_shard_is_hashed_off_the_reading_thread(monkeypatch):
    threads = _sha256_threads(monkeypatch, held_manifest._THREAD_FROM)
    assert threads and threading.get_ident() not in threads


def test_a_small_shard_is_hashed_on_the_reading_thread(monkeypatch):
    """A thread costs more than it saves on a block or two."""
    assert _sha256_threads(monkeypatch, 4096) == {threading.get_ident()}


def _hashing_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "recordforge-sha256"]


@settings(max_examples=20, deadline=None)
@given(records=_records, stop=st.integers(1, 12), fault=_faults)
def test_no_hashing_thread_outlives_its_reader(records, stop, fault):
    """A reader that stops early, or fails, stops its hashing thread."""
    written = tfrecord.frame_records(records)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(held_manifest, "_THREAD_FROM", 0)
        patch.setattr(held_manifest, "_HASH_CHUNK", 64)
        _read(_damaged(written, fault), _held(written), stop=stop)
    assert _hashing_threads() == []


def test_the_hashing_thread_holds_a_bounded_number_of_chunks(monkeypatch):
    """Memory: the reader waits once `_PENDING_BLOCKS` chunks are queued,
    whatever the shard's size, rather than read ahead of the hash."""
    release = threading.Event()
    largest = []

    class _Slow(_RecordingSha256):
        def update(self, block):
            release.wait()
            super().update(block)

    data = tfrecord.frame_records([b"r" * 100] * 400)
    monkeypatch.setattr(held_manifest, "hashlib", type("hashlib", (), {"sha256": _Slow}))
    monkeypatch.setattr(held_manifest, "_THREAD_FROM", 0)
    monkeypatch.setattr(held_manifest, "_HASH_CHUNK", 128)
    digest = held_manifest._BackgroundDigest()
    feeder = threading.Thread(target=lambda: [digest.update(data[i:i + 128])
                                              for i in range(0, len(data), 128)])
    feeder.start()
    feeder.join(0.5)
    largest.append(digest._blocks.qsize())
    assert feeder.is_alive()  # blocked: the hash holds the rest back
    release.set()
    feeder.join()
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert max(largest) <= held_manifest._PENDING_BLOCKS
