"""The console script imports Beam without what a build does not use (`pipelines.beam_import`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

LEAN = "from recordforge.pipelines.beam_import import import_beam_lean; import_beam_lean(); "
BEAM_S3 = "apache_beam.io.aws.s3filesystem"


def _run(code: str, *args: str, cwd=None) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_console_build_of_a_small_table_imports_neither_pandas_nor_beams_s3(tmp_path):
    """A small build spends most of its CPU importing; pandas (Beam imports
    it only for pandas batch types, which no step has) and Beam's S3
    filesystem (boto3) are no part of it."""
    (tmp_path / "t.csv").write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(50)))
    (tmp_path / "c.yaml").write_text(
        "name: t\nversion: '1'\nsource: {type: csv, path: t.csv}\n"
        "features:\n  id: {type: int64}\n  name: {type: string}\n"
        "output: {path: out, shuffle: true}\nkey: id\n")
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            "atexit.register(lambda: print(*(name in sys.modules for name in "
            f"('pandas', 'boto3', '{BEAM_S3}', 'apache_beam')))); "
            "sys.exit(cli.main())")
    out = _run(code, "build", "c.yaml", "--", "--direct_running_mode=in_memory",
               "--direct_num_workers=1", cwd=tmp_path)
    assert out == ["False", "False", "False", "True"]
    assert (tmp_path / "out" / "LATEST").exists()


def test_what_it_left_out_can_be_imported_after_beam_and_registers_as_usual():
    code = ("import sys; " + LEAN +
            "print('apache_beam' in sys.modules, 'pandas' in sys.modules); "
            "from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY as known; "
            "from apache_beam.io.filesystems import FileSystems; "
            "print('pandas' in known); import apache_beam.dataframe.schemas; "
            "import pandas; print('pandas' in known, pandas.DataFrame({'a': [1, 2]})['a'].sum()); "
            f"import {BEAM_S3}; print(type(FileSystems.get_filesystem('s3://b/k')).__name__)")
    assert _run(code) == ["True", "False", "False", "True", "3", "S3FileSystem"]


@pytest.mark.parametrize("args,imported", [
    (["--direct_num_workers=1", "--temp_location=/tmp/x"], False),
    (["--temp_location", "S3://bucket/tmp"], True),
])
def test_beams_s3_filesystem_is_imported_when_an_option_names_an_s3_location(args, imported):
    code = ("import sys; " + LEAN + "from recordforge.pipelines.beam_import import "
            f"import_beam_filesystems; import_beam_filesystems({args!r}); "
            f"print('{BEAM_S3}' in sys.modules)")
    assert _run(code) == [str(imported)]


@pytest.mark.parametrize("command", [["verify", "no-such-dataset"], ["install-prism", "--help"]])
def test_the_console_scripts_other_commands_import_no_beam_for_it(command):
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            "atexit.register(lambda: print('apache_beam' in sys.modules)); cli.main()")
    proc = subprocess.run([sys.executable, "-c", code, *command], capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.split()[-1:] == ["False"], proc.stderr


@pytest.mark.parametrize("first", ["pandas", "apache_beam"])
def test_it_leaves_a_process_that_imported_either_already_as_it_is(first):
    code = (f"import sys, {first}; " + LEAN + "import apache_beam; "
            "from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY as known; "
            "print('pandas' in sys.modules, 'pandas' in known)")
    assert _run(code) == ["True", "True"]
