"""`recordforge verify`: re-reads a published dataset and reports damage.

Library: ``verify_dataset(path, deep=False, workers=None) -> VerifyReport``.
`path` is a version directory (holding ``manifest.json``) or an output root
(holding ``LATEST``), as a local path or fsspec URL.

Checks, each reported as a `Problem` naming the file and, where there is
one, the byte offset and record index of the first fault:

* ``manifest.json`` parses and is consistent (shard naming, per-split sums,
  ``num_input_rows == Σ num_examples + dead_letter.num_rows``);
* every shard: present, size and sha256 as in the manifest, every record's
  length CRC and data CRC (offsets of gzip shards are in the uncompressed
  stream), record count as in the manifest; a shard whose bytes are those of
  another shard in the manifest is named as such (swapped or copied);
* record counts per split;
* ``SHA256SUMS``: present, lists every shard with the manifest's digest, and
  every other file it lists (dead letters, report) matches; every dead-letter
  file in the manifest exists and is listed; no file in the version
  directory is unaccounted for;
* ``deep=True``: every record parses as a tf.train.Example whose features
  have the manifest's names, stored types and shapes, with vocabulary ids in
  range.

Each file is read once, streaming (hash, size, framing and parsing in one
pass), so memory does not depend on file size. Files are checked in parallel
by a thread pool (``executor="process"`` for a process pool: faster for
shards of many small records, whose per-record CRC and parsing hold the GIL;
memory:// datasets always use threads, as that filesystem lives in one
process).

CLI: ``recordforge verify DATASET_DIR [--deep] [--workers N] [--processes]``;
exit 0 intact, 1 damaged (one line per damaged file on stdout), 2 usage.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Mapping, Sequence

import fsspec

from . import manifest as manifest_lib
from .finalizing import check_version_name
from ...transforms.urls import redact_url
from ...schemas.errors import ConfigError
from ...schemas.example import ExampleDecodeError, decode_example
from ...transforms import tfrecordio
from ...transforms.page_cache import drop_behind

__all__ = [
    "DatasetNotFoundError",
    "FileCheck",
    "Problem",
    "VerifyReport",
    "check_file",
    "example_problem",
    "main",
    "verify_dataset",
]

_BLOCK = 1 << 20
_DROP_EVERY = 8 << 20
# Which problem of a file is reported first: the most specific cause (a
# wrong file, the first bad byte) before its consequences (size, checksum).
_FIRST_FAULT_ORDER = {code: rank for rank, code in enumerate(
    ["missing", "swapped", "framing", "example", "count", "size", "sha256"])}


class DatasetNotFoundError(Exception):
    """The path given to verify does not exist (a usage error, exit 2)."""


@dataclass(frozen=True)
class Problem:
    """One fault. file: path relative to the version directory (or a split
    label like ``split 'train'``). offset: byte offset of the first fault
    (uncompressed stream for gzip shards) or None. record_index: 0-based
    index of the first faulty record or None. code: the kind of fault
    ("missing", "size", "sha256", "swapped", "framing", "count", "example",
    "sums", "unexpected", "manifest", "latest", "split")."""

    file: str
    message: str
    offset: int | None = None
    record_index: int | None = None
    code: str = ""

    def location(self) -> str:
        parts = []
        if self.record_index is not None:
            parts.append(f"record {self.record_index}")
        if self.offset is not None:
            parts.append(f"byte {self.offset}")
        return " at ".join(parts)

    def __str__(self) -> str:
        where = self.location()
        return f"{self.file}: {where}: {self.message}" if where else f"{self.file}: {self.message}"


@dataclass
class FileCheck:
    """What reading one file found (picklable: crosses process pools)."""

    file: str
    exists: bool = True
    size: int = 0
    sha256: str = ""
    records: int | None = None
    problems: list[Problem] = field(default_factory=list)


@dataclass
class VerifyReport:
    """The outcome of `verify_dataset`. `ok` is True when nothing is wrong."""

    path: str
    version: str | None
    problems: list[Problem] = field(default_factory=list)
    files_checked: int = 0
    records_checked: int = 0
    bytes_checked: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def damaged(self) -> dict[str, list[Problem]]:
        """file -> its problems, the most telling first."""
        by_file: dict[str, list[Problem]] = {}
        for problem in self.problems:
            by_file.setdefault(problem.file, []).append(problem)
        for problems in by_file.values():
            problems.sort(key=lambda p: (_FIRST_FAULT_ORDER.get(p.code, len(_FIRST_FAULT_ORDER)),
                                         p.offset or 0, p.record_index or 0))
        return dict(sorted(by_file.items()))

    def lines(self) -> list[str]:
        """One line per damaged file: its first fault, and how many more."""
        lines = []
        for problems in self.damaged().values():
            line = str(problems[0])
            if len(problems) > 1:
                line += f" (and {len(problems) - 1} more: " + "; ".join(
                    p.message for p in problems[1:3]) + ("; ..." if len(problems) > 3 else "") + ")"
            lines.append(line)
        return lines


# --- per-record checks (plain functions) -----------------------------------------

def _vocabulary_sizes(features: Mapping[str, Mapping], vocabularies: Mapping[str, Sequence]) -> dict:
    """feature -> vocabulary size, for int64 features backed by a vocabulary
    (named by the feature's ``vocabulary`` key, or by the feature's name)."""
    sizes = {}
    for name, spec in features.items():
        if spec.get("type") != "int64":
            continue
        vocabulary = spec.get("vocabulary")
        key = vocabulary if isinstance(vocabulary, str) and vocabulary in vocabularies else name
        if key in vocabularies:
            sizes[name] = len(vocabularies[key])
    return sizes


def example_problem(decoded: Mapping[str, tuple[str, list]], features: Mapping[str, Mapping],
                    vocabulary_sizes: Mapping[str, int]) -> str | None:
    """Why a decoded Example does not match the manifest's features, or None.

    A feature may be absent only when its shape is [-1] or it is declared
    ``"required": false``; an empty value list matches any stored type.
    """
    for name, spec in features.items():
        shape = spec.get("shape", [])
        found = decoded.get(name)
        if found is None:
            if shape == [-1] or spec.get("required") is False:
                continue
            return f"feature {name!r} is missing"
        kind, values = found
        if values and kind != spec["type"]:
            return f"feature {name!r} holds {kind} values, manifest says {spec['type']}"
        expected = 1 if not shape else shape[0]
        if expected != -1 and len(values) != expected:
            return f"feature {name!r} has {len(values)} values, shape {shape} needs {expected}"
        size = vocabulary_sizes.get(name)
        if size is not None:
            for value in values:
                if not 0 <= value < size:
                    return f"feature {name!r}: id {value} is outside its vocabulary (0..{size - 1})"
    extra = sorted(set(decoded) - set(features))
    if extra:
        return f"feature {extra[0]!r} is not in the manifest"
    return None


class _HashingReader:
    """A read-only file wrapper that hashes and counts what passes through,
    so hashing and record parsing share one read of the file. What it has
    read of a local file leaves the page cache every `_DROP_EVERY` bytes:
    verification reads each byte once."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self.digest = hashlib.sha256()
        self.size = 0
        self._dropped = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self.digest.update(data)
        self.size += len(data)
        if self.size - self._dropped >= _DROP_EVERY:
            drop_behind(self._raw, self._dropped, self.size - self._dropped)
            self._dropped = self.size
        return data

    def seekable(self) -> bool:
        return False

    def drain(self) -> None:
        """Reads the rest of the file."""
        while self.read(_BLOCK):
            pass
        drop_behind(self._raw, self._dropped, 0)


def check_file(url: str, file: str, *, compression: str | None = None,
               expected_size: int | None = None, expected_sha256: str | None = None,
               expected_records: int | None = None, features: Mapping | None = None,
               vocabulary_sizes: Mapping | None = None) -> FileCheck:
    """Reads one file once. For a shard (`compression` given): checks every
    record's framing and CRCs, counts records and, with `features`, checks
    each Example. Always: size and sha256 against the expected values.
    Returns a `FileCheck`; never raises for damaged data."""
    check = FileCheck(file=file)
    try:
        handle = fsspec.open(url, "rb").open()
    except FileNotFoundError:
        check.exists = False
        check.problems.append(Problem(file, "missing", code="missing"))
        return check
    with handle:
        reader = _HashingReader(handle)
        if compression is not None:
            _check_records(reader, file, compression, check, features, vocabulary_sizes or {})
        reader.drain()
    check.size = reader.size
    check.sha256 = reader.digest.hexdigest()
    framing_broken = any(p.offset is not None for p in check.problems)
    if expected_size is not None and check.size != expected_size:
        check.problems.append(Problem(file, f"is {check.size} bytes, manifest says {expected_size}"
                                      + (" (truncated)" if check.size < expected_size else ""),
                                      code="size"))
    if expected_records is not None and not framing_broken and check.records != expected_records:
        check.problems.append(Problem(file, f"holds {check.records} records, manifest says "
                                      f"{expected_records}", code="count",
                                      record_index=min(check.records, expected_records)))
    if expected_sha256 is not None and check.sha256 != expected_sha256:
        hint = ""
        if compression is not None and not check.problems:
            # e.g. a flipped gzip header byte (mtime, flags): TFRecord
            # readers would not notice, but the bytes are not the ones built.
            hint = (f"; all {check.records} records read back intact, so the damage is in the "
                    "container bytes (such as the gzip header)")
        check.problems.append(Problem(file, f"sha256 {check.sha256[:16]}… does not match the "
                                      f"expected {expected_sha256[:16]}…{hint}", code="sha256"))
    return check


def _check_records(reader: _HashingReader, file: str, compression: str, check: FileCheck,
                   features: Mapping | None, vocabulary_sizes: Mapping) -> None:
    count = 0
    first_bad = None
    bad = 0
    try:
        if features is None:
            # Framing and CRCs only: no object per record.
            count = tfrecordio.count_records(reader, path=file, compression=compression)
            records = ()
        else:
            records = tfrecordio.iter_records(reader, path=file, compression=compression)
        for index, record in enumerate(records):
            count = index + 1
            try:
                problem = example_problem(decode_example(record), features, vocabulary_sizes)
            except ExampleDecodeError as error:
                problem = str(error)
            if problem:
                bad += 1
                if first_bad is None:
                    first_bad = Problem(file, problem, record_index=index, code="example")
    except tfrecordio.TFRecordError as error:
        count = error.record_index  # the intact records before the damage
        # Offsets of gzip shards count uncompressed bytes (what TFRecord
        # readers see); say so, or a user would seek the compressed file.
        suffix = " (byte offset in the uncompressed stream)" if compression == "gzip" else ""
        check.problems.append(Problem(file, error.problem + suffix,
                                      offset=error.offset, record_index=error.record_index,
                                      code="framing"))
    check.records = count
    if first_bad is not None:
        if bad > 1:
            first_bad = Problem(file, f"{first_bad.message} ({bad} records do not match the "
                                "manifest's features)", record_index=first_bad.record_index,
                                code="example")
        check.problems.append(first_bad)


# --- the dataset ---------------------------------------------------------------------

def _locate(path: str) -> tuple[Any, str, str, str | None, list[Problem]]:
    """(fs, version dir path, its URL, LATEST's version or None, problems).
    Raises DatasetNotFoundError when `path` does not exist."""
    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/") or "/"
    base_url = path.rstrip("/") or path
    if fs.exists(f"{root}/{manifest_lib.MANIFEST_FILE}"):
        return fs, root, base_url, None, []
    if fs.exists(f"{root}/{manifest_lib.LATEST_FILE}"):
        version = fs.cat_file(f"{root}/{manifest_lib.LATEST_FILE}").decode("utf-8", "replace").strip()
        try:
            check_version_name(version)
        except ConfigError as error:
            return fs, root, base_url, None, [Problem(manifest_lib.LATEST_FILE, str(error),
                                                      code="latest")]
        version_dir = f"{root}/{version}"
        if not fs.exists(version_dir):
            return fs, root, base_url, version, [Problem(
                manifest_lib.LATEST_FILE, f"names version {version!r}, which does not exist",
                code="latest")]
        return fs, version_dir, f"{base_url}/{version}", version, []
    if not fs.exists(root):
        raise DatasetNotFoundError(f"{redact_url(path)} does not exist")
    return fs, root, base_url, None, []


def _list_files(fs, root: str) -> set[str]:
    prefix = root.rstrip("/") + "/"
    found = fs.find(root, detail=True)
    return {name[len(prefix):] for name, info in found.items()
            if info.get("type") != "directory" and name.startswith(prefix)}


def _make_executor(kind: str, workers: int, fs) -> concurrent.futures.Executor:
    if kind == "process" and "memory" not in _protocols(fs):
        # spawn, not fork: the caller may run threads (a build's heartbeat).
        return concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"))
    return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="verify")


def _protocols(fs) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


def verify_dataset(path: str, deep: bool = False, workers: int | None = None, *,
                   executor: str = "thread") -> VerifyReport:
    """Verifies the dataset at `path` (version directory or output root with
    LATEST). Returns a `VerifyReport`; raises `DatasetNotFoundError` only
    when `path` does not exist. `workers` defaults to the CPU count;
    `executor` is "thread" or "process"."""
    started = time.monotonic()
    fs, version_dir, version_url, latest, problems = _locate(path)
    report = VerifyReport(path=redact_url(version_url), version=latest, problems=problems)
    if problems:
        return report
    manifest_bytes = fs.cat_file(f"{version_dir}/{manifest_lib.MANIFEST_FILE}") \
        if fs.exists(f"{version_dir}/{manifest_lib.MANIFEST_FILE}") else None
    if manifest_bytes is None:
        report.problems.append(Problem(manifest_lib.MANIFEST_FILE, "missing: the version is "
                                       "incomplete (a build still running or interrupted) or "
                                       "this is not a recordforge dataset", code="manifest"))
        return report
    try:
        manifest = manifest_lib.load_manifest(manifest_bytes)
    except manifest_lib.ManifestError as error:
        report.problems.append(Problem(manifest_lib.MANIFEST_FILE, str(error), code="manifest"))
        return report
    report.version = manifest["version"]
    present = _list_files(fs, version_dir)

    sums = {}
    if manifest_lib.SHA256SUMS_FILE not in present:
        report.problems.append(Problem(manifest_lib.SHA256SUMS_FILE, "missing", code="sums"))
    else:
        try:
            sums = manifest_lib.parse_sha256sums(
                fs.cat_file(f"{version_dir}/{manifest_lib.SHA256SUMS_FILE}"))
        except manifest_lib.ManifestError as error:
            report.problems.append(Problem(manifest_lib.SHA256SUMS_FILE, str(error), code="sums"))

    compression = manifest_lib.compression_from_label(manifest["compression"])
    features = manifest["features"] if deep else None
    vocabulary_sizes = _vocabulary_sizes(manifest["features"], manifest["vocabularies"])
    shards = {shard["file"]: (split, shard) for split, summary in manifest["splits"].items()
              for shard in summary["shards"]}
    owner_of_sha = {shard["sha256"]: file for file, (_, shard) in shards.items()}

    tasks = []  # (size hint, file, kwargs)
    for file, (_, shard) in shards.items():
        tasks.append((shard["num_bytes"], file, dict(
            compression=compression, expected_size=shard["num_bytes"],
            expected_sha256=shard["sha256"], expected_records=shard["num_examples"],
            features=features, vocabulary_sizes=vocabulary_sizes)))
        listed = sums.get(file)
        if sums and listed != shard["sha256"]:
            report.problems.append(Problem(manifest_lib.SHA256SUMS_FILE, (
                f"lists {listed[:16]}… for {file}, manifest says {shard['sha256'][:16]}…")
                if listed else f"does not list shard {file}", code="sums"))
    for file in manifest["dead_letter"]["files"]:
        if file not in present:
            report.problems.append(Problem(
                file, "missing (listed in the manifest's dead_letter.files)", code="missing"))
        elif sums and file not in sums:
            report.problems.append(Problem(manifest_lib.SHA256SUMS_FILE, f"does not list {file}",
                                           code="sums"))
    for file in manifest.get("files", []):
        if file not in present:
            report.problems.append(Problem(file, "missing (listed in the manifest's files)",
                                           code="missing"))
        elif sums and file not in sums:
            report.problems.append(Problem(manifest_lib.SHA256SUMS_FILE, f"does not list {file}",
                                           code="sums"))
    for file, digest in sums.items():
        if file in shards:
            continue
        if file not in present:
            report.problems.append(Problem(file, "missing (listed in SHA256SUMS)", code="missing"))
            continue
        tasks.append((0, file, dict(expected_sha256=digest)))
    accounted = set(shards) | set(sums) | set(manifest["dead_letter"]["files"]) | {
        manifest_lib.MANIFEST_FILE, manifest_lib.SHA256SUMS_FILE}
    for file in sorted(present - accounted):
        report.problems.append(Problem(file, "unexpected file (in neither the manifest nor "
                                       "SHA256SUMS)", code="unexpected"))

    # Largest first, so one big shard does not start last.
    tasks.sort(key=lambda task: (-task[0], task[1]))
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks) or 1))
    checks: dict[str, FileCheck] = {}
    with _make_executor(executor, workers, fs) as pool:
        futures = {pool.submit(check_file, f"{version_url}/{file}", file, **kwargs): file
                   for _, file, kwargs in tasks}
        for future in concurrent.futures.as_completed(futures):
            check = future.result()
            checks[check.file] = check

    for file in sorted(checks):
        check = checks[file]
        report.files_checked += check.exists
        report.bytes_checked += check.size
        report.records_checked += check.records or 0
        other = owner_of_sha.get(check.sha256) if file in shards else None
        for problem in check.problems:
            if problem.code == "sha256" and other and other != file:
                # The whole file is wrong from its first byte: it is another
                # shard's content.
                problem = Problem(file, f"holds the bytes of {other} (shards swapped or "
                                  "copied over each other)", offset=0, code="swapped")
            report.problems.append(problem)

    for split, summary in manifest["splits"].items():
        split_checks = [checks[shard["file"]] for shard in summary["shards"]]
        if all(c.exists and not any(p.offset is not None for p in c.problems)
               for c in split_checks):
            found = sum(c.records or 0 for c in split_checks)
            if found != summary["num_examples"]:
                report.problems.append(Problem(f"split {split!r}", f"holds {found} examples, "
                                               f"manifest says {summary['num_examples']}",
                                               code="split"))
    report.seconds = time.monotonic() - started
    return report


# --- command line ---------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordforge verify",
        description="Re-read a published dataset: sizes, sha256, record framing and CRCs, "
                    "counts; --deep also parses every Example against the manifest.")
    parser.add_argument("dataset", metavar="DATASET_DIR",
                        help="a version directory, or an output root holding LATEST "
                             "(local path or fsspec URL)")
    parser.add_argument("--deep", action="store_true",
                        help="parse every record and check features, types, shapes, vocab ids")
    parser.add_argument("--workers", type=int, default=None,
                        help="files checked in parallel (default: CPU count)")
    parser.add_argument("--processes", action="store_true",
                        help="use a process pool instead of threads")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``recordforge verify``. Returns 0 intact, 1 damaged, 2 usage error."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 0 if exit_.code == 0 else 2
    if args.workers is not None and args.workers < 1:
        print("recordforge verify: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        report = verify_dataset(args.dataset, deep=args.deep, workers=args.workers,
                                executor="process" if args.processes else "thread")
    except DatasetNotFoundError as error:
        print(f"recordforge verify: {error}", file=sys.stderr)
        return 2
    except (ImportError, ValueError) as error:  # an unknown protocol, or its extra missing
        print(f"recordforge verify: {redact_url(args.dataset)}: {error}", file=sys.stderr)
        return 2
    if report.ok:
        print(f"OK {report.path}: version {report.version}, {report.files_checked} files, "
              f"{report.records_checked} records, {report.bytes_checked} bytes verified"
              + (" (deep)" if args.deep else "") + f" in {report.seconds:.1f}s")
        return 0
    for line in report.lines():
        print(line)
    damaged = len(report.damaged())
    print(f"DAMAGED {report.path}: {damaged} file(s) with problems", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
