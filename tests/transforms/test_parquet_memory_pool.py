"""The Parquet reader's memory pool: glibc's malloc unless the environment names one."""

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

_READ = """
import sys
import pyarrow as pa
from recordforge.transforms.readers.parquet import iter_parquet
before = pa.default_memory_pool().backend_name
rows = sum(len(batch) for batch in iter_parquet(sys.argv[1], columns=True))
print(before, pa.default_memory_pool().backend_name, rows)
"""


@pytest.mark.parametrize("named", [None, "mimalloc"])
def test_the_reader_allocates_through_malloc_unless_the_environment_names_a_pool(tmp_path, named):
    if named is not None and named not in pa.supported_memory_backends():
        pytest.skip(f"this pyarrow has no {named}")
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(100)), "text": ["x"] * 100}), path)
    env = {key: value for key, value in os.environ.items()
           if key != "ARROW_DEFAULT_MEMORY_POOL"}
    if named is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = named
    out = subprocess.run([sys.executable, "-c", _READ, str(path)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    before, after, rows = out[-3:]
    assert rows == "100"
    assert after == ("system" if named is None else named)
    if named is not None:
        assert before == named
