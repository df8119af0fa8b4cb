"""`WriteDataset`: a Beam user's PCollection of row dicts in, a published version out.

    with beam.Pipeline() as p:
        rows = p | beam.io.ReadFromParquet("gs://bucket/rows/*.parquet")
        written = rows | recordforge.WriteDataset("flights.yaml", **{"output.path": url})
        written.dead_letters | beam.Map(print)

The rows go through the same steps as a `build` (`graph.stage_build`:
checks, encoding, dead letters, shards), so the same rows and settings give
the same shard bytes. Key-ordered output (``shuffle: false``) moves its
rows through a distributed runner's shuffle once more (plain: three times;
gzip: twice) unless the bounds of the key ranges workers sort are known
before the run: ``WriteDataset(config, key_sample=rows)`` takes them from
a few thousand rows like the input's (the first rows of some of its
files, say), and the rows then cross once fewer
(`key_sample.bounds_of_rows`). A sample that
misjudges the keys changes no byte of the output, only how evenly the
workers share the sorting. The pipeline's last step publishes (`publish.finalize`:
error budget, manifest, checksums, verification, commit, LATEST), the way
Beam's file sinks finalize in a last step: a pipeline that completes has
published, with no call after it; one that fails has published nothing.

Where the staging directory is opened: when the transform is applied
(`expand`, in the process building the pipeline), as Beam's file sinks
choose their temporary directory at construction, because the shard writer
needs its location as a plain value. No process is sure to live as long
as the pipeline (on a remote runner the builder may exit after submitting),
so the build owns its staging directory by a lease in its owner record
(`publish.begin_pipeline_build`, default 24 h), not a heartbeat; on a
local runner the lease also ends when the building process dies. A
pipeline built and never run leaves a staging directory the first build
of the same version after the lease (or the process) ends deletes.

Retries: the publishing step may run again after a worker died. It
rewrites the pipeline result from its input, deletes what an earlier
attempt of itself wrote into staging, and finalizes again; when an earlier
attempt already committed (the staging directory is gone and the
published manifest lists exactly this run's shards), it returns the same
summary without publishing twice.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Mapping, NamedTuple

import apache_beam as beam

from . import publish
from .config import DatasetConfig, load_config
from .graph import known_vocabularies, stage_build, write_result
from .key_sample import SAMPLE_ROWS, bounds_of_rows, uses_sampled_bounds
from .publish import BuildFailed, report
from .publish.manifest import load_manifest
from .publish.duplicates import DuplicatesCheck
from .publish.gates import BuildChecks, StatisticsCheck
from .publish.staging import PIPELINE_LEASE, StagingRef
from ..schemas.checks import stored_defaults
from ..schemas.errors import ConfigError
from ..schemas.features import manifest_features
from ..transforms.layout import FAILED_DIR, FINALIZE_FILES, MANIFEST_FILE
from ..transforms.writer import ShardTuning, default_exchange
from ..transforms.sources import RowsFromElements

__all__ = ["WriteDataset", "WriteDatasetResult"]

# The runners that run a pipeline inside the process that builds it (their
# workers die with it), so a build can be bound to that process.
_IN_PROCESS_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner",
                       "FnApiRunner")


# Runners that lose what a DoFn emits from finish_bundle (Beam 2.77's Dask
# runner collects a partition's outputs before calling it).
_DROPS_BUNDLE_END = ("DaskRunner",)


class WriteDatasetResult(NamedTuple):
    """What `WriteDataset` gives.

    dead_letters: one dict per row that failed (the dead-letter record of
    the product contract), to route elsewhere; also written into the
    version's ``dead_letter/``. published: one summary dict when the
    pipeline publishes: ``{"version", "path", "splits": {split: examples},
    "num_examples", "dead_letter_rows", "manifest"}``.
    """

    dead_letters: beam.PCollection
    published: beam.PCollection


class _Publish(NamedTuple):
    """Everything the publishing step needs, as plain values."""

    staging: StagingRef
    name: str
    compression: str
    features: dict
    vocabularies: dict
    config: dict
    split_names: tuple
    max_error_rate: float
    max_errors: int | None
    runner: str
    verify: bool
    update_latest: bool
    statistics: BuildChecks | None = None
    file_format: str = "tfrecord"
    # The splits that name the duplicates found, or None with detection off.
    duplicate_splits: tuple | None = None


def publish_staged(parts: tuple, job: _Publish) -> dict:
    """The pipeline's last step: writes the gathered result (``(None,
    [(kind, value), ...])``) into staging and publishes it; returns the
    summary. Safe to run again after an attempt that died (module docstring)."""
    staging = publish.Staging.attach(job.staging)
    out = staging.out
    if not staging.exists():
        return _already_published(staging, parts)
    for name in FINALIZE_FILES:  # an earlier attempt's, or the check of staged files fails
        out.remove(f"{staging.directory}/{name}")
    write_result(parts, staging.url, split_names=job.duplicate_splits)

    statistics = job.statistics

    def write_report(staging_url: str, manifest: dict, label_counts: dict | None) -> None:
        report.write_staged_report(staging_url, manifest, label_counts=label_counts,
                                   **(statistics.report_sections if statistics else {}))

    result = publish.finalize(
        staging, name=job.name, compression=job.compression, file_format=job.file_format,
        features=job.features,
        vocabularies=job.vocabularies, config=job.config, split_names=job.split_names,
        max_error_rate=job.max_error_rate, max_errors=job.max_errors, runner=job.runner,
        verify=job.verify, report_hook=write_report, describe=True,
        update_latest=job.update_latest, statistics_hook=statistics)
    return _summary(result.manifest, result.url)


def _summary(manifest: Mapping[str, Any], url: str) -> dict:
    splits = {name: split["num_examples"] for name, split in manifest["splits"].items()}
    return {"version": manifest["version"], "path": url, "splits": splits,
            "num_examples": sum(splits.values()),
            "dead_letter_rows": manifest["dead_letter"]["num_rows"], "manifest": dict(manifest)}


def _already_published(staging: publish.Staging, parts: tuple) -> dict:
    """A retry after this build's staging directory is gone: committed by an
    earlier attempt (the published shards are this run's), or failed."""
    out = staging.out
    data = out.read_bytes(out.path(staging.version, MANIFEST_FILE))
    manifest = load_manifest(data) if data is not None else None
    ours = sorted((value["file"], value["sha256"]) for kind, value in parts[1] if kind == "shard")
    if manifest is not None:
        published = sorted((shard["file"], shard["sha256"])
                           for split in manifest["splits"].values() for shard in split["shards"])
        if published == ours:
            return _summary(manifest, out.display_of(out.path(staging.version)))
    failed = out.path(FAILED_DIR, f"{staging.version}.{staging.build_id}")
    where = f"; its dead letters are in {out.display_of(failed)}" if out.fs.exists(failed) else ""
    raise BuildFailed(f"build {staging.build_id} of version {staging.version!r} already ended "
                      f"without publishing (its staging directory is gone){where}")


def _sample_rows(key_sample: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first `SAMPLE_ROWS` rows of a key sample. Raises TypeError, before
    any pipeline runs, for one that is no mapping of column -> value."""
    rows = list(itertools.islice(key_sample, SAMPLE_ROWS))
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"key_sample row {index + 1} is a {type(row).__name__}, not a "
                            f"mapping of column -> value like the input's rows")
    return rows


class WriteDataset(beam.PTransform):
    """Checks, encodes, shards and publishes a PCollection of row dicts.

    config: the path of a YAML config, a mapping with its keys (``source``
    may be left out: the rows are the input), or what `load_config`
    returned. overrides: dotted keys as ``--set`` takes them, with Python
    values: ``WriteDataset(config, **{"output.path": url})``.
    overwrite: replace a published version; update_latest: False leaves
    LATEST alone; verify: False skips re-reading the staged shards;
    lease: seconds the build owns its staging directory (module docstring).
    key_sample: rows like the input's, whose keys give key-ordered output
    the bounds of its workers' key ranges before the run (module
    docstring; the first `key_sample.SAMPLE_ROWS` are used, and one that is
    no mapping raises TypeError here); ignored by other output and by local
    runners.

    Input: dicts, column name -> raw value (what a table row holds). Output:
    `WriteDatasetResult` (dead letters, publish summary). The pipeline fails,
    publishing nothing, when the error budget is exceeded or verification
    fails; the error names the cause. An invalid config raises `ConfigError`
    here, before any pipeline runs.
    """

    def __init__(self, config: "str | os.PathLike | Mapping[str, Any] | DatasetConfig", *,
                 overwrite: bool = False, update_latest: bool = True, verify: bool = True,
                 lease: float = PIPELINE_LEASE,
                 key_sample: Iterable[Mapping[str, Any]] | None = None, **overrides: Any):
        super().__init__()
        self._config = load_config(config, overrides or None, rows_given=True)
        duplicates = self._config.validation.duplicates
        if duplicates is not None and duplicates.dedupe is not None:
            # Removal tells rows apart by their file and row number, which a
            # pipeline's own elements do not have.
            raise ConfigError("validation.duplicates.dedupe", "removes rows of a build's own "
                              "source only (a pipeline's elements have no file and row to tell "
                              "equal rows apart); detect duplicates without it here")
        self._key_sample = None if key_sample is None else _sample_rows(key_sample)
        self._overwrite = overwrite
        self._update_latest = update_latest
        self._verify = verify
        self._lease = lease
        self._job: _Publish | None = None

    @property
    def config(self) -> DatasetConfig:
        return self._config

    def expand(self, rows: beam.PCollection) -> WriteDatasetResult:
        config = self._config
        try:
            version = publish.resolve_version(config.version)
        except ConfigError:
            raise
        except ValueError as error:
            raise ConfigError("version", str(error)) from None
        vocabularies = known_vocabularies(config)
        # Named as the user named it: Beam's DirectRunner is a SwitchingDirectRunner.
        runner = type(rows.pipeline.runner).__name__.replace("SwitchingDirectRunner",
                                                              "DirectRunner")
        staging = publish.begin_pipeline_build(
            config.output.path, version, overwrite=self._overwrite, lease=self._lease,
            bound_to_process=runner in _IN_PROCESS_RUNNERS)
        try:
            # rows: RowBatch; dead_letter: dict; counts: (source, rows)
            source = rows | "ToRows" >> RowsFromElements(
                source=self.label, batch_size=1 if runner in _DROPS_BUNDLE_END else 1000)
            key_bounds = None
            if self._key_sample is not None and uses_sampled_bounds(
                    config, default_exchange(rows.pipeline.runner)):
                key_bounds = bounds_of_rows(config, vocabularies, self._key_sample,
                                            ShardTuning.for_input(None))
            staged = stage_build(source, config, staging_url=staging.url,
                                 vocabularies=vocabularies, key_bounds=key_bounds,
                                 gather_dead_letters=True)
            job = _Publish(
                staging=staging.ref, name=config.name, compression=config.output.compression,
                file_format=config.output.file_format,
                features=manifest_features(config.features,
                                           stored_defaults(config.features, vocabularies)),
                vocabularies={name: list(labels) for name, labels in vocabularies.items()},
                config=config.resolved, split_names=tuple(config.split_names),
                max_error_rate=config.dead_letter.max_error_rate,
                max_errors=config.dead_letter.max_errors, runner=runner,
                verify=self._verify, update_latest=self._update_latest,
                statistics=BuildChecks.of(StatisticsCheck.for_config(config),
                                          DuplicatesCheck.for_config(config)),
                duplicate_splits=(tuple(config.split_names)
                                  if config.validation.duplicates is not None else None))
            self._job = job  # what the publishing step was given (tests run it again)
            # one summary dict
            published = staged.result | "Publish" >> beam.Map(publish_staged, job)
        except BaseException:
            staging.abort()
            raise
        # The owner record holds a lease: nothing here outlives this call.
        return WriteDatasetResult(staged.dead_letter, published)
