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
are arrays (``isArray``, ``arrayShape``). A field's ``@id`` is
``<split>/<feature>`` with what an IRI path segment may not hold as
itself (spaces, control characters, ``/``, ``#``, ``?``, ``%``, ...)
replaced by ``_`` (and a ``~N`` suffix should two names meet); its
``name`` and column are the feature's own. A timestamp field's description
gives its unit and epoch. A feature with a vocabulary references a
``sc:Enumeration`` record set (``labels/<feature>``) that lists each id
with its label inline, as Croissant describes categorical data. The
config's ``dataset:`` section gives ``description``, ``license`` and
``citeAs``. ArrayRecord output has no ``croissant.json`` (`croissant_files`).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, Iterable, Mapping

from ...transforms.layout import CROISSANT_FILE
from .manifest import file_format_of
from .tfds_metadata import about, image_features, timestamp_text

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
# Besides letters, digits and marks, what a path segment of an IRI may hold
# as itself (RFC 3987 ipchar, less "/": mlcroissant folds empty segments).
# Anything else (spaces, which mlcroissant refuses even escaped, control
# characters, which it drops, "/", "#", "?", "%") becomes "_" in an @id.
_ID_PUNCTUATION = set("-._~!$&'()*+,;=:@")


def _id_safe(name: str) -> str:
    text = "".join(char if char in _ID_PUNCTUATION or unicodedata.category(char)[0] in "LNM"
                   else "_" for char in name)
    # A "." or ".." segment would be resolved away ("train/.." is "").
    return "_" * len(text) if text.strip(".") == "" else text


def _id_tokens(names: Iterable[str]) -> dict[str, str]:
    """feature name -> the text its @ids use: the name with what @ids may
    not hold replaced by ``_``, made unique by a ``~N`` suffix. The field's
    ``name`` and the column it extracts stay the feature's own name."""
    tokens: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        token = base = _id_safe(name)
        suffix = 1
        while token in used:
            suffix += 1
            token = f"{base}~{suffix}"
        used.add(token)
        tokens[name] = token
    return tokens


def _field(split: str, name: str, token: str, spec: Mapping[str, Any], is_image: bool,
           labels: bool) -> dict:
    description = f"Example feature {name!r} ({spec['type']}, shape {spec['shape']})"
    stamp = timestamp_text(spec)
    if stamp is not None:
        description += f": {stamp}"
    field = {"@type": "cr:Field", "@id": f"{split}/{token}", "name": name,
             "description": description,
             "dataType": "sc:ImageObject" if is_image else _DATA_TYPES[spec["type"]],
             "source": {"fileSet": {"@id": f"{split}-shards"}, "extract": {"column": name}}}
    if labels:
        field["references"] = {"field": {"@id": f"{_labels_id(token)}/id"}}
    if spec["shape"]:
        field["isArray"] = True
        field["arrayShape"] = ",".join(str(d) for d in spec["shape"])
    return field


def _labels_id(token: str) -> str:
    # A prefix without ":" keeps any token a relative path (never a scheme).
    return f"labels/{token}"


def _labels_record_set(name: str, token: str, vocabulary: list) -> dict:
    """The ids and labels of feature `name`'s vocabulary, inline."""
    record_set = _labels_id(token)
    return {
        "@type": "cr:RecordSet", "@id": record_set, "name": record_set,
        "description": f"The labels of feature {name!r}: the id stored in the Example, "
                       "and the label it stands for.",
        "dataType": "sc:Enumeration", "key": {"@id": f"{record_set}/id"},
        "field": [{"@type": "cr:Field", "@id": f"{record_set}/id", "name": "id",
                   "dataType": "cr:Int64"},
                  {"@type": "cr:Field", "@id": f"{record_set}/label", "name": "label",
                   "dataType": "sc:Text"}],
        "data": [{f"{record_set}/id": index, f"{record_set}/label": label}
                 for index, label in enumerate(vocabulary)],
    }


def croissant(manifest: Mapping[str, Any]) -> dict:
    """The Croissant description of the version `manifest` describes."""
    gzip = manifest["compression"] == "GZIP"
    encoding = "application/x-tfrecord+gzip" if gzip else "application/x-tfrecord"
    suffix = ".tfrecord.gz" if gzip else ".tfrecord"
    images = image_features(manifest.get("config") or {})
    vocabularies = {name: list(labels) for name, labels in
                    (manifest.get("vocabularies") or {}).items()
                    if name in manifest["features"]}
    tokens = _id_tokens(manifest["features"])
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
            "field": [_field(split, name, tokens[name], spec, name in images,
                             name in vocabularies)
                      for name, spec in manifest["features"].items()]})
    # The splits first: readers that take the first record set get rows.
    record_sets += [_labels_record_set(name, tokens[name], labels)
                    for name, labels in vocabularies.items()]
    given = about(manifest)
    description = (f"{manifest['name']} version {manifest['version']}: TFRecord files of "
                   "tf.train.Example records, built by recordforge.")
    document = {
        "@context": _CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": manifest["name"],
        "description": (f"{given['description']}\n\n{description}" if "description" in given
                        else description),
        "version": manifest["version"],
        "datePublished": manifest["created"],
    }
    if "license" in given:
        document["license"] = given["license"]
    if "citation" in given:
        document["citeAs"] = given["citation"]
    return {**document, "distribution": distribution, "recordSet": record_sets}


def croissant_files(manifest: Mapping[str, Any]) -> dict[str, bytes]:
    """File name -> content: ``croissant.json``; empty for ArrayRecord
    output, which Croissant has no encoding for (its record sets extract
    fields from TFRecord files only), rather than a description no
    Croissant reader could follow."""
    if file_format_of(manifest) != "tfrecord":
        return {}
    text = json.dumps(croissant(manifest), indent=2, sort_keys=False) + "\n"
    return {CROISSANT_FILE: text.encode("utf-8")}
