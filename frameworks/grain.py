"""A Grain (JAX) data source over a published version: random access through the shards' index files.

    import grain
    import recordforge.grain
    source = recordforge.grain.RecordSource("out/flights", "train")
    ds = grain.MapDataset.source(source).shuffle(seed=0)         # ds[i], len(ds)
    loader = grain.DataLoader(
        data_source=source, worker_count=2,
        sampler=grain.samplers.IndexSampler(
            len(source), shard_options=grain.sharding.ShardOptions(
                shard_index=jax.process_index(), shard_count=jax.process_count(),
                drop_remainder=True),
            shuffle=True, num_epochs=1, seed=0))

`RecordSource` is Grain's random-access protocol (``__len__``,
``__getitem__``): record i of the split in shard order, a dict of numpy
values by the manifest's features (``pipelines/loaders/decode.py``), then
`decode(row)` when given. It reads through the index files, checked as
``pipelines/loaders/records.py`` says, from any number of threads (Grain's
read pool) and processes (it pickles without its open files). A version
without index files (gzip output, older versions) raises `NoIndexFiles`.
An ArrayRecord version (``output.format: array_record``) is read through
the `array_record` package's reader by record position (each shard's own
footer is its index; ``pipelines/loaders/array_record_access.py``).
Needs no Grain itself (``pip install 'recordforge[grain]'`` for Grain);
`import recordforge` imports neither.

This file lives in ``frameworks/`` (the package's ``__init__`` adds it to
its ``__path__``): a ``grain.py`` at the repository root would shadow Grain
for any Python started there.
"""

from __future__ import annotations

from .pipelines.loaders import NoIndexFiles, RecordSource

__all__ = ["NoIndexFiles", "RecordSource"]
