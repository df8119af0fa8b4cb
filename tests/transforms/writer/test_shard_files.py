"""Putting a shard in staging: written once, hashed, and checked as written off the local disk."""

import hashlib
import io
import uuid

import crc32c
import fsspec
import pytest
from recordforge.pipelines.publish.file_checks import check_stored
from recordforge.transforms import tfrecord
from recordforge.transforms.writer import shard_files

RECORDS = [bytes([n]) * (n * 7 % 300) for n in range(200)]


def _framed(compression: str) -> bytes:
    buffer = io.BytesIO()
    with tfrecord.TFRecordWriter(buffer, compression) as writer:
        writer.write_many(RECORDS)
    return buffer.getvalue()


def _writer(data: bytes, records: int, piece: int = 4096):
    def write(out) -> int:
        for start in range(0, len(data), piece):
            out.write(data[start:start + piece])
        return records
    return write


@pytest.fixture
def memory_staging():
    root = f"memory://shard-files-{uuid.uuid4().hex}"
    yield root
    fs, path = fsspec.core.url_to_fs(root)
    if fs.exists(path):
        fs.rm(path, recursive=True)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_shard_off_the_local_disk_is_checked_and_fingerprinted(memory_staging, compression):
    data = _framed(compression)
    shard = shard_files.publish_shard("train-00000-of-00001.tfrecord", _writer(data, 200),
                                      staging_dir=memory_staging,
                                      temp_dir=f"{memory_staging}/_tmp", compression=compression)
    assert (shard.num_bytes, shard.sha256, shard.num_examples) == (
        len(data), hashlib.sha256(data).hexdigest(), 200)
    assert shard.fingerprint["size"] == len(data)
    fs, path = fsspec.core.url_to_fs(f"{memory_staging}/train-00000-of-00001.tfrecord")
    assert fs.cat_file(path) == data
    metadata = shard_files.shard_metadata("train", "train-00000-of-00001.tfrecord", shard)
    assert metadata["stored"] == shard.fingerprint and metadata["num_examples"] == 200


def test_a_shard_on_the_local_disk_is_left_for_verification(tmp_path):
    data = _framed("none")
    shard = shard_files.publish_shard("s.tfrecord", _writer(data, 200),
                                      staging_dir=str(tmp_path / "staging"),
                                      temp_dir=str(tmp_path / "tmp"), compression="none")
    assert shard.fingerprint is None
    metadata = shard_files.shard_metadata("train", "s.tfrecord", shard)
    assert "stored" not in metadata
    assert metadata["written_crc32c"] == {"s.tfrecord": crc32c.crc32c(data)}
    assert (tmp_path / "staging" / "s.tfrecord").read_bytes() == data
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_damage_written_off_the_local_disk_is_refused(memory_staging, compression):
    data = bytearray(_framed("none"))
    data[5000] ^= 0x40  # inside some record
    damaged = bytes(data) if compression == "none" else tfrecord.gzip_compress(bytes(data))
    with pytest.raises(shard_files.ShardCheckError, match="CRC"):
        shard_files.publish_shard("s.tfrecord", _writer(damaged, 200),
                                  staging_dir=memory_staging,
                                  temp_dir=f"{memory_staging}/_tmp", compression=compression)


def test_a_record_count_other_than_the_writers_is_refused(memory_staging):
    with pytest.raises(shard_files.ShardCheckError, match="holds 200 records, its writer "
                                                          "wrote 199"):
        shard_files.publish_shard("s.tfrecord", _writer(_framed("none"), 199),
                                  staging_dir=memory_staging,
                                  temp_dir=f"{memory_staging}/_tmp", compression="none")


def test_a_stream_cut_inside_a_record_is_refused(memory_staging):
    data = _framed("none")
    with pytest.raises(shard_files.ShardCheckError, match="truncated record"):
        shard_files.publish_shard("s.tfrecord", _writer(data[:-3], 200),
                                  staging_dir=memory_staging,
                                  temp_dir=f"{memory_staging}/_tmp", compression="none")


def test_check_stored_reads_back_an_object_that_changed(memory_staging):
    data = _framed("none")
    shard = shard_files.publish_shard("s.tfrecord", _writer(data, 200),
                                      staging_dir=memory_staging,
                                      temp_dir=f"{memory_staging}/_tmp", compression="none")
    url = f"{memory_staging}/s.tfrecord"
    expected = dict(stored=shard.fingerprint, compression="none", expected_size=len(data),
                    expected_sha256=shard.sha256, expected_records=200)
    intact = check_stored(url, "s.tfrecord", **expected)
    assert (intact.problems, intact.size, intact.records) == ([], len(data), 200)
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, data + b"x")  # another size: read back, damage found by reading
    resized = check_stored(url, "s.tfrecord", **expected)
    assert {"size", "sha256", "framing"} <= {problem.code for problem in resized.problems}
    fs.rm_file(path)
    gone = check_stored(url, "s.tfrecord", **expected)
    assert not gone.exists and gone.problems[0].code == "missing"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_shard_and_its_index_are_written_again_the_same_under_the_same_names(
        tmp_path, memory_staging, where):
    from tfrecord.tools.tfrecord2idx import create_index

    data = _framed("none")
    staging = str(tmp_path / "staging") if where == "local" else memory_staging
    published = [shard_files.publish_shard(
        "s.tfrecord", _writer(data, 200, piece=999), staging_dir=staging,
        temp_dir=f"{staging}/_tmp", compression="none", index=True) for _ in range(2)]
    assert published[0] == published[1]  # a retry: the same bytes, the same entry
    fs, root = fsspec.core.url_to_fs(staging)
    # No temporary file is left: the two final names only.
    assert sorted(fs.find(root)) == [f"{root}/s.tfrecord", f"{root}/s.tfrecord.index"]
    (tmp_path / "s.tfrecord").write_bytes(data)
    create_index(str(tmp_path / "s.tfrecord"), str(tmp_path / "reference"))
    index = fs.cat_file(f"{root}/s.tfrecord.index")
    assert index == (tmp_path / "reference").read_bytes()
    assert published[0].index == {"file": "s.tfrecord.index", "num_bytes": len(index),
                                  "sha256": hashlib.sha256(index).hexdigest()}
    metadata = shard_files.shard_metadata("train", "s.tfrecord", published[0])
    assert metadata["index"] == published[0].index
    # What verification checks the staged copies against (the crc32c
    # package's CRC of what is on disk, not the extension's).
    assert metadata["written_crc32c"] == {"s.tfrecord": crc32c.crc32c(data),
                                          "s.tfrecord.index": crc32c.crc32c(index)}


def test_an_index_that_counts_other_records_than_the_writer_fails_the_shard(tmp_path):
    with pytest.raises(shard_files.ShardCheckError, match="s.tfrecord: holds 200 records, "
                                                          "its writer wrote 201"):
        shard_files.publish_shard("s.tfrecord", _writer(_framed("none"), 201),
                                  staging_dir=str(tmp_path / "staging"),
                                  temp_dir=str(tmp_path / "tmp"), compression="none",
                                  index=True)
    with pytest.raises(ValueError, match="a gzip shard has no index"):
        shard_files.publish_shard("s.tfrecord.gz", _writer(_framed("gzip"), 200),
                                  staging_dir=str(tmp_path / "staging"),
                                  temp_dir=str(tmp_path / "tmp"), compression="gzip",
                                  index=True)
