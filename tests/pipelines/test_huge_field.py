"""A huge CSV field: peak memory a small multiple of the record; stats.json and report.html small (issue 41.9).

Each build runs in a fresh process, whose peak RSS (with its children) is
sampled with psutil; a build of the same table with a one-byte field gives
the fixed cost (Python, Beam, numpy) to subtract.
"""

import hashlib
import subprocess
import sys
import time

import psutil
import pytest
from hypothesis import Phase, given, settings, strategies as st

from recordforge.schemas.example import decode_example
from recordforge.transforms import tfrecord

pytestmark = pytest.mark.slow

_CONFIG = """name: big
version: "1.0.0"
source: {{type: csv, path: {csv}}}
features:
  id: {{type: int64}}
  text: {{type: string}}
splits: {{train: 1.0}}
output: {{path: {out}, compression: none}}
"""


def _table(path, field: bytes):
    with open(path, "wb") as f:
        f.write(b"id,text\n")
        for i in range(5):
            f.write(b"%d,small %d\n" % (i, i))
        f.write(b"99," + field + b"\n")


def _peak_rss_of_build(config) -> int:
    process = psutil.Popen([sys.executable, "-m", "recordforge.pipelines.cli", "build",
                            str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, process.memory_info().rss + sum(
                child.memory_info().rss for child in process.children(recursive=True)))
        except psutil.Error:  # a child that ended between listing and asking
            pass
        time.sleep(0.02)
    assert process.returncode == 0, process.stderr.read().decode()
    return peak


def _build(tmp_path, name, field):
    csv, out = tmp_path / f"{name}.csv", tmp_path / name
    _table(csv, field)
    config = tmp_path / f"{name}.yaml"
    config.write_text(_CONFIG.format(csv=csv, out=out))
    return _peak_rss_of_build(config), out / "1.0.0"


# Two builds a case, seconds each: two generated cases, no shrinking.
@settings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.generate])
@given(megabytes=st.integers(50, 80), unit=st.sampled_from([b"abcdefghij", "é€😀 ".encode()]))
def test_a_huge_field_costs_a_small_multiple_of_itself(tmp_path_factory, megabytes, unit):
    tmp_path = tmp_path_factory.mktemp("huge")
    field = (unit * (megabytes * 10**6 // len(unit) + 1))[:megabytes * 10**6]
    field = field.decode("utf-8", "ignore").encode("utf-8")  # whole characters
    fixed, _ = _build(tmp_path, "small", b"x")
    peak, version = _build(tmp_path, "huge", field)
    # The record's largest form in memory: its UTF-8 bytes, or the text
    # they decode to (4 bytes a character once one is outside the BMP).
    largest = max(len(field), sys.getsizeof(field.decode("utf-8")))
    assert peak - fixed < 6 * largest, (peak, fixed, largest)
    for name in ("stats.json", "report.html"):
        assert (version / name).stat().st_size < 64 << 10, name
    digest = hashlib.sha256(field).hexdigest()
    assert digest in (version / "stats.json").read_text()  # listed by its digest
    with open(next(version.glob("train-*.tfrecord")), "rb") as handle:
        texts = [decode_example(record)["text"][1][0]
                 for record in tfrecord.iter_records(handle, compression="none")]
    assert field in texts  # stored exactly
