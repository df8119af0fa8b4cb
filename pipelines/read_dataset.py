"""`ReadDataset`: a published version read back as row dicts, in Beam, without TensorFlow.

    with beam.Pipeline() as p:
        rows = p | recordforge.ReadDataset("gs://bucket/flights", split="train")

`path` is a version directory (it holds manifest.json) or an output root
whose LATEST names one. The manifest is read when the transform is applied;
each shard is then checked against it as it streams (size and sha256,
`publish.held_manifest`), and every record's CRCs as it is read. A shard
that does not match raises `VersionReplaced` (an ``--overwrite`` committed
while reading; the step fails, so no partial output is kept) or
`DatasetCorrupt` (the manifest still lists it: the shard is damaged).
A row is a dict feature name -> value: a scalar feature (shape ``[]``)
gives one value (None when an optional feature is absent), others a list;
``string`` features give `str`, ``bytes`` features `bytes`, floats the
float32 value stored.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Mapping, NamedTuple

import apache_beam as beam

from .publish.held_manifest import (DatasetCorrupt, HeldShard, VersionReplaced,
                                     checked_records, held_shards)
from .publish.manifest import compression_from_label, load_manifest
from .publish.output import Output
from ..schemas.example import example_values
from ..transforms.layout import LATEST_FILE, MANIFEST_FILE

__all__ = ["DatasetCorrupt", "ReadDataset", "VersionReplaced", "decode_row",
           "resolve_version_dir"]


class _Shard(NamedTuple):
    version_url: str
    held: HeldShard
    compression: str


def resolve_version_dir(path: str) -> tuple[str, dict]:
    """The version directory `path` names (itself, or the one an output
    root's LATEST names) and its manifest. Raises FileNotFoundError when
    neither is there."""
    out = Output(path)
    data = out.read_bytes(out.path(MANIFEST_FILE))
    if data is None:
        latest = out.read_bytes(out.path(LATEST_FILE))
        if latest is None:
            raise FileNotFoundError(f"{out.display} holds neither {MANIFEST_FILE} (a version) "
                                    f"nor {LATEST_FILE} (an output root)")
        out = Output(out.url_of(out.path(latest.decode("utf-8").strip())))
        data = out.read_bytes(out.path(MANIFEST_FILE))
        if data is None:
            raise FileNotFoundError(f"{out.display}: {MANIFEST_FILE} is missing; LATEST names "
                                    "a version that is not complete")
    return out.url, load_manifest(data)


def decode_row(record: bytes, features: Mapping[str, Mapping[str, Any]]) -> dict:
    """One serialized Example -> row dict, shaped as the manifest's
    `features` say (module docstring)."""
    decoded = example_values(record)
    row = {}
    for name, spec in features.items():
        values = decoded.get(name, [])
        if spec.get("text"):
            values = [value.decode("utf-8") for value in values]
        if spec.get("shape") == []:
            row[name] = values[0] if values else None
        else:
            row[name] = list(values)
    return row


def _read_shard(shard: _Shard, features: Mapping[str, Mapping[str, Any]]) -> Iterator[dict]:
    out = Output(shard.version_url)
    opener = functools.partial(out.fs.open, out.path(shard.held.file), "rb")
    read_manifest = functools.partial(out.read_bytes, out.path(MANIFEST_FILE))
    for record in checked_records(opener, shard.held, compression=shard.compression,
                                  read_manifest=read_manifest):
        yield decode_row(record, features)


class ReadDataset(beam.PTransform):
    """Reads a published version back as row dicts (module docstring).

    path: a version directory or an output root (local path or fsspec URL).
    split: one split's name, or None for every split. Applied to a pipeline:
    ``p | ReadDataset(path)``. The manifest is available as `.manifest`
    once applied.
    """

    def __init__(self, path: str, split: str | None = None):
        super().__init__()
        self._path = path
        self._split = split
        self.manifest: dict | None = None

    def expand(self, pbegin):
        url, manifest = resolve_version_dir(self._path)
        self.manifest = manifest
        splits = manifest["splits"]
        if self._split is not None and self._split not in splits:
            raise ValueError(f"{url} has no split {self._split!r}; its splits: "
                             f"{', '.join(splits)}")
        compression = compression_from_label(manifest["compression"])
        display = Output(url).display
        shards = [_Shard(url, held, compression)
                  for held in held_shards(manifest, self._split, f"{display}/{{}}".format)]
        return (pbegin
                # _Shard, one per shard file
                | "Shards" >> beam.Create(shards)
                | "Spread" >> beam.Reshuffle()
                # row dicts
                | "Read" >> beam.FlatMap(_read_shard, manifest["features"]))
