"""A split as a random-access sequence of decoded rows, through its shards' index files.

``len(source)`` is the split's record count and ``source[i]`` record i in
shard order, read with the random-access checks of `records` and decoded
by `decode.ExampleDecoder` (then the user's `decode`). A version without
index files (gzip output, which has no random access, or a version
written before index files) is refused when opened: `NoIndexFiles` says
to read it in order instead (`recordforge.torch.RecordDataset`) rather
than walk every shard once to find its offsets. An ArrayRecord version
(``output.format: array_record``) needs no index files: each shard's
footer indexes its records (`array_record_access`).
"""

from __future__ import annotations

import bisect
import itertools
import operator
from typing import Any, Callable

from .decode import ExampleDecoder
from .records import random_access
from .version import open_version

__all__ = ["NoIndexFiles", "RecordSource"]


class NoIndexFiles(ValueError):
    """Random access asked of a version whose shards have no index files."""


class RecordSource:
    """Random access to split `split` of the version `path` names (module
    docstring). Picklable: each process opens the shards it reads."""

    def __init__(self, path: str, split: str = "train", *,
                 decode: Callable[[dict], Any] | None = None):
        version = open_version(path)
        shards = version.shards(split)
        missing = [shard.held.display for shard in shards
                   if shard.index is None and version.file_format == "tfrecord"]
        if missing:
            why = ("gzip output has no random access" if version.compression == "gzip"
                   else "it was written without index files")
            raise NoIndexFiles(f"{missing[0]} has no index file ({why}): read split {split!r} "
                               "in order with recordforge.torch.RecordDataset, or rebuild it "
                               "uncompressed")
        self.split, self.user_decode = split, decode
        self.access = random_access(version, shards)
        self.decoder = ExampleDecoder(version.features)
        self._starts = list(itertools.accumulate((s.num_examples for s in shards), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def __repr__(self) -> str:
        return f"RecordSource({self.access.version.display!r}, split={self.split!r})"

    def __getitem__(self, index: int) -> Any:
        try:
            position = operator.index(index)
        except TypeError:
            raise TypeError(f"record indices are integers, not {type(index).__name__}") from None
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"record {index} of split {self.split!r}, which holds {len(self)}")
        shard = bisect.bisect_right(self._starts, position) - 1
        record = position - self._starts[shard]
        row = self.decoder.decode(self.access.read(shard, record),
                                  self.access.shards[shard].held.display, record)
        return row if self.user_decode is None else self.user_decode(row)
