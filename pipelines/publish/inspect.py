"""`recordforge inspect PATH [--limit N]`: print records as JSON lines.

PATH may be a shard file, a directory of shards (a dataset version, or an
output root whose LATEST names one), or a dead-letter JSONL file. Each Example
prints as ``{"file": ..., "record": i, "features": {name: [values]}}``; bytes
print as text when they are valid UTF-8 of at most `MAX_TEXT_BYTES` bytes,
otherwise as ``{"bytes": N, "head": "<base64 of the first 32>"}``. A damaged
file prints the records before the damage, then the error on stderr, and the
command exits 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import posixpath
import sys
from typing import TextIO

import fsspec

from ...schemas.example import BYTES, FLOAT, ExampleDecodeError, decode_example
from ...transforms.layout import LATEST_FILE, MANIFEST_FILE, is_shard_file
from ...transforms.tfrecordio import TFRecordError, read_records
from ...transforms.urls import redact_url

__all__ = ["main", "render_example", "shard_files"]

MAX_TEXT_BYTES = 1024


def _render_bytes(value: bytes):
    if len(value) <= MAX_TEXT_BYTES:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"bytes": len(value), "head": base64.b64encode(value[:32]).decode("ascii")}


def _render_float(value: float):
    # JSON has no NaN/Infinity; print them as strings rather than emit
    # invalid JSON.
    return value if math.isfinite(value) else repr(value)


def render_example(data: bytes) -> dict:
    """A serialized Example as JSON-ready feature name -> list of values."""
    rendered = {}
    for name, (kind, values) in sorted(decode_example(data).items()):
        if kind == BYTES:
            rendered[name] = [_render_bytes(v) for v in values]
        elif kind == FLOAT:
            rendered[name] = [_render_float(v) for v in values]
        else:
            rendered[name] = values
    return rendered


def shard_files(path: str) -> list[str]:
    """The shard files PATH stands for, in manifest order where there is one."""
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.isdir(root):
        return [path]
    latest = posixpath.join(root, LATEST_FILE)
    if fs.exists(latest) and not fs.exists(posixpath.join(root, MANIFEST_FILE)):
        version = fs.cat_file(latest).decode("utf-8").strip()
        return shard_files(_join(path, version))
    manifest_path = posixpath.join(root, MANIFEST_FILE)
    if fs.exists(manifest_path):
        manifest = json.loads(fs.cat_file(manifest_path))
        return [_join(path, shard["file"])
                for split in manifest["splits"].values() for shard in split["shards"]]
    names = sorted(posixpath.basename(p) for p in fs.ls(root, detail=False))
    return [_join(path, name) for name in names if is_shard_file(name)]


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _error(message: str) -> None:
    # Paths may be URLs with credentials (s3://key:secret@bucket/...).
    print(f"recordforge inspect: {redact_url(message)}", file=sys.stderr)


def _inspect_shards(files: list[str], limit: int | None, out: TextIO) -> int:
    printed = 0
    for file in files:
        index = 0
        try:
            for index, data in enumerate(read_records(file)):
                if limit is not None and printed >= limit:
                    return 0
                line = {"file": posixpath.basename(file), "record": index,
                        "features": render_example(data)}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                printed += 1
        except TFRecordError as error:
            out.flush()
            _error(str(error))
            return 1
        except ExampleDecodeError as error:
            out.flush()
            _error(f"{file}: record {index} is not a tf.train.Example ({error})")
            return 1
    return 0


def _inspect_jsonl(path: str, limit: int | None, out: TextIO) -> int:
    with fsspec.open(path, "rt", encoding="utf-8", compression="infer") as lines:
        for number, line in enumerate(lines, start=1):
            if limit is not None and number > limit:
                break
            try:
                record = json.loads(line)
            except ValueError as error:
                out.flush()
                _error(f"{path}: line {number} is not JSON ({error})")
                return 1
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
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
    except (ImportError, ValueError) as error:  # an unknown protocol, or its extra missing
        _error(f"{args.path}: {error}")
        return 2
    if not fs.exists(root):
        _error(f"{args.path}: no such file or directory")
        return 2
    if args.path.endswith((".jsonl", ".jsonl.gz")):
        return _inspect_jsonl(args.path, args.limit, out)
    files = shard_files(args.path)
    if not files:
        _error(f"{args.path}: no .tfrecord or .tfrecord.gz files")
        return 2
    return _inspect_shards(files, args.limit, out)
