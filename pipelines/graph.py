"""The build's Beam graph: source -> checks and encoding -> shards and dead letters -> result.

`build_pipeline(p, config, ...)` wires a build into a user's or the driver's
`beam.Pipeline`; the element types between the steps are noted beside each
step (docs/DESIGN.md has the whole map). `known_vocabularies` resolves
`vocabulary: auto` from what is known before the run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Mapping, NamedTuple, Sequence

import apache_beam as beam
import fsspec

from .cache import READ_BATCH_SIZE, CacheState
from .config import DatasetConfig
from .key_sample import sample_bucket_bounds, uses_sampled_bounds
from .runners import one_local_worker
from ..schemas.duplicates import merge_parts, render_part
from ..schemas.features import label_feature, manifest_features, resolve_vocabularies
from ..schemas.stats import FeatureStatistics, StatisticsPlan
from ..transforms.cache.steps import ConvertTablesWithCache, RowLayout
from ..transforms.dead_letter_sink import WriteDeadLetters
from ..transforms.duplicates import DropDuplicateRows, FindDuplicates, duplicate_buckets
from ..transforms.near_pairs import FindNearImages
from ..transforms.files import write_atomic
from ..transforms.layout import DEAD_LETTER_DIR, RESULT_FILE, TMP_DIR
from ..transforms.writer import ShardTuning, WriteShards, default_exchange
from ..transforms.readers.image_items import known_labels
from ..transforms.readers.tables import scan_distinct
from ..transforms.sources import ReadImages, ReadOutputs
from ..transforms.merge_statistics import MergeStatistics, StatisticsSetup, statistics_entry
from ..transforms.to_examples import GATHERABLE, DuplicateSetup, LabelCounting, RowsToExamples
from ..transforms.unit_conversion import ConvertTables, ConvertedTables

__all__ = ["StagedBuild", "build_pipeline", "cache_summary", "known_vocabularies",
           "near_threshold", "spreads", "stage_build", "watched_columns", "write_result"]


def _read_source(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]],
                 spread: bool) -> beam.PTransform:
    """The source's read without the build cache: images as row batches
    (`ReadImages`), table files read and converted a unit at a time
    (`ConvertTables`); spread: reshuffle its reading units over the
    runner's workers (False: one worker, nothing to spread over)."""
    source = config.source
    if source.type == "images":
        image = source.image
        if near_threshold(config) is not None:
            # Each image is hashed where its bytes are read and checked.
            image = dataclasses.replace(
                image, perceptual_hash=True,
                perceptual_views=config.validation.duplicates.near_views)
        return ReadImages(source.path, source.extensions, source.labels, image, spread=spread)
    return ConvertTables(source.path, source.type, specs=config.features,
                         vocabularies=vocabularies, duplicates=_duplicate_setup(config),
                         extensions=source.extensions, options=source.csv,
                         batch_size=READ_BATCH_SIZE, spread=spread,
                         **_conversion_options(config, vocabularies))


def spreads(pipeline: beam.Pipeline) -> bool:
    """Whether the build's Reshuffles spread work over workers: False with
    one local worker (`runners.one_local_worker`), where each would cost a
    runner stage and four ParDos for nothing. Decided here once for the
    read, the cached read and the shard writer; never changes the bytes."""
    return not one_local_worker(pipeline.options)


def watched_columns(config: DatasetConfig) -> dict[str, str]:
    """Feature name -> the top-level column it reads, for the features a
    missing column would not fail row by row (optional, or with a default):
    a build in which no row holds such a column fails (`unseen_columns`)."""
    return {spec.name: spec.column
            for spec in config.features if not spec.required or spec.default is not None}


def write_result(parts: tuple, staging_url: str,
                 watched: Mapping[str, str] | None = None,
                 split_names: Sequence[str] | None = None) -> str:
    """Writes what the driver needs to publish: shard metadata, the
    dead-letter summary and the number of rows read. `parts` is the grouped
    ``(None, [(kind, value), ...])`` gathered from the whole pipeline
    (`StagedBuild.result`).

    Written whole (`transforms.files.write_atomic`), so a retried bundle
    rewrites the same file atomically.

    watched: `watched_columns`; the result's ``unseen_columns`` names those
    no row held (feature -> column) and ``columns_seen`` some that rows did.
    split_names: the configured splits, which name the ``duplicates`` found
    (`schemas.duplicates.render_part`; with removal also ``duplicates_left``)
    when duplicate detection is on; ``near_duplicates`` is the one summary
    of near-duplicate images (`transforms.near_pairs`)."""
    _, tagged = parts
    seen: set[str] = set()
    shards, dead_letter, num_input_rows = [], None, 0
    label_counts: dict[str, dict[str, int]] = {}
    statistics: dict[str, dict[str, dict]] = {}
    cache_use: list[dict] = []
    duplicates: list = []
    left: list = []
    result: dict = {}
    for kind, value in tagged:
        if kind == "shard":
            shards.append(value)
        elif kind == "dead_letter":
            dead_letter = value
        elif kind == "columns_seen":
            seen.update(value)
        elif kind == "counts":  # (source file, rows read)
            num_input_rows += value[1]
        elif kind == "label_counts":
            for split, label, count in value:
                by_label = label_counts.setdefault(split, {})
                by_label[label] = by_label.get(label, 0) + count
        elif kind == "statistics":
            split, feature, entry = value
            statistics.setdefault(split, {})[feature] = entry
        elif kind == "cache_use":
            cache_use.append(value)
        elif kind == "duplicates":
            duplicates.append(value)
        elif kind == "duplicates_left":
            left.append(value)
        elif kind == "near_duplicates":
            result["near_duplicates"] = value
    result.update({"shards": sorted(shards, key=lambda s: (s["split"], s["file"])),
                   "dead_letter": dead_letter, "num_input_rows": num_input_rows,
                   "label_counts": label_counts, "statistics": statistics})
    if cache_use:
        result["cache"] = cache_summary(cache_use)
    if split_names is not None:
        result["duplicates"] = render_part(merge_parts(duplicates), split_names)
        if left:  # with removal: what the published version still holds
            result["duplicates_left"] = render_part(merge_parts(left), split_names)
    if watched:
        result["unseen_columns"] = {feature: column for feature, column in watched.items()
                                    if column not in seen}
        result["columns_seen"] = sorted(seen)[:1000]
    fs, path = fsspec.core.url_to_fs(f"{staging_url}/{RESULT_FILE}")
    write_atomic(fs, path, json.dumps(result, sort_keys=True).encode("utf-8"))
    return path


def cache_summary(units: list[Mapping]) -> dict:
    """What the build took from the cache and what it converted, from one
    ``cache_use`` dict per reading unit: files (a file is reused when every
    unit of it was), units, rows, Examples and piece bytes each way, and the
    pieces found damaged (read again)."""
    by_file: dict[str, bool] = {}
    summary = {"files_reused": 0, "files_converted": 0, "units_reused": 0,
               "units_converted": 0, "units_damaged": 0, "rows_reused": 0,
               "rows_converted": 0, "examples_reused": 0, "examples_converted": 0,
               "bytes_reused": 0, "bytes_written": 0}
    for unit in units:
        way = "reused" if unit["reused"] else "converted"
        summary[f"units_{way}"] += 1
        summary[f"rows_{way}"] += unit["rows"]
        summary[f"examples_{way}"] += unit["examples"]
        summary["bytes_reused" if unit["reused"] else "bytes_written"] += unit["bytes"]
        summary["units_damaged"] += bool(unit["damaged"])
        by_file[unit["source"]] = by_file.get(unit["source"], True) and unit["reused"]
    summary["files_reused"] = sum(by_file.values())
    summary["files_converted"] = len(by_file) - summary["files_reused"]
    return summary


def _with_key(record: dict, key_column: str | None) -> dict:
    """Read- and decode-stage dead letters are made before a row has a key;
    where the failed input still holds the key column (an image's `path`),
    the record names the key like every other dead letter."""
    failed_input = record["input"]
    if (record["key"] is None and key_column is not None and isinstance(failed_input, dict)
            and failed_input.get(key_column) is not None):
        return {**record, "key": failed_input[key_column]}
    return record



class StagedBuild(NamedTuple):
    """What `stage_build` wires: `result`, the one ``(None, [(kind, value),
    ...])`` element gathered from the whole graph (shard metadata, the
    dead-letter summary, label counts, rows read) that `write_result`
    writes; `dead_letter`, every dead-letter record (dicts)."""

    result: beam.PCollection
    dead_letter: beam.PCollection


def _conversion_options(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                        ) -> dict:
    """What converting rows needs of the config (`RowsToExamples`'s,
    `ConvertTables`'s and `ConvertTablesWithCache`'s keyword arguments)."""
    return {"key_column": config.key,
            "count_labels": _label_counting(config, vocabularies),
            "watch_columns": sorted(set(watched_columns(config).values())),
            "statistics": _statistics_setup(config, vocabularies)}


def stage_build(source: ReadOutputs | ConvertedTables, config: DatasetConfig, *,
                staging_url: str, vocabularies: Mapping[str, Sequence[str]],
                input_bytes: int | None = None,
                key_bounds: Sequence[bytes] | None = None,
                gather_dead_letters: bool = False) -> StagedBuild:
    """Wires checks, encoding, shards and dead letters after a source.

    `source` is what a source gives (`transforms.sources.ReadOutputs`: row
    batches, dead letters, (source, rows read)), or rows already converted
    by `ConvertTables` or `ConvertTablesWithCache` (`ConvertedTables`); the shards and
    dead-letter files are written into `staging_url`. Used by
    `build_pipeline` and by `WriteDataset`, so both write the same bytes for
    the same rows. input_bytes: the size of the input, when known, which
    sizes the shard writer's sort buckets (`ShardTuning.for_input`; never
    the bytes it writes). key_bounds: bucket bounds sampled before the run
    (`key_sample.sample_bucket_bounds`; `WriteShards`), which never change
    the bytes either. gather_dead_letters: give every dead-letter record
    as `StagedBuild.dead_letter` (else None).
    """
    output = config.output
    fingerprints = None
    if isinstance(source, ConvertedTables):
        if config.validation.duplicates is not None and source.fingerprints is None:
            raise ValueError("duplicate detection needs every row converted in this build: "
                             "it cannot take rows from the build cache")
        converted, rows, spilled = source, source.rows, source.rows_are_runs
        read_dead_letter = source.read_dead_letter
        # label counts, columns seen, rows read (and cache use), one step
        gathered = [source.gathered]
        # FingerprintBatch per batch, or None with detection off
        fingerprints = source.fingerprints
    else:
        # examples: ExampleBatch = [(key, serialized Example)]; dead_letter: dict;
        # label_counts: ((split, label, examples), ...) for the report
        # statistics: ((split, feature), FeatureStatistics) per batch
        to_examples = RowsToExamples(config.features, vocabularies,
                                     duplicates=_duplicate_setup(config), gathered=GATHERABLE,
                                     **_conversion_options(config, vocabularies))
        converted = source.rows | "ToExamples" >> to_examples
        rows, read_dead_letter, spilled = converted.examples, source.dead_letter, False
        # label counts and columns seen in one step; (source file, rows read)
        gathered = [to_examples.gathered,
                    source.counts | "RowsRead" >> beam.Map(_result_part, "counts")]
        # FingerprintBatch per batch, or None with detection off
        fingerprints = to_examples.fingerprints
    duplicate_parts, removed = _duplicates(fingerprints, config, input_bytes)
    if removed is not None:
        # The later copies leave before the shard writer, as dead letters.
        rows, removed = rows | "DropDuplicates" >> DropDuplicateRows(
            removed, config.split_names, config.validation.duplicates.dedupe)
    # One element that makes the shard writer's cleanup and the dead-letter
    # summary run even with nothing to write: one Create (a runner stage
    # and two ParDos) for both, not one each.
    trigger = rows.pipeline | "Trigger" >> beam.Create([(None, None)])
    # (None, ("shard", {"split", "file", "num_examples", "num_bytes", "sha256"}))
    # per shard: tagged for the result by the writer's last step
    shards = rows | "WriteShards" >> WriteShards(
        staging_url, dataset_name=config.name, splits=config.splits,
        shuffle=output.shuffle, shard_size=output.shard_size,
        compression=output.compression, index=output.index,
        shard_count_multiple=output.shard_count_multiple, file_format=output.file_format,
        temp_dir=f"{staging_url}/{TMP_DIR}",
        spilled=spilled, tuning=ShardTuning.for_input(input_bytes), key_bounds=key_bounds,
        spread=spreads(rows.pipeline), finish=functools.partial(_result_part, kind="shard"),
        trigger=trigger)
    # dead-letter dicts, read and check stages
    dead_parts = (read_dead_letter | "KeyReadFailures" >> beam.Map(_with_key, config.key),
                  converted.dead_letter) + ((removed,) if removed is not None else ())
    # One (None, ("dead_letter", {"num_rows", "by_reason", "files", "samples"}));
    # the sink takes the parts unflattened: every multi-input Flatten is a
    # stage of its own on Beam's portable runners, and the sink flattens
    # them once anyway.
    dead_letter = dead_parts | "WriteDeadLetters" >> WriteDeadLetters(
        f"{staging_url}/{DEAD_LETTER_DIR}",
        finish=functools.partial(_result_part, kind="dead_letter"), marker=trigger)
    # Everything the driver needs is gathered by one GroupByKey, not side
    # inputs: the Dask runner re-runs side-input producers, and only computes
    # the branch of the last transform, so the step applied to this result
    # also keeps every branch in the graph that runs.
    parts = [shards, dead_letter, *gathered]
    if config.validation.statistics:
        parts += _statistics_parts(converted.statistics)
    parts += duplicate_parts
    # Each part is (None, (kind, value)) already (`_result_part`).
    result = (tuple(parts)
              | "GatherResult" >> beam.Flatten()
              # (None, [(kind, value), ...])
              | "Group" >> beam.GroupByKey())
    # Only WriteDataset hands every dead letter to its user; a build's own
    # graph would pay a stage for a Flatten nobody reads.
    all_dead = (dead_parts | "AllDeadLetters" >> beam.Flatten()) if gather_dead_letters else None
    return StagedBuild(result, all_dead)


def _duplicates(fingerprints: beam.PCollection | None, config: DatasetConfig,
                input_bytes: int | None) -> tuple[list, beam.PCollection | None]:
    """(the result's duplicates parts, the removals of `dedupe` or None):
    nothing at all with detection off."""
    if fingerprints is None:
        return [], None
    parts = []
    threshold = near_threshold(config)
    if threshold is not None:
        # one summary of the image pairs within the threshold
        parts.append(fingerprints
                     | "FindNearImages" >> FindNearImages(threshold, config.split_names)
                     | "TagNearDuplicates" >> beam.Map(_result_part, "near_duplicates"))
    mode = config.validation.duplicates.dedupe
    found = fingerprints | "FindDuplicates" >> FindDuplicates(duplicate_buckets(input_bytes),
                                                              dedupe=mode)
    if mode is None:
        # DuplicatesPart per digest bucket, added up by write_result
        return parts + [found | "TagDuplicates" >> beam.Map(_result_part, "duplicates")], None
    return parts + [found.found | "TagDuplicates" >> beam.Map(_result_part, "duplicates"),
                    found.left | "TagDuplicatesLeft" >> beam.Map(_result_part, "duplicates_left")
                    ], found.removals


def near_threshold(config: DatasetConfig) -> int | None:
    """The near-duplicate threshold of a build, or None when it finds no
    near-duplicate images (detection off, no image source, or
    ``near_threshold: null``)."""
    duplicates = config.validation.duplicates
    if duplicates is None or config.source is None or config.source.type != "images":
        return None
    return duplicates.near_threshold


def _result_part(value, kind: str) -> tuple[None, tuple[str, object]]:
    """``(None, (kind, value))``: a value of the result, tagged with its
    kind and keyed for the one GroupByKey that gathers the result, in the
    step that makes it (a step of its own would be one more ParDo)."""
    return None, (kind, value)


def _statistics_part(keyed: tuple[tuple[str, str], FeatureStatistics]
                     ) -> tuple[None, tuple[str, tuple[str, str, dict]]]:
    return _result_part(statistics_entry(keyed), "statistics")


def _statistics_parts(statistics: beam.PCollection) -> tuple:
    """The result's statistics part: (split, feature, stats.json entry) per
    key, made by the step that finishes a key's merge (no step at all when
    statistics are off)."""
    return (statistics | "MergeStatistics" >> MergeStatistics(finish=_statistics_part),)


def build_pipeline(pipeline: beam.Pipeline, config: DatasetConfig, *, staging_url: str,
                   vocabularies: Mapping[str, Sequence[str]],
                   cache: CacheState | None = None, input_bytes: int | None = None) -> None:
    """Wires a build into `pipeline`.

    The pipeline reads the source, checks and encodes every row, writes the
    shards and dead letters into `staging_url`, and last writes
    ``_pipeline_result.json`` (shard metadata, dead-letter summary, rows read)
    for `publish.finalize`. With `cache` (`pipelines.cache.open_cache`) a
    table source reuses the cached pieces of unchanged files and caches
    the rest (`ConvertTablesWithCache`). input_bytes: see `stage_build`.
    Key-ordered plain output on a runner with the shuffle exchange gets
    bucket bounds from a sample of the input read here (`key_sample`).
    """
    spread = spreads(pipeline)
    if cache is not None:
        source = pipeline | "ReadAndConvert" >> ConvertTablesWithCache(
            config.source.path, config.source.type, cache_url=cache.url,
            encoding_key=cache.encoding_key, whole_files=cache.whole_files,
            pieces=cache.pieces, specs=config.features, vocabularies=vocabularies,
            layout=RowLayout(config.name, tuple(config.splits), config.output.shuffle),
            give_runs=cache.local and default_exchange(pipeline.runner) == "files",
            extensions=config.source.extensions, options=config.source.csv,
            batch_size=READ_BATCH_SIZE, spread=spread, known_contents=cache.known_contents,
            **_conversion_options(config, vocabularies))
    else:
        # rows: RowBatch; dead_letter: dead-letter dict; counts: (source file, rows read)
        label = "Read" if config.source.type == "images" else "ReadAndConvert"
        source = pipeline | label >> _read_source(config, vocabularies, spread=spread)
    key_bounds = None
    if uses_sampled_bounds(config, default_exchange(pipeline.runner)):
        key_bounds = sample_bucket_bounds(config, vocabularies,
                                          ShardTuning.for_input(input_bytes), input_bytes)
    staged = stage_build(source, config, staging_url=staging_url, vocabularies=vocabularies,
                         input_bytes=input_bytes, key_bounds=key_bounds)
    _ = staged.result | "WriteResult" >> beam.Map(write_result, staging_url,
                                                  watched=watched_columns(config),
                                                  split_names=_duplicates_named(config))


def _duplicates_named(config: DatasetConfig) -> tuple[str, ...] | None:
    """The split names `write_result` names duplicates by, or None when
    duplicate detection is off (the result then has no ``duplicates``)."""
    return config.split_names if config.validation.duplicates is not None else None


def _duplicate_setup(config: DatasetConfig) -> DuplicateSetup | None:
    """What `RowsToExamples` needs to fingerprint rows, or None when
    duplicate detection is off (``validation.duplicates``)."""
    duplicates = config.validation.duplicates
    if duplicates is None:
        return None
    return DuplicateSetup(duplicates.features, config.name, tuple(config.splits),
                          duplicates.dedupe, image_hashes=near_threshold(config) is not None)


def _label_counting(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                    ) -> LabelCounting | None:
    """Counting per split and label of the feature the report counts by, or
    None when the dataset has none."""
    feature, vocabulary = label_feature(manifest_features(config.features), vocabularies)
    if feature is None:
        return None
    return LabelCounting(feature, tuple(vocabulary) if vocabulary is not None else None,
                         config.name, tuple(config.splits))


def _statistics_setup(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                      ) -> StatisticsSetup | None:
    """What the converter needs to compute statistics, or None when the
    config turns them off (``validation.statistics: false``)."""
    if not config.validation.statistics:
        return None
    return StatisticsSetup(StatisticsPlan.from_specs(config.features, vocabularies),
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
            known[spec.name] = scan_distinct(source.path, source.type, spec.path or spec.source,
                                            extensions=source.extensions, options=source.csv,
                                            null_values=spec.null_values)
    return resolve_vocabularies(config.features, known)
