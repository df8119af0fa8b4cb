"""recordforge.torch with the real torch package: DataLoader workers and
simulated ranks read every record once per epoch in equal shares, values
equal to the `tfrecord` package's reading; resuming from a checkpoint taken
mid-epoch; damage raising through the workers; the map-style dataset under
torch's own DistributedSampler."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.utils.data import DistributedSampler

import recordforge.torch as rf_torch
from recordforge.pipelines.loaders.loader_position import rows_given
from recordforge.pipelines.publish.held_manifest import DatasetCorrupt


def _rows(batch: list) -> list:
    """collate_fn keeping rows as read (variable-length features do not stack)."""
    return batch


def _ids(loader) -> list[int]:
    return [int(row["id"]) for batch in loader for row in batch]


def test_import_recordforge_does_not_import_torch():
    code = "import sys, recordforge; print('torch' in sys.modules, 'grain' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split() == ["False", "False"]


@pytest.mark.parametrize("shuffle", [False, True])
def test_two_workers_on_two_ranks_read_every_record_once_equal_to_the_oracle(
        built_sample, oracle, shuffle):
    theirs = {int(row["id"][0]): row for row in oracle.rows(built_sample / "1.0.0", "train")}
    per_rank, seen = [], collections.Counter()
    for rank in range(2):
        dataset = rf_torch.RecordDataset(str(built_sample), "train", rank=rank, world_size=2,
                                         shuffle=shuffle, seed=4)
        dataset.set_epoch(1)
        rows = [row for batch in rf_torch.DataLoader(dataset, batch_size=16, num_workers=2,
                                                     collate_fn=_rows) for row in batch]
        per_rank.append(len(rows))
        seen.update(int(row["id"]) for row in rows)
        assert all(oracle.same(row, theirs[int(row["id"])]) for row in rows)
    assert per_rank[0] == per_rank[1] == len(theirs) // 2
    assert set(seen.values()) == {1} and len(seen) == len(theirs) - len(theirs) % 2


def test_default_collate_gives_tensors_of_the_manifest_dtypes(built_sample):
    dataset = rf_torch.RecordDataset(str(built_sample), "train")
    row = next(iter(torch.utils.data.DataLoader(dataset, batch_size=None)))
    assert row["id"].dtype == torch.int64 and row["id"].shape == ()
    assert row["vec"].dtype == torch.float32 and row["vec"].shape == (3,)
    assert isinstance(row["name"], bytes)


@pytest.mark.parametrize("sample,workers", [("built_sample", 2), ("gzip_sample", 2),
                                            ("built_sample", 0)])
def test_a_checkpoint_mid_epoch_resumes_with_the_rest_exactly_once(request, sample, workers):
    path = str(request.getfixturevalue(sample))

    def loader():
        dataset = rf_torch.RecordDataset(path, "test", shuffle=True, seed=9, buffer_size=64)
        return dataset, rf_torch.DataLoader(dataset, batch_size=7, num_workers=workers,
                                            collate_fn=_rows)

    dataset, first = loader()
    dataset.set_epoch(3)
    head = []
    for count, batch in enumerate(first):
        head.extend(int(row["id"]) for row in batch)
        if count == 10:
            state = json.loads(json.dumps(first.state_dict()))
            break
    dataset, second = loader()
    second.load_state_dict(state)
    dataset.set_epoch(3)  # the training loop's own call: the same epoch keeps the position
    tail = _ids(second)
    assert len(head) == 77 and len(head) + len(tail) == len(dataset)
    assert len(set(head + tail)) == len(dataset)
    dataset.set_epoch(4)
    assert len(_ids(second)) == len(dataset)


@settings(max_examples=200)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=4), st.integers(0, 60),
       st.integers(1, 9), st.booleans())
def test_rows_given_matches_a_round_robin_of_batches(lengths, batches, size, drop_last):
    """The order torch's in-order loader gives batches in, simulated batch by batch."""
    queues = [[min(size, length - start) for start in range(0, length, size)
               if not drop_last or length - start >= size] for length in lengths]
    given, left = [0] * len(lengths), batches
    while left and any(queues):
        for worker, queue in enumerate(queues):
            if queue and left:
                given[worker] += queue.pop(0)
                left -= 1
    assert rows_given(lengths, batches, size, drop_last) == given


def test_a_damaged_shard_raises_through_the_workers(indexed):
    shard = sorted((indexed / "1.0.0").glob("train-*.tfrecord"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 1
    shard.write_bytes(bytes(data))
    dataset = rf_torch.RecordDataset(str(indexed), "train")
    with pytest.raises(DatasetCorrupt, match=shard.name):
        _ids(rf_torch.DataLoader(dataset, batch_size=16, num_workers=2, collate_fn=_rows))


def test_the_map_dataset_under_distributed_samplers_reads_everything_once(built_sample, oracle):
    dataset = rf_torch.RecordMapDataset(str(built_sample), "test")
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    assert len(dataset) == len(theirs)
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=1,
                                     drop_last=True)
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler,
                                             num_workers=2, collate_fn=_rows)
        rows = [row for batch in loader for row in batch]
        assert len(rows) == len(theirs) // 2
        seen.extend(int(row["id"]) for row in rows)
    assert len(set(seen)) == len(seen)
    assert oracle.same(dataset[3], theirs[3])


def test_the_map_dataset_refuses_gzip_output(gzip_sample):
    with pytest.raises(ValueError, match="no index file"):
        rf_torch.RecordMapDataset(str(gzip_sample), "train")


def test_persistent_workers_are_refused_as_they_would_repeat_an_epoch(built_sample):
    dataset = rf_torch.RecordDataset(str(built_sample), "test", shuffle=True)
    with pytest.raises(ValueError, match="persistent_workers"):
        rf_torch.DataLoader(dataset, num_workers=2, persistent_workers=True)
