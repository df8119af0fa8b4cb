"""`recordforge verify`: re-reads a published dataset and reports damage.

Library: ``verify_dataset(path, deep=False, workers=None) -> VerifyReport``.
`path` is a version directory (holding ``manifest.json``) or an output root
(holding ``LATEST``), as a local path or fsspec URL.

Checks, each reported as a `Problem` naming the file and, where there is
one, the byte offset and record index of the first fault:

* ``manifest.json`` parses and is consistent (shard naming, per-split sums,
  ``num_input_rows == Σ num_examples + dead_letter.num_rows``);
* every shard's index file (``<shard>.index``, uncompressed output):
  present, size and sha256 as in the manifest; no index file the manifest
  does not list (``deep=True``: every line against the shard's records);
* every shard: present, size and sha256 as in the manifest, every record's
  length CRC and data CRC (offsets of gzip shards are in the uncompressed
  stream), record count as in the manifest; a shard whose bytes are those of
  another shard in the manifest is named as such (swapped or copied);
* record counts per split;
* ``SHA256SUMS``: present, lists every shard with the manifest's digest, and
  every other file it lists (dead letters, report) matches; every dead-letter
  file in the manifest exists and is listed; no file in the version
  directory is unaccounted for;
* ``duplicates.json``, when present: read as untrusted input (size and
  nesting limited), its shape, split names and counts agree with the
  manifest (`duplicates.duplicates_problems`);
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
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...transforms.layout import INDEX_SUFFIX, MANIFEST_FILE, SHA256SUMS_FILE
from ...transforms.urls import redact_url
from . import manifest as manifest_lib
from .checksums import parse_sha256sums
from .duplicates import duplicates_problems
from .dataset_paths import (MAX_MANIFEST_BYTES, DatasetNotFoundError, list_version,
                            load_version_manifest, locate_version, read_limited)
from .file_checks import FileCheck, Problem, ReadBack, check_file, check_read_back, check_stored
from .reading_processes import reading_pool

__all__ = ["DatasetNotFoundError", "VerifyReport", "main", "verify_dataset"]

# Which problem of a file is reported first: the most specific cause (a
# wrong file, the first bad byte) before its consequences (size, checksum).
_FIRST_FAULT_ORDER = {code: rank for rank, code in enumerate(
    ["missing", "swapped", "framing", "example", "index", "count", "size", "sha256",
     "crc32c"])}


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


def _declared_features(manifest: Mapping) -> dict:
    """The manifest's features, each saying whether it may be absent. A
    manifest written before features stated ``"required"`` still records
    the schema as declared in its ``config`` block: a feature declared
    ``required: false`` without a default may be absent there too."""
    declared = manifest.get("config", {}).get("features")
    features = {}
    for name, spec in manifest["features"].items():
        spec = dict(spec)
        if "required" not in spec and "default" not in spec and isinstance(declared, Mapping):
            body = declared.get(name)
            if isinstance(body, Mapping) and body.get("required") is False \
                    and body.get("default") is None:
                spec["required"] = False
        features[name] = spec
    return features


# --- the dataset ---------------------------------------------------------------------

def _make_executor(kind: str, workers: int, fs) -> concurrent.futures.Executor:
    if kind == "process" and "memory" not in _protocols(fs):
        return reading_pool(workers)
    return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="verify")


def _protocols(fs) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


def verify_dataset(path: str, deep: bool = False, workers: int | None = None, *,
                   executor: str = "thread",
                   checked_as_written: Mapping[str, Mapping] | None = None,
                   read_already: Mapping[str, ReadBack] | None = None,
                   written_crc32c: Mapping[str, int] | None = None) -> VerifyReport:
    """Verifies the dataset at `path` (version directory or output root with
    LATEST). Returns a `VerifyReport`; raises `DatasetNotFoundError` only
    when `path` does not exist. `workers` defaults to the CPU count;
    `executor` is "thread" or "process". checked_as_written: shards whose
    records their writer checked as it wrote them (file -> the store's
    fingerprint it took then; `transforms.shard_files`), which are not read
    again: each must still be that object (`file_checks.check_stored`).
    read_already: local shards read back while the build ran
    (`early_checks`), judged without reading them again while each is
    still the file read (`file_checks.check_read_back`). written_crc32c:
    file -> the CRC-32C its writer took of the bytes it wrote (shards and
    index files a build staged): such a file is judged by that instead of
    hashing it with sha256 once more (`file_checks`); not with `deep`."""
    checked_as_written = checked_as_written or {}
    read_already = read_already or {}
    written_crc32c = {} if deep else dict(written_crc32c or {})
    started = time.monotonic()
    located = locate_version(path)
    fs, version_dir, version_url = located.fs, located.version_dir, located.url
    report = VerifyReport(path=redact_url(version_url), version=located.latest,
                          problems=list(located.problems))
    if report.problems:
        return report
    manifest, problem = load_version_manifest(located)
    if problem is not None:
        report.problems.append(problem)
        return report
    report.version = manifest["version"]
    present, links = list_version(fs, version_dir)
    for file in sorted(links):
        # Never read through it: its target may be anywhere.
        report.problems.append(Problem(file, "is a symbolic link; a published version holds "
                                       "only regular files (not followed)", code="link"))

    sums = {}
    if SHA256SUMS_FILE not in present:
        report.problems.append(Problem(SHA256SUMS_FILE, "missing", code="sums"))
    else:
        try:
            sums = parse_sha256sums(read_limited(fs, f"{version_dir}/{SHA256SUMS_FILE}",
                                                 MAX_MANIFEST_BYTES))
        except (manifest_lib.ManifestError, OSError, ValueError) as error:
            report.problems.append(Problem(SHA256SUMS_FILE, str(error), code="sums"))

    compression = manifest_lib.compression_from_label(manifest["compression"])
    features = _declared_features(manifest) if deep else None
    vocabulary_sizes = _vocabulary_sizes(manifest["features"], manifest["vocabularies"])
    shards = {shard["file"]: (split, shard) for split, summary in manifest["splits"].items()
              for shard in summary["shards"]}
    owner_of_digest = {("sha256", shard["sha256"]): file for file, (_, shard) in shards.items()}
    owner_of_digest.update((("crc32c", crc), file) for file, crc in written_crc32c.items()
                           if file in shards)
    indexes = manifest_lib.index_files(manifest)

    tasks = []  # (size hint, file, check function, kwargs)
    checks: dict[str, FileCheck] = {}
    for file, (_, shard) in shards.items():
        if file in links:
            checks[file] = FileCheck(file=file, exists=False)  # reported above, not read
            continue
        if file in checked_as_written and not deep:
            tasks.append((0, file, check_stored, dict(
                stored=checked_as_written[file], compression=compression,
                expected_size=shard["num_bytes"],
                expected_sha256=shard["sha256"], expected_records=shard["num_examples"])))
        elif file in read_already and file in written_crc32c:
            tasks.append((0, file, check_read_back, dict(
                read=read_already[file], compression=compression,
                expected_size=shard["num_bytes"],
                expected_crc32c=written_crc32c[file], expected_records=shard["num_examples"])))
        else:
            index = shard.get("index")
            tasks.append((shard["num_bytes"], file, check_file, dict(
                compression=compression, expected_size=shard["num_bytes"],
                expected_records=shard["num_examples"], **_whole_file(file, shard["sha256"],
                                                                       written_crc32c),
                features=features, vocabulary_sizes=vocabulary_sizes,
                index=(f"{version_url}/{index['file']}", index["file"])
                if deep and index and index["file"] not in links else None)))
        report.problems.extend(_listed_as_in_manifest(sums, file, shard["sha256"], "shard"))
    for file, shard in indexes.items():  # plain: size and sha256 (deep: lines, above)
        if file not in links:
            tasks.append((0, file, check_file, dict(
                expected_size=shard["index"]["num_bytes"],
                **_whole_file(file, shard["index"]["sha256"], written_crc32c))))
        report.problems.extend(_listed_as_in_manifest(sums, file, shard["index"]["sha256"],
                                                      "index"))
    for file in sorted(_unlisted_indexes(present | set(sums), indexes)):
        report.problems.append(Problem(file, "an index file the manifest does not list (a "
                                       "reader would trust offsets nothing checked)",
                                       code="unexpected"))
    for file in manifest["dead_letter"]["files"]:
        if file in links:
            continue
        if file not in present:
            report.problems.append(Problem(
                file, "missing (listed in the manifest's dead_letter.files)", code="missing"))
        elif sums and file not in sums:
            report.problems.append(Problem(SHA256SUMS_FILE, f"does not list {file}",
                                           code="sums"))
    for entry in manifest.get("files") or []:  # descriptions (croissant.json, ...)
        file = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(file, str) or file in links:
            continue
        if file not in present:
            report.problems.append(Problem(file, "missing (listed in the manifest's files)",
                                           code="missing"))
        elif sums and sums.get(file) != entry.get("sha256"):
            report.problems.append(Problem(SHA256SUMS_FILE, (
                f"lists {sums[file][:16]}… for {file}, manifest says "
                f"{str(entry.get('sha256'))[:16]}…") if file in sums
                else f"does not list {file}", code="sums"))
    for file, digest in sums.items():
        if file in shards or file in indexes or file.endswith(INDEX_SUFFIX):
            continue
        if file in links:
            continue
        if file not in present:
            report.problems.append(Problem(file, "missing (listed in SHA256SUMS)", code="missing"))
            continue
        tasks.append((0, file, check_file, dict(expected_sha256=digest)))
    accounted = set(shards) | set(sums) | set(indexes) | set(
        manifest["dead_letter"]["files"]) | {MANIFEST_FILE, SHA256SUMS_FILE}
    for file in sorted(present - accounted - set(_unlisted_indexes(present, indexes))):
        report.problems.append(Problem(file, "unexpected file (in neither the manifest nor "
                                       "SHA256SUMS)", code="unexpected"))

    # Largest first, so one big shard does not start last.
    tasks.sort(key=lambda task: (-task[0], task[1]))
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks) or 1))
    with _make_executor(executor, workers, fs) as pool:
        futures = {pool.submit(check, f"{version_url}/{file}", file, **kwargs): file
                   for _, file, check, kwargs in tasks}
        for future in concurrent.futures.as_completed(futures):
            check = future.result()
            checks[check.file] = check

    for file in sorted(checks):
        check = checks[file]
        report.files_checked += check.exists
        report.bytes_checked += check.size
        report.records_checked += check.records or 0
        other = owner_of_digest.get(check.whole_file_digest()) if file in shards else None
        for problem in check.problems:
            if problem.code in ("sha256", "crc32c") and other and other != file:
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
    report.problems += duplicates_problems(fs, version_dir, manifest)
    report.seconds = time.monotonic() - started
    return report


def _whole_file(file: str, sha256: str, written_crc32c: Mapping[str, int]) -> dict:
    """`check_file`'s expected whole-file hash for `file`: its writer's
    CRC-32C where one is known, else the manifest's sha256."""
    if file in written_crc32c:
        return {"expected_crc32c": written_crc32c[file]}
    return {"expected_sha256": sha256}


def _listed_as_in_manifest(sums: Mapping[str, str], file: str, digest: str,
                           what: str) -> list[Problem]:
    """SHA256SUMS's problem with a shard's or an index's line: it must list
    `file` with the manifest's `digest` (nothing when there is no SHA256SUMS
    to read: that is reported once)."""
    listed = sums.get(file)
    if not sums or listed == digest:
        return []
    return [Problem(SHA256SUMS_FILE, f"lists {listed[:16]}… for {file}, manifest says "
                    f"{digest[:16]}…" if listed else f"does not list {what} {file}",
                    code="sums")]


def _unlisted_indexes(files, indexes: Mapping[str, Mapping]) -> list[str]:
    """The index files among `files` that no shard of the manifest has."""
    return [file for file in files if file.endswith(INDEX_SUFFIX) and file not in indexes]


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
    except OSError as error:  # a store that cannot be reached, an I/O error
        print(f"recordforge verify: {redact_url(args.dataset)}: cannot be read "
              f"({redact_url(str(error))})", file=sys.stderr)
        return 1
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
