"""The statistics gates of a staged build: `finalize`'s statistics hook, which writes the statistics files, compares with the baseline and checks the gates.

The pipeline merges the statistics per split and feature and hands them to
the driver in ``_pipeline_result.json``; `check_statistics` (called by
`publish.finalize` through its ``statistics_hook``, before the report and
before anything is published) writes them as ``stats.json`` into the
staging directory, compares them with the previous version's
(`baseline.load_statistics`) as ``drift.json``, and evaluates the configured gates.
A crossed gate fails the build: `finalize` then publishes nothing, leaves
LATEST alone and keeps the report under ``<output>/.failed/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...schemas.drift import Gate, GateResult, check_gates, compare, failure_message
from .baseline import load_statistics
from .commit import read_latest
from .stats_files import statistics_document, write_statistics

__all__ = ["StatisticsCheck", "StatisticsOutcome", "check_statistics"]


@dataclass
class StatisticsOutcome:
    """What `check_statistics` found: the stats.json and drift.json
    documents, every gate's result and the failure message (None: passed)."""

    stats: dict
    drift: dict
    gates: list[GateResult] = field(default_factory=list)
    failure: str | None = None


def check_statistics(staging_url: str, manifest: Mapping[str, Any],
                     entries: Mapping[str, Mapping[str, dict]], *,
                     feature_order: Sequence[str], gates: Sequence[Gate],
                     previous: dict | None, previous_version: str | None) -> StatisticsOutcome:
    """Writes ``stats.json`` and ``drift.json`` into the staging directory
    and evaluates `gates`. Never raises for a crossed gate: the outcome's
    `failure` says which gates failed, with the measured values."""
    stats = statistics_document(entries, manifest, feature_order)
    drift = compare(stats, previous, previous_version if previous is not None else None)
    results = check_gates(gates, stats, drift)
    drift["gates"] = [{"key": result.gate.key, "split": result.split,
                       "measure": result.gate.measure, "feature": result.gate.feature,
                       "limit": result.gate.limit, "value": result.value,
                       "passed": result.passed, "message": result.message}
                      for result in results]
    write_statistics(staging_url, stats, drift)
    return StatisticsOutcome(stats=stats, drift=drift, gates=results,
                             failure=failure_message(results))


class StatisticsCheck:
    """`finalize`'s statistics hook for one build: compares with the version
    LATEST names under `output_path` (read when the hook runs, just before
    publishing) and keeps its outcome for the report. Pickles as plain
    values (`WriteDataset` publishes from a pipeline step)."""

    def __init__(self, output_path: str, feature_order: Sequence[str], gates: Sequence[Gate]):
        self._output_path = output_path
        self._feature_order = tuple(feature_order)
        self._gates = tuple(gates)
        self.outcome: StatisticsOutcome | None = None

    @classmethod
    def for_config(cls, config) -> "StatisticsCheck | None":
        """The hook of a build of `config` (a `DatasetConfig`), or None when
        its statistics are turned off."""
        if not config.validation.statistics:
            return None
        return cls(config.output.path, [spec.name for spec in config.features],
                   config.validation.gates)

    def __call__(self, staging_url: str, manifest: dict, result: dict) -> str | None:
        previous_version = read_latest(self._output_path)
        self.outcome = check_statistics(
            staging_url, manifest, result.get("statistics") or {},
            feature_order=self._feature_order, gates=self._gates,
            previous=load_statistics(self._output_path, previous_version),
            previous_version=previous_version)
        return self.outcome.failure

    @property
    def report_sections(self) -> dict:
        """The keyword arguments that give the report its statistics sections."""
        if self.outcome is None:
            return {}
        return {"statistics": self.outcome.stats, "drift": self.outcome.drift}
