"""The statistics gates of a staged build: `finalize`'s statistics hook, which writes the statistics files, compares with the baseline and checks the gates.

The pipeline merges the statistics per split and feature and hands them to
the driver in ``_pipeline_result.json``; `check_statistics` (called by
`publish.finalize` through its ``statistics_hook``, before the report and
before anything is published) writes them as ``stats.json`` into the
staging directory, compares them with the baselines the config chooses
(`baseline.load_baselines`: by default the version LATEST names) as
``drift.json``, and evaluates the configured gates.
A crossed gate fails the build: `finalize` then publishes nothing, leaves
LATEST alone and keeps the report under ``<output>/.failed/``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...schemas.drift import Gate, GateResult, check_gates, compare, failure_message
from ...transforms.urls import redact_url
from .baseline import Baseline, BaselineChoice, load_baselines
from .stats_files import statistics_document, write_statistics

__all__ = ["BuildChecks", "StatisticsCheck", "StatisticsOutcome", "check_statistics",
           "drift_document"]


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
                     baselines: Sequence[Baseline]) -> StatisticsOutcome:
    """Writes ``stats.json`` and ``drift.json`` into the staging directory
    and evaluates `gates` against every usable baseline. Never raises for a
    crossed gate: the outcome's `failure` says which gates failed, with the
    measured values."""
    stats = statistics_document(entries, manifest, feature_order)
    drift = drift_document(stats, baselines)
    results = check_gates(gates, stats, drift)
    drift["gates"] = [{"key": result.gate.key, "split": result.split,
                       "measure": result.gate.measure, "feature": result.gate.feature,
                       "baseline": result.baseline, "limit": result.gate.limit,
                       "value": result.value, "passed": result.passed,
                       "message": result.message}
                      for result in results]
    write_statistics(staging_url, stats, drift)
    return StatisticsOutcome(stats=stats, drift=drift, gates=results,
                             failure=failure_message(results))


def drift_document(stats: Mapping[str, Any], baselines: Sequence[Baseline]) -> dict:
    """``drift.json``: the comparison with the first usable baseline (none:
    compared with nothing), ``baselines`` (each version and why it cannot
    be used, or null) and ``earlier`` (the comparisons with the further
    usable baselines, in order)."""
    usable = [baseline for baseline in baselines if baseline.stats is not None]
    comparisons = [compare(stats, baseline.stats, baseline.version) for baseline in usable]
    drift = comparisons[0] if comparisons else compare(stats, None, None)
    drift["baselines"] = [{"version": baseline.version, "problem": baseline.problem}
                          for baseline in baselines]
    drift["earlier"] = comparisons[1:]
    return drift


class StatisticsCheck:
    """`finalize`'s statistics hook for one build: compares with the
    baselines the config chooses under `output_path` (`baseline`: read when
    the hook runs, just before publishing), warns on stderr of each that
    cannot be used, and keeps its outcome for the report. Pickles as plain
    values (`WriteDataset` publishes from a pipeline step)."""

    def __init__(self, output_path: str, feature_order: Sequence[str], gates: Sequence[Gate],
                 choice: BaselineChoice = BaselineChoice()):
        self._output_path = output_path
        self._feature_order = tuple(feature_order)
        self._gates = tuple(gates)
        self._choice = choice
        self.outcome: StatisticsOutcome | None = None
        self.warnings: list[str] = []

    @classmethod
    def for_config(cls, config) -> "StatisticsCheck | None":
        """The hook of a build of `config` (a `DatasetConfig`), or None when
        its statistics are turned off."""
        validation = config.validation
        if not validation.statistics:
            return None
        return cls(config.output.path, [spec.name for spec in config.features],
                   validation.gates, BaselineChoice(validation.baseline_version,
                                                    validation.baseline_last))

    def __call__(self, staging_url: str, manifest: dict, result: dict) -> str | None:
        baselines, self.warnings = load_baselines(self._output_path, self._choice)
        for warning in self.warnings:
            print(f"recordforge: warning: {redact_url(warning)}", file=sys.stderr)
        self.outcome = check_statistics(
            staging_url, manifest, result.get("statistics") or {},
            feature_order=self._feature_order, gates=self._gates, baselines=baselines)
        return self.outcome.failure

    @property
    def report_sections(self) -> dict:
        """The keyword arguments that give the report its statistics sections."""
        if self.outcome is None:
            return {}
        return {"statistics": self.outcome.stats, "drift": self.outcome.drift}


class BuildChecks:
    """Several of `finalize`'s statistics hooks as one (the statistics'
    `StatisticsCheck`, the duplicates' `duplicates.DuplicatesCheck`): each
    runs, every failure message is joined, and their report sections are
    merged. Pickles as its hooks do."""

    def __init__(self, hooks):
        self._hooks = tuple(hook for hook in hooks if hook is not None)

    @classmethod
    def of(cls, *hooks) -> "BuildChecks | None":
        """The hooks that are not None as one, or None when none is."""
        checks = cls(hooks)
        return checks if checks._hooks else None

    def __call__(self, staging_url: str, manifest: dict, result: dict) -> str | None:
        failures = [hook(staging_url, manifest, result) for hook in self._hooks]
        return "\n".join(failure for failure in failures if failure) or None

    @property
    def report_sections(self) -> dict:
        sections: dict = {}
        for hook in self._hooks:
            sections.update(hook.report_sections)
        return sections
