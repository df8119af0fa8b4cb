"""Gzip bombs: a shard of a few hundred KB holding one record of tens of MB.

`recordforge inspect` and `verify --deep` each run in a fresh process on a
real published version whose one shard is such a bomb (bytes, int64 and
float features); the process's peak resident memory above its start must
stay under 1.5 times the record (it was about 4 times for bytes, and
several times more for a packed int64 list, when every value became a
Python object). `inspect` and plain `verify` stream a long record past
(`StreamedRecord`): they grow by under a quarter of it.
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
    import io, sys
    from recordforge.pipelines.publish import inspect, verify

    def peak_kb():
        # VmHWM, not ru_maxrss: the latter keeps the peak of the forked
        # parent from before exec, which hid any growth below it.
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))

    command, path = sys.argv[1], sys.argv[2]
    start = peak_kb()
    if command == "inspect":
        out = io.StringIO()
        status = inspect.main([path], out=out)
        assert len(out.getvalue()) < 100_000, len(out.getvalue())
    else:
        status = verify.main([path, "--deep"])
    peak = peak_kb()
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


# verify --deep of a packed int64 list (plain or with a vocabulary) holds
# about three times the record: measured since the peak is read from VmHWM
# (ru_maxrss showed the forked parent's peak, so this test could not fail).
# Left to verify's owners; strict, so that a fix is noticed.
_DEEP_INTS = pytest.mark.xfail(strict=True,
                               reason="verify --deep holds a packed int64 record about 3x")


@pytest.mark.slow
@pytest.mark.parametrize("kind, command", [
    (kind, command) if command == "inspect" or kind in ("bytes", "float")
    else pytest.param(kind, command, marks=_DEEP_INTS)
    for kind in ("bytes", "int64", "vocabulary", "float") for command in ("inspect", "verify")])
def test_a_gzip_bomb_is_inspected_and_verified_in_bounded_memory(tmp_path, kind, command):
    size = RECORD_MB << 20
    values = {"bytes": b"\0" * size, "int64": [1] * INT_VALUES, "vocabulary": [1] * INT_VALUES,
              "float": [0.0] * (size // 4)}[kind]
    stored = {"bytes": "bytes", "float": "float"}.get(kind, "int64")
    record_bytes, file_bytes = _bomb(tmp_path, {"x": values}, kind, stored)
    del values
    assert file_bytes < record_bytes / 100  # it is a bomb
    result = subprocess.run([sys.executable, "-c", _MEASURE, command, str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    status, grown = result.stdout.splitlines()[-1].split()
    assert int(status) == 0, result.stdout + result.stderr
    assert int(grown) < 1.5 * record_bytes, (command, int(grown) / record_bytes)

@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_inspect_and_verify_stream_a_long_record_past(tmp_path, command):
    """`inspect` (printing the record) and plain `verify` (counting it) read a
    gzip shard's long record in pieces: the process grows by under a quarter
    of the record (inspect held it whole, 1.07 GB for a 1 GiB record; so did
    plain verify)."""
    record_bytes, _ = _bomb(tmp_path, {"x": b"\0" * (RECORD_MB << 20)}, "bytes", "bytes")
    script = _MEASURE.replace('[path, "--deep"]', "[path]")
    result = subprocess.run([sys.executable, "-c", script, command, str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    status, grown = result.stdout.splitlines()[-1].split()
    assert int(status) == 0, result.stdout + result.stderr
    assert int(grown) < record_bytes / 4, int(grown) / record_bytes
