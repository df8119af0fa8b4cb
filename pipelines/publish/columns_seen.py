"""A feature whose column no row held fails the build, with what was meant.

A feature that is optional or has a default reads a missing column as
missing values without a dead letter, so a `from:` typo (or a source that
changed) would publish a version in which the feature is absent from, or
defaulted in, every row. Where the columns are known before the run the
config check catches it; elsewhere (JSONL, JSON, TFRecord, remote tables)
the pipeline reports the columns rows held (`graph.write_result`:
``unseen_columns``, ``columns_seen``) and `check_columns_seen` fails the
build.
"""

from __future__ import annotations

import difflib

from ...schemas.features import nested_path_hint
# (the error budget's own summary of the dead letters, reused)
from .budget import reason_lines, top_reasons
from .errors import BuildFailed

__all__ = ["check_columns_seen"]


def check_columns_seen(result: dict) -> None:
    """Raises `BuildFailed` naming every feature whose column no row held,
    with the nearest column seen."""
    unseen = result.get("unseen_columns") or {}
    if not isinstance(unseen, dict) or not unseen:
        return
    seen = [name for name in result.get("columns_seen") or [] if isinstance(name, str)]
    lines = ["build failed: no row of this build holds the column of "
             + ("a feature" if len(unseen) == 1 else f"{len(unseen)} features")
             + "; nothing was published"]
    for feature, column in sorted(unseen.items()):
        # a dotted name starting with a column seen is most likely a path
        # meant as one, which `from:` writes as a list of keys
        suggestion = nested_path_hint(str(column), seen)
        close = difflib.get_close_matches(str(column), seen, n=1, cutoff=0.6)
        if suggestion is None and close:
            suggestion = f"`{close[0]}`"
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        lines.append(f"  features.{feature}.from: column {column!r} appears in no row{hint}")
    if seen:
        lines.append(f"  columns seen: {', '.join(seen[:50])}" + (" ..." if len(seen) > 50
                                                                   else ""))
    else:
        lines.append(_why_no_row(result))
    raise BuildFailed("\n".join(lines))


def _why_no_row(result: dict) -> str:
    """Says that no row was read at all, with the dead letters' top reasons
    and a sample each (a JSON file holding one object, not an array; a file
    that is not UTF-8 ...): the missing columns only follow from them."""
    reasons = top_reasons(result.get("dead_letter") or {})
    if not reasons:
        return "  no row was read"
    return "\n".join(["  no row was read: every input was a dead letter; top reasons:",
                      *reason_lines(reasons, indent="    ")])
