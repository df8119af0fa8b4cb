"""Which row path runs: the compiled kernels (`recordforge._native`) or the pure-Python reference.

The extension is optional: `pip install .` builds it where cargo is
present (setup.py, setuptools-rust) and leaves it out elsewhere. Every
kernel mirrors a Python function that stays the reference and the
fallback; this module is the one place that chooses between them, so a
build runs one path throughout. ``RECORDFORGE_PURE_PYTHON=1`` forces the
Python path (to compare the two, or to rule the extension out).
"""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

__all__ = ["PURE_PYTHON_VARIABLE", "kernels", "path_note"]

PURE_PYTHON_VARIABLE = "RECORDFORGE_PURE_PYTHON"
# The kernels and what each mirrors (the Python reference beside it).
_KERNELS_USED = (
    "CsvPlan",  # transforms/native_rows.py: a schema compiled for a CSV header
    "check_csv_run",  # transforms/readers/csv.py: _plain_lines (is a run one ColumnBatch)
    "convert_csv_run",  # RowEncoder.encode_columns + BatchConverter._column_keys
    "convert_checked_run",  # the same for a run check_csv_run parsed (its fields kept)
    "convert_arrow_batch",  # the same for a Parquet record batch (readers/arrow_batch.py)
    "arrow_text_valid",  # transforms/readers/parquet.py: RecordBatch.validate(full=True) (_valid)
    "frame_gathered",  # transforms/writer/run_format.py: RunWriter.add of take(examples, order)
    "join_gathered",  # transforms/writer/run_format.py: b"".join(take(keys, order))
    "frame_records",  # transforms/tfrecord/framing.py: frame_records
    "fixed_key_order",  # transforms/writer/row_order.py: sorted_positions (run_kernel.py)
    "head_order",  # transforms/writer/row_order.py: _order_by_head
    "write_run",  # transforms/writer/run_format.py: RunWriter of rows in order (run_kernel.py)
    "framed_sizes",  # transforms/writer/prepare.py: the framed sizes of a batch's examples
    "key_nones",  # transforms/writer/prepare.py: a batch's keys checked and their Nones counted
    "sorted_rows",  # transforms/writer/run_format.py: write_sorted_run's sort (run_kernel.py)
    "merged_order",  # transforms/writer/sorting.py: _Ordered's sort of sorted slices (run_merge.py)
    "gather_values",  # transforms/writer/sorting.py: _gather (Arrow's take of a block's records)
    "hash_rows",  # transforms/splits.py: SplitAssigner.hash_rows
    "numeric_update",  # schemas/stats/numeric.py: python_update
    "text_theta",  # schemas/stats/distinct.py: compact_theta(add_texts(None, texts))
    "text_partial",  # schemas/stats/text.py: python_text_parts of a batch alone
    "text_column_partial",  # the same of a TextColumn (schemas/text_column.py) whole
    "text_column_take",  # schemas/text_column.py: TextColumn.python_take
    "index_lines",  # transforms/tfrecord/index.py: RecordIndexer._framed per header
    "walk_records",  # transforms/tfrecord/damage.py: python_complete_records
    "crc32c_append",  # transforms/tfrecord/framing.py: crc32c (the crc32c package's)
    "count_newlines_quotes",  # transforms/readers/ranges.py: bytes.count of "\n" and '"'
    "lone_carriage_return",  # transforms/readers/csv.py: count(b"\r") != count(b"\r\n")
    "count_walk",  # transforms/tfrecord/damage.py: python_count_complete
    "jsonl_segments",  # transforms/readers/jsonl.py: _jsonl_row's verdict per line
    "jsonl_keys",  # transforms/readers/jsonl.py: JsonlRunBatch.column_names
    "convert_jsonl_run",  # convert_csv_run for the rows of a JsonlRunBatch
    "example_values",  # schemas/example.py: decode_example's values, names sorted
    "example_features",  # schemas/example.py: example_features' protobuf path
    "example_run_check",  # transforms/readers/tfrecords.py: example_values of each record read
    "convert_example_run",  # convert_csv_run for the rows of an ExampleRunBatch
)
# Kernels an extension may lack, None where it does (built for Linux only).
_KERNELS_OPTIONAL = (
    "FileReadAhead",  # transforms/page_cache.py: read_files_once's window of advised files
)


def _load() -> tuple[SimpleNamespace | None, str]:
    if os.environ.get(PURE_PYTHON_VARIABLE, "").strip() not in ("", "0"):
        return None, f"pure Python ({PURE_PYTHON_VARIABLE} is set)"
    try:
        # Through importlib: the extension is compiled, with no .py file for
        # tests/test_structure.py to follow, and `from .. import _native`
        # would read as an import of the whole package.
        native = importlib.import_module("._native", __package__.rpartition(".")[0])
        missing = [name for name in _KERNELS_USED if not hasattr(native, name)]
        if missing:
            raise ImportError(f"an older build lacks {', '.join(missing)}")
    except ImportError as error:
        return None, (f"pure Python (the native extension is not installed: {error}; "
                      "install with cargo on PATH to build it)")
    kernels = {name: getattr(native, name) for name in _KERNELS_USED}
    kernels.update((name, getattr(native, name, None)) for name in _KERNELS_OPTIONAL)
    return SimpleNamespace(**kernels), "native (recordforge._native)"


# Read once per process: a build (and every worker) keeps the path it
# started with, whatever the environment does later.
_KERNELS, _NOTE = _load()


def kernels() -> SimpleNamespace | None:
    """The native kernels (`_KERNELS_USED`, and `_KERNELS_OPTIONAL` or None
    for each), or None where the Python path runs (an extension without
    one of `_KERNELS_USED` counts as absent)."""
    return _KERNELS


def path_note() -> str:
    """Which path runs and why, for the build's one line saying so."""
    return _NOTE
