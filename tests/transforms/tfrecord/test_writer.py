"""`TFRecordWriter` (`transforms.tfrecord.writer`) against independent readers."""

import gzip
import io
import struct

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from recordforge.transforms import tfrecord


def _hand_parse(stream, masked):
    """An independent reading of the framing, written from the format spec."""
    records, offset = [], 0
    while offset < len(stream):
        (length,) = struct.unpack("<Q", stream[offset:offset + 8])
        assert struct.unpack("<I", stream[offset + 8:offset + 12])[0] == masked(stream[offset:offset + 8])
        data = stream[offset + 12:offset + 12 + length]
        assert struct.unpack("<I", stream[offset + 12 + length:offset + 16 + length])[0] == masked(data)
        records.append(data)
        offset += 16 + length
    return records


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_written_files_parse_with_python_gzip_and_a_hand_parser(compression, make_records,
                                                                write_file, spec_masked_crc):
    records = make_records()
    data = write_file(records, compression)
    stream = gzip.decompress(data) if compression == "gzip" else data
    assert _hand_parse(stream, spec_masked_crc) == records


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_beam_reads_our_files(tmp_path, compression, make_records, write_file):
    records = make_records(seed=1)
    path = tmp_path / ("data" + tfrecord.suffix_for(compression))
    path.write_bytes(write_file(records, compression))
    with TestPipeline() as p:
        read = p | beam.io.ReadFromTFRecord(
            str(path), compression_type=beam.io.filesystem.CompressionTypes.AUTO)
        assert_that(read, equal_to(records))


def test_writer_rejects_unknown_compression():
    with pytest.raises(ValueError, match="compression"):
        tfrecord.TFRecordWriter(io.BytesIO(), "zstd")


def test_the_compressions_have_a_suffix_each():
    assert [tfrecord.suffix_for(c) for c in tfrecord.COMPRESSIONS] == [".tfrecord", ".tfrecord.gz"]
    with pytest.raises(ValueError, match="compression must be one of"):
        tfrecord.suffix_for("zlib")
