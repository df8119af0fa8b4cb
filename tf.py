"""TensorFlow readers of a published version: the parse spec and a `tf.data` dataset.

    import recordforge.tf
    spec = recordforge.tf.feature_spec("out/flights")          # {name: tf.io.*Feature}
    ds = recordforge.tf.dataset("out/flights", "train")        # parsed Examples

Needs TensorFlow (``pip install recordforge[tf]``), imported on first call,
never by the rest of recordforge. `path` is a version directory or an
output root whose LATEST names one (local path, or any URL TensorFlow's
file system reads, e.g. ``gs://``). The spec follows the manifest: shape
``[]`` or ``[N]`` a `FixedLenFeature` (with the stated ``default`` as its
default value), ``[-1]`` or a feature that may be absent
(``"required": false``) a `VarLenFeature`;
``string``/``bytes`` features are `tf.string`, ``float`` `tf.float32`.

`dataset` reads each shard through `publish.held_manifest.checked_records`
(TensorFlow's file system, our record reader): its size and sha256 are
checked against the manifest read first as it streams, so a version an
``--overwrite`` replaced while it was read raises "version replaced while
reading" (`VersionReplaced`, surfaced by tf.data as the error's message)
instead of mixing two builds.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any, Iterator, Mapping

from .pipelines.publish.held_manifest import checked_records, held_shards
from .pipelines.publish.manifest import compression_from_label

__all__ = ["dataset", "feature_spec", "manifest"]

_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string"}


def _tf():
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError("recordforge.tf needs TensorFlow: pip install 'recordforge[tf]'"
                          ) from error
    return tf


def _version_dir(path: str) -> str:
    tf = _tf()
    path = path.rstrip("/")
    if tf.io.gfile.exists(f"{path}/manifest.json"):
        return path
    with tf.io.gfile.GFile(f"{path}/LATEST", "r") as handle:
        return f"{path}/{handle.read().strip()}"


def manifest(path: str) -> dict:
    """The manifest.json of the version `path` names."""
    tf = _tf()
    with tf.io.gfile.GFile(f"{_version_dir(path)}/manifest.json", "r") as handle:
        return json.loads(handle.read())


def _manifest_now(version_dir: str) -> bytes | None:
    tf = _tf()
    try:
        with tf.io.gfile.GFile(f"{version_dir}/manifest.json", "rb") as handle:
            return handle.read()
    except tf.errors.NotFoundError:
        return None


def _open_shard(path: str):
    tf = _tf()
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(path)
    return tf.io.gfile.GFile(path, "rb")


def _records(version_dir: str, info: Mapping[str, Any], split: str) -> Iterator[bytes]:
    """The records of `split`, every shard checked against `info`, the
    manifest read first (module docstring)."""
    compression = compression_from_label(info["compression"])
    read_manifest = functools.partial(_manifest_now, version_dir)
    for held in held_shards(info, split, f"{version_dir}/{{}}".format):
        yield from checked_records(functools.partial(_open_shard, held.display), held,
                                   compression=compression, read_manifest=read_manifest)


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


def dataset(path: str, split: str, *, parse: bool = True):
    """A `tf.data.Dataset` of split `split`'s records, in shard order,
    parsed by `feature_spec` (``parse=False``: the serialized Examples)."""
    tf = _tf()
    version_dir = _version_dir(path)
    info = manifest(version_dir)
    if split not in info["splits"]:
        raise ValueError(f"{version_dir} has no split {split!r}; its splits: "
                         f"{', '.join(info['splits'])}")
    records = tf.data.Dataset.from_generator(
        functools.partial(_records, version_dir, info, split),
        output_signature=tf.TensorSpec(shape=[], dtype=tf.string))
    if not parse:
        return records
    spec = {name: _spec(tf, feature) for name, feature in info["features"].items()}
    return records.map(lambda record: tf.io.parse_single_example(record, spec))
