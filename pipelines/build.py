"""Building a version: `build()` for Python callers, and `recordforge build` over it.

    recordforge build CONFIG.yaml [--set KEY=VALUE ...] [--output URL]
                      [--overwrite] [--no-verify] [-v] [-- BEAM_OPTIONS ...]

`build(config, ...)` loads and validates the config (before anything runs),
opens a staging directory, runs the pipeline `build_pipeline` wires, then
checks, verifies and publishes it (`publish.finalize`); it returns a
`BuildResult` or raises `ConfigError`, `VersionExistsError`, `BuildFailed`
(`PipelineFailed` is one) or `PublishError`, whose messages are what the
command line prints. `run(argv)` is the command: it parses our flags, hands
everything after `--` to Beam's `PipelineOptions` unchanged, calls `build`
and turns its errors into exit statuses: 0 published; 1 the build failed and
nothing was published; 2 bad usage, an invalid config, or a version that is
already published; 3 published, but publishing did not finish (LATEST could
not be moved: running the same command again moves it); 130 / 143
interrupted by SIGINT / SIGTERM, nothing published (`signals`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import stat
import sys
import time
import traceback
from typing import Any, Mapping, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from . import progress, publish, scratch, signals, waiting_workers
from .beam_import import import_beam_filesystems
from .cache import CacheState, cache_url, open_cache, prune_cache, uses_cache
from .config import DatasetConfig, load_config, load_runner_profile
from .config.output import refuse_process_local_output
from .graph import build_pipeline, known_vocabularies, near_threshold
from .publish import (BuildFailed, PublishError, PublishedWithErrors, VersionExistsError,
                      report)
from .publish.duplicates import DuplicatesCheck
from .publish.gates import BuildChecks, StatisticsCheck
from .runners import (BuildOptions, default_beam_args, is_local, local_parallel_min_bytes,
                      local_runner, planned_local_workers)
from ..schemas.checks import stored_defaults
from ..schemas.errors import ConfigError
from ..schemas.features import manifest_features
from ..transforms.readers.inputs import ContentTokens, changed_inputs, source_inputs
from ..transforms.readers.tables import DEFAULT_RANGE_BYTES, RangeScan
from ..transforms.urls import redact_url

__all__ = ["BuildResult", "PipelineFailed", "build", "run"]


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """A published version.

    version: its name; path: where it is (the version directory, URL with
    credentials redacted); splits: examples per split; num_examples: their
    sum; dead_letter_rows: rows that failed; manifest: the manifest.json
    content; latest_updated: whether LATEST now names it.
    """

    version: str
    path: str
    splits: Mapping[str, int]
    num_examples: int
    dead_letter_rows: int
    manifest: Mapping[str, Any]
    latest_updated: bool

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], path: str,
                      latest_updated: bool) -> "BuildResult":
        splits = {name: split["num_examples"] for name, split in manifest["splits"].items()}
        return cls(version=manifest["version"], path=path, splits=splits,
                   num_examples=sum(splits.values()),
                   dead_letter_rows=manifest["dead_letter"]["num_rows"], manifest=manifest,
                   latest_updated=latest_updated)


class PipelineFailed(BuildFailed):
    """The pipeline itself failed (a step raised, a worker died); nothing was
    published. `error` is what the runner raised."""

    def __init__(self, error: BaseException):
        super().__init__(f"the pipeline failed; nothing was published: "
                         f"{_error_summary(error, verbose=False)}")
        self.error = error

    def verbose_message(self) -> str:
        return (f"the pipeline failed; nothing was published: "
                f"{_error_summary(self.error, verbose=True)}")


def build(config: "str | os.PathLike | Mapping[str, Any] | DatasetConfig", *,
          overrides: "Mapping[str, Any] | Sequence[str] | None" = None,
          output: str | None = None, beam_args: Sequence[str] = (),
          overwrite: bool = False, update_latest: bool = True, verify: bool = True,
          show_progress: bool = False) -> BuildResult:
    """Builds and publishes one version of a dataset; returns a `BuildResult`.

    config: a YAML file's path, the config as a mapping, or what
      `load_config` returned. overrides: ``{"output.shard_size": "512MB"}``
      (the dotted keys of ``--set``; Python values) or ``["key=yaml", ...]``.
    output: replaces ``output.path``. beam_args: Beam pipeline options
      (``["--runner=DataflowRunner", ...]``); a local build gets
      recordforge's defaults where they set nothing.
    overwrite: replace the version if it is published; update_latest:
    False leaves LATEST alone (backfills); verify: False skips re-reading
    the staged shards; show_progress: progress lines on stderr.

    Raises `ConfigError` (an invalid config; nothing ran),
    `VersionExistsError`, `BuildFailed` (nothing was published:
    `PipelineFailed` when the pipeline failed, else the error budget,
    verification, ...) or `PublishedWithErrors` (published, but LATEST could
    not be replaced: `LatestNotUpdated`; building the same version again
    then moves LATEST and returns the published version). Any other
    exception raised inside the build (KeyboardInterrupt, SystemExit, a
    scheduler's task timeout) stops it and escapes unchanged: nothing is
    published, its staging directory and owner file are deleted, and the
    build cache is kept, so the next build resumes from it.
    """
    config = load_config(config, overrides, output=output)
    try:
        version = publish.resolve_version(config.version)
    except ConfigError:
        raise
    except ValueError as error:  # a version template or name that cannot be used
        raise ConfigError("version", str(error)) from None
    # The workers a local multi_processing run will ask for start now, so
    # that their imports overlap the reading of the inputs below; those
    # the run does not take end with the build (`waiting_workers`).
    workers = planned_local_workers(beam_args, _source_file_size(config.source.path),
                                    local_parallel_min_bytes(config.source.type))
    if workers:
        from .local_engine import start_workers_ahead  # (Beam's runner: local builds only)
        start_workers_ahead(beam_args, workers)
    try:
        return _build_version(config, version, beam_args, overwrite=overwrite,
                              update_latest=update_latest, verify=verify,
                              show_progress=show_progress)
    finally:
        waiting_workers.discard()


def _build_version(config: DatasetConfig, version: str, beam_args: Sequence[str], *,
                   overwrite: bool, update_latest: bool, verify: bool,
                   show_progress: bool) -> BuildResult:
    """`build` of `config`'s `version` (resolved)."""
    # Fingerprinted before anything reads them, compared after the pipeline;
    # a local file is hashed here only (`ContentTokens`), and a table file
    # cut into byte ranges is planned in the same read, as the cache's
    # plan step cuts it.
    tokens = ContentTokens(_range_scan(config))
    inputs = _source_inputs(config, tokens)
    vocabularies = known_vocabularies(config)
    cache_state = _open_cache(config, vocabularies)
    if cache_state is not None:
        cache_state = dataclasses.replace(cache_state, known_contents=tokens.known)

    # The fingerprints hold every input's size: the running mode is chosen
    # from them, not from a second listing (~30 ms for 3,000 images).
    beam_args = default_beam_args(beam_args, input_bytes=lambda: _input_size(inputs),
                                  parallel_from=local_parallel_min_bytes(config.source.type))
    import_beam_filesystems(beam_args)
    options = BuildOptions(beam_args)
    requested_runner = options.view_as(StandardOptions).runner
    # Whatever escapes once the staging exists (a failure, Ctrl-C, SystemExit,
    # a scheduler's timeout raised by its signal handler, which may not be an
    # Exception) deletes the staging directory and owner file, as the
    # command line's signal handling does: nothing is published, the cache
    # stays for the next build, and no dead build is left for it to clean.
    # (Once committed, the staging is closed and this deletes nothing.) The
    # command line's signals wait while the directory is made and put under
    # `guard` (`signals.held`): a signal between the two left it behind.
    with contextlib.ExitStack() as guard:
        with signals.held():
            try:
                staging = publish.begin_build(config.output.path, version, overwrite=overwrite)
            except OSError as error:
                raise BuildFailed(f"cannot start a build in {config.output.path}; nothing was "
                                  f"published: {type(error).__name__}: {error}") from error
            except ImportError as error:  # output.path's protocol needs an extra (s3fs, gcsfs)
                raise ConfigError("output.path", f"{config.output.path}: {error}") from None
            except ConfigError:
                raise
            except ValueError as error:  # a URL the filesystem refuses (an invalid bucket name)
                raise ConfigError("output.path", f"{config.output.path}: {error}") from None
            except VersionExistsError as exists:
                if not update_latest:
                    raise
                staging, published_already = None, exists
            else:
                guard.enter_context(staging)
        if staging is not None:
            return _build_staged(staging, config, inputs, vocabularies, cache_state, options,
                                 requested_runner, verify=verify, update_latest=update_latest,
                                 show_progress=show_progress, tokens=tokens)
    # A build that published the version but could not move LATEST is
    # finished by running it again.
    finished = publish.finish_latest(config.output.path, version)
    if finished is None:
        raise published_already
    print(f"recordforge build: version {version!r} was already published; LATEST now "
          "names it", file=sys.stderr)
    return BuildResult.from_manifest(finished.manifest, finished.url, True)


def _build_staged(staging: publish.Staging, config: DatasetConfig, inputs: Mapping,
                  vocabularies: Mapping[str, Sequence[str]], cache_state: CacheState | None,
                  options: PipelineOptions, requested_runner: str | None, *, verify: bool,
                  update_latest: bool, show_progress: bool,
                  tokens: ContentTokens | None = None) -> BuildResult:
    """The build once its staging exists: runs the pipeline into it, checks
    it and publishes it (`publish.finalize`). The caller deletes the staging
    on any exception. tokens: the content tokens `inputs` were taken with."""
    started = time.monotonic()
    total_input = _input_size(inputs)
    # A large local build reads its shards back as they are written, on a
    # core the pipeline leaves idle, instead of all of them at the end.
    early_checks = publish.early_shard_checks(staging, config.output.compression,
                                              total_input) if verify else None
    with early_checks or contextlib.nullcontext():
        _run_pipeline(staging, config, vocabularies, options, requested_runner, show_progress,
                      cache_state, input_bytes=total_input)
        _check_inputs_unchanged(config, inputs, tokens)

        # stats.json, drift.json against the version LATEST names, the gates;
        # duplicates.json and its gates.
        duplicates = DuplicatesCheck.for_config(config, near_threshold(config))
        checks = BuildChecks.of(StatisticsCheck.for_config(config), duplicates)

        def write_report(staging_url: str, manifest: dict, label_counts: dict | None) -> None:
            report.write_staged_report(staging_url, manifest, label_counts=label_counts,
                                       wall_seconds=time.monotonic() - started,
                                       **(checks.report_sections if checks else {}))

        try:
            result = publish.finalize(
                staging, name=config.name, compression=config.output.compression,
                file_format=config.output.file_format,
                features=manifest_features(config.features,
                                           stored_defaults(config.features, vocabularies)),
                vocabularies=vocabularies,
                config=config.resolved, split_names=[name for name, _ in config.splits],
                max_error_rate=config.dead_letter.max_error_rate,
                max_errors=config.dead_letter.max_errors,
                runner=requested_runner or "DirectRunner", verify=verify,
                report_hook=write_report, describe=True, update_latest=update_latest,
                inputs=inputs, statistics_hook=checks, early_checks=early_checks)
        except OSError as error:  # the filesystem failed (disk full, I/O error), not committed
            raise BuildFailed(f"publishing failed; nothing was published: "
                              f"{type(error).__name__}: {error}") from error
        with _stderr_may_fail():
            if cache_state is not None:
                _prune_cache(cache_state, inputs, config.cache.keep_unused_days, staging)
            if show_progress:
                progress.print_summary(result.manifest, output=result.url,
                                       wall_seconds=time.monotonic() - started,
                                       notes=duplicates.summary_lines if duplicates else ())
        return BuildResult.from_manifest(result.manifest, result.url, result.latest_updated)


@contextlib.contextmanager
def _stderr_may_fail():
    """Around what a build says once its outcome is decided (after the
    publish: the cache's pruning, the summary; the verdict of `_fail`):
    stderr that cannot be written (EIO, a terminal gone) changes nothing on
    disk, so it must not turn a published version into a failed build; the
    exit status still says what is there. (Pruning reports its own
    failures; any OSError left is the message's.)"""
    try:
        yield
    except OSError:
        pass  # the message is lost: stderr is where it would be reported


def _source_file_size(path: str) -> int | None:
    """The size of a source that is one local file, known at once (its
    stat); None for anything else (a folder, a pattern, a URL), whose size
    the listing of its files gives."""
    if "://" in path or any(char in path for char in "*?["):
        return None
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


def _source_inputs(config: DatasetConfig, tokens: ContentTokens | None = None) -> dict:
    """The fingerprints of the files the build reads (the manifest's
    ``inputs``); `BuildFailed` when they cannot be listed. tokens: the
    build's `ContentTokens` (a local file unchanged since is not read)."""
    source = config.source
    try:
        return source_inputs(source.type, source.path, source.extensions, source.labels,
                             tokens)
    except OSError as error:
        raise BuildFailed(f"cannot list the inputs at {redact_url(source.path)}; nothing was "
                          f"published: {type(error).__name__}: {error}") from error


def _range_scan(config: DatasetConfig) -> RangeScan | None:
    """How the build's cached read cuts its table files
    (`ConvertTablesWithCache`, at its default range size), for
    `ContentTokens` to find their split points as it hashes them; None
    for a build that does not use the cache (off, or duplicate detection
    on: `_open_cache`), whose read plans its files itself."""
    if not uses_cache(config) or config.validation.duplicates is not None:
        return None
    return RangeScan(config.source.type, DEFAULT_RANGE_BYTES, config.source.csv)


def _input_size(inputs: Mapping) -> int:
    """The bytes of the inputs `_source_inputs` fingerprinted (a vanished
    file counts 0)."""
    return sum(entry.get("size", 0) for entry in inputs["files"])


def _check_inputs_unchanged(config: DatasetConfig, inputs: Mapping,
                            tokens: ContentTokens | None = None) -> None:
    """Fails the build (nothing published; `build` deletes the staging)
    when an input was rewritten, truncated, added or removed while the
    pipeline read. A local file whose write marks are those it was hashed
    with (`tokens`) is not read again: no write happened to it."""
    changes = changed_inputs(inputs, _source_inputs(config, tokens))
    if changes:
        raise BuildFailed("the inputs changed while the build read them; nothing was "
                          "published:\n" + "\n".join(f"  {line}" for line in changes))


def _open_cache(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                ) -> CacheState | None:
    """The build cache as the build starts, or None (off, an image source,
    or a cache that cannot be listed: the build then reads every input and
    says why). Duplicate detection fingerprints every row as it is
    converted, so a build with it reads every input (docs/duplicates.md)."""
    if config.validation.duplicates is not None and config.cache.enabled \
            and config.source.type != "images":
        print("recordforge build: duplicate detection is on (validation.duplicates), so the "
              "cache is not used: every input is read and converted", file=sys.stderr)
        return None
    try:
        return open_cache(config, vocabularies)
    except (OSError, ValueError) as error:
        print(f"recordforge build: the cache at {redact_url(cache_url(config))} cannot be "
              f"used, every input is read ({type(error).__name__}: {error})", file=sys.stderr)
        return None


def _prune_cache(state: CacheState, inputs: Mapping, keep_unused_days: float,
                 staging: publish.Staging) -> None:
    """Deletes what the published build did not use (`prune_cache`), unless
    another build of the output is running: it may be reading pieces this
    build did not use, and a later build prunes them. A failure is
    reported, not fatal: the version is published."""
    try:
        others = [key for key in publish.live_builds(staging.out, staging.stale_after)
                  if key != (staging.version, staging.build_id)]
        if others:
            print(f"recordforge build: the cache at {state.display_url} is left as it is: "
                  f"{len(others)} other build(s) of this output are running and may be "
                  "reading it; a later build prunes it", file=sys.stderr)
            return
        prune_cache(state, inputs, keep_unused_days)
    except (OSError, ValueError) as error:
        print(f"recordforge build: pruning the cache at {state.display_url} failed "
              f"({type(error).__name__}: {error}); it is pruned after the next build",
              file=sys.stderr)


def _run_pipeline(staging: publish.Staging, config: DatasetConfig,
                  vocabularies: Mapping[str, Sequence[str]], options: PipelineOptions,
                  requested_runner: str | None, show_progress: bool,
                  cache_state: CacheState | None = None, input_bytes: int | None = None
                  ) -> None:
    """Runs the build's pipeline into `staging` until it finishes. A
    failure of the pipeline raises `PipelineFailed`; an interruption
    (KeyboardInterrupt, a timeout) is raised as it is (`build` deletes the
    staging either way).
    input_bytes: the inputs' size, from their fingerprints
    (`graph.stage_build`)."""
    watcher = progress.BuildProgress(staging.url, enabled=show_progress,
                                     cache_url=cache_state.url if cache_state else None)
    try:
        with watcher:
            pipeline = beam.Pipeline(
                runner=local_runner(options) if is_local(requested_runner) else None,
                options=options)
            build_pipeline(pipeline, config, staging_url=staging.url, vocabularies=vocabularies,
                           cache=cache_state, input_bytes=input_bytes)
            result = pipeline.run()
            try:
                watcher.attach(result)
                result.wait_until_finish()
            finally:
                _close_runner_client(result)
    except Exception as error:  # the pipeline failed: report it, publish nothing
        raise PipelineFailed(error) from error


def _close_runner_client(result) -> None:
    """Closes the client Beam's Dask runner opened for the run, which only
    its result holds: left open, it keeps its connection and thread, and
    once the cluster is gone tries to reconnect for as long as the process
    lives (a scheduler, a notebook, a test session)."""
    close = getattr(getattr(result, "client", None), "close", None)
    if callable(close):
        close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recordforge build",
        description="Build and publish a TFRecord dataset from a config.",
        epilog="Everything after `--` is passed to Beam's PipelineOptions unchanged "
               "(--runner, --project, --direct_num_workers, --setup_file ...).")
    parser.add_argument("config", help="dataset config (YAML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one config key, e.g. "
                                                  "--set output.shard_size=512MB")
    parser.add_argument("--output", metavar="URL", help="override output.path")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the version if it is already published")
    parser.add_argument("--runner-profile", metavar="NAME_OR_FILE",
                        help="add the Beam options of a runner profile (direct, dask, "
                             "dataflow, flink, or a YAML file); options after `--` "
                             "still apply")
    parser.add_argument("--no-latest", dest="update_latest", action="store_false",
                        help="publish without moving LATEST (for backfills of older "
                             "versions)")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip re-reading the staged shards before publishing "
                             "(for very large builds)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show Beam's own log messages and warnings")
    return parser


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _error_summary(error: BaseException, verbose: bool) -> str:
    """``Type: message`` of a pipeline failure. Runners wrap a worker's error
    in one carrying the whole remote traceback; its last line names the
    original error and the step (``OSError: ... [while running 'WriteShards/Spill']``)."""
    text = str(error).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if verbose or len(lines) <= 1:
        return f"{type(error).__name__}: {text}"
    return f"{lines[-1].strip()} (run with -v for the traceback)"


def _fail(message: str, code: int) -> int:
    # Messages quote paths and exception text, either of which may hold a URL
    # with credentials (s3://key:secret@bucket/...).
    with _stderr_may_fail():
        print(f"recordforge build: {redact_url(message)}", file=sys.stderr)
    return code


def run(argv: Sequence[str] | None = None) -> int:
    """Runs `recordforge build`; returns the exit status."""
    ours, beam_args = _split_argv(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(ours)
    quiet_args = progress.hide_beam_noise(args.verbose)
    with signals.interruptible(), scratch.private_tempdir():
        status = _run(args, beam_args, quiet_args)
    if status == 0 and signals.received() is not None:
        with _stderr_may_fail():
            print("recordforge build: interrupted after the version was published",
                  file=sys.stderr)
    return status


def _run(args: argparse.Namespace, beam_args: list[str], quiet_args: list[str]) -> int:
    try:
        if args.runner_profile:
            beam_args = load_runner_profile(args.runner_profile) + beam_args
        beam_args = beam_args + [flag for flag in quiet_args if not any(
            a.startswith(flag.split("=")[0]) for a in beam_args)]
        config = load_config(args.config, args.overrides, output=args.output)
        refuse_process_local_output(config.output.path)
        build(config, beam_args=beam_args, overwrite=args.overwrite,
              update_latest=args.update_latest, verify=args.verify, show_progress=True)
    except ConfigError as error:
        return _fail(f"invalid config {args.config}: {error}", 2)
    except KeyboardInterrupt as interrupt:
        return _fail("interrupted; nothing was published", _interrupt_status(interrupt))
    except VersionExistsError as error:
        return _fail(str(error), 2)
    except PipelineFailed as failure:
        if signals.received() is not None:  # workers died of the signal first
            return _fail("interrupted; nothing was published",
                         _interrupt_status(signals.received()))
        if args.verbose:
            traceback.print_exception(failure.error)
            return _fail(failure.verbose_message(), 1)
        return _fail(str(failure), 1)
    except PublishedWithErrors as error:  # published, but LATEST (or durability) left behind
        return _fail(str(error), 3)
    except PublishError as error:  # BuildFailed: nothing was published
        return _fail(str(error), 1)
    return 0


def _interrupt_status(interrupt: BaseException) -> int:
    return getattr(interrupt, "exit_status", 130)
