"""`croissant.json`: a version described in Croissant 1.1 JSON-LD (MLCommons).

The distribution lists every shard as a ``cr:FileObject`` (relative
``contentUrl``, ``contentSize`` in bytes, ``sha256``, encoding
``application/x-tfrecord``, or ``application/x-tfrecord+gzip`` for
gzip shards) and one ``cr:FileSet`` per split that gathers its shards;
each split is a ``cr:RecordSet`` whose fields (one per feature) are
extracted from the Example feature of the same name: ``int64`` as
``cr:Int64``, ``float`` as ``cr:Float32``, text as ``sc:Text``, an image
source's encoded image as ``sc:ImageObject``, other bytes as ``sc:Text``
(base64 by readers that need text). Features of shape ``[N]`` or ``[-1]``
are arrays (``isArray``, ``arrayShape``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ...transforms.layout import CROISSANT_FILE
from .tfds_metadata import image_features

__all__ = ["croissant", "croissant_files"]

CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
_CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
_DATA_TYPES = {"int64": "cr:Int64", "float": "cr:Float32", "bytes": "sc:Text"}


def _field(split: str, name: str, spec: Mapping[str, Any], is_image: bool) -> dict:
    field = {"@type": "cr:Field", "@id": f"{split}/{name}", "name": name,
             "description": f"Example feature {name!r} ({spec['type']}, shape {spec['shape']})",
             "dataType": "sc:ImageObject" if is_image else _DATA_TYPES[spec["type"]],
             "source": {"fileSet": {"@id": f"{split}-shards"}, "extract": {"column": name}}}
    if spec["shape"]:
        field["isArray"] = True
        field["arrayShape"] = ",".join(str(d) for d in spec["shape"])
    return field


def croissant(manifest: Mapping[str, Any]) -> dict:
    """The Croissant description of the version `manifest` describes."""
    gzip = manifest["compression"] == "GZIP"
    encoding = "application/x-tfrecord+gzip" if gzip else "application/x-tfrecord"
    suffix = ".tfrecord.gz" if gzip else ".tfrecord"
    images = image_features(manifest.get("config") or {})
    distribution: list[dict] = []
    record_sets = []
    for split, summary in manifest["splits"].items():
        for shard in summary["shards"]:
            distribution.append({
                "@type": "cr:FileObject", "@id": shard["file"], "name": shard["file"],
                "contentUrl": shard["file"], "contentSize": f"{shard['num_bytes']} B",
                "encodingFormat": encoding, "sha256": shard["sha256"]})
        distribution.append({
            "@type": "cr:FileSet", "@id": f"{split}-shards", "name": f"{split}-shards",
            "description": f"The {summary['num_examples']} tf.train.Example records of split "
                           f"{split!r}, in {len(summary['shards'])} shard(s).",
            "encodingFormat": encoding, "includes": f"{split}-*{suffix}"})
        record_sets.append({
            "@type": "cr:RecordSet", "@id": split, "name": split,
            "description": f"Split {split!r}: {summary['num_examples']} examples.",
            "field": [_field(split, name, spec, name in images)
                      for name, spec in manifest["features"].items()]})
    return {
        "@context": _CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": manifest["name"],
        "description": f"{manifest['name']} version {manifest['version']}: TFRecord files of "
                       "tf.train.Example records, built by recordforge.",
        "version": manifest["version"],
        "datePublished": manifest["created"],
        "distribution": distribution,
        "recordSet": record_sets,
    }


def croissant_files(manifest: Mapping[str, Any]) -> dict[str, bytes]:
    """File name -> content: ``croissant.json``."""
    text = json.dumps(croissant(manifest), indent=2, sort_keys=False) + "\n"
    return {CROISSANT_FILE: text.encode("utf-8")}
