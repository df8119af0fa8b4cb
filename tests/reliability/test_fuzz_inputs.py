"""Property tests: hostile bytes and configs end in the documented error.

Every reader that takes outside input is fed arbitrary and mutated input:

* the TFRecord reader (`tfrecord.iter_records`) yields records or raises
  `TFRecordError`;
* the Example decoder (`example.decode_example`) returns features or raises
  `ExampleDecodeError`;
* the CSV/JSONL row readers (`csv_reader.iter_csv` / `iter_jsonl`) yield
  rows or dead letters with a registered reason, never raise;
* the config loader (`config.load_config` / `config_from_dict`) returns a
  config or raises `ConfigError`.

Each example also runs under a wall-clock alarm (no hang) and tracemalloc
(no allocation far beyond the input's size). `benchmarks/fuzz.py` runs these
same properties for minutes; ``RECORDFORGE_FUZZ_EXAMPLES`` sets the number of
examples per property (default: a CI-sized 60).
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import struct
import tempfile
import tracemalloc
import uuid

import fsspec
from hypothesis import HealthCheck, example, given, settings, strategies as st

from recordforge.pipelines.config import DatasetConfig, config_from_dict, load_config
from recordforge.schemas.dead_letters import REASONS
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.example import ExampleDecodeError, decode_example, encode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.readers import csv as csv_reader, jsonl
from recordforge.transforms.readers.rows import SourceRow
from recordforge.transforms.tfrecord import TFRecordError

EXAMPLES = int(os.environ.get("RECORDFORGE_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
# Generous: a loaded 2-core machine is slow, a hang is forever.
SECONDS_PER_EXAMPLE = 20
# Inputs here are at most tens of KB; anything near this is an allocation
# driven by a length field or a decompression bomb, not by the input.
MAX_PEAK_BYTES = 64 << 20


@contextlib.contextmanager
def bounded(seconds: float = SECONDS_PER_EXAMPLE, peak_bytes: int | None = MAX_PEAK_BYTES):
    """Fails the example if it runs longer than `seconds` or allocates more
    than `peak_bytes` (Python allocations, measured with tracemalloc; None:
    time only, for inputs where tracing itself would dominate)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"example still running after {seconds}s")

    started_tracing = peak_bytes is not None and not tracemalloc.is_tracing()
    if started_tracing:
        tracemalloc.start()
    if peak_bytes is not None:
        tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        peak = tracemalloc.get_traced_memory()[1] - before
        if started_tracing:
            tracemalloc.stop()
    if peak_bytes is not None:
        assert peak < peak_bytes, f"allocated {peak} bytes"


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Applies (kind, position, value) edits: 0 flip a byte, 1 truncate,
    2 insert a byte, 3 insert a TFRecord header claiming a huge length."""
    out = bytearray(data)
    for kind, position, value in edits:
        at = position % (len(out) + 1)
        if kind == 0 and out:
            out[at % len(out)] ^= value or 1
        elif kind == 1:
            del out[at:]
        elif kind == 2:
            out[at:at] = bytes([value])
        else:
            length = struct.pack("<Q", 1 << (40 + value % 24))
            out[at:at] = length + struct.pack("<I", tfrecord.masked_crc32c(length))
    return bytes(out)


edits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 16), st.integers(0, 255)),
                 max_size=4)
payloads = st.lists(st.binary(max_size=300), max_size=8)


# --- TFRecord reader -----------------------------------------------------------------

def _read_all(data: bytes, compression: str, path: str = "") -> list[bytes]:
    return list(tfrecord.iter_records(io.BytesIO(data), path=path, compression=compression))


@FUZZ
@given(data=st.binary(max_size=4096), compression=st.sampled_from(["none", "gzip", "auto"]))
def test_tfrecord_reader_arbitrary_bytes(data, compression):
    with bounded():
        try:
            _read_all(data, compression, path="fuzz.tfrecord")
        except TFRecordError as error:
            assert error.path == "fuzz.tfrecord" and error.offset >= 0


@FUZZ
@given(records=payloads, compression=st.sampled_from(["none", "gzip"]),
       members=st.integers(1, 3), edits=edits)
def test_tfrecord_reader_mutated_files(records, compression, members, edits):
    framed = tfrecord.frame_records(records)
    if compression == "gzip":
        # Several gzip members, as recordforge's own shards are assembled.
        cut = [len(framed) * i // members for i in range(members + 1)]
        framed = b"".join(tfrecord.gzip_compress(framed[a:b]) for a, b in zip(cut, cut[1:]))
    damaged = mutate(framed, edits)
    with bounded():
        try:
            read = _read_all(damaged, compression)
        except TFRecordError:
            assert damaged != framed, "an intact file was rejected"
            return
    if damaged == framed:
        assert read == records


# --- Example decoder -----------------------------------------------------------------

feature_values = st.one_of(
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=4),
    st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=4),
    st.lists(st.binary(max_size=40), min_size=1, max_size=4))
examples = st.dictionaries(st.text(max_size=12), feature_values, max_size=5)


@FUZZ
@given(data=st.binary(max_size=2048))
def test_example_decoder_arbitrary_bytes(data):
    with bounded():
        try:
            decoded = decode_example(data)
        except ExampleDecodeError:
            return
    assert all(kind in ("int64", "float", "bytes") for kind, _ in decoded.values())


@FUZZ
@given(features=examples, edits=edits)
def test_example_decoder_mutated_examples(features, edits):
    encoded = encode_example(features)
    damaged = mutate(encoded, edits)
    with bounded():
        try:
            decoded = decode_example(damaged)
        except ExampleDecodeError:
            assert damaged != encoded
            return
    if damaged == encoded:
        assert set(decoded) == set(features)


# --- CSV / JSONL readers ----------------------------------------------------------

# Bytes that matter to the readers, plus arbitrary ones (invalid UTF-8, NUL).
table_bytes = st.lists(st.one_of(
    st.sampled_from([b",", b'"', b"\n", b"\r", b"\r\n", b"\x00", b"{", b"}", b"[", b"]",
                     b":", b'"a"', b"\xef\xbb\xbf", b"\xff", b"\xc3", b" ", b"1", b"null",
                     b'{"a": 1}', b"a,b\n", b"[" * 70, b"]" * 70]),
    st.binary(max_size=8)), max_size=200).map(b"".join)


def _check_reader_output(items, source: str) -> None:
    for item in items:
        if isinstance(item, SourceRow):
            assert item.source == source and isinstance(item.values, dict)
            continue
        assert isinstance(item, dict), item
        assert item["reason"] in REASONS and item["stage"] == "read", item
        assert item["source"] == source
        json.dumps(item, allow_nan=False)  # dead letters are always valid JSON


def _read_table(reader, data: bytes, suffix: str, **kwargs) -> list:
    fs = fsspec.filesystem("memory")
    path = f"/fuzz-{uuid.uuid4().hex}{suffix}"
    fs.pipe_file(path, data)
    try:
        with bounded():
            return list(reader(path, fs=fs, source="fuzz" + suffix, **kwargs))
    finally:
        fs.rm_file(path)


@FUZZ
@given(data=table_bytes, compressed=st.booleans(), start=st.integers(0, 64))
def test_csv_reader_never_raises(data, compressed, start):
    suffix = ".csv.gz" if compressed else ".csv"
    body = gzip.compress(data, mtime=0) if compressed else data
    start = 0 if compressed else start
    items = _read_table(csv_reader.iter_csv, body, suffix, start=start)
    _check_reader_output(items, "fuzz" + suffix)


@FUZZ
@given(data=table_bytes, start=st.integers(0, 64))
@example(data=b"\n\xef\xbb\xbf", start=0)  # a byte-order mark not at the start is text
def test_jsonl_reader_never_raises(data, start):
    items = _read_table(jsonl.iter_jsonl, data, ".jsonl", start=start)
    _check_reader_output(items, "fuzz.jsonl")
    if start == 0:
        # Every line that is not blank is a row or a dead letter; an empty
        # file is one dead letter.
        lines = data.split(b"\n")
        assert len(items) == (sum(_counts_as_row(line, i == 0) for i, line in enumerate(lines))
                              if data else 1)


def _counts_as_row(line: bytes, first: bool) -> bool:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return True
    if first and text.startswith("\ufeff"):  # a byte-order mark only opens a file
        text = text[1:]
    return bool(text.strip())


@FUZZ
@given(data=st.binary(max_size=2048))
@example(data=b"\x08\x00\x00\x00\x00\x00\x00\x00\x06")  # isal's own error type
def test_gzip_damage_in_tables_is_a_read_error(data):
    items = _read_table(csv_reader.iter_csv, b"\x1f\x8b" + data, ".csv.gz")
    _check_reader_output(items, "fuzz.csv.gz")


# --- config loader -------------------------------------------------------------------

_WORKDIR: list[str] = []


def _workdir() -> str:
    """A directory with a small CSV table, made once per process."""
    if not _WORKDIR:
        root = tempfile.mkdtemp(prefix="recordforge-fuzz-")
        atexit.register(shutil.rmtree, root, True)
        with open(os.path.join(root, "rows.csv"), "w") as handle:
            handle.write("id,name,score\n1,a,0.5\n")
        os.mkdir(os.path.join(root, "images"))
        _WORKDIR.append(root)
    return _WORKDIR[0]


def base_config(root: str) -> dict:
    return {"name": "fuzz", "version": "1.0.0",
            "source": {"type": "csv", "path": os.path.join(root, "rows.csv")},
            "features": {"id": {"type": "int64", "min": 0},
                         "name": {"type": "string", "values": ["a", "b"]},
                         "score": {"type": "float", "shape": [-1], "default": [0.0]}},
            "splits": {"train": 0.5, "test": 0.5}, "key": "id",
            "output": {"path": os.path.join(root, "out"), "compression": "gzip",
                       "shard_size": "1MB"},
            "dead_letter": {"max_error_rate": 0.1}}


yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(),
    st.text(max_size=20), st.binary(max_size=8),
    st.sampled_from(["", ".", "..", "/nonexistent", "memory://x/y", "*.csv", "{date}",
                     "1.0.0/../x", "256MB", "-1", "1e400", "images", "csv", "gzip",
                     "auto", "int64", "string", "directory", "rows.csv"]))
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.one_of(st.text(max_size=10), st.integers()),
                                               children, max_size=4)),
    max_leaves=20)
key_paths = st.lists(st.sampled_from([
    "name", "version", "source", "type", "path", "labels", "extensions", "image", "features",
    "id", "name", "score", "min", "shape", "default", "values", "vocabulary", "splits",
    "train", "key", "output", "compression", "shard_size", "shuffle", "dead_letter",
    "max_error_rate", "max_errors", "from", "max_bytes"]), min_size=1, max_size=3)


@contextlib.contextmanager
def _in_workdir():
    # Relative paths the fuzzer invents ("." or "..") resolve inside a small
    # scratch directory, not in whatever tree the tests were started from.
    previous = os.getcwd()
    os.chdir(os.path.join(_workdir(), "images"))
    try:
        yield
    finally:
        os.chdir(previous)


def _load_or_config_error(raw) -> None:
    with _in_workdir(), bounded():
        try:
            config = config_from_dict(raw)
        except ConfigError as error:
            assert str(error)
            return
    assert isinstance(config, DatasetConfig)
    json.dumps(config.resolved)


@FUZZ
@given(value=yaml_values)
def test_config_from_arbitrary_data(value):
    _load_or_config_error(value)


@FUZZ
@given(changes=st.lists(st.tuples(key_paths, yaml_values), min_size=1, max_size=3))
def test_config_with_mutated_keys(changes):
    raw = base_config(_workdir())
    for path, value in changes:
        node = raw
        for part in path[:-1]:
            child = node.get(part) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                break
            node = child
        if isinstance(node, dict):
            node[path[-1]] = value
    _load_or_config_error(raw)


yaml_text = st.lists(st.one_of(
    st.sampled_from(["name: fuzz\n", "version: '1'\n", "source:\n", "  type: csv\n",
                     "features: {a: {type: int64}}\n", "output: {path: out}\n", "- ", ": ",
                     "[", "]", "{", "}", "&a ", "*a ", "!!python/object:os.system ", "!!binary ",
                     "!!set ", "? ", "'", '"', "\n", "  ", "\t", "%YAML 1.1\n", "---\n",
                     "<<: *a\n", "\x00", "\ufeff", "#"]),
    st.text(max_size=10)), max_size=60).map("".join)


@FUZZ
@given(text=yaml_text)
@example(text="!!set name: fuzz\n")  # a mapping tag on a scalar
def test_config_from_arbitrary_yaml(text):
    path = os.path.join(_workdir(), f"fuzz-{uuid.uuid4().hex}.yaml")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(text)
    try:
        with _in_workdir(), bounded():
            try:
                load_config(path)
            except ConfigError:
                pass
    finally:
        os.unlink(path)


# --- the documented limits, checked directly ------------------------------------------

def test_a_record_claiming_two_to_the_sixty_bytes_in_a_gzip_bomb_is_refused_early():
    length = struct.pack("<Q", 1 << 60)
    header = length + struct.pack("<I", tfrecord.masked_crc32c(length))
    # ~100 KB of gzip expanding to 100 MB of zeros behind the header: reading
    # on would buffer all of it waiting for a record that can never complete.
    bomb = tfrecord.gzip_compress(header + bytes(100 << 20), level=3)
    assert len(bomb) < 1 << 20
    with bounded(peak_bytes=16 << 20):
        try:
            _read_all(bomb, "gzip")
        except TFRecordError as error:
            assert "exceeds" in error.problem and error.offset == 0
        else:
            raise AssertionError("a 2**60-byte record was accepted")


def test_deeply_nested_yaml_is_a_config_error(tmp_path):
    for text in ("[" * 20_000, "- " * 20_000 + "x", "{a: " * 20_000, "a:\n " * 5_000 + "1"):
        path = tmp_path / "deep.yaml"
        path.write_text(text)
        # Time only: under tracemalloc, unwinding PyYAML's deep recursion takes
        # tens of seconds.
        with bounded(peak_bytes=None):
            try:
                load_config(str(path))
            except ConfigError as error:
                assert "nested" in str(error) or "invalid YAML" in str(error), str(error)
            else:
                raise AssertionError("deep YAML was accepted")


def test_deeply_nested_and_self_referencing_data_is_a_config_error():
    deep: dict = {}
    node = deep
    for _ in range(10_000):
        node["a"] = {}
        node = node["a"]
    looped: list = []
    looped.append(looped)
    for features in (deep, {"x": looped}):
        raw = {**base_config(_workdir()), "features": features}
        with bounded():
            try:
                config_from_dict(raw)
            except ConfigError as error:
                assert error.key == "features" or "nested" in str(error), str(error)
            else:
                raise AssertionError("accepted")


def test_yaml_alias_bomb_is_a_config_error(tmp_path):
    # "Billion laughs": nine levels of ten aliases each expand to 10**9 leaves.
    lines = ['a0: &a0 ["lol"]'] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    lines.append("features: {x: {type: int64, values: *a9}}")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    with bounded():
        try:
            load_config(str(path))
        except ConfigError as error:
            assert "alias" in str(error) or "nested" in str(error) or "large" in str(error), \
                str(error)
        else:
            raise AssertionError("an alias bomb was accepted")


def test_python_tags_never_construct_objects(tmp_path):
    marker = tmp_path / "owned"
    for tag in ("!!python/object/apply:os.system", "!!python/object/new:os.system",
                "!!python/name:os.system", "!!python/module:os"):
        path = tmp_path / "evil.yaml"
        path.write_text(f"name: {tag} ['touch {marker}']\n")
        try:
            load_config(str(path))
        except ConfigError as error:
            assert "invalid YAML" in str(error)
        else:
            raise AssertionError(f"{tag} was accepted")
    assert not marker.exists()
