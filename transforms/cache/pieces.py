"""A piece of the build cache: one reading unit's rows as sorted runs, and everything else it gave.

A piece is a summary file and a run file per split the unit had rows of:

    <file key>.<unit>-of-<count>.piece            summary (TFRecord-framed)
    <file key>.<unit>-of-<count>.s<split>.run     the split's rows, sorted
    <file key>.<unit>-of-<count>.s<split>.<n>.run  its next run (n = 1, 2, ...)

A unit whose rows pass the writer's `run_bytes` (a whole Avro, JSON or
TFRecord file is one unit, of any size) is written as several runs per
split as its rows come, so that the memory a unit holds stays bounded.

The run files are the shard writer's own sorted runs (`writer.RunBuffer`,
the format `writer.run_format` documents), so a reused unit's rows go to the shard
writer as they are: not read, hashed, sorted or written again. The summary
holds the rest of what the unit gave, as the converting step gave it: dead
letters of reading and checking, label counts, statistics (one partial
per split and feature: `unit_conversion.unit_outputs`), the columns seen,
the rows read, and per run its split, rows, bytes, sampled keys,
file size and CRC32C. Its records are, by first byte:

    j<JSON>     the summary
    s<sha256>   the digest of every byte before this record (last)

Values go through JSON with a few tagged forms (tuples, bytes, numpy
arrays; statistics by their own JSON form), never pickle: the cache sits in storage others may
write to, and loading it must not run code. The writer turns each text
partial into its JSON text as it comes (each holding up to ~1000 values)
and splices those texts into the summary: the same bytes as `json.dumps`
of the whole, without a list per value held until the unit ends. The summary is written last,
after its runs: a piece whose summary exists names complete runs.

`read_piece` checks the summary's digest and every run's size and CRC32C
before it gives anything, so a torn write (pieces are not synced: a crash
of the machine may leave one half-written) or a damaged file is never
reused: it raises `DamagedPiece` and the unit is read and encoded again.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import uuid
from typing import Any, BinaryIO, Iterator, NamedTuple

import crc32c
import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from ..splits import ExampleRows, HashedExamples, SplitAssigner
from ..merge_statistics import partial_from_json, partial_json_text
from ..page_cache import WriteBehind
from ..tfrecord import FRAMING, TFRecordError, frame_records, iter_records
from ..writer import KEY_VARIABLE, CheckedFile, RunBuffer, RunFile, SampleEntry

__all__ = ["CachedRun", "DamagedPiece", "PieceContents", "PieceWriter", "SUMMARY_TAGS",
           "decode_value", "encode_value", "read_piece", "run_file_name"]

# The summary's format and, with it, the runs' (`writer.run_format`'s format): change it
# when either changes, and every cached piece is rebuilt (it is part of the
# encoding key, `pipelines.cache.encoding_key`). 3: a unit's text statistics
# are one partial per split and feature, no longer one per batch.
FORMAT = "recordforge.piece/3"
# The tags of everything but Examples, in the order a reused piece gives them.
SUMMARY_TAGS = ("read_dead_letter", "dead_letter", "label_counts", "statistics",
                "columns_seen", "counts")
_DIGEST_RECORD_BYTES = FRAMING + 1 + 32  # framing, tag, sha256
_BATCH_EXAMPLES = 1000
_READ_BLOCK = 8 << 20


class DamagedPiece(Exception):
    """A piece that cannot be reused: missing, truncated, or not what was written."""


class CachedRun(NamedTuple):
    """One run file of a piece: its split's name, where it is, its rows and
    framed bytes (as the shard writer counts them), its sampled keys."""

    split: str
    path: str
    num_records: int
    num_bytes: int
    sample: tuple[SampleEntry, ...]


def run_file_name(piece: str, split: int, index: int = 0) -> str:
    """``<piece name without .piece>.s<split>.run`` (a split's first run),
    ``....s<split>.<index>.run`` (its next)."""
    return f"{piece[:-len('.piece')]}.s{split}{f'.{index}' if index else ''}.run"


# --- values through JSON ---------------------------------------------------------------


def encode_value(value: Any) -> Any:
    """A JSON-safe form of a value a converting step gives: JSON values,
    tuples, bytes and numpy arrays (statistics partials have their own,
    `transforms.merge_statistics.partial_to_json`)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"t": [encode_value(item) for item in value]}
    if isinstance(value, list):
        return [encode_value(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("only string keys can be cached")
        return {"m": {key: encode_value(item) for key, item in value.items()}}
    if isinstance(value, bytes):
        return {"b": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray):
        return {"a": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot cache a {type(value).__name__}")


def decode_value(data: Any) -> Any:
    """The value `encode_value` gave `data` for."""
    if isinstance(data, list):
        return [decode_value(item) for item in data]
    if not isinstance(data, dict):
        return data
    if "t" in data:
        return tuple(decode_value(item) for item in data["t"])
    if "m" in data:
        return {key: decode_value(item) for key, item in data["m"].items()}
    if "b" in data:
        return base64.b64decode(data["b"])
    if "a" in data:
        return np.asarray(data["a"], dtype=np.dtype(data["dtype"]))
    raise ValueError(f"unknown cached form with keys {sorted(data)}")


# --- writing -----------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    """`value` as the summary's JSON writes it (ASCII, no spaces)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


class _Encoded(list):
    """A JSON list whose items are already JSON text (`_json_text`)."""


def _summary_text(summary: dict) -> str:
    """The summary's JSON text, the same as `_json_text(summary)` would give
    with every `_Encoded` list's items decoded: each top-level entry
    written on its own, an `_Encoded` list by joining its items' text."""
    parts = []  # joined once: the statistics of a unit of free text are megabytes
    for key, value in summary.items():
        parts += (",", _json_text(key), ":")
        if isinstance(value, _Encoded):
            parts += ("[", ",".join(value), "]")
        else:
            parts.append(_json_text(value))
    if not parts:
        return "{}"
    parts[0] = "{"  # the first entry's comma
    return "".join(parts) + "}"


class PieceWriter:
    """Writes one piece as its unit is converted: `add(tag, value)` for every
    output, `commit()` at the end, `abort()` on failure.

    Rows wait in a `writer.RunBuffer` until they hold `run_bytes` (a unit
    of a range reader is ~16 MB of input, but a whole file is one unit) or
    the unit ends, then are written as a run per split; the rest waits for
    the summary. Files are written under temporary names and renamed
    locally; on object stores each upload completes at once or not at all.
    A retried unit writes the same names again."""

    def __init__(self, fs: fsspec.AbstractFileSystem, directory: str, name: str,
                 assigner: SplitAssigner, *, shuffle: bool, sample_every: int,
                 prefix_len: int, index_every: int, run_bytes: int = 64 << 20):
        self._fs = fs
        self._directory = directory.rstrip("/")
        self._name = name
        self._assigner = assigner
        self._local = isinstance(fs, LocalFileSystem)
        self._buffer = RunBuffer(assigner, shuffle=shuffle, sample_every=sample_every,
                                 prefix_len=prefix_len, index_every=index_every)
        self._run_bytes = run_bytes
        # Per split: rows, bytes and sampled keys of the rows buffered
        # (the run they make next), and how many of its runs were written.
        self._held: dict[int, tuple[int, int]] = {}
        self._samples: dict[int, list[SampleEntry]] = {}
        self._runs_written: dict[int, int] = {}
        # What the runs written so far make: CachedRuns, summary entries, bytes.
        self._runs: list[CachedRun] = []
        self._entries: list[dict] = []
        self._size = 0
        self._summary: dict[str, list] = {tag: [] for tag in SUMMARY_TAGS}
        self._temporary: list[str] = []
        self.examples = 0

    def _path(self, name: str) -> str:
        return f"{self._directory}/{name}"

    def add(self, tag: str, value: Any) -> None:
        if tag == "examples":
            for split, num_records, num_bytes, sample in self._buffer.add(value):
                self._held[split] = (num_records, num_bytes)
                self._samples.setdefault(split, []).extend(sample)
            self.examples += len(value)
            if self._buffer.buffered_bytes >= self._run_bytes:
                self._write_runs()
        elif tag == "statistics":
            # Its JSON text at once: one str object, where the JSON-safe
            # form is a list per value held (a text partial of free text
            # holds ~1000) until the unit ends, each one more object for
            # the cyclic collector to walk in every full collection.
            self._summary[tag].append(partial_json_text(value))
        elif tag in self._summary:
            self._summary[tag].append(encode_value(value))
        else:
            raise ValueError(f"nothing of tag {tag!r} is cached")

    def _open(self, name: str) -> tuple[BinaryIO, str]:
        final = self._path(name)
        path = f"{final}.{uuid.uuid4().hex}.tmp" if self._local else final
        self._temporary.append(path)
        return self._fs.open(path, "wb"), path

    def _finish(self, path: str, name: str) -> None:
        if self._local:
            os.replace(path, self._path(name))

    def _write_runs(self) -> None:
        """Writes the rows held as a run per split, and empties the buffer."""
        names = self._assigner.names
        for split in self._buffer.splits_held():
            name = run_file_name(self._name, split, self._runs_written.get(split, 0))
            self._runs_written[split] = self._runs_written.get(split, 0) + 1
            fileobj, path = self._open(name)
            with fileobj:
                # Read back once by this build's shards, soon, and by later
                # builds from the disk: handed to it as written (page_cache).
                on_disk = WriteBehind(fileobj)
                checked = CheckedFile(on_disk)
                self._buffer.write(split, checked)
                on_disk.finish(durable=False)
            self._finish(path, name)
            num_records, num_bytes = self._held[split]
            sample = tuple(self._samples.get(split, ()))
            self._runs.append(CachedRun(names[split], self._path(name), num_records, num_bytes,
                                        sample))
            self._entries.append({"split": names[split], "file": name, "records": num_records,
                                  "bytes": num_bytes, "size": checked.size,
                                  "crc32c": checked.crc, "sample": encode_value(sample)})
            self._size += checked.size
        self._buffer.clear()
        self._held.clear()
        self._samples.clear()

    def commit(self, remember: bool = True) -> tuple[list[CachedRun], int]:
        """Writes the runs, then (with `remember`) the summary; returns the
        runs and the piece's size in bytes. Without the summary the runs
        serve this build only: the piece is not complete, so no later build
        reuses it, and the next one to convert the unit writes them again."""
        self._write_runs()
        runs, entries, size = self._runs, self._entries, self._size
        if not remember:
            self._temporary.clear()
            return runs, size
        summary = {"format": FORMAT, "examples": self.examples, "runs": entries,
                   **self._summary,
                   "statistics": _Encoded(self._summary["statistics"])}
        body = frame_records([b"j" + _summary_text(summary).encode("ascii")])
        data = body + frame_records([b"s" + hashlib.sha256(body).digest()])
        fileobj, path = self._open(self._name)
        with fileobj:
            fileobj.write(data)
        self._finish(path, self._name)
        self._temporary.clear()
        return runs, size + len(data)

    def abort(self) -> None:
        """Drops what an unfinished piece wrote under temporary names (a
        failed or abandoned unit). A large unit's runs already renamed to
        their names stay, named by no summary, until the unit is converted
        again, which writes the same names (another attempt of the unit may
        hold them: not deleted here)."""
        for path in self._temporary:
            try:
                self._fs.rm(path)
            except (OSError, ValueError):
                pass
        self._temporary.clear()


# --- reading -----------------------------------------------------------------------------


class PieceContents:
    """A checked piece: its summary values and its runs."""

    def __init__(self, summary: dict, runs: list[CachedRun], size: int):
        self.summary = summary
        self.runs = runs
        self.size = size
        self.examples = summary["examples"]

    def values(self, tag: str) -> list:
        decode = partial_from_json if tag == "statistics" else decode_value
        return [decode(item) for item in self.summary[tag]]

    def example_batches(self, fs: fsspec.AbstractFileSystem, salt: bytes
                        ) -> Iterator[ExampleRows]:
        """The rows as ExampleBatches, for an exchange that takes Examples
        rather than runs: rows ordered by hash come with their digests
        (`HashedExamples`), rows ordered by their own key with the key."""
        for run in self.runs:
            reader = RunFile(run.path, fs=fs)
            keys: list = []
            examples: list[bytes] = []
            digests: list[bytes] = []
            for key, example, _ in reader.stream(b"", None):
                if reader.key_width > 0:
                    keys.append(None)
                    digests.append(bytes(key))
                else:
                    keys.append(bytes(key) if reader.key_width == KEY_VARIABLE else None)
                examples.append(example)
                if len(examples) >= _BATCH_EXAMPLES:
                    yield _cached_batch(keys, examples, salt, digests)
                    keys, examples, digests = [], [], []
            if examples:
                yield _cached_batch(keys, examples, salt, digests)


def _cached_batch(keys: list, examples: list, salt: bytes, digests: list[bytes]) -> ExampleRows:
    """An ExampleBatch of rows read back from a run: with their digests
    when the run is ordered by them."""
    if digests:
        return HashedExamples(salt=salt, digests=digests, columns=(keys, examples))
    return ExampleRows.zipped(keys, examples)


def read_piece(fs: fsspec.AbstractFileSystem, directory: str, name: str) -> PieceContents:
    """Reads a piece's summary, checks its digest and every run's size and
    CRC32C (each run read once, whole), and returns the piece; raises
    `DamagedPiece` when it cannot be reused."""
    directory = directory.rstrip("/")
    path = f"{directory}/{name}"
    try:
        with fs.open(path, "rb") as handle:
            data = handle.read()
        if len(data) <= _DIGEST_RECORD_BYTES:
            raise ValueError("too short to be a piece")
        body, trailer = data[:-_DIGEST_RECORD_BYTES], data[-_DIGEST_RECORD_BYTES:]
        (digest,) = list(iter_records(io.BytesIO(trailer), path=path, compression="none"))
        if digest[:1] != b"s" or digest[1:] != hashlib.sha256(body).digest():
            raise ValueError("its summary does not match its digest")
        (record,) = list(iter_records(io.BytesIO(body), path=path, compression="none"))
        summary = json.loads(record[1:])
        if record[:1] != b"j" or summary.get("format") != FORMAT:
            raise ValueError(f"not a summary of format {FORMAT}")
        runs, size = [], len(data)
        for entry in summary["runs"]:
            # A summary names its own runs only: never a path elsewhere.
            if not _is_run_of(name, entry["file"]):
                raise ValueError(f"names {entry['file']!r}, not one of its runs")
            run_path = f"{directory}/{entry['file']}"
            _check_run(fs, run_path, entry["size"], entry["crc32c"])
            runs.append(CachedRun(entry["split"], run_path, entry["records"], entry["bytes"],
                                  tuple(SampleEntry(*item)
                                        for item in decode_value(entry["sample"]))))
            size += entry["size"]
    except (OSError, TFRecordError, ValueError, KeyError, TypeError) as error:
        raise DamagedPiece(f"{path}: {error}") from error
    return PieceContents(summary, runs, size)


def _is_run_of(piece: str, file: Any) -> bool:
    """Whether `file` is a name `run_file_name` gives `piece`'s runs."""
    base = piece[:-len(".piece")]
    if not (isinstance(file, str) and file.startswith(f"{base}.s") and file.endswith(".run")):
        return False
    numbers = file[len(base) + 2:-len(".run")].split(".")
    return (len(numbers) in (1, 2) and all(n.isascii() and n.isdigit() for n in numbers)
            and file == run_file_name(piece, int(numbers[0]),
                                      int(numbers[1]) if len(numbers) == 2 else 0))


def _check_run(fs: fsspec.AbstractFileSystem, path: str, size: int, crc: int) -> None:
    seen, running = 0, 0
    with fs.open(path, "rb") as handle:
        while True:
            block = handle.read(_READ_BLOCK)
            if not block:
                break
            running = crc32c.crc32c(block, running)
            seen += len(block)
    if seen != size or running != crc:
        raise ValueError(f"run {path} is {seen} bytes with CRC32C {running:08x}; its piece "
                         f"says {size} bytes with {crc:08x}")
