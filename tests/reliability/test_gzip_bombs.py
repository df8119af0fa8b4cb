"""Gzip bombs: a shard of a few hundred KB holding one record of tens of MB.

`recordforge inspect` and `verify --deep` each run in a fresh process on a
real published version whose one shard is such a bomb (bytes, int64 and
float features); the process's peak resident memory above its start must
stay under 1.5 times the record (it was about 4 times for bytes, and
several times more for a packed int64 list, when every value became a
Python object).
"""

import hashlib
import json
import subprocess
import sys
import textwrap

import fsspec
import pytest

from recordforge.pipelines import publish
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.layout import shard_file_name

RECORD_MB = 32
INT_VALUES = 8 << 20  # one byte each packed; every one made a Python object before

_MEASURE = textwrap.dedent("""\
    import io, resource, sys
    from recordforge.pipelines.publish import inspect, verify
    command, path = sys.argv[1], sys.argv[2]
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if command == "inspect":
        out = io.StringIO()
        status = inspect.main([path], out=out)
        assert len(out.getvalue()) < 100_000, len(out.getvalue())
    else:
        status = verify.main([path, "--deep"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(status, (peak - start) * 1024)
    """)


def _bomb(root, features, kind, stored):
    record = encode_example(features)
    data = tfrecord.gzip_compress(tfrecord.frame_records([record]))
    staging = publish.begin_build(str(root), "v1")
    file = shard_file_name("train", 0, 1, "gzip")
    with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
        handle.write(data)
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({"shards": [{
            "split": "train", "file": file, "num_examples": 1, "num_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}], "num_input_rows": 1, "dead_letter": {
            "num_rows": 0, "by_reason": {}, "files": [], "samples": {}}}).encode())
    publish.finalize(staging, name="bomb", compression="gzip",
                     features={"x": {"type": stored, "shape": [-1]}},
                     vocabularies={"x": ["a", "b"]} if kind == "vocabulary" else {},
                     config={}, split_names=["train"], max_error_rate=0.0, verify=False)
    return len(record), len(data)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bytes", "int64", "vocabulary", "float"])
def test_a_gzip_bomb_is_inspected_and_verified_in_bounded_memory(tmp_path, kind):
    size = RECORD_MB << 20
    values = {"bytes": b"\0" * size, "int64": [1] * INT_VALUES, "vocabulary": [1] * INT_VALUES,
              "float": [0.0] * (size // 4)}[kind]
    stored = {"bytes": "bytes", "float": "float"}.get(kind, "int64")
    record_bytes, file_bytes = _bomb(tmp_path, {"x": values}, kind, stored)
    del values
    assert file_bytes < record_bytes / 100  # it is a bomb
    for command in ("inspect", "verify"):
        result = subprocess.run([sys.executable, "-c", _MEASURE, command, str(tmp_path)],
                                capture_output=True, text=True, timeout=300)
        status, grown = result.stdout.splitlines()[-1].split()
        assert int(status) == 0, result.stdout + result.stderr
        assert int(grown) < 1.5 * record_bytes, (command, int(grown) / record_bytes)
