"""`recordforge build`: a dataset config in, a published, verified version out.

    recordforge build CONFIG.yaml [--set KEY=VALUE ...] [--output URL]
                      [--overwrite] [--no-verify] [-v] [-- BEAM_OPTIONS ...]

`run(argv)` parses our flags, hands everything after `--` to Beam's
`PipelineOptions` unchanged, and drives the build: load and validate the
config (exit 2 on a mistake, before anything runs), open a staging directory,
run the pipeline `build_pipeline` wires, then check, verify and publish it
(`publish.finalize`). Exit status: 0 published; 1 the build failed and
nothing was published; 2 bad usage, an invalid config, or a version that is
already published.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from . import progress, publish
from .config import load_config, load_runner_profile
from .graph import build_pipeline, known_vocabularies
from .publish import report
from .publish.statistics import StatisticsCheck
from .runners import default_beam_args, input_bytes, is_local, local_runner
from ..schemas.checks import stored_defaults
from ..schemas.errors import ConfigError
from ..schemas.features import manifest_features
from ..transforms.urls import redact_url

__all__ = ["run"]


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
    print(f"recordforge build: {redact_url(message)}", file=sys.stderr)
    return code


def run(argv: Sequence[str] | None = None) -> int:
    """Runs `recordforge build`; returns the exit status."""
    ours, beam_args = _split_argv(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(ours)
    quiet_args = progress.hide_beam_noise(args.verbose)
    try:
        if args.runner_profile:
            beam_args = load_runner_profile(args.runner_profile) + beam_args
        config = load_config(args.config, args.overrides, output=args.output)
        version = publish.resolve_version(config.version)
        vocabularies = known_vocabularies(config)
    except ConfigError as error:
        return _fail(f"invalid config {args.config}: {error}", 2)
    except ValueError as error:  # a version template or name that cannot be used
        return _fail(f"invalid config {args.config}: version: {error}", 2)

    beam_args = default_beam_args(beam_args, input_bytes=lambda: input_bytes(config))
    beam_args += [flag for flag in quiet_args
                  if not any(a.startswith(flag.split("=")[0]) for a in beam_args)]
    options = PipelineOptions(beam_args)
    requested_runner = options.view_as(StandardOptions).runner
    runner = requested_runner or "DirectRunner"
    try:
        staging = publish.begin_build(config.output.path, version, overwrite=args.overwrite)
    except publish.VersionExistsError as error:
        return _fail(str(error), 2)
    except OSError as error:
        return _fail(f"cannot start a build in {config.output.path}; nothing was published: "
                     f"{type(error).__name__}: {error}", 1)
    except ImportError as error:  # output.path's protocol needs an extra (s3fs, gcsfs)
        return _fail(f"output.path {config.output.path}: {error}", 2)

    started = time.monotonic()
    watcher = progress.BuildProgress(staging.url)
    try:
        with watcher:
            pipeline = beam.Pipeline(
                runner=local_runner(options) if is_local(requested_runner) else None,
                options=options)
            build_pipeline(pipeline, config, staging_url=staging.url, vocabularies=vocabularies)
            result = pipeline.run()
            watcher.attach(result)
            result.wait_until_finish()
    except KeyboardInterrupt:
        staging.abort()
        return _fail("interrupted; nothing was published", 130)
    except Exception as error:  # the pipeline failed: report it, publish nothing
        staging.abort()
        if args.verbose:
            traceback.print_exc()
        return _fail(f"the pipeline failed; nothing was published: "
                     f"{_error_summary(error, args.verbose)}", 1)

    # stats.json, drift.json against the version LATEST names, the gates.
    statistics = StatisticsCheck(config.output.path, [spec.name for spec in config.features],
                                 config.validation.gates, publish.read_latest) \
        if config.validation.statistics else None

    def write_report(staging_url: str, manifest: dict, label_counts: dict | None) -> None:
        report.write_staged_report(staging_url, manifest, label_counts=label_counts,
                                   wall_seconds=time.monotonic() - started,
                                   **(statistics.report_sections if statistics else {}))

    try:
        result = publish.finalize(
            staging, name=config.name, compression=config.output.compression,
            features=manifest_features(config.features,
                                       stored_defaults(config.features, vocabularies)),
            vocabularies=vocabularies,
            config=config.resolved, split_names=[name for name, _ in config.splits],
            max_error_rate=config.dead_letter.max_error_rate,
            max_errors=config.dead_letter.max_errors, runner=runner, verify=args.verify,
            report_hook=write_report, update_latest=args.update_latest,
            statistics_hook=statistics)
    except publish.VersionExistsError as error:
        return _fail(str(error), 2)
    except publish.PublishError as error:  # BuildFailed, or LATEST left behind
        return _fail(str(error), 1)
    except OSError as error:  # the filesystem failed (disk full, I/O error) before the commit
        return _fail(f"publishing failed; nothing was published: {type(error).__name__}: "
                     f"{error}", 1)
    progress.print_summary(result.manifest, output=result.url,
                           wall_seconds=time.monotonic() - started)
    return 0
