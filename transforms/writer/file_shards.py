"""The file exchange's last step: a shard written from its ShardSpec and put at its final name.

A shard cut at rows takes its rows of each bucket it reaches, sorted from
the runs (gzip: into one gzip member); a key-ordered gzip shard copies
its ranges of the buckets' chunk files.
"""

from __future__ import annotations

from collections.abc import Callable

import apache_beam as beam
import fsspec

from .. import tfrecord
from ..layout import SHARD_FILE_NAME, shard_suffix
from ..page_cache import drop_behind
from . import run_format, sorting, spill
from .elements import RunInfo, ShardSpec
from .file_runs import RunLists, bucket_sort_options
from .shard_cuts import row_shard_thresholds
from .shard_files import publish_shard, shard_metadata
from .step_setup import ShardCounters, set_up_worker
from .tuning import ShardTuning

__all__ = ["WriteShardFn", "write_shard"]

_COPY_BLOCK = 4 << 20


def write_shard(spec: ShardSpec, *, staging_dir: str, temp_dir: str, compression: str,
                runs_of: Callable[[str], list[RunInfo]] | None = None,
                bucket_options: dict | None = None,
                gzip_level: int = tfrecord.DEFAULT_GZIP_LEVEL, index: bool = False,
                file_format: str = "tfrecord") -> dict:
    """Writes a shard, hashing as it goes, and puts it at its final name in
    `staging_dir` (`shard_files.publish_shard`): with `spec.cut`, the rows
    of each listed bucket that the shard holds, sorted from the runs
    (`sorting.write_bucket_rows`; `runs_of`: run list file -> runs;
    `bucket_options`: see `file_runs.bucket_sort_options`), for gzip
    into one gzip member at `gzip_level` (`tfrecord.GzipStream`); else its chunk
    ranges of bucket files, copied (key-ordered gzip). With `index`, its
    index file beside it (`shard_files.publish_shard`). Returns the
    shard's metadata dict. `file_format`: see `shard_files.publish_shard`.
    Rerunning it writes the same bytes under the same final name."""
    name = SHARD_FILE_NAME.format(split=spec.split, index=spec.index, count=spec.count,
                                  suffix=shard_suffix(compression, file_format))
    thresholds = row_shard_thresholds(*spec.cut) if spec.cut else None

    def write(out) -> int:
        num_examples = 0
        sink = out
        if spec.cut and compression == "gzip":
            sink = tfrecord.GzipStream(out, gzip_level)
        for path, offset, length in spec.pieces:
            measured = spill.parse_bucket_reference(path) if spec.cut else None
            if measured is not None:
                runs_file, bucket = measured
                rows, _ = sorting.write_bucket_rows(sink, bucket, offset, thresholds,
                                                        spec.index, runs_of(runs_file),
                                                        **bucket_options)
                num_examples += rows
            else:
                _copy_range(out, path, offset, length, name)
        if not spec.cut:
            return spec.num_examples
        if sink is not out:
            sink.close()
        if not num_examples:
            raise run_format.RunFileError(f"{name}: no row of its buckets falls in it")
        return num_examples

    shard = publish_shard(name, write, staging_dir=staging_dir, temp_dir=temp_dir,
                          compression=compression, index=index, file_format=file_format)
    if not spec.cut and shard.num_bytes != spec.num_bytes:
        raise run_format.RunFileError(f"{name}: assembled {shard.num_bytes} bytes, planned "
                                 f"{spec.num_bytes}")
    return shard_metadata(spec.split, name, shard)


def _copy_range(out, path: str, offset: int, length: int, name: str) -> None:
    """Copies `length` bytes at `offset` of the file at `path` to `out`."""
    source_fs, source_path = fsspec.core.url_to_fs(path)
    with source_fs.open(source_path, "rb") as source:
        source.seek(offset)
        remaining = length
        while remaining:
            block = source.read(min(_COPY_BLOCK, remaining))
            if not block:
                raise run_format.RunFileError(
                    f"{path}: ends before byte {offset + length} while writing {name}")
            out.write(block)
            remaining -= len(block)
        drop_behind(source, offset, length)


class WriteShardFn(beam.DoFn):
    """ShardSpec -> shard metadata dict (the file is at its final name)."""

    def __init__(self, staging_dir: str, temp_dir: str, compression: str, work_dir: str,
                 tuning: ShardTuning, gzip_level: int = tfrecord.DEFAULT_GZIP_LEVEL,
                 index: bool = False, file_format: str = "tfrecord"):
        self._work_dir = work_dir
        self._tuning = tuning
        # `write_shard`'s keywords, the same for every shard.
        self._shard_options = {"staging_dir": staging_dir, "temp_dir": temp_dir,
                               "compression": compression, "gzip_level": gzip_level,
                               "index": index, "file_format": file_format}

    def setup(self):
        set_up_worker()
        self._runs = RunLists()
        self._counters = ShardCounters()

    def process(self, spec: ShardSpec):
        metadata = write_shard(spec, runs_of=self._runs,
                               bucket_options=bucket_sort_options(self._work_dir, self._tuning),
                               **self._shard_options)
        self._counters.count(metadata["num_examples"], metadata["num_bytes"])
        yield metadata

    def finish_bundle(self):
        sorting.release_read_arena()
