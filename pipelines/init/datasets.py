"""What a recordforge or TFDS output says of its own features, when init reads its TFRecord files.

A version directory written by recordforge holds ``manifest.json`` (each
feature's stored type, shape and whether it is required; the config block
says which bytes features are text and which int64 features are
timestamps); one written by TensorFlow Datasets holds ``features.json`` and
``dataset_info.json``. Either, beside the TFRecord files init reads, gives
each feature's type and shape as the writer meant them, and the dataset's
name. Metadata that cannot be read is ignored (init then goes by the sample)
and the config says so.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, NamedTuple

from ...transforms.layout import DATASET_INFO_FILE, FEATURES_FILE, MANIFEST_FILE
from ..publish.manifest import ManifestError, load_manifest

__all__ = ["Metadata", "dataset_name", "read_metadata"]

_VERSION_DIR = re.compile(r"v?\d+(\.\d+)*")
# Metadata files are small; a larger one is not what it claims to be.
_MAX_METADATA_BYTES = 64 << 20
_TFDS_TYPES = {"int64": "int64", "float32": "float", "string": "bytes", "uint8": "bytes"}


class Metadata(NamedTuple):
    """features: name -> settings (type, shape, required); name: the
    dataset's name; note: where they come from, or why they were not used;
    comments: name -> what the writer said of a feature that its stored type
    does not (a timestamp's unit)."""

    features: dict[str, dict]
    name: str | None
    note: str
    comments: dict[str, str]


def _folder(path: str) -> str:
    return path if os.path.isdir(path) else os.path.dirname(path) or "."


def dataset_name(path: str) -> str:
    """The folder the TFRecord files at `path` sit in, above a version folder (1.0.0)."""
    folder = os.path.abspath(_folder(path))
    base = os.path.basename(folder)
    if _VERSION_DIR.fullmatch(base):
        base = os.path.basename(os.path.dirname(folder)) or base
    return base


def _read_json(path: str) -> Any:
    if os.path.getsize(path) > _MAX_METADATA_BYTES:
        raise ValueError(f"larger than {_MAX_METADATA_BYTES >> 20} MB")
    with open(path, "rb") as f:
        return json.loads(f.read())


def read_metadata(path: str) -> Metadata | None:
    """The metadata beside the TFRecord files at `path` (local files only),
    or None when there is none."""
    folder = _folder(path)
    manifest = os.path.join(folder, MANIFEST_FILE)
    features = os.path.join(folder, FEATURES_FILE)
    if os.path.isfile(manifest):
        try:
            with open(manifest, "rb") as f:
                return _from_manifest(load_manifest(f.read(_MAX_METADATA_BYTES)), manifest)
        except (OSError, ManifestError) as error:
            return Metadata({}, None, f"{manifest} was not used: {error}", {})
    if os.path.isfile(features):
        try:
            return _from_tfds(_read_json(features), _tfds_name(folder), features)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:
            return Metadata({}, None, f"{features} was not used: not TFDS features "
                            f"({type(error).__name__}: {error})", {})
    return None


def _from_manifest(manifest: dict, where: str) -> Metadata:
    declared = (manifest.get("config") or {}).get("features") or {}
    features, comments = {}, {}
    for name, spec in manifest["features"].items():
        body: dict[str, Any] = {"type": spec["type"]}
        written = declared.get(name) if isinstance(declared.get(name), dict) else {}
        if spec["type"] == "bytes" and written.get("type") == "string":
            body["type"] = "string"
        if written.get("type") == "timestamp":
            comments[name] = (f"a timestamp: {written.get('unit', 's')} since "
                              "1970-01-01T00:00:00Z")
        if spec.get("shape"):
            body["shape"] = list(spec["shape"])
        if spec.get("required") is False:
            body["required"] = False
        features[name] = body
    return Metadata(features, manifest["name"], f"types and shapes from {where}", comments)


def _from_tfds(document: dict, name: str | None, where: str) -> Metadata:
    features = {}
    for feature, spec in document["featuresDict"]["features"].items():
        if "image" in spec:
            features[feature] = {"type": "bytes"}
            continue
        tensor = spec["tensor"]
        dimensions = [int(d) for d in (tensor.get("shape") or {}).get("dimensions", [])]
        if len(dimensions) > 1 or tensor["dtype"] not in _TFDS_TYPES:
            raise ValueError(f"feature {feature!r}: {tensor['dtype']} of shape {dimensions} "
                             "has no recordforge feature type")
        body: dict[str, Any] = {"type": _TFDS_TYPES[tensor["dtype"]]}
        if dimensions:
            body["shape"] = dimensions
        features[feature] = body
    return Metadata(features, name, f"types and shapes from {where}", {})


def _tfds_name(folder: str) -> str | None:
    info = os.path.join(folder, DATASET_INFO_FILE)
    try:
        name = _read_json(info).get("name")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return name if isinstance(name, str) else None
