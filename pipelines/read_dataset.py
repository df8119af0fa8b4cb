"""`ReadDataset`: a published version read back as row dicts, in Beam, without TensorFlow.

    with beam.Pipeline() as p:
        rows = p | recordforge.ReadDataset("gs://bucket/flights", split="train")

`path` is a version directory (it holds manifest.json) or an output root
whose LATEST names one. The manifest is read when the transform is applied;
each shard is then checked against it (size and sha256, read once through)
before any of its records is given, and every record's CRCs are checked as
it is read. A row is a dict feature name -> value: a scalar feature
(shape ``[]``) gives one value (None when an optional feature is absent),
others a list; ``string`` features give `str`, ``bytes`` features `bytes`,
floats the float32 value stored.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterator, Mapping, NamedTuple

import apache_beam as beam

from .publish.manifest import load_manifest
from .publish.output import Output
from ..schemas.example import decode_example
from ..transforms.layout import LATEST_FILE, MANIFEST_FILE
from ..transforms.tfrecord import iter_records

__all__ = ["DatasetCorrupt", "ReadDataset", "decode_row", "resolve_version_dir"]

_BLOCK = 4 << 20


class DatasetCorrupt(IOError):
    """A shard does not match its manifest entry (size or sha256)."""


class _Shard(NamedTuple):
    url: str
    split: str
    num_bytes: int
    sha256: str
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
    decoded = decode_example(record)
    row = {}
    for name, spec in features.items():
        values = decoded.get(name, (None, []))[1]
        if spec.get("text"):
            values = [value.decode("utf-8") for value in values]
        if spec.get("shape") == []:
            row[name] = values[0] if values else None
        else:
            row[name] = list(values)
    return row


def _read_shard(shard: _Shard, features: Mapping[str, Mapping[str, Any]]) -> Iterator[dict]:
    out = Output(shard.url.rsplit("/", 1)[0])
    path = out.path(shard.url.rsplit("/", 1)[1])
    digest, size = hashlib.sha256(), 0
    with out.fs.open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
            size += len(block)
    if size != shard.num_bytes or digest.hexdigest() != shard.sha256:
        raise DatasetCorrupt(f"{out.display_of(path)}: {size} bytes with sha256 "
                             f"{digest.hexdigest()}, but the manifest says {shard.num_bytes} "
                             f"bytes with sha256 {shard.sha256}")
    with out.fs.open(path, "rb") as handle:
        for record in iter_records(handle, path=path, compression=shard.compression):
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
        compression = "gzip" if manifest["compression"] == "GZIP" else "none"
        shards = [_Shard(f"{url}/{shard['file']}", name, shard["num_bytes"], shard["sha256"],
                         compression)
                  for name, split in splits.items() if self._split in (None, name)
                  for shard in split["shards"]]
        return (pbegin
                # _Shard, one per shard file
                | "Shards" >> beam.Create(shards)
                | "Spread" >> beam.Reshuffle()
                # row dicts
                | "Read" >> beam.FlatMap(_read_shard, manifest["features"]))
