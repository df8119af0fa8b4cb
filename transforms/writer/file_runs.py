"""A file-exchange worker's runs: each split's run list read once, and how its buckets are sorted.

No Beam. The bucket, cell and shard steps of the file exchange
(`file_exchange`, `file_cells`, `file_shards`) read a bucket's rows from
the runs its split's run list file names (written by the planning step).
"""

from __future__ import annotations

from . import spill
from .elements import RunInfo
from .tuning import ShardTuning

__all__ = ["RunLists", "bucket_sort_options"]


class RunLists:
    """Run list file -> its runs, read once; buckets of one split share a
    run list, so a few are kept."""

    def __init__(self):
        self._lists: dict[str, list[RunInfo]] = {}

    def __call__(self, runs_file: str) -> list[RunInfo]:
        runs = self._lists.get(runs_file)
        if runs is None:
            if len(self._lists) >= 8:
                self._lists.clear()
            runs = self._lists[runs_file] = spill.read_run_list(runs_file)
        return runs


def bucket_sort_options(work_dir: str, tuning: ShardTuning) -> dict:
    """How buckets are sorted, for `sorting.sort_bucket` and `write_bucket_rows`."""
    return {"scratch_dir": spill.join_path(work_dir, "merge"),
            "memory_bytes": tuning.memory_bytes, "fan_in": tuning.fan_in,
            "prefix_len": tuning.prefix_len, "index_every": tuning.index_every}
