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
import json
import os
import sys
import time
import traceback
import uuid
from typing import Callable, Mapping, Sequence

import apache_beam as beam
import fsspec
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from . import publish
from .config import DatasetConfig, load_config, load_runner_profile
from .staging import DEAD_LETTER_DIR, RESULT_FILE, TMP_DIR
from ..schemas.errors import ConfigError
from ..schemas.features import label_feature, manifest_features, resolve_vocabularies
from ..transforms.dead_letter_sink import WriteDeadLetters
from ..transforms.shards import WriteShards
from ..transforms.sources import (ReadImages, ReadTable, known_labels, scan_distinct,
                                            source_bytes)
from ..transforms.to_examples import LabelCounting, RowsToExamples
from ..transforms.urls import redact_url

__all__ = ["LOCAL_PARALLEL_MIN_BYTES", "build_pipeline", "default_beam_args",
           "known_vocabularies", "run"]


def _read_source(config: DatasetConfig) -> beam.PTransform:
    source = config.source
    if source.type == "images":
        return ReadImages(source.path, source.extensions, source.labels, source.image)
    return ReadTable(source.path, source.type)


def _write_result(parts: tuple, staging_url: str) -> str:
    """Writes what the driver needs to publish: shard metadata, the
    dead-letter summary and the number of rows read. `parts` is the grouped
    ``(None, [(kind, value), ...])`` gathered from the whole pipeline.

    Written under a temporary name then renamed, so a retried bundle rewrites
    the same file atomically."""
    _, tagged = parts
    shards, dead_letter, num_input_rows = [], None, 0
    label_counts: dict[str, dict[str, int]] = {}
    for kind, value in tagged:
        if kind == "shard":
            shards.append(value)
        elif kind == "dead_letter":
            dead_letter = value
        elif kind == "label_counts":
            for split, label, count in value:
                by_label = label_counts.setdefault(split, {})
                by_label[label] = by_label.get(label, 0) + count
        else:
            num_input_rows += value
    result = {"shards": sorted(shards, key=lambda s: (s["split"], s["file"])),
              "dead_letter": dead_letter, "num_input_rows": num_input_rows,
              "label_counts": label_counts}
    fs, path = fsspec.core.url_to_fs(f"{staging_url}/{RESULT_FILE}")
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open(temporary, "wb") as f:
        f.write(json.dumps(result, sort_keys=True).encode("utf-8"))
    fs.mv(temporary, path)
    return path


def _with_key(record: dict, key_column: str | None) -> dict:
    """Read- and decode-stage dead letters are made before a row has a key;
    where the failed input still holds the key column (an image's `path`),
    the record names the key like every other dead letter."""
    failed_input = record["input"]
    if (record["key"] is None and key_column is not None and isinstance(failed_input, dict)
            and failed_input.get(key_column) is not None):
        return {**record, "key": failed_input[key_column]}
    return record


def _tag(kind: str):
    return lambda value: (kind, value)


def build_pipeline(pipeline: beam.Pipeline, config: DatasetConfig, *, staging_url: str,
                   vocabularies: Mapping[str, Sequence[str]]) -> None:
    """Wires a build into `pipeline`.

    The pipeline reads the source, checks and encodes every row, writes the
    shards and dead letters into `staging_url`, and last writes
    ``_pipeline_result.json`` (shard metadata, dead-letter summary, rows read)
    for `publish.finalize`.
    """
    output = config.output
    # rows: RowBatch; dead_letter: dead-letter dict; counts: (source file, rows read)
    source = pipeline | "Read" >> _read_source(config)
    # examples: ExampleBatch = [(key, serialized Example)]; dead_letter: dict;
    # label_counts: ((split, label, examples), ...) for the report
    converted = source.rows | "ToExamples" >> RowsToExamples(
        config.features, vocabularies, config.key, count_labels=_label_counting(
            config, vocabularies))
    # {"split", "file", "num_examples", "num_bytes", "sha256"} per shard
    shards = converted.examples | "WriteShards" >> WriteShards(
        staging_url, dataset_name=config.name, splits=config.splits,
        shuffle=output.shuffle, shard_size=output.shard_size,
        compression=output.compression, temp_dir=f"{staging_url}/{TMP_DIR}")
    # one {"num_rows", "by_reason", "files", "samples"}
    read_failures = source.dead_letter | "KeyReadFailures" >> beam.Map(
        _with_key, config.key)
    dead_letter = ((read_failures, converted.dead_letter)
                   | "AllDeadLetters" >> beam.Flatten()
                   | "WriteDeadLetters" >> WriteDeadLetters(
                       f"{staging_url}/{DEAD_LETTER_DIR}"))
    # (source file, rows read) -> ("rows_read", n)
    rows_read = source.counts | "RowsRead" >> beam.Map(
        lambda file_and_count: ("rows_read", file_and_count[1]))
    # Everything the driver needs is gathered by one GroupByKey, not side
    # inputs: the Dask runner re-runs side-input producers, and only computes
    # the branch of the last transform, so this step also keeps every branch
    # in the graph that runs.
    _ = ((shards | "TagShards" >> beam.Map(_tag("shard")),
          dead_letter | "TagDeadLetters" >> beam.Map(_tag("dead_letter")),
          converted.label_counts | "TagLabelCounts" >> beam.Map(_tag("label_counts")),
          rows_read)
         | "GatherResult" >> beam.Flatten()
         # (None, (kind, value))
         | "OneKey" >> beam.Map(lambda tagged: (None, tagged))
         # (None, [(kind, value), ...])
         | "Group" >> beam.GroupByKey()
         | "WriteResult" >> beam.Map(_write_result, staging_url))


def _label_counting(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                    ) -> LabelCounting | None:
    """Counting per split and label of the feature the report counts by, or
    None when the dataset has none."""
    feature, vocabulary = label_feature(manifest_features(config.features), vocabularies)
    if feature is None:
        return None
    return LabelCounting(feature, tuple(vocabulary) if vocabulary is not None else None,
                         config.name, tuple(config.splits))


def known_vocabularies(config: DatasetConfig) -> dict[str, tuple[str, ...]]:
    """Resolves `vocabulary: auto` from what is known before the run: the
    class folders (or labels table) of an image source, or the distinct
    values of a table column."""
    auto = [spec for spec in config.features if spec.vocabulary == "auto"]
    known: dict[str, list[str]] = {}
    source = config.source
    for spec in auto:
        if source.type == "images":
            known[spec.name] = known_labels(source.path, source.labels, source.extensions)
        else:
            known[spec.name] = scan_distinct(source.path, source.type, spec.source)
    return resolve_vocabularies(config.features, known)


# Below this much input a local build runs in one process (in_memory, one
# worker): starting multi_processing workers (each imports Beam and unpickles
# the pipeline) costs about 1.5 s and every worker holds its own ~200 MB. On
# the 2-core benchmark machine two workers ran the bundled samples (under
# 1 MB) 0.55x as fast as one, a 100 MB table 1.03x-1.09x, 456 MB of images
# 0.85x-0.96x, 1 GB of large records 1.01x-1.30x and 4 GB 1.41x-1.43x
# (benchmarks/RESULTS.md, full run of 2026-11-22 15:11).
LOCAL_PARALLEL_MIN_BYTES = 1 << 30


def default_beam_args(beam_args: Sequence[str],
                      input_bytes: Callable[[], int | None] | None = None) -> list[str]:
    """Beam options with recordforge's local defaults filled in where the user
    set nothing: the DirectRunner, in_memory with one worker when
    `input_bytes()` (the size of the input, called only then) is below
    `LOCAL_PARALLEL_MIN_BYTES`, else multi_processing with one worker per
    core (the per-row work is CPU-bound Python, so processes, not threads,
    are what scale)."""
    args = list(beam_args)
    if _is_local(PipelineOptions(args).view_as(StandardOptions).runner):
        chosen = any(a.startswith(("--direct_running_mode", "--direct_num_workers"))
                     for a in args)
        if not chosen and input_bytes is not None:
            size = input_bytes()
            if size is not None and size < LOCAL_PARALLEL_MIN_BYTES:
                return args + ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
        if not any(a.startswith("--direct_running_mode") for a in args):
            args.append("--direct_running_mode=multi_processing")
        if not any(a.startswith("--direct_num_workers") for a in args):
            args.append(f"--direct_num_workers={os.cpu_count() or 1}")
    return args


def _is_local(runner: str | None) -> bool:
    return runner in (None, "DirectRunner", "direct")


def _local_runner(options: PipelineOptions) -> beam.runners.PipelineRunner:
    """The engine of a local build: Beam's FnApiRunner, set up as the
    DirectRunner sets it up for a batch pipeline.

    Beam 2.77's DirectRunner first tries to download and start the Prism
    runner and falls back to the FnApiRunner only when that fails, so the
    engine a build ran on would depend on the network. Pinning it keeps every
    local build on the engine recordforge is tested on."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def _input_bytes(config: DatasetConfig) -> int | None:
    """The size of the source's files, counted up to just past
    `LOCAL_PARALLEL_MIN_BYTES`; None when the listing fails (the build then
    reports the problem itself)."""
    source = config.source
    try:
        return source_bytes(source.path, source.type, source.extensions,
                            limit=LOCAL_PARALLEL_MIN_BYTES)
    except (OSError, ValueError):
        return None


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
    from . import progress, report

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

    beam_args = default_beam_args(beam_args, input_bytes=lambda: _input_bytes(config))
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
                runner=_local_runner(options) if _is_local(requested_runner) else None,
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

    def write_report(staging_url: str, manifest: dict, label_counts: dict | None) -> None:
        report.write_staged_report(staging_url, manifest, label_counts=label_counts,
                                   wall_seconds=time.monotonic() - started)

    try:
        result = publish.finalize(
            staging, name=config.name, compression=config.output.compression,
            features=manifest_features(config.features), vocabularies=vocabularies,
            config=config.resolved, split_names=[name for name, _ in config.splits],
            max_error_rate=config.dead_letter.max_error_rate,
            max_errors=config.dead_letter.max_errors, runner=runner, verify=args.verify,
            report_hook=write_report, update_latest=args.update_latest)
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
