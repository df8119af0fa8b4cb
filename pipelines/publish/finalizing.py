"""Finishing a build: check what the pipeline staged, describe it, verify it, commit it.

The driver calls::

    staging = publish.begin_build(output_path, version, overwrite=False)
    try:
        run the pipeline, writing into staging.url (see `staging`)
    except BaseException:
        staging.abort()
        raise
    result = publish.finalize(staging, name=..., compression="gzip"|"none",
                              features={...}, vocabularies={...}, config={...},
                              split_names=[...], max_error_rate=0.01,
                              max_errors=None, runner="DirectRunner",
                              verify=True, report_hook=None,
                              statistics_hook=None)

`finalize` checks, in order: the pipeline result, its row accounting, the
error budget and that some row became an example (`budget`), shard naming
(`manifest.build_manifest`), and that no split is empty. Any failure
raises `BuildFailed`; the dead-letter files are then moved to
``<output>/.failed/<version>.<build_id>/dead_letter/``.
Otherwise it deletes ``_tmp``, calls ``report_hook(staging.url, manifest,
label_counts)`` (which may add files such as ``report.html``;
`label_counts` are the pipeline's ``{split: {label: examples}}`` or None).
Before it, ``statistics_hook(staging.url, manifest, pipeline_result)`` may
write statistics files (stats.json, drift.json; `statistics`) and returns a
failure message when a validation gate is crossed: the build then fails
(`BuildFailed`) once the report is written, and the report and statistics
files are kept with the dead letters under
``<output>/.failed/<version>.<build_id>/``. Every file the hooks added is
listed in the manifest's ``files``. With ``describe=True`` (as builds do)
it writes the descriptions for other readers (``dataset_info.json`` and
``features.json`` for TFDS, `tfds_metadata`, uncompressed output only;
``croissant.json``, `croissant`). Every file besides the shards, dead
letters, manifest and SHA256SUMS is listed in the manifest's ``files`` with
its size and sha256. It then writes ``SHA256SUMS`` (`checksums`), writes ``manifest.json`` into the
staging directory, runs `verify.verify_dataset` on it (unless
``verify=False``; shards an `early_checks.EarlyShardChecks` read back while
the pipeline ran are judged from that reading), commits (`commit.commit`) and replaces ``LATEST``
(``update_latest=False`` leaves it alone, e.g. for a backfill of an old
version).

Errors (`errors`): `VersionExistsError`, `BuildFailed` (`ConcurrentBuildError`
is one), `PublishedWithErrors` when the version was published but
publishing did not finish (`LatestNotUpdated`: ``LATEST`` could not be
replaced; a later build of the version finishes it, `finish_latest`),
`OSError` from the filesystem before the commit (nothing published). A
failure once the commit began is judged by what it left, read back
(`read_back`): `BuildFailed` or `PublishedWithErrors` saying what is at
the version's name and what LATEST names, or, when the version is this
build's, a warning and the LATEST update as usual. A
SIGINT or SIGTERM during the commit and the LATEST update waits until they
are done (`signals.deferred`). Credentials in URLs never appear in messages or the
manifest (`redact_url`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ...transforms.files import sync_directory
from ...transforms.layout import (DEAD_LETTER_DIR, DRIFT_FILE, DUPLICATES_FILE, FAILED_DIR,
                                  MANIFEST_FILE, REPORT_FILE, RESULT_FILE, SHA256SUMS_FILE,
                                  STATS_FILE, TMP_DIR)
from ...transforms.urls import redact_url
from .. import signals
from . import manifest as manifest_lib
from .budget import (check_accounting, check_error_budget, check_some_examples,
                     read_pipeline_result)
from .columns_seen import check_columns_seen
from .checksums import write_sha256sums
from .croissant import croissant_files
from .commit import (check_still_publishable, commit, latest_is_behind, point_latest,
                     write_latest)
from .early_checks import EarlyShardChecks
from .errors import BuildFailed, ConcurrentBuildError, LatestNotUpdated, PublishedWithErrors
from .file_checks import ReadBack
from .output import Output, load_json, published_identity
from .read_back import after_failure, late_warning, warn
from .staging import Staging
from .tfds_metadata import tfds_files
from .verify import verify_dataset

__all__ = ["PublishResult", "early_shard_checks", "finalize", "finish_latest"]


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
             describe: bool = False, inputs: Mapping[str, Any] | None = None,
             statistics_hook: Callable[[str, dict, dict], str | None] | None = None,
             early_checks: EarlyShardChecks | None = None,
             file_format: str = "tfrecord") -> PublishResult:
    """Checks the staged build and publishes it (see the module docstring).
    file_format: the shards' ("tfrecord" or "array_record", the manifest's
    ``file_format``).

    Returns a `PublishResult`. Raises `BuildFailed` (nothing published; the
    staging directory is deleted, dead letters moved under ``.failed/``),
    `ConcurrentBuildError` or `VersionExistsError`. Either way the staging
    directory and its owner file are gone afterwards.
    """
    out = staging.out
    try:
        result = read_pipeline_result(out, staging.directory, staging.display_url)
        check_accounting(result)
        check_error_budget(result, max_error_rate, max_errors)
        check_some_examples(result)
        check_columns_seen(result)
        dead_files = _dead_letter_files(out, staging, result)
        try:
            manifest = manifest_lib.build_manifest(
                name=name, version=staging.version, created=manifest_lib.utc_timestamp(),
                compression=compression, features=features, vocabularies=vocabularies,
                split_names=split_names, shards=result["shards"],
                num_input_rows=result["num_input_rows"],
                dead_letter={**result["dead_letter"], "files": dead_files},
                config=_redact_values(config), runner=runner, inputs=inputs,
                cache=result.get("cache"), file_format=file_format)
        except manifest_lib.ManifestError as error:
            raise BuildFailed(f"the pipeline's shards are inconsistent: {error}") from None
        _check_nonempty_splits(manifest)
        # Fails early (before verifying) when another build published this
        # version since begin_build; the commit checks again under the lock.
        check_still_publishable(out, staging)
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
        if describe:
            _write_descriptions(out, staging, manifest)
        manifest = manifest_lib.with_files(manifest, _added_files(out, staging, manifest))
        write_sha256sums(out, staging.directory, manifest)
        if out.local:
            # Shards and dead-letter files were synced before their renames;
            # the renames inside dead_letter/ are synced here, those in the
            # staging directory by the manifest's own write.
            sync_directory(f"{staging.directory}/{DEAD_LETTER_DIR}")
        manifest_bytes = manifest_lib.dumps_manifest(manifest)
        ours = hashlib.sha256(manifest_bytes).hexdigest()  # how read_back knows it
        out.write_atomic(f"{staging.directory}/{MANIFEST_FILE}", manifest_bytes)
        if verify:
            read_already = early_checks.results() if early_checks is not None else {}
            _verify_staged(staging, verify_workers,
                           "thread" if read_already else _verify_executor(out, manifest),
                           _checked_as_written(result), read_already, _written_crc32c(result))
        # A signal whose exception Python ignored where it landed stops the
        # build here, before it publishes. From here to LATEST a SIGINT or
        # SIGTERM waits: the commit's few renames finish and the build
        # reports what it published.
        signals.raise_swallowed()
        with signals.deferred():
            late = _commit(out, staging, ours)
    except ConcurrentBuildError:
        staging.abort()
        raise
    except BuildFailed as failure:
        try:
            kept_at, report_at, lost = _keep_failed(out, staging)
        finally:  # even when keeping fails (a full disk), nothing of the build stays staged
            staging.abort()
        if lost:
            raise _not_kept(failure.with_kept_at(kept_at, report_at), lost) from None
        if kept_at or report_at:
            raise failure.with_kept_at(kept_at, report_at) from None
        raise
    except BaseException:
        staging.abort()
        raise
    latest_updated = False
    with signals.deferred():
        try:
            staging.close()
        except OSError as error:
            late.append(("removing the build's owner file", error))
        try:
            if update_latest:
                _write_latest(out, staging, ours)
                latest_updated = True
        finally:
            for step, error in late:
                warn(late_warning(out, staging.version, ours, step, error))
    return PublishResult(version=staging.version, url=out.display_of(out.path(staging.version)),
                         manifest=manifest, verified=verify, latest_updated=latest_updated)


def _commit(out: Output, staging: Staging, ours: str) -> list[tuple[str, BaseException]]:
    """`commit.commit`, its failure judged by what it left (`read_back`):
    raises `BuildFailed` or `PublishedWithErrors` saying what is there, or
    returns [(step, error)] when the version is this build's all the same."""
    try:
        commit(out, staging)
    except ConcurrentBuildError:  # raised before anything changed
        raise
    except Exception as error:
        failure = after_failure(out, staging.version, ours, "the commit", error)
        if failure is not None:
            raise failure from error
        return [("the commit", error)]
    return []


def _write_latest(out: Output, staging: Staging, ours: str) -> None:
    """`commit.write_latest`; a failure other than `LatestNotUpdated` (which
    says what LATEST names) gets the read-back of the version too."""
    try:
        write_latest(out, staging)
    except LatestNotUpdated:
        raise
    except PublishedWithErrors as error:
        raise after_failure(out, staging.version, ours, "updating LATEST", error) from error


def finish_latest(output_path: str, version: str) -> PublishResult | None:
    """Finishes the publication of `version` when a build published it but
    could not update LATEST (`commit.latest_is_behind`: LATEST is missing
    or names a version published before it): points LATEST at it and
    returns what is published. None when there is nothing to finish."""
    out = Output(output_path)
    if published_identity(out, version) is None or not latest_is_behind(out, version):
        return None
    manifest = load_json(out.read_bytes(out.path(version, MANIFEST_FILE)))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        return None
    point_latest(out, version)
    return PublishResult(version=version, url=out.display_of(out.path(version)),
                         manifest=manifest, verified=False, latest_updated=True)


def _write_descriptions(out: Output, staging: Staging, manifest: dict) -> None:
    """Writes the files that let readers without recordforge load the
    version (TFDS's `tfds_metadata`, Croissant's `croissant`); `_added_files`
    lists them in the manifest like every other added file."""
    for file, data in {**tfds_files(manifest), **croissant_files(manifest)}.items():
        out.write_atomic(f"{staging.directory}/{file}", data)


def _check_nonempty_splits(manifest: dict) -> None:
    empty = [split for split, summary in manifest["splits"].items()
             if summary["num_examples"] == 0]
    if empty:
        raise BuildFailed(f"split(s) {', '.join(map(repr, empty))} ended up with no examples; "
                          "nothing was published (too few rows, or the split fractions are "
                          "too small for this dataset)")


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
    """Every shard, and every shard's index file, exists with its recorded
    size; nothing unexplained is left beside them (it would be published)."""
    files = out.files(staging.directory)
    expected = set(manifest["dead_letter"]["files"])
    for split, summary in manifest["splits"].items():
        for shard in summary["shards"]:
            for what, entry in (("shard", shard), ("index", shard.get("index"))):
                if entry is None:
                    continue
                expected.add(entry["file"])
                size = files.get(entry["file"])
                if size is None:
                    raise BuildFailed(f"{what} {entry['file']} of split {split!r} is missing "
                                      f"from {staging.display_url}")
                if size != entry["num_bytes"]:
                    raise BuildFailed(f"{what} {entry['file']} is {size} bytes but the "
                                      f"pipeline reported {entry['num_bytes']}")
    unexpected = sorted(set(files) - expected)
    if unexpected:
        raise BuildFailed(f"unexpected files in {staging.display_url}: {', '.join(unexpected[:10])}")


# Staged shards of at least this many bytes (on the local disk, with more
# than one core) are verified by processes: checking every record's CRC is
# Python work per record, which threads cannot spread over cores. Below it,
# starting the processes (~0.5 s) costs more than they save. Measured on a
# 1 GB build of 14 shards: 3.8 s with processes, 5.8 s with threads.
VERIFY_PROCESSES_FROM = 256 << 20


def _verify_executor(out: Output, manifest: Mapping[str, Any]) -> str:
    """"process" for a large build on the local disk of a machine with more
    than one core, else "thread" (`verify.verify_dataset`'s executors)."""
    staged = sum(split["num_bytes"] for split in manifest["splits"].values())
    shards = sum(len(split["shards"]) for split in manifest["splits"].values())
    if (out.local and staged >= VERIFY_PROCESSES_FROM and shards > 1
            and (os.cpu_count() or 1) > 1):
        return "process"
    return "thread"


def early_shard_checks(staging: Staging, compression: str,
                       expected_bytes: int) -> EarlyShardChecks | None:
    """An `EarlyShardChecks` (not started) for a build on the local disk of
    a machine with more than one core, whose large shards verification
    would read by processes (`_verify_executor`). One expected to stage
    `expected_bytes` (its input's size) or more reads from its first shard;
    another (its input compressed, as Parquet's columns are) once its
    shards make a large build. Else None."""
    if not staging.out.local or (os.cpu_count() or 1) < 2:
        return None
    start_bytes = 0 if expected_bytes >= VERIFY_PROCESSES_FROM else VERIFY_PROCESSES_FROM
    return EarlyShardChecks(staging.directory, compression, workers=os.cpu_count() or 1,
                            start_bytes=start_bytes)


def _checked_as_written(result: Mapping[str, Any]) -> dict[str, dict]:
    """file -> the store's fingerprint, for the shards whose writer checked
    their records as it wrote them (`transforms.shard_files`: those not on
    the local disk), which verification does not read again."""
    return {shard["file"]: shard["stored"] for shard in result["shards"]
            if isinstance(shard.get("stored"), dict)}


def _written_crc32c(result: Mapping[str, Any]) -> dict[str, int]:
    """file -> the CRC-32C its writer took as it wrote it, for every shard
    and index file the pipeline reports one for: verification checks the
    staged copies against these (`verify.verify_dataset`)."""
    return {file: crc for shard in result["shards"]
            for file, crc in shard.get("written_crc32c", {}).items()}


def _verify_staged(staging: Staging, workers: int | None, executor: str = "thread",
                   checked_as_written: Mapping[str, dict] | None = None,
                   read_already: Mapping[str, ReadBack] | None = None,
                   written_crc32c: Mapping[str, int] | None = None) -> None:
    report = verify_dataset(staging.url, workers=workers, executor=executor,
                            checked_as_written=checked_as_written, read_already=read_already,
                            written_crc32c=written_crc32c)
    if not report.ok:
        lines = [f"the staged build failed verification ({len(report.problems)} problems); "
                 "nothing was published:"] + [f"  {problem}" for problem in report.problems[:20]]
        raise BuildFailed("\n".join(lines), problems=report.problems)


def _keep_failed(out: Output, staging: Staging) -> tuple[str | None, str | None, str | None]:
    """Keeps a failed build's dead letters and report under ``.failed/``
    (`_keep_dead_letters`, `_keep_report`). Returns where each went (or
    None), and why keeping stopped (a full disk), as text, or None; a
    folder left with nothing kept in it is removed."""
    kept_at = report_at = None
    try:
        kept_at = _keep_dead_letters(out, staging)
        report_at = _keep_report(out, staging)
    except OSError as error:
        if kept_at is None and report_at is None:
            out.remove(out.path(FAILED_DIR, f"{staging.version}.{staging.build_id}"),
                       recursive=True)
            if not out.names(out.path(FAILED_DIR)):
                out.remove(out.path(FAILED_DIR), recursive=True)
        return kept_at, report_at, f"{type(error).__name__}: {error}"
    return kept_at, report_at, None


def _not_kept(failure: BuildFailed, lost: str) -> BuildFailed:
    """`failure` saying that what it would have kept under .failed/ was not."""
    extended = type(failure)(f"{failure}\nits dead letters and report could not all be kept "
                             f"under .failed/ ({lost})", reasons=failure.reasons,
                             kept_at=failure.kept_at, problems=failure.problems)
    extended.report_at = failure.report_at
    return extended


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
# .failed/ (the report hook's and the statistics hooks' files).
KEPT_FILES = (REPORT_FILE, STATS_FILE, DRIFT_FILE, DUPLICATES_FILE)


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


def _added_files(out: Output, staging: Staging, manifest: dict) -> list[dict]:
    """The files the hooks and descriptions added (report, statistics,
    TFDS and Croissant metadata), each as ``{"file", "num_bytes", "sha256"}``:
    every staged file that is not a shard, a shard's index, a dead-letter
    file, the manifest or SHA256SUMS. They are small and written whole just
    before, so they are read back here once to be described."""
    known = set(manifest["dead_letter"]["files"]) | set(manifest_lib.index_files(manifest)) | {
        shard["file"] for summary in manifest["splits"].values() for shard in summary["shards"]}
    known |= {MANIFEST_FILE, SHA256SUMS_FILE}
    entries = []
    for file in sorted(set(out.files(staging.directory)) - known):
        data = out.read_bytes(f"{staging.directory}/{file}") or b""
        entries.append({"file": file, "num_bytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    return entries
