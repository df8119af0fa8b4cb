"""Tests for recordforge.pipelines.publish.early_checks and the read-back it
hands to verification: a shard read while the pipeline ran is judged as if
it were read at the end, and one that changed since is read again."""

import concurrent.futures
import os
import pathlib
import threading
import time

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.pipelines.publish import early_checks, file_checks, finalizing
from recordforge.pipelines.publish.early_checks import EarlyShardChecks
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord

REPO = pathlib.Path(__file__).resolve().parents[2]


def shard_bytes(count: int, first: int = 0, compression: str = "none") -> bytes:
    data = tfrecord.frame_records([encode_example({"id": first + row, "text": f"row {row}"})
                                     for row in range(count)])
    return tfrecord.gzip_compress(data) if compression == "gzip" else data


def expected(data: bytes, count: int) -> dict:
    """What the writer of `data` would report: size, whole-file CRC-32C
    (from the crc32c package, not the extension), records."""
    return {"expected_size": len(data), "expected_crc32c": crc32c.crc32c(data),
            "expected_records": count}


def replace_file(path: pathlib.Path, data: bytes) -> None:
    """Puts `data` at `path` the way a shard writer does: a new file renamed
    over the old one."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_shard_read_back_early_is_judged_like_one_read_at_the_end(tmp_path, compression):
    data = shard_bytes(40, compression=compression)
    path = tmp_path / "train-00000-of-00001.tfrecord"
    path.write_bytes(data)
    read = file_checks.read_back(str(path), path.name, compression=compression)
    assert read is not None and read.check.records == 40 and not read.check.problems

    judged = file_checks.check_read_back(str(path), path.name, read=read,
                                         compression=compression, **expected(data, 40))
    at_the_end = file_checks.check_file(str(path), path.name, compression=compression,
                                        **expected(data, 40))
    assert judged == at_the_end and not judged.problems
    # Judged against other expectations, it fails as a late reading would.
    other = shard_bytes(41, compression=compression)
    assert (file_checks.check_read_back(str(path), path.name, read=read,
                                        compression=compression, **expected(other, 41))
            == file_checks.check_file(str(path), path.name, compression=compression,
                                      **expected(other, 41)))
    assert read.check.problems == []  # judging does not change what was read


@settings(max_examples=25, deadline=None)
@given(offset=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255),
       replace=st.booleans())
def test_a_shard_changed_after_it_was_read_is_read_again(tmp_path_factory, offset, flip,
                                                         replace):
    """Whatever byte changes after the early reading, in place or by a new
    file renamed over it, verification finds it as if it had read the shard
    only then."""
    directory = tmp_path_factory.mktemp("changed")
    data = shard_bytes(12)
    path = directory / "train-00000-of-00001.tfrecord"
    path.write_bytes(data)
    read = file_checks.read_back(str(path), path.name, compression="none")
    damaged = bytearray(data)
    damaged[offset % len(data)] ^= flip
    if replace:
        replace_file(path, bytes(damaged))
    else:
        time.sleep(0.02)  # a later modification time, as any later write has
        with open(path, "r+b") as handle:
            handle.seek(offset % len(data))
            handle.write(bytes([damaged[offset % len(data)]]))
    judged = file_checks.check_read_back(str(path), path.name, read=read,
                                         compression="none", **expected(data, 12))
    assert judged.problems
    assert judged == file_checks.check_file(str(path), path.name, compression="none",
                                            **expected(data, 12))


def test_a_shard_that_changes_while_it_is_read_gives_no_reading(tmp_path, monkeypatch):
    data = shard_bytes(5)
    path = tmp_path / "train-00000-of-00001.tfrecord"
    path.write_bytes(data)
    read_file = file_checks._read_file

    def replaced_meanwhile(*args, **kwargs):
        found = read_file(*args, **kwargs)
        replace_file(path, data)  # the same bytes, another file
        return found

    monkeypatch.setattr(file_checks, "_read_file", replaced_meanwhile)
    assert file_checks.read_back(str(path), path.name, compression="none") is None


def test_early_checks_read_each_shard_as_it_appears(tmp_path):
    first, second = shard_bytes(3), shard_bytes(4, first=3)
    with EarlyShardChecks(str(tmp_path), "none", workers=1, interval=0.05) as checks:
        (tmp_path / "train-00000-of-00002.tfrecord").write_bytes(first)
        (tmp_path / "notes.txt").write_bytes(b"not a shard")
        (tmp_path / "train-00001-of-00002.tfrecord.3f2a").write_bytes(b"a writer's temp file")
        deadline = time.monotonic() + 30
        while not checks._futures and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(checks._futures) == ["train-00000-of-00002.tfrecord"]  # read while running
        replace_file(tmp_path / "train-00000-of-00002.tfrecord", second)  # a retried writer
        (tmp_path / "train-00001-of-00002.tfrecord").write_bytes(first)  # after the last look
        found = checks.results()
    assert sorted(found) == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert found["train-00000-of-00002.tfrecord"].check.records == 4  # the replacement's
    assert found["train-00001-of-00002.tfrecord"].check.records == 3


class RecordingPool(concurrent.futures.ThreadPoolExecutor):
    """A reading pool in threads that notes the shards of each task."""

    def __init__(self, tasks: list):
        super().__init__(2)
        self.tasks = tasks

    def submit(self, fn, shards, *args):
        self.tasks.append(sorted(name for _, name in shards))
        return super().submit(fn, shards, *args)


@pytest.mark.parametrize("task_bytes, tasks", [
    (1 << 20, [[f"train-{shard:05d}-of-00004.tfrecord" for shard in range(4)]]),
    (1, [[f"train-{shard:05d}-of-00004.tfrecord"] for shard in range(4)]),
])
def test_shards_left_at_the_end_go_to_readers_in_tasks_of_task_bytes(tmp_path, monkeypatch,
                                                                      task_bytes, tasks):
    """Small shards share one reader (each reader started is a Python
    start-up); a backlog of TASK_BYTES or more is spread over readers."""
    submitted: list = []
    monkeypatch.setattr(early_checks, "reading_pool", lambda workers: RecordingPool(submitted))
    monkeypatch.setattr(early_checks, "TASK_BYTES", task_bytes)
    with EarlyShardChecks(str(tmp_path), "none", workers=2, interval=60) as checks:
        for shard in range(4):
            (tmp_path / f"train-{shard:05d}-of-00004.tfrecord").write_bytes(shard_bytes(shard + 1))
        found = checks.results()
    assert sorted(submitted) == tasks
    assert {name: read.check.records for name, read in found.items()} == {
        f"train-{shard:05d}-of-00004.tfrecord": shard + 1 for shard in range(4)}


def test_shards_that_appear_between_two_looks_go_to_one_reader(tmp_path, monkeypatch):
    submitted: list = []
    monkeypatch.setattr(early_checks, "reading_pool", lambda workers: RecordingPool(submitted))
    names = [f"train-{shard:05d}-of-00003.tfrecord" for shard in range(3)]
    for name in names[:2]:
        (tmp_path / name).write_bytes(shard_bytes(2))
    with EarlyShardChecks(str(tmp_path), "none", workers=2, interval=0.05) as checks:
        wait_for(lambda: submitted)
        (tmp_path / names[2]).write_bytes(shard_bytes(2))
        found = checks.results()
    assert submitted == [names[:2], names[2:]]
    assert sorted(found) == names


def test_shards_wait_for_a_busy_reader_until_task_bytes_of_them_wait(tmp_path, monkeypatch):
    submitted: list = []
    reader_free = threading.Event()

    class BusyPool(RecordingPool):
        def submit(self, fn, shards, *args):
            def busy(*call):
                reader_free.wait(30)
                return fn(*call)
            return super().submit(busy, shards, *args)

    data = shard_bytes(2)
    names = [f"train-{shard:05d}-of-00003.tfrecord" for shard in range(3)]
    monkeypatch.setattr(early_checks, "reading_pool", lambda workers: BusyPool(submitted))
    monkeypatch.setattr(early_checks, "TASK_BYTES", 2 * len(data))
    with EarlyShardChecks(str(tmp_path), "none", workers=2, interval=0.02) as checks:
        (tmp_path / names[0]).write_bytes(data)
        wait_for(lambda: submitted)
        (tmp_path / names[1]).write_bytes(data)
        time.sleep(0.2)  # ten looks
        assert submitted == [names[:1]]  # one shard waits for the busy reader
        (tmp_path / names[2]).write_bytes(data)
        wait_for(lambda: len(submitted) == 2)
        assert submitted == [names[:1], names[1:]]  # TASK_BYTES wait: another reader
        reader_free.set()
        found = checks.results()
    assert sorted(found) == names


def test_a_shard_handed_out_is_not_looked_at_again(tmp_path, monkeypatch):
    """Each look lists the directory; a shard already handed out costs no
    stat (else the looks would cost the shards times the looks)."""
    stats: list = []

    def counted(path):
        stats.append(path)
        return file_checks.file_identity(path)

    monkeypatch.setattr(early_checks, "file_identity", counted)
    path = tmp_path / "train-00000-of-00001.tfrecord"
    path.write_bytes(shard_bytes(2))
    with EarlyShardChecks(str(tmp_path), "none", workers=1, interval=0.01) as checks:
        wait_for(lambda: checks._futures)
        time.sleep(0.2)  # about twenty looks
        found = checks.results()
    assert stats == [str(path)]
    assert list(found) == [path.name]


def test_a_build_whose_input_is_small_reads_once_its_shards_make_start_bytes(tmp_path,
                                                                             monkeypatch):
    """Shards wait until those seen hold start_bytes (a compressed input's
    build may stage many times its input), then go to readers."""
    submitted: list = []
    monkeypatch.setattr(early_checks, "reading_pool", lambda workers: RecordingPool(submitted))
    data = shard_bytes(3)
    names = [f"train-{shard:05d}-of-00003.tfrecord" for shard in range(3)]
    with EarlyShardChecks(str(tmp_path), "none", workers=2, interval=0.02,
                          start_bytes=2 * len(data)) as checks:
        (tmp_path / names[0]).write_bytes(data)
        time.sleep(0.2)  # ten looks
        assert submitted == []
        (tmp_path / names[1]).write_bytes(data)
        wait_for(lambda: submitted)
        assert submitted == [names[:2]]
        (tmp_path / names[2]).write_bytes(data)
        found = checks.results()
    assert sorted(found) == names


def test_a_build_whose_shards_never_make_start_bytes_starts_no_reader(tmp_path, monkeypatch):
    """Verification reads a small build's shards in threads: no process."""
    pools: list = []
    monkeypatch.setattr(early_checks, "reading_pool",
                        lambda workers: pools.append(RecordingPool([])) or pools[-1])
    data = shard_bytes(3)
    with EarlyShardChecks(str(tmp_path), "none", workers=2, interval=0.02,
                          start_bytes=3 * len(data)) as checks:
        for shard in range(2):
            (tmp_path / f"train-{shard:05d}-of-00002.tfrecord").write_bytes(data)
        time.sleep(0.1)
        assert checks.results() == {}
    assert pools == []


@pytest.mark.parametrize("expected_bytes, start_bytes", [
    (0, finalizing.VERIFY_PROCESSES_FROM),
    (finalizing.VERIFY_PROCESSES_FROM - 1, finalizing.VERIFY_PROCESSES_FROM),
    (finalizing.VERIFY_PROCESSES_FROM, 0),
])
def test_a_local_build_reads_early_from_its_first_shard_when_its_input_is_large(
        tmp_path, monkeypatch, expected_bytes, start_bytes):
    from recordforge.pipelines.publish.staging import begin_build

    monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 2)
    staging = begin_build(str(tmp_path / "out"), "v1")
    try:
        checks = finalizing.early_shard_checks(staging, "none", expected_bytes)
        assert checks is not None and checks._start_bytes == start_bytes
        monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 1)
        assert finalizing.early_shard_checks(staging, "none", expected_bytes) is None
    finally:
        staging.abort()


def wait_for(condition) -> None:
    deadline = time.monotonic() + 30
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_early_checks_of_a_directory_that_never_appears(tmp_path):
    with EarlyShardChecks(str(tmp_path / "gone"), "none", interval=0.01) as checks:
        time.sleep(0.05)
        assert checks.results() == {}


def test_a_shard_damaged_after_its_early_reading_is_not_published(tmp_path, monkeypatch):
    """End to end: a shard is damaged between its early reading and
    publishing; the build fails, nothing is published."""
    import recordforge
    from recordforge.pipelines.publish import BuildFailed
    from recordforge.pipelines.publish.early_checks import EarlyShardChecks as Checks

    results = Checks.results
    damaged = []

    def damage_then_results(self):
        found = results(self)
        name = sorted(found)[0]
        path = pathlib.Path(self._directory) / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        time.sleep(0.02)
        with open(path, "r+b") as handle:
            handle.write(bytes(data))
        damaged.append(name)
        return found

    monkeypatch.setattr(finalizing, "VERIFY_PROCESSES_FROM", 0)
    monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(Checks, "results", damage_then_results)
    monkeypatch.chdir(REPO)
    with pytest.raises(BuildFailed) as failure:
        recordforge.build(str(REPO / "configs" / "examples" / "flights.yaml"),
                          output=str(tmp_path / "out"),
                          beam_args=["--direct_running_mode=in_memory"])
    assert damaged and damaged[0] in str(failure.value)
    assert not (tmp_path / "out" / "LATEST").exists()


@pytest.mark.parametrize("early", [True, False])
def test_a_build_judges_what_it_staged_by_its_writers_crc32c(tmp_path, monkeypatch, early):
    """A build reads each staged shard and index file once, taking its
    CRC-32C (not a second sha256) to compare with its writer's; the
    manifest's sha256s are those of the files published, which
    `recordforge verify` (sha256) accepts."""
    import hashlib

    import recordforge
    from recordforge.pipelines.publish import verify
    from recordforge.pipelines.publish.early_checks import EarlyShardChecks as Checks

    read_whole_by = {}  # file -> "crc32c" or "sha256", as verification read it
    read_file = file_checks._read_file

    def recording(url, file, *args, crc32c=False, **kwargs):
        read_whole_by[file] = "crc32c" if crc32c else "sha256"
        return read_file(url, file, *args, crc32c=crc32c, **kwargs)

    results = Checks.results

    def recorded_results(self):
        found = results(self)
        read_whole_by.update((name, read.check.whole_file_digest()[0])
                             for name, read in found.items())
        return found

    monkeypatch.setattr(file_checks, "_read_file", recording)
    monkeypatch.setattr(Checks, "results", recorded_results)
    monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 2)
    if early:  # read back by processes while the pipeline runs
        monkeypatch.setattr(finalizing, "VERIFY_PROCESSES_FROM", 0)
    monkeypatch.chdir(REPO)
    result = recordforge.build(str(REPO / "configs" / "examples" / "flights.yaml"),
                               output=str(tmp_path / "out"),
                               beam_args=["--direct_running_mode=in_memory"])
    version_dir = tmp_path / "out" / result.version
    shards = [shard for split in result.manifest["splits"].values()
              for shard in split["shards"]]
    staged = {shard["file"] for shard in shards} | {shard["index"]["file"] for shard in shards}
    assert {file: read_whole_by.get(file) for file in staged} == dict.fromkeys(staged, "crc32c")
    others = set(read_whole_by) - staged
    assert others and {read_whole_by[file] for file in others} == {"sha256"}
    for shard in shards:
        for entry in (shard, shard["index"]):
            data = (version_dir / entry["file"]).read_bytes()
            assert (entry["num_bytes"], entry["sha256"]) == (
                len(data), hashlib.sha256(data).hexdigest())
    assert verify.verify_dataset(str(tmp_path / "out")).ok
