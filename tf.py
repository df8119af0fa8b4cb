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
"""

from __future__ import annotations

import base64
import json
from typing import Any, Mapping

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
    files = [f"{version_dir}/{shard['file']}" for shard in info["splits"][split]["shards"]]
    records = tf.data.TFRecordDataset(
        files, compression_type="GZIP" if info["compression"] == "GZIP" else "")
    if not parse:
        return records
    spec = {name: _spec(tf, feature) for name, feature in info["features"].items()}
    return records.map(lambda record: tf.io.parse_single_example(record, spec))
