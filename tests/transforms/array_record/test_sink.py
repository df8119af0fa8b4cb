"""The ArrayRecord record sink: TFRecord framed bytes in, cut anywhere, an
ArrayRecord file out whose records the `array_record` package's own reader
gives back exactly, in order; the same records make the same bytes;
damaged framing is refused, naming the shard."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.transforms.array_record import (WRITER_OPTIONS, ArrayRecordError,
                                                 ArrayRecordFile, ArrayRecordSink,
                                                 iter_array_records)
from recordforge.transforms.tfrecord import TFRecordError, frame_records

array_record_module = pytest.importorskip("array_record.python.array_record_module")

RECORDS = st.lists(st.binary(min_size=0, max_size=3000), max_size=40)


def _sink_file(path, records, cuts):
    """Writes `records` framed, in pieces cut at `cuts`, through a sink."""
    framed = frame_records(records)
    sink = ArrayRecordSink(str(path), display="shard")
    bounds = sorted({0, len(framed), *(cut % (len(framed) + 1) for cut in cuts)})
    for start, end in zip(bounds, bounds[1:]):
        sink.write(framed[start:end])
    assert sink.finish() == len(records)
    return path.read_bytes()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=RECORDS, cuts=st.lists(st.integers(min_value=0), max_size=6),
       other_cuts=st.lists(st.integers(min_value=0), max_size=6))
def test_records_read_back_exactly_and_make_the_same_bytes(tmp_path, records, cuts,
                                                           other_cuts):
    data = _sink_file(tmp_path / "a.array_record", records, cuts)
    assert _sink_file(tmp_path / "b.array_record", records, other_cuts) == data
    reader = array_record_module.ArrayRecordReader(str(tmp_path / "a.array_record"))
    assert reader.num_records() == len(records)
    assert (reader.read(0, len(records)) if records else []) == records
    written = reader.writer_options_string()
    assert "group_size:1," in written and ",zstd:1," in written
    reader.close()
    assert list(iter_array_records(str(tmp_path / "a.array_record"))) == records


def test_random_access_reads_any_record(tmp_path):
    records = [bytes([n % 256]) * n for n in range(300)]
    _sink_file(tmp_path / "s.array_record", records, [])
    with ArrayRecordFile(str(tmp_path / "s.array_record")) as opened:
        assert opened.num_records == 300
        assert [opened.read(n) for n in (299, 0, 150)] == [records[299], records[0],
                                                           records[150]]
        with pytest.raises(IndexError, match="record 300 out of range 0..299"):
            opened.read(300)


def test_options_are_the_documented_ones():
    assert WRITER_OPTIONS == "group_size:1,zstd:1,max_parallelism:1"


def test_damaged_framing_is_refused_naming_the_shard(tmp_path):
    framed = bytearray(frame_records([b"a" * 100, b"b" * 100]))
    framed[130] ^= 0xFF  # inside the second record's data: its CRC fails
    sink = ArrayRecordSink(str(tmp_path / "d.array_record"), display="train-00000")
    sink.write(bytes(framed))
    with pytest.raises(TFRecordError, match="train-00000"):
        sink.finish()
    sink.close()


def test_a_stream_ending_inside_a_record_is_refused(tmp_path):
    framed = frame_records([b"x" * 50])
    sink = ArrayRecordSink(str(tmp_path / "t.array_record"), display="train-00001")
    sink.write(framed[:-3])
    with pytest.raises(TFRecordError, match="train-00001.*truncated record"):
        sink.finish()
    sink.close()


def test_a_file_that_is_not_array_record_is_an_error_naming_it(tmp_path):
    path = tmp_path / "junk.array_record"
    path.write_bytes(b"not an array record file" * 100)
    with pytest.raises(ArrayRecordError, match="junk.array_record"):
        with ArrayRecordFile(str(path), display=str(path)) as opened:
            list(opened)


def test_the_core_package_does_not_import_array_record():
    """Building, verifying and reading TFRecord versions never imports the
    package: only choosing ArrayRecord does."""
    import subprocess
    import sys
    code = ("import sys, recordforge, recordforge.pipelines.build, recordforge.grain, "
            "recordforge.pipelines.publish.verify, recordforge.pipelines.loaders; "
            "from recordforge.pipelines.config.output import parse_output; "
            "parse_output({'path': '/tmp/unused-out'}); "
            "print('array_record' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"
