"""The row record that sources produce and the schema checks consume."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["SourceRow"]


class SourceRow(NamedTuple):
    """One input row with its provenance.

    source: the input file's path or URL (credentials removed).
    row: 1-based line/row number in that file, or None (image files).
    values: column name -> raw value.
    """

    source: str
    row: int | None
    values: dict[str, Any]
