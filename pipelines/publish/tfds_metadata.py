"""`dataset_info.json` and `features.json`: what TensorFlow Datasets needs to load a version.

With them, ``tfds.builder_from_directory(version_dir).as_dataset(split=...)``
reads a published version without recordforge: every row, with the
declared dtypes and shapes, images decoded. TFDS reads plain TFRecord
files only, so for gzip output (``output.compression: gzip``) neither file
is written (`tfds_files` returns nothing). ArrayRecord output
(``output.format: array_record``) is TFDS's own ``array_record`` file
format: ``fileFormat`` says so and the template names the
``.array_record`` shards.

Shard names are given to TFDS by its file-name template support
(``filepathTemplate`` per split): ``{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}``
is ``train-00000-of-00012.tfrecord`` (``.array_record``). Features map as TFDS's own would:
``int64``/``float`` (float32)/``string``/``bytes`` tensors, shape ``[]`` a
scalar, ``[N]`` a fixed vector, ``[-1]`` a vector of any length; a scalar
that may be absent (``required: false``, no default) becomes a vector of
0 or 1 values, since TFDS parses scalars as always present; a ``bytes``
feature taken from an image source's ``image`` column is a TFDS ``Image``
(decoded to uint8, 3 channels). A scalar ``int64`` feature with a
vocabulary is a TFDS ``ClassLabel`` (``numClasses``), its labels in id
order (JSON) in the feature's ``description``; a timestamp feature's
``description`` gives its unit and epoch. TFDS versions are ``X.Y.Z``: a
version name of another form (``{date}``) is recorded as ``0.0.0`` with
the real name in the description. The config's ``dataset:`` section
(`config.about`) gives the description, ``citation`` and
``redistributionInfo.license``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ...transforms.layout import DATASET_INFO_FILE, FEATURES_FILE
from .manifest import file_format_of

__all__ = ["FILEPATH_TEMPLATE", "about", "dataset_info", "features_json", "is_class_label",
           "tfds_files", "timestamp_text"]

FILEPATH_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_IMAGE = "tensorflow_datasets.core.features.image_feature.Image"
_DICT = "tensorflow_datasets.core.features.features_dict.FeaturesDict"
_CLASS_LABEL = "tensorflow_datasets.core.features.class_label_feature.ClassLabel"
_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string"}


def timestamp_text(spec: Mapping[str, Any]) -> str | None:
    """What a timestamp feature's integers count (``"int64 seconds since
    1970-01-01T00:00:00Z; ..."``), None for other features; shared with
    `croissant`."""
    stamp = spec.get("timestamp")
    if not isinstance(stamp, Mapping):
        return None
    unit = _UNIT_NAMES.get(stamp.get("unit"), stamp.get("unit"))
    return (f"int64 {unit} since 1970-01-01T00:00:00Z (a timestamp; naive source "
            f"times were read in {stamp.get('timezone', 'UTC')})")


# schemas.features.TIMESTAMP_UNITS, spelled out for readers of other tools.
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds",
               "ns": "nanoseconds", "days": "days"}


def is_class_label(spec: Mapping[str, Any], vocabulary: Any) -> bool:
    """A feature TFDS reads as a ClassLabel: one int64 id per example, from
    a vocabulary. (Absent or repeated ids have no ClassLabel form.)"""
    return (vocabulary is not None and spec.get("type") == "int64"
            and list(spec.get("shape", [])) == [] and spec.get("required") is not False)


def _feature(spec: Mapping[str, Any], is_image: bool, vocabulary: Any) -> dict:
    if is_image and spec.get("shape") == []:
        return {"pythonClassName": _IMAGE,
                "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"}}
    if is_class_label(spec, vocabulary):
        # TFDS's ClassLabel proto holds only the count; the names ride in the
        # description so that nothing the manifest knows is lost.
        return {"pythonClassName": _CLASS_LABEL,
                "classLabel": {"numClasses": str(len(vocabulary))},
                "description": "labels in id order: "
                               + json.dumps(list(vocabulary), ensure_ascii=False)}
    shape = list(spec.get("shape", []))
    if shape == [] and spec.get("required") is False:
        shape = [-1]
    feature = {"pythonClassName": _TENSOR,
               "tensor": {"shape": {"dimensions": [str(d) for d in shape]} if shape else {},
                          "dtype": _DTYPES[spec["type"]], "encoding": "none"}}
    stamp = timestamp_text(spec)
    if stamp is not None:
        feature["description"] = stamp
    return feature


def image_features(config: Mapping[str, Any]) -> set[str]:
    """The features an image source fills from its ``image`` column (the
    resolved config's ``features``)."""
    source = config.get("source") or {}
    if source.get("type") != "images":
        return set()
    return {name for name, spec in (config.get("features") or {}).items()
            if isinstance(spec, Mapping) and spec.get("from", name) == "image"}


def features_json(manifest: Mapping[str, Any]) -> dict:
    """TFDS's `FeaturesDict` of the manifest's features, as TFDS writes it."""
    images = image_features(manifest.get("config") or {})
    vocabularies = manifest.get("vocabularies") or {}
    return {"pythonClassName": _DICT, "featuresDict": {"features": {
        name: _feature(spec, name in images, vocabularies.get(name))
        for name, spec in manifest["features"].items()}}}


def about(manifest: Mapping[str, Any]) -> dict:
    """The config's ``dataset:`` section (description, license, citation)
    as the manifest recorded it; the keys not given are left out."""
    section = (manifest.get("config") or {}).get("dataset")
    if not isinstance(section, Mapping):
        return {}
    return {key: value for key, value in section.items() if isinstance(value, str)}


def dataset_info(manifest: Mapping[str, Any]) -> dict:
    """TFDS's `DatasetInfo` proto (as JSON) of a version: name, version,
    file format, description, citation and license (the config's
    ``dataset:`` section) and, per split, its bytes, examples per shard and
    shard file names."""
    version = manifest["version"]
    given = about(manifest)
    description = f"{manifest['name']} version {version}, built by recordforge."
    if "description" in given:
        description = f"{given['description']}\n\n{description}"
    info = {
        "name": manifest["name"],
        "version": version if _SEMVER.match(version) else "0.0.0",
        "description": description,
        "fileFormat": file_format_of(manifest),
        "moduleName": "recordforge",
        "disableShuffling": True,
        "splits": [{"name": name, "numBytes": str(split["num_bytes"]),
                    "shardLengths": [str(shard["num_examples"]) for shard in split["shards"]],
                    "filepathTemplate": FILEPATH_TEMPLATE}
                   for name, split in manifest["splits"].items()],
    }
    if "citation" in given:
        info["citation"] = given["citation"]
    if "license" in given:
        info["redistributionInfo"] = {"license": given["license"]}
    return info


def tfds_files(manifest: Mapping[str, Any]) -> dict[str, bytes]:
    """File name -> content of the TFDS metadata of a version; empty for gzip output."""
    if manifest["compression"] != "NONE":
        return {}
    return {DATASET_INFO_FILE: _dumps(dataset_info(manifest)),
            FEATURES_FILE: _dumps(features_json(manifest))}


def _dumps(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")
