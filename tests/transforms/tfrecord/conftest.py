"""What the codec's tests share: records, files written from them, and the
masked CRC as TensorFlow's format defines it (written from the spec, not
taken from the code under test)."""

import io
import random

import crc32c
import pytest

from recordforge.transforms import tfrecord


def _records(seed=0, count=300):
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice([0, 1, 7, 100, 1000, 5000])) for _ in range(count)]


def _write(records, compression, batches=3):
    buffer = io.BytesIO()
    with tfrecord.TFRecordWriter(buffer, compression) as writer:
        step = max(1, len(records) // batches)
        for start in range(0, len(records), step):
            writer.write_many(records[start:start + step])
    return buffer.getvalue()


def _masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@pytest.fixture(scope="session")
def make_records():
    """records(seed=0, count=300): random records of 0 to 5000 bytes."""
    return _records


@pytest.fixture(scope="session")
def write_file():
    """write(records, compression, batches=3): the bytes of a TFRecordWriter
    given `records` in `batches` calls."""
    return _write


@pytest.fixture(scope="session")
def spec_masked_crc():
    """The masked CRC32C as the TFRecord format defines it."""
    return _masked


@pytest.fixture(scope="session")
def damage_case():
    """(records, {compression: file}): 40 records, written plain and gzipped,
    for the damage properties to flip and cut."""
    records = _records(seed=6, count=40)
    return records, {compression: _write(records, compression) for compression in ("none", "gzip")}
