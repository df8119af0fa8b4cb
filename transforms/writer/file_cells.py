"""The file exchange's cells (key-ordered gzip): each bucket's cells sorted and compressed from the runs.

The steps `FileExchange._cells` wires: a split's measured buckets placed
in the split (`plan_split_cells`), the cells within each bucket sorted
from its runs and compressed into a chunk file (`SortRunCellsFn`), and
each cell two buckets may share (a seam) compressed from both buckets'
rows there (`CompressSeamFn`).
"""

from __future__ import annotations

import uuid

import apache_beam as beam

from . import bucket_output, sorting, spill
from .bucket_plan import bucket_places
from .elements import BucketChunks, Chunk
from .file_runs import RunLists, bucket_sort_options
from .step_setup import set_up_worker
from .tuning import ShardTuning

__all__ = ["CompressSeamFn", "SortRunCellsFn", "plan_split_cells"]


def plan_split_cells(split_buckets):
    """(split, [(run list file, measured BucketChunks)]) -> (run list file,
    BucketRange, first byte in the split, bytes, split total) per bucket
    holding rows, in key order."""
    _, items = split_buckets
    placed, total = bucket_places(bucket for _, bucket in items)
    for bucket, start, size in placed:
        runs_file, bucket_range = spill.parse_bucket_reference(bucket.path)
        yield runs_file, bucket_range, start, size, total


class _CellFn(beam.DoFn):
    """What both cell steps hold: where the chunk files go, the cells'
    size and their gzip level."""

    def __init__(self, work_dir: str, cell_bytes: int, gzip_level: int):
        self._work_dir = work_dir
        self._cell_bytes = cell_bytes
        self._gzip_level = gzip_level


class SortRunCellsFn(_CellFn):
    """(run list file, BucketRange, start, bytes, total) -> ("unit", (run
    list file, BucketChunks)): the cells within the bucket, sorted and
    compressed into a chunk file (`sorting.sort_bucket_cells`); and
    ("seam", ((split, cell), (bucket, start, end, total, rows, file))) for
    each cell it may share with a neighbour, its rows there written as
    they are to a small file (possibly empty) for `CompressSeamFn`."""

    def __init__(self, work_dir: str, cell_bytes: int, gzip_level: int, tuning: ShardTuning):
        super().__init__(work_dir, cell_bytes, gzip_level)
        self._tuning = tuning

    def setup(self):
        set_up_worker()
        self._runs = RunLists()

    def process(self, task):
        runs_file, bucket, start, size, total = task
        unit, seams = sorting.sort_bucket_cells(
            bucket, self._runs(runs_file), start=start, size=size, total=total,
            cell_bytes=self._cell_bytes, gzip_level=self._gzip_level,
            out_dir=spill.join_path(self._work_dir, "buckets"),
            **bucket_sort_options(self._work_dir, self._tuning))
        yield "unit", (runs_file, unit)
        for cell, (data, rows) in seams.items():
            path = spill.join_path(self._work_dir, "seams", f"{uuid.uuid4().hex}.seam")
            with spill.open_for_write(path) as fileobj:
                fileobj.write(data)
            yield "seam", ((bucket.split, cell),
                           (bucket.index, start, start + size, total, rows, path, runs_file))

    def finish_bundle(self):
        sorting.release_read_arena()


class CompressSeamFn(_CellFn):
    """((split, cell), [pieces]) -> (run list file, BucketChunks): the
    seam's chunk (`bucket_output.join_seam`, each bucket's rows read from
    its seam file) in a chunk file of its own; nothing when no bucket had
    rows there."""

    def process(self, item):
        (split, cell), values = item
        values = list(values)  # a piece from each of a few buckets
        seam = bucket_output.join_seam(split, cell, self._cell_bytes,
                                        (value[:6] for value in values), self._gzip_level,
                                        read=_read_file)
        if seam is None:
            return
        unit, data, rows = seam
        path = spill.join_path(self._work_dir, "buckets", f"{uuid.uuid4().hex}.chunks")
        with spill.open_for_write(path) as fileobj:
            fileobj.write(data)
        runs_file = values[0][6]  # a split's buckets share its run list
        yield runs_file, BucketChunks(split, unit, path, (Chunk(0, len(data), rows),))


def _read_file(path: str) -> bytes:
    with open(path, "rb") as fileobj:
        return fileobj.read()
