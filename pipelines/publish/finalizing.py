"""Publishing a build: error budget, manifest, verification, commit.

A build never writes at a final name. The driver calls::

    staging = publish.begin_build(output_path, version, overwrite=False)
    try:
        run the pipeline, writing into staging.url (see `pipelines.staging`)
    except BaseException:
        staging.abort()
        raise
    result = publish.finalize(staging, name=..., compression="gzip"|"none",
                              features={...}, vocabularies={...}, config={...},
                              split_names=[...], max_error_rate=0.01,
                              max_errors=None, runner="DirectRunner",
                              verify=True, report_hook=None,
                              statistics_hook=None)

`begin_build` checks the version name, creates the staging directory (after
cleaning up dead builds of the version, see `staging.open_staging`) and
refuses a version that is already published unless overwriting.

`_pipeline_result.json` holds::

    {"shards": [{"split", "file", "num_examples", "num_bytes", "sha256"}, ...],
     "dead_letter": {"num_rows", "by_reason": {reason: n}, "files": [...],
                     "samples": {reason: dead-letter record}},
     "num_input_rows": int}

(`files` relative to the staging directory, e.g. ``dead_letter/part-00000.jsonl``.)

`finalize` checks, in order: the row accounting invariant
(``num_input_rows == Σ num_examples + dead_letter.num_rows``; a failure is a
bug that lost or duplicated rows), the error budget (`max_error_rate` of the
input rows, and `max_errors` rows if given), shard naming, and that no split
is empty. Any failure raises `BuildFailed`; the dead-letter files are then
moved to ``<output>/.failed/<version>.<build_id>/dead_letter/`` and the
message names the top reasons with a sample row each. Otherwise it deletes
``_tmp``, calls ``report_hook(staging.url, manifest, label_counts)`` (which
may add files such as ``report.html``; `label_counts` are the pipeline's
``{split: {label: examples}}`` or None). Before it,
``statistics_hook(staging.url, manifest, pipeline_result)`` may write
statistics files (stats.json, drift.json) and returns a failure message when
a validation gate is crossed: the build then fails (`BuildFailed`) once the
report is written, and the report and statistics files are kept with the
dead letters under ``<output>/.failed/<version>.<build_id>/``. Every file
the hooks added is listed in the manifest's ``files``. It then writes
``SHA256SUMS`` (every file of the version
but ``manifest.json`` and itself), writes ``manifest.json`` into the staging
directory, runs `verify.verify_dataset` on it (unless ``verify=False``) and
commits:

* local filesystems: the staging directory is renamed to ``<output>/<version>``
  in one step, so the version appears complete or not at all. When
  overwriting, the two directories are swapped atomically
  (``renameat2(RENAME_EXCHANGE)`` on Linux) and the old one deleted; where
  that call is missing the old version is renamed aside first, and a crash
  between the two renames is rolled back by the next build.
* object stores (memory://, gs://, s3://, anything without atomic rename):
  an existing ``manifest.json`` is deleted first (a version being replaced is
  unpublished rather than mixed), files the new version does not have are
  removed, every file is copied, sizes are checked, and ``manifest.json`` is
  copied last.

Then ``LATEST`` is replaced (temporary name + rename locally, one put on
object stores) by the published version's name (``update_latest=False``
leaves it alone, e.g. for a backfill of an old version).

Concurrency: commits of one version hold the version's commit lock
(`staging.CommitLock`) and publish only if the version's published
``manifest.json`` is still the one seen by `begin_build`; the second of two
concurrent builds fails with `ConcurrentBuildError`.

Errors: `VersionExistsError` (version already published; the CLI exits 2 and
suggests --overwrite), `BuildFailed` (exit 1; `ConcurrentBuildError` is one),
`PublishError` itself when the version was published but ``LATEST`` could not
be replaced (exit 1), `OSError` from the filesystem before the commit
(nothing published; exit 1),
`schemas.errors.ConfigError` for an invalid version template (exit 2).
Credentials in URLs never appear in messages (`redact_url`).
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import errno
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from . import manifest as manifest_lib
from .report import REPORT_FILE
from .statistics import DRIFT_FILE, STATS_FILE
from .staging import (ASIDE_SUFFIX, DEAD_LETTER_DIR, HEARTBEAT_INTERVAL,
                                           LATEST_TMP_SUFFIX, RESULT_FILE, STALE_AFTER,
                                           TMP_DIR, CommitLock, Output, Staging, fsync_dir,
                                           load_json, open_staging, published_identity)
from ...schemas.errors import ConfigError
from ...transforms.urls import redact_url

__all__ = [
    "FAILED_DIR",
    "LATEST_FILE",
    "BuildFailed",
    "ConcurrentBuildError",
    "PublishError",
    "PublishResult",
    "VersionExistsError",
    "begin_build",
    "check_version_name",
    "finalize",
    "read_latest",
    "resolve_version",
]

FAILED_DIR = ".failed"
LATEST_FILE = manifest_lib.LATEST_FILE
_VERSION_CHARS = re.compile(r"^[A-Za-z0-9._+=-]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_TOP_REASONS = 5
_MAX_SAMPLE_CHARS = 240


# --- errors -------------------------------------------------------------------

class PublishError(Exception):
    """Base of the errors that stop a build from publishing."""


class VersionExistsError(PublishError):
    """The version is already published and overwrite was not requested."""


class BuildFailed(PublishError):
    """The build is not published: error budget exceeded, rows lost, an empty
    split, damaged output, ...

    reasons: the top dead-letter reasons as (reason, count, sample record or
    None). kept_at: where the dead-letter files of the failed build were
    moved (a redacted URL), or None. problems: verification problems, if any.
    """

    def __init__(self, message: str, *, reasons=(), kept_at: str | None = None,
                 problems=()):
        super().__init__(message)
        self.reasons = list(reasons)
        self.kept_at = kept_at
        self.problems = list(problems)
        self.report_at: str | None = None

    def with_kept_at(self, kept_at: str | None, report_at: str | None = None) -> "BuildFailed":
        """The same failure, its message extended by where dead letters
        (and the report) went."""
        message = str(self)
        if kept_at:
            message += f"\ndead-letter files of this build were kept in {kept_at}"
        if report_at:
            message += f"\nthe report of this build was kept at {report_at}"
        failure = type(self)(message, reasons=self.reasons, kept_at=kept_at or None,
                             problems=self.problems)
        failure.report_at = report_at
        return failure


class ConcurrentBuildError(BuildFailed):
    """Another build published (or is publishing) the same version."""


# --- names and URLs -----------------------------------------------------------

def _redact_values(value: Any) -> Any:
    """Redacts every string inside a config tree (output paths may carry
    credentials; the manifest must not)."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Mapping):
        return {key: _redact_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_values(item) for item in value]
    return value


def resolve_version(template: str, now: _dt.datetime | None = None) -> str:
    """Expands ``{date}`` (UTC YYYYMMDD) and ``{datetime}`` (UTC
    YYYYMMDDTHHMMSS) in a version template and checks the resulting name.
    Raises `ConfigError` (key ``version``) for other placeholders or a name
    that cannot be a directory name."""
    if not isinstance(template, str):
        raise ConfigError("version", f"must be a string, got {type(template).__name__}")
    now = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    values = {"date": now.strftime("%Y%m%d"), "datetime": now.strftime("%Y%m%dT%H%M%S")}

    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError("version", f"unknown placeholder {{{name}}} in {template!r}; "
                              "only {date} and {datetime} are allowed")
        return values[name]

    resolved = _PLACEHOLDER.sub(substitute, template)
    if "{" in resolved or "}" in resolved:
        raise ConfigError("version", f"unbalanced brace in {template!r}")
    check_version_name(resolved)
    return resolved


def check_version_name(version: str) -> None:
    """Raises `ConfigError` unless `version` is a safe directory name."""
    problem = None
    if not version:
        problem = "is empty"
    elif "/" in version or "\\" in version:
        problem = "contains a path separator"
    elif ".." in version:
        problem = "contains '..'"
    elif any(ch.isspace() for ch in version):
        problem = "contains whitespace"
    elif version.startswith("."):
        problem = "starts with '.' (names starting with '.' are reserved for staging)"
    elif version == LATEST_FILE:
        problem = f"is {LATEST_FILE!r}, the name of the pointer file"
    elif len(version) > 200:
        problem = "is longer than 200 characters"
    elif not _VERSION_CHARS.match(version):
        problem = "may only use letters, digits and . _ + = -"
    if problem:
        raise ConfigError("version", f"{version!r} {problem}")


# --- starting a build ----------------------------------------------------------

def begin_build(output_path: str, version: str, overwrite: bool = False, *,
                stale_after: float = STALE_AFTER,
                heartbeat_interval: float = HEARTBEAT_INTERVAL) -> Staging:
    """Starts a build of `version` under `output_path` (local path or fsspec
    URL). Returns the `Staging` the pipeline writes into.

    Raises `ConfigError` for an invalid version name and `VersionExistsError`
    if ``<output>/<version>/manifest.json`` exists (once dead builds are
    cleaned up, see `staging.open_staging`) and not `overwrite`.
    """
    check_version_name(version)

    def admit(out: Output, identity: str | None) -> None:
        if identity is not None and not overwrite:
            raise VersionExistsError(
                f"version {version!r} is already published at {out.display}/{version}; "
                "use --overwrite to replace it")

    return open_staging(output_path, version, stale_after=stale_after,
                        heartbeat_interval=heartbeat_interval, admit=admit)


def read_latest(output_path: str) -> str | None:
    """The version named by ``<output>/LATEST``, or None if there is none."""
    out = Output(output_path)
    data = out.read_bytes(out.path(LATEST_FILE))
    if data is None:
        return None
    return data.decode("utf-8").strip() or None


# --- finalize -------------------------------------------------------------------

@dataclass
class PublishResult:
    """What was published: the version, its redacted location and manifest."""

    version: str
    url: str
    manifest: dict
    verified: bool
    latest_updated: bool
    num_examples: int = field(init=False)

    def __post_init__(self):
        self.num_examples = sum(split["num_examples"] for split in self.manifest["splits"].values())


def finalize(staging: Staging, *, name: str, compression: str, features: Mapping[str, Any],
             vocabularies: Mapping[str, Sequence[str]], config: Mapping[str, Any],
             split_names: Sequence[str], max_error_rate: float | None = 0.01,
             max_errors: int | None = None, runner: str = "DirectRunner", verify: bool = True,
             report_hook: Callable[[str, dict, dict | None], None] | None = None,
             update_latest: bool = True, verify_workers: int | None = None,
             statistics_hook: Callable[[str, dict, dict], str | None] | None = None
             ) -> PublishResult:
    """Checks the staged build and publishes it (see the module docstring).

    Returns a `PublishResult`. Raises `BuildFailed` (nothing published; the
    staging directory is deleted, dead letters moved under ``.failed/``),
    `ConcurrentBuildError` or `VersionExistsError`. Either way the staging
    directory and its owner file are gone afterwards.
    """
    out = staging.out
    try:
        result = _read_pipeline_result(out, staging)
        _check_accounting(result)
        _check_error_budget(result, max_error_rate, max_errors)
        dead_files = _dead_letter_files(out, staging, result)
        try:
            manifest = manifest_lib.build_manifest(
                name=name, version=staging.version, created=manifest_lib.utc_timestamp(),
                compression=compression, features=features, vocabularies=vocabularies,
                split_names=split_names, shards=result["shards"],
                num_input_rows=result["num_input_rows"],
                dead_letter={**result["dead_letter"], "files": dead_files},
                config=_redact_values(config), runner=runner)
        except manifest_lib.ManifestError as error:
            raise BuildFailed(f"the pipeline's shards are inconsistent: {error}") from None
        _check_nonempty_splits(manifest)
        _check_still_publishable(out, staging)
        out.remove(f"{staging.directory}/{TMP_DIR}", recursive=True)
        out.remove(f"{staging.directory}/{RESULT_FILE}")
        _check_staged_files(out, staging, manifest)
        gate_failure = None
        if statistics_hook is not None:
            try:
                gate_failure = statistics_hook(staging.url, manifest, result)
            except Exception as error:
                raise BuildFailed(f"computing the build's statistics failed "
                                  f"({type(error).__name__}: {error}); nothing was "
                                  "published") from error
        if report_hook is not None:
            try:
                report_hook(staging.url, manifest, result.get("label_counts"))
            except Exception as error:
                raise BuildFailed(f"writing the build report failed ({type(error).__name__}: "
                                  f"{error}); nothing was published") from error
        if gate_failure:
            raise BuildFailed(gate_failure)
        manifest = manifest_lib.with_files(manifest, _added_files(out, staging, manifest))
        _write_sha256sums(out, staging, manifest)
        if out.local:
            # Shards and dead-letter files were synced before their renames;
            # the renames inside dead_letter/ are synced here, those in the
            # staging directory by the manifest's own write.
            fsync_dir(f"{staging.directory}/{DEAD_LETTER_DIR}")
        out.write_atomic(f"{staging.directory}/{manifest_lib.MANIFEST_FILE}",
                         manifest_lib.dumps_manifest(manifest))
        if verify:
            _verify_staged(staging, verify_workers)
        _commit(out, staging)
    except ConcurrentBuildError:
        staging.abort()
        raise
    except BuildFailed as failure:
        kept_at = _keep_dead_letters(out, staging)
        report_at = _keep_report(out, staging)
        staging.abort()
        if kept_at or report_at:
            raise failure.with_kept_at(kept_at, report_at) from None
        raise
    except BaseException:
        staging.abort()
        raise
    staging.close()
    latest_updated = False
    if update_latest:
        try:
            out.write_atomic(out.path(LATEST_FILE), f"{staging.version}\n".encode(),
                             tmp=f"{staging.directory}{LATEST_TMP_SUFFIX}")
        except OSError as error:
            # The version is complete and published; only the pointer is stale.
            raise PublishError(
                f"version {staging.version!r} is published at "
                f"{out.display_of(out.path(staging.version))}, but {LATEST_FILE} could not be "
                f"updated ({type(error).__name__}: {redact_url(str(error))}); it still names "
                "the previous version") from error
        latest_updated = True
    return PublishResult(version=staging.version, url=out.display_of(out.path(staging.version)),
                         manifest=manifest, verified=verify, latest_updated=latest_updated)


def _read_pipeline_result(out: Output, staging: Staging) -> dict:
    data = out.read_bytes(f"{staging.directory}/{RESULT_FILE}")
    if data is None:
        raise BuildFailed(f"{staging.display_url}/{RESULT_FILE} is missing: the pipeline did "
                          "not finish")
    result = load_json(data)
    problem = _result_problem(result)
    if problem:
        raise BuildFailed(f"{staging.display_url}/{RESULT_FILE} is malformed: {problem}")
    return result


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _result_problem(result: Any) -> str | None:
    if not isinstance(result, dict):
        return "not a JSON object"
    if not _is_count(result.get("num_input_rows")):
        return "num_input_rows must be a non-negative integer"
    shards = result.get("shards")
    if not isinstance(shards, list):
        return "shards must be a list"
    for position, shard in enumerate(shards):
        if not isinstance(shard, dict) or not all(key in shard for key in (
                "split", "file", "num_examples", "num_bytes", "sha256")):
            return f"shards[{position}] needs split, file, num_examples, num_bytes, sha256"
        if not (_is_count(shard["num_examples"]) and _is_count(shard["num_bytes"])):
            return f"shards[{position}]: counts must be non-negative integers"
    dead = result.get("dead_letter")
    if not isinstance(dead, dict) or not _is_count(dead.get("num_rows")):
        return "dead_letter.num_rows must be a non-negative integer"
    if not isinstance(dead.get("by_reason", {}), dict):
        return "dead_letter.by_reason must be an object"
    label_counts = result.get("label_counts", {})
    if not (isinstance(label_counts, dict) and all(
            isinstance(counts, dict) and all(map(_is_count, counts.values()))
            for counts in label_counts.values())):
        return "label_counts must map each split to {label: non-negative integer}"
    if not isinstance(dead.get("files", []), list):
        return "dead_letter.files must be a list"
    if not isinstance(dead.get("samples", {}), dict):
        return "dead_letter.samples must be an object"
    return None


def _check_accounting(result: dict) -> None:
    examples = sum(shard["num_examples"] for shard in result["shards"])
    dead = result["dead_letter"]["num_rows"]
    rows = result["num_input_rows"]
    if rows != examples + dead:
        difference = rows - examples - dead
        what = f"{difference} rows lost" if difference > 0 else f"{-difference} rows duplicated"
        raise BuildFailed(
            f"row accounting failed: {rows} input rows but {examples} examples in shards + "
            f"{dead} dead letters ({what}). This is a bug in recordforge or a runner that "
            "ran a step twice; nothing was published")
    by_reason = result["dead_letter"].get("by_reason", {})
    if by_reason and sum(by_reason.values()) != dead:
        raise BuildFailed(f"row accounting failed: dead_letter.by_reason sums to "
                          f"{sum(by_reason.values())} but dead_letter.num_rows is {dead}")


def _format_sample(record: Any) -> str:
    if not isinstance(record, Mapping):
        return ""
    where = str(record.get("source") or "?")
    if record.get("row") is not None:
        where += f" row {record['row']}"
    if record.get("key") is not None:
        where += f" key {json.dumps(record['key'], ensure_ascii=False)}"
    message = str(record.get("message", ""))
    if record.get("feature") and repr(record["feature"]) not in message:
        where += f" feature {record['feature']!r}"
    text = f"{where}: {message}"
    return redact_url(text if len(text) <= _MAX_SAMPLE_CHARS else text[:_MAX_SAMPLE_CHARS] + "…")


def _top_reasons(dead: Mapping) -> list[tuple[str, int, Any]]:
    samples = dead.get("samples") or {}
    ranked = sorted(dead.get("by_reason", {}).items(), key=lambda item: (-item[1], item[0]))
    return [(reason, count, samples.get(reason)) for reason, count in ranked[:_TOP_REASONS]]


def _check_error_budget(result: dict, max_error_rate: float | None,
                        max_errors: int | None) -> None:
    rows = result["num_input_rows"]
    dead = result["dead_letter"]
    failed = dead["num_rows"]
    limits = []
    if max_error_rate is not None and failed > max_error_rate * rows:
        limits.append(f"max_error_rate={max_error_rate:g} ({int(max_error_rate * rows)} rows)")
    if max_errors is not None and failed > max_errors:
        limits.append(f"max_errors={max_errors}")
    if not limits:
        return
    rate = failed / rows if rows else 1.0
    reasons = _top_reasons(dead)
    lines = [f"build failed: {failed} of {rows} input rows ({rate:.2%}) failed, above the "
             f"error budget {' and '.join(limits)}; nothing was published", "top reasons:"]
    for reason, count, sample in reasons:
        line = f"  {reason}: {count} rows"
        example = _format_sample(sample)
        lines.append(f"{line}, e.g. {example}" if example else line)
    raise BuildFailed("\n".join(lines), reasons=reasons)


def _check_nonempty_splits(manifest: dict) -> None:
    empty = [split for split, summary in manifest["splits"].items()
             if summary["num_examples"] == 0]
    if empty:
        raise BuildFailed(f"split(s) {', '.join(map(repr, empty))} ended up with no examples; "
                          "nothing was published (too few rows, or the split fractions are "
                          "too small for this dataset)")


def _check_still_publishable(out: Output, staging: Staging) -> None:
    """Fails early (before verifying) when another build published this
    version since begin_build; the commit checks again under the lock."""
    if published_identity(out, staging.version) != staging.identity:
        raise ConcurrentBuildError(
            f"version {staging.version!r} was published at {out.display}/{staging.version} by "
            "another build while this one ran; this build published nothing")


def _dead_letter_files(out: Output, staging: Staging, result: dict) -> list[str]:
    """The dead-letter files present in staging (relative paths). Every
    file the pipeline reported must exist."""
    present = sorted(f"{DEAD_LETTER_DIR}/{name}" for name in
                     out.files(f"{staging.directory}/{DEAD_LETTER_DIR}"))
    prefixes = (staging.url.rstrip("/") + "/", staging.directory.rstrip("/") + "/")
    for file in result["dead_letter"].get("files", []):
        relative = next((file[len(p):] for p in prefixes if file.startswith(p)), file)
        if relative not in present:
            raise BuildFailed(f"dead-letter file {redact_url(file)} reported by the pipeline is "
                              f"missing from {staging.display_url}")
    return present


def _check_staged_files(out: Output, staging: Staging, manifest: dict) -> None:
    """Every shard exists with its recorded size; nothing unexplained is
    left beside them (it would be published)."""
    files = out.files(staging.directory)
    expected = set(manifest["dead_letter"]["files"])
    for split, summary in manifest["splits"].items():
        for shard in summary["shards"]:
            expected.add(shard["file"])
            size = files.get(shard["file"])
            if size is None:
                raise BuildFailed(f"shard {shard['file']} of split {split!r} is missing from "
                                  f"{staging.display_url}")
            if size != shard["num_bytes"]:
                raise BuildFailed(f"shard {shard['file']} is {size} bytes but the pipeline "
                                  f"reported {shard['num_bytes']}")
    unexpected = sorted(set(files) - expected)
    if unexpected:
        raise BuildFailed(f"unexpected files in {staging.display_url}: {', '.join(unexpected[:10])}")


def _sha256_of(out: Output, path: str) -> str:
    digest = hashlib.sha256()
    with out.fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_sha256sums(out: Output, staging: Staging, manifest: dict) -> None:
    """Shards by their manifest digests (verify re-reads them anyway); any
    other file (dead letters, report) hashed here."""
    shard_sums = {shard["file"]: shard["sha256"] for summary in manifest["splits"].values()
                  for shard in summary["shards"]}
    entries = []
    for file in out.files(staging.directory):
        if file in (manifest_lib.MANIFEST_FILE, manifest_lib.SHA256SUMS_FILE):
            continue
        digest = shard_sums.get(file) or _sha256_of(out, f"{staging.directory}/{file}")
        entries.append((file, digest))
    out.write_atomic(f"{staging.directory}/{manifest_lib.SHA256SUMS_FILE}",
                     manifest_lib.format_sha256sums(entries))


def _verify_staged(staging: Staging, workers: int | None) -> None:
    from . import verify as verify_lib  # verify imports manifest only

    report = verify_lib.verify_dataset(staging.url, workers=workers)
    if not report.ok:
        lines = [f"the staged build failed verification ({len(report.problems)} problems); "
                 "nothing was published:"] + [f"  {problem}" for problem in report.problems[:20]]
        raise BuildFailed("\n".join(lines), problems=report.problems)


def _keep_dead_letters(out: Output, staging: Staging) -> str | None:
    """Moves a failed build's dead letters (and pipeline result) to
    ``<output>/.failed/<version>.<build_id>/`` so they outlive the staging
    directory. Returns the redacted URL of the kept dead_letter directory."""
    source = f"{staging.directory}/{DEAD_LETTER_DIR}"
    files = out.files(source)
    if not files:
        return None
    target = out.path(FAILED_DIR, f"{staging.version}.{staging.build_id}")
    out.fs.makedirs(target, exist_ok=True)
    if out.local:
        os.rename(source, f"{target}/{DEAD_LETTER_DIR}")
    else:
        for file in files:
            out.fs.copy(f"{source}/{file}", f"{target}/{DEAD_LETTER_DIR}/{file}")
    result = out.read_bytes(f"{staging.directory}/{RESULT_FILE}")
    if result is not None:
        out.write_atomic(f"{target}/{RESULT_FILE}", result)
    return out.display_of(f"{target}/{DEAD_LETTER_DIR}") + "/"


# The files besides shards and dead letters a failed build keeps under
# .failed/ (the report hook's and the statistics hook's files).
KEPT_FILES = (REPORT_FILE, STATS_FILE, DRIFT_FILE)


def _keep_report(out: Output, staging: Staging) -> str | None:
    """Copies a failed build's report and statistics files (those present)
    to ``<output>/.failed/<version>.<build_id>/``. Returns the redacted URL
    of the kept report (or of the first kept file), or None."""
    target = out.path(FAILED_DIR, f"{staging.version}.{staging.build_id}")
    kept = []
    for name in KEPT_FILES:
        data = out.read_bytes(f"{staging.directory}/{name}")
        if data is None:
            continue
        out.fs.makedirs(target, exist_ok=True)
        out.write_atomic(f"{target}/{name}", data)
        kept.append(name)
    return out.display_of(f"{target}/{kept[0]}") if kept else None


def _added_files(out: Output, staging: Staging, manifest: dict) -> list[str]:
    """The files the hooks added (report, statistics): every staged file
    that is not a shard, a dead-letter file, the manifest or SHA256SUMS."""
    known = set(manifest["dead_letter"]["files"]) | {
        shard["file"] for summary in manifest["splits"].values() for shard in summary["shards"]}
    known |= {manifest_lib.MANIFEST_FILE, manifest_lib.SHA256SUMS_FILE}
    return sorted(set(out.files(staging.directory)) - known)


# --- commit --------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two paths (Linux renameat2 RENAME_EXCHANGE). False
    where the call or the filesystem does not support it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), a, None, b)


def _commit(out: Output, staging: Staging) -> None:
    lock = CommitLock(out, staging.version, build_id=staging.build_id,
                      stale_after=staging.stale_after)
    if not lock.acquire():
        holder = lock.holder or {}
        raise ConcurrentBuildError(
            f"another build of version {staging.version!r} (build {holder.get('build_id')}, "
            f"host {holder.get('host')}, pid {holder.get('pid')}) is publishing it; "
            "this build published nothing")
    try:
        # Under the lock: the version must still be in the state this build
        # started from, or a concurrent build has published it.
        _check_still_publishable(out, staging)
        if out.local:
            _commit_by_rename(out, staging)
        else:
            _commit_by_copy(out, staging)
    finally:
        lock.release()


def _commit_by_rename(out: Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged = staging.directory
    if not os.path.lexists(final):
        os.rename(staged, final)
    elif _exchange(staged, final):
        # The old version now sits at the staging name; a crash before the
        # delete leaves it to the stale-staging cleanup.
        shutil.rmtree(staged)
    else:
        aside = staged + ASIDE_SUFFIX
        os.rename(final, aside)
        # Crash window: <version> is absent until the next line; the next
        # begin_build of this version renames the aside copy back.
        os.rename(staged, final)
        shutil.rmtree(aside)
    fsync_dir(out.root)


def _commit_by_copy(out: Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged_files = out.files(staging.directory)
    manifest_name = manifest_lib.MANIFEST_FILE
    # Unpublish first: while files are replaced, readers must not trust the
    # old manifest's checksums against new bytes.
    out.remove(f"{final}/{manifest_name}")
    for file in sorted(set(out.files(final)) - set(staged_files)):
        out.remove(f"{final}/{file}")
    for file in sorted(staged_files):
        if file != manifest_name:
            out.fs.copy(f"{staging.directory}/{file}", f"{final}/{file}")
    copied = out.files(final)
    for file, size in staged_files.items():
        if file != manifest_name and copied.get(file) != size:
            raise BuildFailed(f"copying {file} to {out.display}/{staging.version} gave "
                              f"{copied.get(file)} bytes instead of {size}; nothing was published")
    out.fs.copy(f"{staging.directory}/{manifest_name}", f"{final}/{manifest_name}")
    out.remove(staging.directory, recursive=True)
