"""What every written feature is (`FeatureSpec`), and what the manifest says of the schema.

A `FeatureSpec` is one feature, parsed from the config by
`feature_config.parse_features` and checked row by row by the converters
of `checks`. `manifest_features` and `resolve_vocabularies` give the
manifest's ``features`` and ``vocabularies`` blocks; `label_feature` and
`label_text` name the label the build report counts by.

Nothing here knows about Beam.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import re
from typing import Any, Mapping, Sequence

import yaml

from .errors import ConfigError

__all__ = [
    "FEATURE_TYPES",
    "INT64_MAX",
    "INT64_MIN",
    "TIMESTAMP_UNITS",
    "FeatureSpec",
    "default_as_json",
    "manifest_features",
    "resolve_vocabularies",
    "label_feature",
    "label_text",
    "nested_path_hint",
    "path_text",
    "source_path",
]

# declared type -> stored kind in the Example (string = UTF-8 text in a BytesList;
# timestamp = an int64 count of `unit`s since 1970-01-01T00:00:00Z)
_STORED_KIND = {"int64": "int64", "float": "float", "bytes": "bytes", "string": "bytes",
                "timestamp": "int64"}
TIMESTAMP_UNITS = ("s", "ms", "us", "ns", "days")
FEATURE_TYPES = tuple(_STORED_KIND)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


# --- the `from:` rule -------------------------------------------------------------
# A `from:` text is exactly one top-level column's name, dots and all, in every
# source; a path into nested objects or structs is only ever a list of keys.
# Reading a dotted text as a path would make `a.b` ambiguous between the column
# "a.b" and the key "b" of column "a" (one silently shadowing the other).


def source_path(value: Any) -> tuple[str, ...] | None:
    """The keys of a ``from:`` value that is a path into nested values (a list
    of two or more keys), or None when it names one top-level column (a text,
    or a one-key list). Raises ValueError saying what a valid value is."""
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(k, str) and k for k in value):
            raise ValueError("a list of keys must hold non-empty text keys, e.g. "
                             "[user, address, city]")
        return tuple(value) if len(value) > 1 else None
    if not isinstance(value, str) or not value:
        raise ValueError("must be the name of a source column (text, dots included) or a "
                         "list of keys into nested values, e.g. [user, address, city]")
    return None


# keys YAML reads as plain text inside [...]; others are written quoted
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})


def _plain(key: str) -> bool:
    return _PLAIN_KEY.fullmatch(key) is not None and key.lower() not in _YAML_WORDS


def path_text(keys: Sequence[str]) -> str:
    """A path of keys as the config writes it: ``[user, address, city]``
    (a key YAML would read otherwise quoted: ``[user, "a, b"]``)."""
    return "[" + ", ".join(k if _plain(k) else _quoted(k) for k in keys) + "]"


def _quoted(key: str) -> str:
    # YAML's own double-quoted form, so that any key (controls, commas,
    # YAML words) reads back as itself
    return yaml.safe_dump(key, default_style='"', width=math.inf,
                          allow_unicode=True).rstrip("\n")


def nested_path_hint(column: str, columns: Sequence[str]) -> str | None:
    """For a dotted column name that no row holds but whose leading part is a
    column of `columns`: the list form the user probably meant
    (``from: [user, city]``), else None."""
    parts = column.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:cut])
        if head in columns and all(parts[cut:]):
            return f"`from: {path_text([head, *parts[cut:]])}` (a path into nested values)"
    return None


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One feature of the schema.

    name: the feature's key in the Example.
    type: declared type, one of `FEATURE_TYPES`.
    source: the input column it is read from (config key ``from``).
    shape: ``()`` one value, ``(N,)`` exactly N values, ``(-1,)`` any number.
    default: the raw config value used when the column is missing (a tuple for
      list shapes); converted and checked like a row value.
    values: allowed values (ints, floats or strings as written in the config).
    vocabulary: allowed labels, in id order; ``"auto"`` until resolved.
    path: the keys leading to a nested value (``from: [user, address, city]``
      in a JSON, JSONL, Parquet or Avro source), or None for a top-level
      column (`source`). `source` is then the path as the config writes it,
      for messages (`path_text`).
    null_values: text values read as missing, or None for the standard rule
      (None and ``""``; for numbers also blank text).
    unit, format, timezone: timestamp features only: the stored unit, how
      text is parsed (``iso8601`` or a strptime pattern) and the zone of
      values that name none.
    ambiguous: timestamp features only: how a local time that a
      daylight-saving change repeats is read (``error``, ``earlier``, ``later``).
    """

    name: str
    type: str
    source: str
    shape: tuple[int, ...] = ()
    required: bool = True
    default: Any = None
    min: int | float | None = None
    max: int | float | None = None
    values: tuple | None = None
    vocabulary: tuple[str, ...] | str | None = None
    max_bytes: int | None = None
    allow_nan: bool = False
    path: tuple[str, ...] | None = None
    null_values: tuple[str, ...] | None = None
    unit: str | None = None
    format: str | None = None
    timezone: str | None = None
    ambiguous: str | None = None

    @property
    def column(self) -> str:
        """The top-level input column the feature reads (a nested value's
        first key)."""
        return self.path[0] if self.path else self.source

    @property
    def read_key(self) -> str | tuple[str, ...]:
        """The key the feature's raw value is found under once nested paths
        are resolved (`row_encoder.with_paths`): the column's name, or the
        tuple of keys for a path, which no top-level column's name can equal."""
        return self.path if self.path else self.source

    @property
    def stored_kind(self) -> str:
        """The Example list this feature is stored in: "int64", "float" or "bytes"."""
        return _STORED_KIND[self.type]

    @property
    def is_text(self) -> bool:
        """True for `string` features (UTF-8 text stored as bytes)."""
        return self.type == "string"


def manifest_features(specs: Sequence[FeatureSpec],
                      defaults: Mapping[str, Sequence] | None = None) -> dict:
    """The manifest's ``features`` block: name -> {"type": stored kind, "shape": [...]},
    plus ``"text": true`` for string features, ``"required": false`` for a
    feature that may be absent from a record (declared optional, without a
    default), and ``"default"`` for a feature with one. Keys in sorted order.

    defaults: feature name -> the values stored when the value is missing
    (`checks.stored_defaults`); a feature with a default is never absent.
    """
    block = {}
    for spec in sorted(specs, key=lambda s: s.name):
        entry: dict[str, Any] = {"type": spec.stored_kind, "shape": list(spec.shape)}
        if spec.is_text:
            entry["text"] = True
        if spec.type == "timestamp":
            entry["timestamp"] = {"unit": spec.unit, "timezone": spec.timezone}
        if not spec.required and spec.default is None:
            entry["required"] = False
        if defaults is not None and spec.name in defaults:
            entry["default"] = default_as_json(defaults[spec.name], spec.shape)
        block[spec.name] = entry
    return block


def default_as_json(values: Sequence, shape: Sequence[int]) -> Any:
    """A feature's stored default values as the manifest writes them: one
    value for shape ``[]``, else a list; int64 and finite floats as numbers,
    NaN and infinities as the text ``"nan"``, ``"inf"``, ``"-inf"`` (JSON
    has no such numbers; Python's and TensorFlow's float parsing read them),
    bytes as text when they are UTF-8, else ``{"base64": ...}``."""
    shown = [_json_value(value) for value in values]
    return shown[0] if not shape and len(shown) == 1 else shown


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # "nan", "inf", "-inf"
    return value


# Features a dataset without vocabularies is counted by, in order of preference.
_LABEL_TEXT_FEATURES = ("label/text", "label")


def label_feature(features: Mapping[str, Mapping[str, Any]],
                  vocabularies: Mapping[str, Sequence[str]]
                  ) -> tuple[str | None, list[str] | None]:
    """The feature a dataset's examples are counted by per split (the build
    report's label counts), and its vocabulary: ``label`` if it has a
    vocabulary, else the first feature with one, else a ``label/text`` or
    ``label`` feature of bytes or int64; ``(None, None)`` when there is none.
    `features` is the manifest's features block."""
    if "label" in vocabularies:
        return "label", list(vocabularies["label"])
    if vocabularies:
        name = sorted(vocabularies)[0]
        return name, list(vocabularies[name])
    for name in _LABEL_TEXT_FEATURES:
        if features.get(name, {}).get("type") in ("bytes", "int64"):
            return name, None
    return None, None


def label_text(value: Any, vocabulary: Sequence[str] | None) -> str:
    """How a label value (the first value of the label feature, as stored)
    is named: its vocabulary entry, its text, or its number."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if vocabulary is not None and isinstance(value, int) and 0 <= value < len(vocabulary):
        return str(vocabulary[value])
    return str(value)


def resolve_vocabularies(specs: Sequence[FeatureSpec], known: Mapping[str, Sequence[str]],
                         *, key_path: str = "features") -> dict[str, tuple[str, ...]]:
    """Feature name -> vocabulary (labels in id order) for every feature with one.

    known: values known before the run, keyed by source column (e.g. the image
      source's ``label`` column -> class folder names) or by feature name.
      ``auto`` = the sorted distinct known values; explicit lists are kept as written.
    """
    vocabularies = {}
    for spec in specs:
        if spec.vocabulary is None:
            continue
        if spec.vocabulary != "auto":
            vocabularies[spec.name] = tuple(spec.vocabulary)
            continue
        found = known.get(spec.name, known.get(spec.source))
        labels = tuple(sorted({str(v) for v in found})) if found is not None else ()
        if not labels:
            raise ConfigError(
                f"{key_path}.{spec.name}.vocabulary",
                f"`auto` needs the values of column {spec.source!r} before the run (image "
                "class folders or a labels table provide them); none are known for this "
                "source, so list the labels explicitly: `vocabulary: [a, b, ...]`")
        vocabularies[spec.name] = labels
    return vocabularies
