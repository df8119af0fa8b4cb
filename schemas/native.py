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


def _load() -> tuple[SimpleNamespace | None, str]:
    if os.environ.get(PURE_PYTHON_VARIABLE, "").strip() not in ("", "0"):
        return None, f"pure Python ({PURE_PYTHON_VARIABLE} is set)"
    try:
        # Through importlib: the extension is compiled, with no .py file for
        # tests/test_structure.py to follow, and `from .. import _native`
        # would read as an import of the whole package.
        native = importlib.import_module("._native", __package__.rpartition(".")[0])
    except ImportError as error:
        return None, (f"pure Python (the native extension is not installed: {error}; "
                      "install with cargo on PATH to build it)")
    return SimpleNamespace(CsvPlan=native.CsvPlan, convert_csv_run=native.convert_csv_run,
                           walk_records=native.walk_records), "native (recordforge._native)"


# Read once per process: a build (and every worker) keeps the path it
# started with, whatever the environment does later.
_KERNELS, _NOTE = _load()


def kernels() -> SimpleNamespace | None:
    """The native kernels (`CsvPlan`, `convert_csv_run`, `walk_records`),
    or None where the Python path runs."""
    return _KERNELS


def path_note() -> str:
    """Which path runs and why, for the build's one line saying so."""
    return _NOTE
