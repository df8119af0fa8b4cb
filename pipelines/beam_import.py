"""Importing Beam without pandas, for the console script's process.

`apache_beam.typehints` imports pandas whenever it is installed, only to
register Beam's conversions between pandas objects and batches of elements
(`apache_beam.typehints.pandas_type_compatibility`, for DoFns that declare
pandas batch types and for Beam DataFrames). recordforge declares no such
type, and pandas (with what it imports) is the largest single piece of
importing Beam: ~0.4 s of CPU of the ~1.4 s, which a small build (a few
hundred thousand rows, a few thousand images) spends before its first row.

`import_beam_without_pandas` imports Beam while ``import pandas`` fails, then
lets pandas be imported again: whatever imports it later (a Beam DataFrame,
``pyarrow.Table.to_pandas``) gets it as usual, and Beam's DataFrame modules
import the pandas conversions themselves. Only the console script does
this: a caller's own process keeps Beam as it imports it.
"""

from __future__ import annotations

import sys

__all__ = ["import_beam_without_pandas"]


def import_beam_without_pandas() -> None:
    """Imports `apache_beam` with pandas hidden, unless either is imported already."""
    if "apache_beam" in sys.modules or "pandas" in sys.modules:
        return
    sys.modules["pandas"] = None  # `import pandas` raises ImportError while this is here
    try:
        import apache_beam  # noqa: F401
    finally:
        if sys.modules.get("pandas", 0) is None:
            del sys.modules["pandas"]
