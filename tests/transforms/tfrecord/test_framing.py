"""A record's framing (`transforms.tfrecord.framing`) against the format's definition."""

import struct

from hypothesis import given, strategies as st

from recordforge.transforms import tfrecord


def test_masked_crc_matches_the_published_definition(spec_masked_crc):
    # Known value: TensorFlow's masked CRC of an empty record's 8 length bytes.
    assert tfrecord.masked_crc32c(b"\x00" * 8) == spec_masked_crc(b"\x00" * 8)
    empty_length = b"\x00" * 8
    assert tfrecord.frame_records([b""]) == (empty_length
                                             + struct.pack("<I", spec_masked_crc(empty_length))
                                             + struct.pack("<I", spec_masked_crc(b"")))


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_framing_is_header_record_footer_and_framing_counts_its_bytes(spec_masked_crc, records):
    framed = tfrecord.frame_records(iter(records))
    expected = b"".join(struct.pack("<Q", len(record))
                        + struct.pack("<I", spec_masked_crc(struct.pack("<Q", len(record))))
                        + record + struct.pack("<I", spec_masked_crc(record)) for record in records)
    assert framed == expected
    assert len(framed) == sum(map(len, records)) + tfrecord.FRAMING * len(records)
    assert tfrecord.FRAMING == tfrecord.HEADER_SIZE + tfrecord.FOOTER_SIZE == 16
