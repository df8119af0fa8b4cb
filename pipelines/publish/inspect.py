"""`recordforge inspect PATH [--limit N]`: print records as JSON lines.

PATH may be a shard file, a published version directory (holding
``manifest.json``), an output root whose LATEST names one, or a dead-letter
JSONL file. A directory is read by the rules `verify` applies
(`dataset_paths`): the version LATEST names must be a safe name of a real
directory of the root, the manifest must be intact, and only the shards it
lists are read, never through a symbolic link, each checked as it streams
against the manifest read first (`held_manifest`: a version an
``--overwrite`` replaced while it was read is an error, never a silent mix);
a directory without ``manifest.json`` is not a published version and is
refused. Each Example
prints as ``{"file": ..., "record": i, "features": {name: [values]}}``;
bytes print as text when they are valid UTF-8 of at most `MAX_TEXT_BYTES`
bytes, otherwise as ``{"bytes": N, "head": "<base64 of the first 32>"}``.
Damage (a damaged record, manifest, LATEST or dead-letter line, a missing
or unreadable shard) prints the records before it, then the error on
stderr, and the command exits 1; exit 2 is bad usage or a path that does
not exist.
"""

from __future__ import annotations

import argparse
import base64
import functools
import itertools
import json
import math
import posixpath
import sys
import zlib
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, TextIO

import fsspec

from ...schemas.example import BYTES, FLOAT, ExampleDecodeError, decode_example
from ...schemas.example_scan import LARGE_EXAMPLE_BYTES, NonCanonicalExample, scan_example
from ...schemas.example_stream import LongBytes, summarize_example
from ...transforms.tfrecord import StreamedRecord, TFRecordError, iter_record_views
from ...transforms.urls import redact_url
from .dataset_paths import (MAX_MANIFEST_BYTES, DatasetNotFoundError, Located, list_version,
                            load_version_manifest, locate_version, read_limited)
from .held_manifest import DatasetCorrupt, HeldShard, checked_records, held_shards
from .manifest import compression_from_label

__all__ = ["ShardSource", "main", "render_example", "shard_files"]

MAX_TEXT_BYTES = 1024
MAX_LIST_VALUES = 1000  # a longer list prints its length and its first HEAD_VALUES
HEAD_VALUES = 100
MAX_LINE_BYTES = 64 << 20  # a dead-letter record summarises large values; far below this


def _render_bytes(value):
    if isinstance(value, LongBytes):  # a streamed record's long value: its size and head
        return {"bytes": value.size, "head": base64.b64encode(value.head[:32]).decode("ascii")}
    if len(value) <= MAX_TEXT_BYTES:
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"bytes": len(value), "head": base64.b64encode(value[:32]).decode("ascii")}


def _render_float(value: float):
    # JSON has no NaN/Infinity; print them as strings rather than emit
    # invalid JSON.
    return value if math.isfinite(value) else repr(value)


def render_example(data) -> dict:
    """A serialized Example (bytes, a memoryview, or a `StreamedRecord`) as
    JSON-ready feature name -> list of values; a list of more than
    `MAX_LIST_VALUES` values as ``{"values": N, "head": [the first
    HEAD_VALUES]}``. A record of `LARGE_EXAMPLE_BYTES` or more is read in
    place (`scan_example`) when held, as a stream (`summarize_example`)
    when streamed: printing it holds it at most once, or never."""
    if isinstance(data, StreamedRecord):
        return _render_streamed(data)
    if len(data) >= LARGE_EXAMPLE_BYTES:
        features = {name: (values.kind, len(values), values)
                    for name, values in scan_example(data).items()}
    else:
        features = {name: (kind, len(values), values)
                    for name, (kind, values) in decode_example(data).items()}
    return _render_features(features)


def _render_streamed(record: StreamedRecord) -> dict:
    try:
        features = summarize_example(record.read, record.length, keep_values=MAX_LIST_VALUES,
                                     keep_bytes=MAX_TEXT_BYTES)
    except ExampleDecodeError:
        record.finish()  # a damaged frame is the first fault, as for a held record
        raise
    return _render_features(features)


def _render_features(features: Mapping[str, tuple[str, int, Iterable]]) -> dict:
    """name -> (kind, number of values, values: at least the first
    `MAX_LIST_VALUES`) as `render_example` prints it."""
    rendered = {}
    for name, (kind, count, values) in sorted(features.items()):
        render = _render_bytes if kind == BYTES else _render_float if kind == FLOAT else int
        if count > MAX_LIST_VALUES:
            head = [render(value) for value in itertools.islice(values, HEAD_VALUES)]
            rendered[name] = {"values": count, "head": head}
        else:
            rendered[name] = [render(value) for value in values]
    return rendered


class ShardSource(NamedTuple):
    """A shard to print. held: its entry in the manifest read first (None
    for a shard file named alone, which no manifest describes);
    compression: "auto" for a file named alone, else the manifest's;
    read_manifest: the version's manifest.json as it is now (None: gone)."""

    url: str
    held: HeldShard | None = None
    compression: str = "auto"
    read_manifest: Callable[[], bytes | None] | None = None


def _manifest_now(located: Located) -> bytes | None:
    try:
        return read_limited(located.fs, f"{located.version_dir}/manifest.json",
                            MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None


def shard_files(path: str) -> tuple[list[ShardSource], list[str]]:
    """(the shards a dataset directory stands for, in manifest order; the
    problems that stop it from being read). The version is located and its
    manifest checked as `verify` does."""
    located = locate_version(path)
    if located.problems:
        return [], [str(problem) for problem in located.problems]
    manifest, problem = load_version_manifest(located)
    if problem is not None:
        return [], [f"{redact_url(located.url)}: {problem}"]
    _, links = list_version(located.fs, located.version_dir)
    compression = compression_from_label(manifest["compression"])
    read_manifest = functools.partial(_manifest_now, located)
    sources = [ShardSource(_join(located.url, held.file), held, compression, read_manifest)
               for held in held_shards(manifest, None,
                                       lambda file: redact_url(_join(located.url, file)))]
    problems = [f"{redact_url(located.url)}: {source.held.file} is a symbolic link; a "
                "published version holds only regular files"
                for source in sources if source.held.file in links]
    return sources, problems


def _record_views(source: ShardSource) -> Iterator[memoryview | StreamedRecord]:
    # Records from LARGE_EXAMPLE_BYTES on stream past: a gzip shard of a
    # few hundred KB may hold a record of 1 GiB, of which only the head of
    # each value is printed.
    if source.held is None:
        with fsspec.open(source.url, "rb") as handle:
            yield from iter_record_views(handle, path=source.url,
                                         stream_from=LARGE_EXAMPLE_BYTES)
        return
    yield from checked_records(functools.partial(fsspec.open, source.url, "rb"), source.held,
                               compression=source.compression,
                               read_manifest=source.read_manifest, views=True,
                               stream_from=LARGE_EXAMPLE_BYTES)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _error(message: str) -> None:
    # Paths may be URLs with credentials (s3://key:secret@bucket/...).
    print(f"recordforge inspect: {redact_url(message)}", file=sys.stderr)


def _inspect_shards(sources: list[ShardSource], limit: int | None, out: TextIO) -> int:
    printed = 0
    for source in sources:
        file, index = source.url, 0
        try:
            for index, data in enumerate(_record_views(source)):
                if limit is not None and printed >= limit:
                    return 0
                line = {"file": posixpath.basename(file), "record": index,
                        "features": render_example(data)}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                printed += 1
        except (TFRecordError, DatasetCorrupt) as error:  # DatasetCorrupt names the file
            out.flush()
            _error(str(error))
            return 1
        except NonCanonicalExample as error:
            out.flush()
            _error(f"{file}: record {index} is an Example of over {LARGE_EXAMPLE_BYTES} bytes "
                   f"in a non-canonical encoding ({error}); such records are read as a "
                   "stream, which needs the encoding every serializer writes")
            return 1
        except ExampleDecodeError as error:
            out.flush()
            _error(f"{file}: record {index} is not a tf.train.Example ({error})")
            return 1
        except FileNotFoundError:
            out.flush()
            _error(f"{file}: missing")
            return 1
        except OSError as error:  # a directory in its place, an I/O error
            out.flush()
            _error(f"{file}: cannot be read ({error.strerror or error})")
            return 1
    return 0


def _inspect_jsonl(path: str, limit: int | None, out: TextIO) -> int:
    """Prints a dead-letter file's records; one that is not a JSON object
    on one UTF-8 line of at most `MAX_LINE_BYTES` bytes is damage."""
    number = 0
    try:
        with fsspec.open(path, "rb", compression="infer") as lines:
            while limit is None or number < limit:
                raw = lines.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                number += 1
                if not raw.strip():
                    continue
                problem = None
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    problem = f"is longer than {MAX_LINE_BYTES} bytes"
                else:
                    try:
                        record = json.loads(raw.decode("utf-8"))
                    except UnicodeDecodeError as error:
                        problem = f"is not UTF-8 (byte {error.start})"
                    except ValueError as error:
                        problem = f"is not JSON ({error})"
                    except RecursionError:
                        problem = "is JSON nested too deeply to parse"
                    else:
                        if not isinstance(record, dict):
                            problem = f"is not a dead-letter record (a JSON object) but a " \
                                      f"JSON {type(record).__name__}"
                if problem:
                    out.flush()
                    _error(f"{path}: line {number} {problem}")
                    return 1
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    except (OSError, EOFError, zlib.error) as error:  # damaged gzip, an I/O error
        out.flush()
        _error(f"{path}: cannot be read after line {number} ({error})")
        return 1
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="recordforge inspect",
        description="Print the records of a shard, a dataset directory or a dead-letter "
                    "file as JSON lines.")
    parser.add_argument("path", help="a .tfrecord[.gz] shard, a dataset directory, "
                                     "or a dead-letter .jsonl file (local path or URL)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="print at most N records in all")
    args = parser.parse_args(argv)
    out = out or sys.stdout
    if args.limit is not None and args.limit < 0:
        parser.error("--limit must be >= 0")
    try:
        fs, root = fsspec.core.url_to_fs(args.path)
        exists = fs.exists(root)
    except (ImportError, ValueError) as error:  # an unknown protocol, or its extra missing
        _error(f"{args.path}: {error}")
        return 2
    except OSError as error:  # a store that cannot be reached
        _error(f"{args.path}: cannot be reached ({error})")
        return 1
    if not exists:
        _error(f"{args.path}: no such file or directory")
        return 2
    if args.path.endswith((".jsonl", ".jsonl.gz")):
        return _inspect_jsonl(args.path, args.limit, out)
    if not fs.isdir(root):
        return _inspect_shards([ShardSource(args.path)], args.limit, out)
    try:
        sources, problems = shard_files(args.path)
    except DatasetNotFoundError as error:  # removed since it was found
        _error(str(error))
        return 2
    except OSError as error:
        _error(f"{args.path}: cannot be read ({error.strerror or error})")
        return 1
    for problem in problems:
        _error(problem)
    if problems:
        return 1
    return _inspect_shards(sources, args.limit, out)
