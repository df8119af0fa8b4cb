"""TensorFlow readers of a published version: the parse spec and a `tf.data` dataset.

    import recordforge.tf
    spec = recordforge.tf.feature_spec("out/flights")          # {name: tf.io.*Feature}
    ds = recordforge.tf.dataset("out/flights", "train")        # parsed Examples

Needs TensorFlow (``pip install recordforge[tf]``), imported on first call,
never by the rest of recordforge. `path` is a version directory or an
output root whose LATEST names one (local path, or any URL TensorFlow's
file system reads, e.g. ``gs://``); LATEST and the manifest are read as
`recordforge verify` reads them (sizes bounded, LATEST a version name of
the root, the manifest checked). The spec follows the manifest: shape
``[]`` or ``[N]`` a `FixedLenFeature` (with the stated ``default`` as its
default value), ``[-1]`` or a feature that may be absent
(``"required": false``) a `VarLenFeature`;
``string``/``bytes`` features are `tf.string`, ``float`` `tf.float32`.

`dataset` checks each shard against the manifest it read first, as the
shard streams (`publish.held_manifest.checked_batches`, through
TensorFlow's file system): a version an ``--overwrite`` replaced while it
was read raises "version replaced while reading" (tf.data surfaces it as
the error's message) instead of mixing two builds. Shards are read by
parallel tf.data workers, their records handed over in lists of about
1 MB, in shard order. ``check=False`` reads with TensorFlow's own
`TFRecordDataset` instead (no Python per shard), for a version no build
overwrites (docs/publishing.md).
"""

from __future__ import annotations

import base64
import functools
from typing import Any, Iterator, Mapping

from .pipelines.publish.dataset_paths import MAX_LATEST_BYTES, MAX_MANIFEST_BYTES
from .pipelines.publish.held_manifest import checked_batches, held_shards
from .pipelines.publish.manifest import compression_from_label, file_format_of, load_manifest
from .pipelines.publish.versions import check_version_name
from .schemas.errors import ConfigError

__all__ = ["dataset", "feature_spec", "manifest"]

_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string"}


def _tf():
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError("recordforge.tf needs TensorFlow: pip install 'recordforge[tf]'"
                          ) from error
    return tf


def _read_limited(path: str, limit: int) -> bytes:
    """A small file's bytes; ValueError past `limit` (as `recordforge
    verify` reads LATEST and manifests: never sized by the file)."""
    tf = _tf()
    with tf.io.gfile.GFile(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def _version_dir(path: str) -> str:
    """`path` when it is a version, else the version its LATEST names, which
    must be a version name of the root (no ``/``, ``..``, leading ``.``)."""
    tf = _tf()
    path = path.rstrip("/")
    if tf.io.gfile.exists(f"{path}/manifest.json"):
        return path
    version = _read_limited(f"{path}/LATEST", MAX_LATEST_BYTES).decode("utf-8", "replace").strip()
    try:
        check_version_name(version)
    except ConfigError as error:
        raise ValueError(f"{path}/LATEST cannot be followed: {error}") from None
    return f"{path}/{version}"


def manifest(path: str) -> dict:
    """The manifest.json of the version `path` names, checked
    (`ManifestError` names a malformed field)."""
    return load_manifest(_read_limited(f"{_version_dir(path)}/manifest.json",
                                       MAX_MANIFEST_BYTES))


def _manifest_now(version_dir: str) -> bytes | None:
    tf = _tf()
    try:
        with tf.io.gfile.GFile(f"{version_dir}/manifest.json", "rb") as handle:
            return handle.read()
    except tf.errors.NotFoundError:
        return None


def _open_shard(path: str):
    tf = _tf()
    # GFile opens lazily, on the first read: ask first, so that a shard an
    # overwrite removed is reported as missing by the check.
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(path)
    return tf.io.gfile.GFile(path, "rb")


class _ShardBatches:
    """The generator tf.data calls once per shard (its index in the
    split): that shard's records in lists, checked against `info`, the
    manifest read first. Holds only names, so tf.data may call it from
    several threads at once."""

    def __init__(self, version_dir: str, info: Mapping[str, Any], split: str):
        self.shards = held_shards(info, split, f"{version_dir}/{{}}".format)
        self._compression = compression_from_label(info["compression"])
        self._read_manifest = functools.partial(_manifest_now, version_dir)

    def __call__(self, index) -> Iterator[list[bytes]]:
        held = self.shards[int(index)]
        return checked_batches(functools.partial(_open_shard, held.display), held,
                               compression=self._compression,
                               read_manifest=self._read_manifest)


def _checked_records(tf, version_dir: str, info: Mapping[str, Any], split: str):
    """`split`'s records, each shard read by `_ShardBatches` (module docstring)."""
    batches = _ShardBatches(version_dir, info, split)

    def shard(index):
        return tf.data.Dataset.from_generator(
            batches, args=(index,), output_signature=tf.TensorSpec([None], tf.string))

    # A shard's lists hold at least one record each, so a block as long as
    # the longest shard's record count takes each shard whole before the
    # next: shard order, while the workers read the next shards ahead.
    longest = max([int(entry["num_examples"]) for entry in info["splits"][split]["shards"]]
                  + [1])
    return (tf.data.Dataset.range(len(batches.shards))
            .interleave(shard, cycle_length=tf.data.AUTOTUNE, block_length=longest,
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch())


def _stored(spec: Mapping[str, Any], value: Any) -> Any:
    """A default as the manifest writes it -> a TensorFlow value."""
    if spec["type"] == "float":
        return float(value)  # numbers, or "nan", "inf", "-inf"
    if spec["type"] == "bytes" and isinstance(value, dict):
        return base64.b64decode(value["base64"])
    return value


def _spec(tf, spec: Mapping[str, Any]):
    dtype = getattr(tf, _DTYPES[spec["type"]])
    shape = list(spec.get("shape", []))
    if shape == [-1] or spec.get("required") is False:
        return tf.io.VarLenFeature(dtype)
    if "default" in spec:
        default = spec["default"]
        default = ([_stored(spec, v) for v in default] if shape else _stored(spec, default))
        return tf.io.FixedLenFeature(shape, dtype, default_value=default)
    return tf.io.FixedLenFeature(shape, dtype)


def feature_spec(path: str) -> dict:
    """``{feature: tf.io.FixedLenFeature | tf.io.VarLenFeature}`` for
    `tf.io.parse_example`, from the version's manifest."""
    tf = _tf()
    return {name: _spec(tf, spec) for name, spec in manifest(path)["features"].items()}


def dataset(path: str, split: str, *, parse: bool = True, check: bool = True):
    """A `tf.data.Dataset` of split `split`'s records, in shard order,
    parsed by `feature_spec` (``parse=False``: the serialized Examples).
    ``check=True``: each shard checked against the manifest as it streams
    (module docstring); iterating raises when the version was replaced
    while it was read. ``check=False``: TensorFlow's `TFRecordDataset`,
    unchecked, for a version no build overwrites."""
    tf = _tf()
    version_dir = _version_dir(path)
    info = manifest(version_dir)
    if file_format_of(info) != "tfrecord":
        raise ValueError(f"{version_dir} holds {file_format_of(info)} shards (output.format), "
                         "which tf.data does not read; read it with recordforge.grain."
                         "RecordSource, recordforge.torch or ReadDataset, or rebuild it with "
                         "output.format: tfrecord")
    if split not in info["splits"]:
        raise ValueError(f"{version_dir} has no split {split!r}; its splits: "
                         f"{', '.join(info['splits'])}")
    if check:
        records = _checked_records(tf, version_dir, info, split)
    else:
        files = [f"{version_dir}/{shard['file']}" for shard in info["splits"][split]["shards"]]
        records = tf.data.TFRecordDataset(
            files, compression_type="GZIP" if info["compression"] == "GZIP" else "")
    if not parse:
        return records
    spec = {name: _spec(tf, feature) for name, feature in info["features"].items()}
    return records.map(lambda record: tf.io.parse_single_example(record, spec))
