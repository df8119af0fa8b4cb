"""The baseline a build's statistics are compared with: the `stats.json` of an earlier published version."""

from __future__ import annotations

from ...schemas.stats import FORMAT
from ...transforms.layout import STATS_FILE
from .output import Output, load_json

__all__ = ["load_statistics"]


def load_statistics(output_path: str, version: str | None) -> dict | None:
    """The ``stats.json`` of a published version, or None (no version, a
    version built without statistics, an unreadable or foreign file)."""
    if not version:
        return None
    out = Output(output_path)
    stats = load_json(out.read_bytes(out.path(version, STATS_FILE)))
    if not isinstance(stats, dict) or stats.get("format") != FORMAT:
        return None
    return stats
