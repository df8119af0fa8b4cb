"""Fixtures shared by the pipeline tests."""

import subprocess
import sys

import pytest


@pytest.fixture
def small_table(tmp_path):
    """write(rows, output) -> tmp_path, holding `t.csv` (an int64 `id` and a
    string `name`, `rows` rows) and `c.yaml`, its build config, whose
    `output:` mapping is `output`: the smallest build a test can run."""

    def write(rows: int, output: str = "{path: out}"):
        (tmp_path / "t.csv").write_text(
            "id,name\n" + "".join(f"{i},n{i}\n" for i in range(rows)))
        (tmp_path / "c.yaml").write_text(
            "name: t\nversion: '1'\nsource: {type: csv, path: t.csv}\n"
            "features:\n  id: {type: int64}\n  name: {type: string}\n"
            f"output: {output}\nkey: id\n")
        return tmp_path

    return write


@pytest.fixture
def run_python():
    """run(code, *args, cwd=None) -> the words the code printed: `code` run by
    ``python -c`` in a process of its own (with `args` as its argv), which
    must exit 0 (else its stderr is the failure)."""

    def run(code: str, *args: str, cwd=None) -> list[str]:
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, cwd=cwd, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    return run
