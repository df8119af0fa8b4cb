"""The config's ``features:`` mapping -> `FeatureSpec`s; each mistake names its key and the fix.

`parse_features` reads each feature's settings (type, column, shape,
bounds, allowed values, vocabulary ...), raising `ConfigError` with the full
key path (e.g. ``features.label.vocabulary``) and what to write instead, and
checks every default with the feature's own row converter (`checks`), so a
default is valid exactly when a row value would be.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Iterable, Mapping, Sequence

from .checks import validate_default
from .errors import ConfigError
from .features import (FEATURE_TYPES, INT64_MAX, INT64_MIN, TIMESTAMP_UNITS, FeatureSpec,
                       nested_path_hint, path_text, source_path)
from .timestamps import AMBIGUOUS, zone

__all__ = ["FEATURE_KEYS", "parse_features"]

FEATURE_KEYS = ("type", "from", "shape", "required", "default", "min", "max",
                "values", "vocabulary", "max_bytes", "allow_nan", "null_values",
                "unit", "format", "timezone", "ambiguous")
_TIMESTAMP_KEYS = ("unit", "format", "timezone", "ambiguous")

# Names people reach for from other tools; difflib does not find these.
_KEY_ALIASES = {
    "dtype": "type", "kind": "type",
    "source": "from", "column": "from", "field": "from",
    "optional": "required", "nullable": "required",
    "minimum": "min", "maximum": "max",
    "enum": "values", "choices": "values", "allowed": "values",
    "vocab": "vocabulary", "labels": "vocabulary", "classes": "vocabulary",
    "max_length": "max_bytes", "max_len": "max_bytes", "maxlen": "max_bytes",
    "nan": "allow_nan", "allow_inf": "allow_nan",
    "na_values": "null_values", "nulls": "null_values", "missing_values": "null_values",
    "tz": "timezone", "time_zone": "timezone", "resolution": "unit",
}
_TYPE_ALIASES = {
    "int": "int64", "integer": "int64", "long": "int64", "int32": "int64",
    "bool": "int64", "boolean": "int64",
    "float32": "float", "float64": "float", "double": "float", "number": "float", "real": "float",
    "str": "string", "text": "string", "utf8": "string",
    "binary": "bytes", "blob": "bytes", "byte": "bytes",
    "datetime": "timestamp", "date": "timestamp", "time": "timestamp",
}


def parse_features(mapping: Any, *, key_path: str = "features",
                   known_columns: Iterable[str] | None = None, nested: bool = True,
                   null_values: Sequence[str] | None = None) -> tuple[FeatureSpec, ...]:
    """Parses the config's ``features:`` mapping, in config order.

    known_columns: the columns the source offers, when known before the run
      (image sources, table headers); a ``from`` naming another column is an error.
    nested: rows may hold nested values (JSON, JSONL, Parquet, Avro, rows
      handed over), so ``from`` may be a list of keys; False (CSV, images):
      it is refused. A ``from`` text is one column's name, dots included,
      in every source (`features.source_path`).
    null_values: the source's text values read as missing (`source.csv`),
      for features that set none; None: the standard rule.
    Raises ConfigError naming the offending key (e.g. ``features.label.vocabulary``).
    """
    if not isinstance(mapping, Mapping) or not mapping:
        raise ConfigError(key_path, "must be a non-empty mapping of feature name to its "
                          "settings, e.g. `label: {type: int64}`")
    columns = None if known_columns is None else list(known_columns)
    specs = []
    for name, body in mapping.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{key_path}.{name}", "feature names must be non-empty text; "
                              "quote the name in the YAML")
        specs.append(_parse_feature(name, body, f"{key_path}.{name}", columns, nested,
                                    null_values))
    # Converting each default with the row converters keeps one definition of
    # "valid value".
    for spec in specs:
        validate_default(spec, key_path=f"{key_path}.{spec.name}.default")
    return tuple(specs)


# --- one feature --------------------------------------------------------------------


def _parse_feature(name: str, body: Any, path: str, columns: list[str] | None,
                   nested: bool = True, source_nulls: Sequence[str] | None = None
                   ) -> FeatureSpec:
    if isinstance(body, str):
        raise ConfigError(path, f"must be a mapping of settings; write `{{type: {body}}}` "
                          f"instead of `{body}`")
    if not isinstance(body, Mapping):
        raise ConfigError(path, "must be a mapping of settings, e.g. `{type: int64, from: col}`")
    for key in body:
        if key not in FEATURE_KEYS:
            raise ConfigError(f"{path}.{key}", "unknown key" + _suggest(str(key), FEATURE_KEYS,
                                                                       _KEY_ALIASES)
                              + f"; valid keys: {', '.join(FEATURE_KEYS)}")
    ftype = _parse_type(body.get("type"), f"{path}.type")
    source, keys = _parse_source(name, body.get("from", name), f"{path}.from", "from" in body,
                                 columns, nested)
    null_values = _parse_null_values(body.get("null_values", source_nulls), f"{path}.null_values")
    unit, time_format, timezone, ambiguous = _parse_timestamp(body, ftype, path)
    shape = _parse_shape(body.get("shape", ()), f"{path}.shape")
    required = _parse_bool(body.get("required", True), f"{path}.required")
    allow_nan = _parse_bool(body.get("allow_nan", False), f"{path}.allow_nan")
    if "allow_nan" in body and ftype != "float":
        raise ConfigError(f"{path}.allow_nan", f"applies to float features only; remove it "
                          f"(this feature is {ftype})")
    max_bytes = _parse_max_bytes(body, ftype, f"{path}.max_bytes")
    vocabulary = _parse_vocabulary(body, ftype, f"{path}.vocabulary")
    lo = _parse_bound(body, "min", ftype, vocabulary, path)
    hi = _parse_bound(body, "max", ftype, vocabulary, path)
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError(f"{path}.min", f"min ({lo}) is greater than max ({hi}); swap them")
    values = _parse_values(body, ftype, vocabulary, lo, hi, max_bytes, f"{path}.values")
    default = body.get("default")
    if isinstance(default, list):
        default = tuple(default)
    return FeatureSpec(name=name, type=ftype, source=source, shape=shape, required=required,
                       default=default, min=lo, max=hi, values=values, vocabulary=vocabulary,
                       max_bytes=max_bytes, allow_nan=allow_nan, path=keys,
                       null_values=null_values, unit=unit, format=time_format,
                       timezone=timezone, ambiguous=ambiguous)


def _suggest(word: str, choices: Sequence[str], aliases: Mapping[str, str]) -> str:
    lowered = word.lower()
    if lowered in aliases:
        return f"; did you mean `{aliases[lowered]}`?"
    close = difflib.get_close_matches(lowered, choices, n=1, cutoff=0.5)
    return f"; did you mean `{close[0]}`?" if close else ""


def _parse_type(value: Any, path: str) -> str:
    if value is None:
        raise ConfigError(path, f"missing; set `type:` to one of {', '.join(FEATURE_TYPES)}")
    if not isinstance(value, str) or value not in FEATURE_TYPES:
        raise ConfigError(path, f"unknown type {value!r}"
                          + _suggest(str(value), FEATURE_TYPES, _TYPE_ALIASES)
                          + f"; use one of {', '.join(FEATURE_TYPES)}")
    return value


def _parse_source(name: str, value: Any, path: str, explicit: bool,
                  columns: list[str] | None, nested: bool = True
                  ) -> tuple[str, tuple[str, ...] | None]:
    """(name shown for the column, path of keys or None), by `source_path`'s rule."""
    try:
        keys = source_path(value)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None
    if keys is not None and not nested:
        raise ConfigError(path, "a list of keys addresses nested values, which this "
                          "source's rows do not hold; name one column")
    if keys is None:
        shown = top = value[0] if isinstance(value, (list, tuple)) else value
    else:
        shown, top = path_text(keys), keys[0]
    if columns is not None and top not in columns:
        hint = "" if explicit else (" (without `from`, the feature's name is used as the "
                                    "column name)")
        raise ConfigError(path, f"the source has no column {top!r}{hint}"
                          f"{_column_hint(top, columns, nested)}; "
                          f"columns: {', '.join(sorted(columns))}")
    return shown, keys


def _column_hint(column: str, columns: Sequence[str], nested: bool) -> str:
    """"; did you mean ...?" for a column the source lacks: the list form
    when a dotted name starts with a column (a path into nested values is
    written as a list of keys), else the closest column's name."""
    suggestion = nested_path_hint(column, columns) if nested else None
    if suggestion is None:
        close = difflib.get_close_matches(column, columns, n=1, cutoff=0.6)
        suggestion = f"`{close[0]}`" if close else None
    return f"; did you mean {suggestion}?" if suggestion else ""


def _parse_null_values(value: Any, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, "must be a list of text values read as missing, e.g. "
                          "[\"\", NA, \"-\"] (quote values YAML reads otherwise, such as null)")
    value = tuple(dict.fromkeys(value))
    return None if value == ("",) else value


def _parse_timestamp(body: Mapping, ftype: str, path: str
                     ) -> tuple[str | None, str | None, str | None, str | None]:
    if ftype != "timestamp":
        for key in _TIMESTAMP_KEYS:
            if key in body:
                raise ConfigError(f"{path}.{key}", f"applies to timestamp features only; "
                                  f"remove it (this feature is {ftype})")
        return None, None, None, None
    unit = body.get("unit", "s")
    if unit not in TIMESTAMP_UNITS:
        raise ConfigError(f"{path}.unit", f"unknown unit {unit!r}; use one of "
                          f"{', '.join(TIMESTAMP_UNITS)}")
    time_format = body.get("format", "iso8601")
    if not isinstance(time_format, str) or not time_format:
        raise ConfigError(f"{path}.format", "must be `iso8601` or a strptime pattern such as "
                          "'%d/%m/%Y %H:%M'")
    if time_format != "iso8601" and "%" not in time_format:
        raise ConfigError(f"{path}.format", f"{time_format!r} is neither `iso8601` nor a "
                          "strptime pattern (it has no % directive), e.g. '%Y-%m-%d'")
    timezone = body.get("timezone", "UTC")
    if not isinstance(timezone, str):
        raise ConfigError(f"{path}.timezone", f"must be a zone name such as UTC or "
                          f"Europe/Paris, not {timezone!r}")
    try:
        zone(timezone)
    except ValueError as error:
        raise ConfigError(f"{path}.timezone", str(error)) from None
    ambiguous = body.get("ambiguous", "error")
    if ambiguous not in AMBIGUOUS:
        raise ConfigError(f"{path}.ambiguous", f"unknown choice {ambiguous!r} for a local "
                          f"time a daylight-saving change repeats; use one of "
                          f"{', '.join(AMBIGUOUS)}")
    return unit, time_format, timezone, ambiguous


def _parse_shape(value: Any, path: str) -> tuple[int, ...]:
    fix = "use [] (one value), [N] with N > 0 (exactly N values) or [-1] (any number of values)"
    if not isinstance(value, (list, tuple)):
        raise ConfigError(path, f"must be a list; {fix}")
    if len(value) == 0:
        return ()
    if len(value) > 1:
        raise ConfigError(path, f"multi-dimensional shapes are not supported; store the "
                          f"values flattened with [N] or [-1] ({fix})")
    n = value[0]
    if isinstance(n, bool) or not isinstance(n, int) or not (n > 0 or n == -1):
        raise ConfigError(path, f"invalid shape {list(value)!r}; {fix}")
    return (n,)


def _parse_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false, not {value!r}")
    return value


def _parse_max_bytes(body: Mapping, ftype: str, path: str) -> int | None:
    if "max_bytes" not in body:
        return None
    value = body["max_bytes"]
    if ftype not in ("bytes", "string"):
        raise _bound_for_other_type(path, "bytes and string", ftype)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(path, f"must be a positive integer (a byte count), not {value!r}")
    return value


# The keys that bound a type's values: a bound given to another type points
# to these, and only to keys that type accepts (timestamps take none).
_BOUND_KEYS = {"int64": "min/max", "float": "min/max",
               "bytes": "max_bytes to limit lengths", "string": "max_bytes to limit lengths"}


def _bound_for_other_type(path: str, types: str, ftype: str) -> ConfigError:
    instead = _BOUND_KEYS.get(ftype)
    hint = f" or use {instead}" if instead else (
        f"; a {ftype} feature takes no bounds (`values` can list the allowed ones)")
    return ConfigError(path, f"applies to {types} features only; remove it "
                       f"(this feature is {ftype}){hint}")


def _parse_vocabulary(body: Mapping, ftype: str, path: str) -> tuple[str, ...] | str | None:
    if "vocabulary" not in body:
        return None
    value = body["vocabulary"]
    if ftype != "int64":
        raise ConfigError(path, f"a vocabulary maps text labels to int64 ids, so the feature "
                          f"must be `type: int64` (it is {ftype}); to restrict text values "
                          f"use `values:` instead")
    if value == "auto":
        return "auto"
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(path, "must be `auto` or a non-empty list of labels, e.g. [cat, dog]")
    seen = set()
    for i, label in enumerate(value):
        if not isinstance(label, str):
            raise ConfigError(path, f"label {i} is {label!r} ({type(label).__name__}); labels "
                              f"are text: quote it in the YAML")
        if label in seen:
            raise ConfigError(path, f"label {label!r} appears twice; each label needs one id")
        seen.add(label)
    return tuple(value)


def _parse_bound(body: Mapping, key: str, ftype: str, vocabulary: Any, path: str):
    if key not in body:
        return None
    value = body[key]
    path = f"{path}.{key}"
    if ftype not in ("int64", "float"):
        raise _bound_for_other_type(path, "int64 and float", ftype)
    if vocabulary is not None:
        raise ConfigError(path, "cannot be combined with a vocabulary (ids are 0..N-1); "
                          "remove it")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, f"must be a number, not {value!r}")
    if ftype == "int64":
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(path, f"must be an integer for an int64 feature, not {value!r}")
            value = int(value)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ConfigError(path, f"{value} does not fit in int64")
    elif math.isnan(value):
        raise ConfigError(path, "must be a number, not NaN")
    return value


def _parse_values(body: Mapping, ftype: str, vocabulary: Any, lo, hi, max_bytes,
                  path: str) -> tuple | None:
    if "values" not in body:
        return None
    value = body["values"]
    if vocabulary is not None:
        raise ConfigError(path, "cannot be combined with a vocabulary (the vocabulary is "
                          "already the allowed set); remove one of them")
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(path, "must be a non-empty list of allowed values")
    allowed = []
    for i, item in enumerate(value):
        where = f"value {i} ({item!r})"
        if ftype in ("string", "bytes"):
            if not isinstance(item, str):
                raise ConfigError(path, f"{where} must be text for a {ftype} feature; quote it")
            if max_bytes is not None and len(item.encode("utf-8", "surrogatepass")) > max_bytes:
                raise ConfigError(path, f"{where} is longer than max_bytes ({max_bytes})")
        else:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ConfigError(path, f"{where} must be a number for a {ftype} feature")
            if ftype == "int64":
                if isinstance(item, float):
                    if not item.is_integer():
                        raise ConfigError(path, f"{where} must be an integer")
                    item = int(item)
                if not INT64_MIN <= item <= INT64_MAX:
                    raise ConfigError(path, f"{where} does not fit in int64")
            elif math.isnan(item):
                raise ConfigError(path, f"{where}: NaN cannot be an allowed value; use allow_nan")
            if (lo is not None and item < lo) or (hi is not None and item > hi):
                raise ConfigError(path, f"{where} is outside min/max, so it could never be "
                                  f"accepted; fix the list or the bounds")
        allowed.append(item)
    return tuple(allowed)
