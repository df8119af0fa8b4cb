"""PyTorch datasets over a published version: iterable (equal shares per rank, resumable) and map-style.

    import recordforge.torch
    ds = recordforge.torch.RecordDataset("out/flights", "train", rank=rank,
                                         world_size=world_size, shuffle=True, seed=0)
    loader = recordforge.torch.DataLoader(ds, batch_size=32, num_workers=2)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in loader: ...
        checkpoint = loader.state_dict()          # resume: loader.load_state_dict(...)

Needs PyTorch (``pip install 'recordforge[torch]'``), never TensorFlow;
`import recordforge` does not import it. Rows are dicts of numpy values by
the manifest's features (``pipelines/loaders/decode.py``: int64, float32,
bytes), then `decode(row)` when given (e.g. to decode image bytes; it
must pickle into the workers). The reading core, its checks and its
shuffles are ``pipelines/loaders`` (docs/reading.md).

This file lives in ``frameworks/``, which the package's ``__init__`` adds
to its ``__path__``: a module named ``torch.py`` at the repository root
would shadow PyTorch itself for any Python started there.
"""

from __future__ import annotations

from typing import Any, Callable

import torch.utils.data as torch_data

from .pipelines.loaders import NoIndexFiles, RecordSource, SplitReader
from .pipelines.loaders.loader_position import rows_given

__all__ = ["DataLoader", "NoIndexFiles", "RecordDataset", "RecordMapDataset"]


class RecordDataset(torch_data.IterableDataset):
    """Split `split` of the version `path` names (a version directory or an
    output root whose LATEST names one; local path or fsspec URL), read in
    order by rank `rank` of `world_size`: every rank the same number of
    rows (`remainder` "drop" leaves the tail of the epoch out, "pad"
    repeats rows from its start, as `DistributedSampler` does), split
    between DataLoader workers. `shuffle`: a new order each epoch from
    (`seed`, epoch): a global shuffle through index files, or, without
    them (gzip output), shards in a seeded order mixed through a buffer of
    `buffer_size` rows per worker. `len()` is the rows per rank. `check`:
    how rows read in order are checked against the manifest, besides every
    record's CRCs: "index" (each shard's size, its index file's sha256,
    every record's span; a shard without an index file by "sha256"),
    "sha256" (each shard's size and sha256 as it streams) or "crc" (sizes
    and record counts); docs/reading.md says what each catches and
    misses."""

    def __init__(self, path: str, split: str = "train", *, rank: int = 0, world_size: int = 1,
                 shuffle: bool = False, seed: int = 0, remainder: str = "drop",
                 decode: Callable[[dict], Any] | None = None, buffer_size: int = 10_000,
                 check: str = "index"):
        super().__init__()
        self.reader = SplitReader(path, split, rank=rank, world_size=world_size,
                                  shuffle=shuffle, seed=seed, remainder=remainder,
                                  decode=decode, buffer_size=buffer_size, check=check)

    def __len__(self) -> int:
        return len(self.reader)

    def __iter__(self):
        info = torch_data.get_worker_info()
        if info is None:
            return self.reader.rows()
        return self.reader.rows(info.id, info.num_workers)

    def set_epoch(self, epoch: int) -> None:
        """Reads epoch `epoch` next (its own order when shuffled)."""
        self.reader.set_epoch(epoch)

    def state_dict(self) -> dict:
        """Where iterating this dataset in this process has got (use
        `DataLoader.state_dict` when DataLoader workers read it)."""
        return self.reader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume after the rows `state` counts: the rest of its epoch,
        each row once, with the same settings and number of workers."""
        self.reader.load_state_dict(state)


class RecordMapDataset(torch_data.Dataset):
    """Split `split` by index (``len``, ``ds[i]``, record i in shard order),
    through the shards' index files; for torch's samplers
    (`DistributedSampler`, `RandomSampler`). A version without index files
    (gzip output, older versions) raises `NoIndexFiles`: use
    `RecordDataset`."""

    def __init__(self, path: str, split: str = "train", *,
                 decode: Callable[[dict], Any] | None = None):
        super().__init__()
        self.source = RecordSource(path, split, decode=decode)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        return self.source[index]


class DataLoader(torch_data.DataLoader):
    """torch's DataLoader that can say where it is: over a `RecordDataset`,
    `state_dict()` after any batch gives the rows each worker has handed
    out (counted from the batches given, `loader_position`), and
    `load_state_dict` resumes there. Keep the default in-order delivery.
    ``persistent_workers=True`` is refused over a `RecordDataset`: workers
    that outlive an epoch keep their copy of the dataset, which
    `set_epoch` would no longer reach (every epoch would repeat the first
    one's order)."""

    _batches = 0

    def __init__(self, dataset, *args, **kwargs):
        if kwargs.get("persistent_workers") and isinstance(dataset, RecordDataset):
            raise ValueError("persistent_workers=True would keep every epoch in the first "
                             "epoch's order: RecordDataset.set_epoch reaches workers started "
                             "for each epoch only")
        super().__init__(dataset, *args, **kwargs)

    def __iter__(self):
        self._batches = 0
        for batch in super().__iter__():
            self._batches += 1
            yield batch

    def _reader(self) -> SplitReader:
        if not isinstance(self.dataset, RecordDataset):
            raise TypeError("state_dict() needs a recordforge.torch.RecordDataset, not "
                            f"{type(self.dataset).__name__}")
        return self.dataset.reader

    def state_dict(self) -> dict:
        """The dataset's position after the batches given so far."""
        reader = self._reader()
        workers = max(self.num_workers, 1)
        pending = reader.pending(workers)
        given = rows_given([length - skip for skip, length in pending], self._batches,
                           self.batch_size, self.drop_last)
        return reader.position(workers, [skip + n for (skip, _), n in zip(pending, given)])

    def load_state_dict(self, state: dict) -> None:
        self._reader().load_state_dict(state)
