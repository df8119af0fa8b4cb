"""Fixtures shared by the pipeline tests."""

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
