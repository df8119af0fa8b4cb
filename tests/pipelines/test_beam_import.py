"""The console script imports Beam without pandas (`pipelines.beam_import`)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str, *args: str, cwd=None) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_console_build_of_a_small_table_does_not_import_pandas(tmp_path):
    """A small build spends most of its CPU importing; pandas is no part of
    it (Beam imports it only for pandas batch types, which no step has)."""
    (tmp_path / "t.csv").write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(50)))
    (tmp_path / "c.yaml").write_text(
        "name: t\nversion: '1'\nsource: {type: csv, path: t.csv}\n"
        "features:\n  id: {type: int64}\n  name: {type: string}\n"
        "output: {path: out, shuffle: true}\nkey: id\n")
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            "atexit.register(lambda: print('pandas' in sys.modules, 'apache_beam' in sys.modules)); "
            "sys.exit(cli.main())")
    out = _run(code, "build", "c.yaml", "--", "--direct_running_mode=in_memory",
               "--direct_num_workers=1", cwd=tmp_path)
    assert out == ["False", "True"]
    assert (tmp_path / "out" / "LATEST").exists()


def test_pandas_can_be_imported_after_beam_and_beam_still_registers_its_batches():
    code = ("import sys; from recordforge.pipelines.beam_import import import_beam_without_pandas; "
            "import_beam_without_pandas(); print('apache_beam' in sys.modules, 'pandas' in sys.modules); "
            "from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY as known; "
            "print('pandas' in known); import apache_beam.dataframe.schemas; "
            "import pandas; print('pandas' in known, pandas.DataFrame({'a': [1, 2]})['a'].sum())")
    assert _run(code) == ["True", "False", "False", "True", "3"]


@pytest.mark.parametrize("first", ["pandas", "apache_beam"])
def test_it_leaves_a_process_that_imported_either_already_as_it_is(first):
    code = (f"import sys, {first}; from recordforge.pipelines.beam_import import "
            "import_beam_without_pandas; import_beam_without_pandas(); import apache_beam; "
            "from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY as known; "
            "print('pandas' in sys.modules, 'pandas' in known)")
    assert _run(code) == ["True", "True"]
