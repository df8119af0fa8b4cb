"""A build's statistics files: the `stats.json` and `drift.json` documents, their bytes, and writing them into staging."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ...schemas.stats import FORMAT
from ...transforms.layout import DRIFT_FILE, STATS_FILE
from .output import Output

__all__ = ["DRIFT_FILE", "STATS_FILE", "dumps_json", "statistics_document", "write_statistics"]


def dumps_json(document: Mapping[str, Any]) -> bytes:
    """A statistics or drift document as UTF-8 JSON (2-space indent, final newline)."""
    return (json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
            + "\n").encode("utf-8")


def statistics_document(entries: Mapping[str, Mapping[str, dict]], manifest: Mapping[str, Any],
                        feature_order: Sequence[str]) -> dict:
    """``stats.json`` from the pipeline's entries (split -> feature ->
    entry): splits in the manifest's order with its example counts,
    features in schema order."""
    splits = {}
    for split, summary in (manifest.get("splits") or {}).items():
        found = entries.get(split) or {}
        splits[split] = {"num_examples": summary.get("num_examples", 0),
                         "features": {name: found[name] for name in feature_order
                                      if name in found}}
    return {"format": FORMAT, "name": manifest.get("name"), "version": manifest.get("version"),
            "splits": splits}


def write_statistics(staging_url: str, stats: Mapping[str, Any], drift: Mapping[str, Any]
                     ) -> None:
    """Writes ``stats.json`` and ``drift.json`` into the staging directory."""
    out = Output(staging_url)
    out.write_atomic(out.path(STATS_FILE), dumps_json(stats))
    out.write_atomic(out.path(DRIFT_FILE), dumps_json(drift))
