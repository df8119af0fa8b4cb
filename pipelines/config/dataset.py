"""A whole dataset config: YAML file or dict in, checked `DatasetConfig` out.

`load_config` reads a dataset config (YAML, safe loading only), applies the
command line's ``--set key.path=value`` overrides and ``--output URL``, and
checks everything a build needs before any pipeline starts. Every mistake
raises `schemas.errors.ConfigError` naming the dotted key at fault and how to
fix it; nothing is checked later that could have been checked here.
`DatasetConfig.resolved` (recorded in the manifest) keeps the paths as
written, so the manifest does not depend on where the build ran.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import datetime as _dt
import math
import os
import re
from typing import Any, Mapping, Sequence

from ...schemas.errors import ConfigError
from ...schemas.feature_config import parse_features
from ..publish import resolve_version
from .about import parse_about
from .cache import parse_cache
from .keys import check_keys, describe
from .model import NESTED_SOURCE_TYPES, DatasetConfig
from .output import parse_dead_letter, parse_output
from .overrides import apply_override, set_value
from .source import parse_source, source_columns
from .validation import parse_validation
from .yaml_safe import MAX_CONFIG_BYTES, check_shape, safe_load

__all__ = ["config_from_dict", "load_config"]

_TOP_KEYS = ("name", "version", "source", "features", "splits", "key", "output", "dead_letter",
             "validation", "cache", "dataset")


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


_SPLIT_RE = re.compile(r"^[a-z0-9_]+$")


def load_config(path_or_dict: "str | os.PathLike | Mapping | DatasetConfig",
                overrides: "Sequence[str] | Mapping[str, Any] | None" = (),
                output: str | None = None, *, rows_given: bool = False) -> DatasetConfig:
    """Reads, overrides and checks a dataset config.

    path_or_dict: the path of a YAML file (local), the config as a mapping
      with the YAML's keys, or a `DatasetConfig` already loaded (returned
      as is unless overridden).
    overrides: ``"a.b=value"`` strings (the command line's ``--set``; each
      value is parsed as YAML, so ``output.shuffle=false`` gives a bool and
      ``splits={a: 0.5, b: 0.5}`` a mapping), or a mapping ``{"a.b": value}``
      of Python values used as given; applied before validation.
    output: replaces ``output.path``.
    rows_given: the rows come from a pipeline (`WriteDataset`), so the
      ``source:`` section is not read (it may be left out).
    Raises ConfigError (key "" for a file that cannot be read or parsed).
    """
    strings, values = ((), overrides) if isinstance(overrides, Mapping) else (overrides or (), None)
    if isinstance(path_or_dict, DatasetConfig):
        if not strings and not values and output is None:
            return path_or_dict
        path_or_dict = _reloadable(path_or_dict.resolved)
    if isinstance(path_or_dict, Mapping):
        return config_from_dict(path_or_dict, strings, output, values=values,
                                rows_given=rows_given)
    path = os.fspath(path_or_dict)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("", f"config file {path} does not exist") from None
    except OSError as error:
        raise ConfigError("", f"cannot read config file {path}: {error.strerror or error}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError("", f"config file {path} is larger than 1 MiB; is it the right file?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError("", f"config file {path} is not UTF-8 text (byte {error.start})") from None
    raw = safe_load(text, origin=path)
    if raw is None:
        raise ConfigError("", f"config file {path} is empty; start from configs/examples/")
    return config_from_dict(raw, overrides=strings, output=output, values=values,
                            rows_given=rows_given)


def config_from_dict(raw: Any, overrides: Sequence[str] = (), output: str | None = None, *,
                     values: Mapping[str, Any] | None = None, rows_given: bool = False
                     ) -> DatasetConfig:
    """Checks an already-parsed config (the YAML document as plain data).

    values: ``{dotted key: value}`` overrides given as Python values (the
      library's ``**{"output.path": url}``), applied after `overrides`.
    rows_given: the caller hands the rows over (`WriteDataset`), so the
      ``source:`` section is not read (it may be left out); then
      `DatasetConfig.source` is None, the columns rows offer are unknown,
      and `vocabulary: auto` is
      refused (nothing is known before the run).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError("", "the config must be a YAML mapping with keys such as name, "
                          f"version, source, features, output (got {type(raw).__name__})")
    check_shape(raw)
    data = copy.deepcopy(dict(raw))
    for assignment in overrides:
        data = apply_override(data, assignment)
    for key, value in (values or {}).items():
        data = set_value(data, key, value)
    check_shape(data)  # override values are YAML too
    if output is not None:
        if not isinstance(data.get("output"), (Mapping, type(None))):
            raise ConfigError("output", "must be a mapping with path, compression, shard_size, shuffle")
        data["output"] = {**(data.get("output") or {}), "path": output}
    return parse_dataset(data, rows_given=rows_given)


def parse_dataset(data: dict, *, rows_given: bool = False) -> DatasetConfig:
    check_keys(data, _TOP_KEYS, "")
    name = _parse_name(data.get("name"))
    version = _parse_version(data.get("version"))
    if rows_given:  # the rows are handed over: a source section is not read
        source, source_resolved, known_columns = None, None, None
    else:
        source, source_resolved = parse_source(data.get("source"))
        known_columns = source_columns(source)
    features = parse_features(data.get("features"), key_path="features",
                              known_columns=known_columns,
                              nested=source is None or source.type in NESTED_SOURCE_TYPES,
                              null_values=None if source is None else source.null_values)
    if source is None:
        _refuse_auto_vocabularies(features)
    splits = _parse_splits(data.get("splits"))
    key = _parse_key(data.get("key"), known_columns)
    output, output_resolved = parse_output(data.get("output"))
    dead_letter = parse_dead_letter(data.get("dead_letter"))
    validation, validation_resolved = parse_validation(data.get("validation"), features)
    cache, cache_resolved = parse_cache(data.get("cache"))
    about, about_resolved = parse_about(data.get("dataset"))
    resolved = {
        "name": name,
        "version": version,
        "source": source_resolved,
        "features": _plain(data["features"]),
        "splits": {split: fraction for split, fraction in splits},
        "key": key,
        "output": output_resolved,
        "dead_letter": dataclasses.asdict(dead_letter),
        "validation": validation_resolved,
        "cache": cache_resolved,
        "dataset": about_resolved,
    }
    return DatasetConfig(name=name, version=version, source=source, features=features,
                         splits=splits, key=key, output=output, dead_letter=dead_letter,
                         validation=validation, cache=cache, about=about, resolved=resolved)


def _reloadable(resolved: Mapping[str, Any]) -> dict:
    """A loaded config's `resolved` data as a config to load again: the
    source keys it fills with None for the other source types left out."""
    data = dict(resolved)
    if isinstance(data.get("source"), Mapping):
        data["source"] = {key: value for key, value in data["source"].items()
                          if value is not None}
    return data


def _refuse_auto_vocabularies(features) -> None:
    for spec in features:
        if spec.vocabulary == "auto":
            raise ConfigError(f"features.{spec.name}.vocabulary",
                              "`auto` needs a source to scan before the run; with rows handed "
                              "over by a pipeline, list the values, e.g. vocabulary: [cat, dog]")


def _parse_name(value: Any) -> str:
    if value is None:
        raise ConfigError("name", "missing; add e.g. `name: flowers`")
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ConfigError("name", f"{value!r} is not a valid dataset name; use letters, digits "
                          "and . _ - (starting with a letter or digit)")
    # The name keys the blake2b hash that assigns splits, and blake2b keys
    # are at most 64 bytes.
    if len(value.encode("utf-8")) > 64:
        raise ConfigError("name", "is longer than 64 characters; shorten it")
    return value


def _parse_version(value: Any) -> str:
    if value is None:
        raise ConfigError("version", 'missing; add e.g. `version: "1.0.0"` or, for scheduled '
                          'builds, `version: "{date}"`')
    if isinstance(value, Mapping) and len(value) == 1 and next(iter(value.values())) is None:
        # `version: {date}` unquoted is a YAML flow mapping {"date": None}.
        placeholder = next(iter(value))
        raise ConfigError("version", f"YAML reads an unquoted {{{placeholder}}} as a mapping; "
                          f'quote it: version: "{{{placeholder}}}" (on the command line: '
                          f"--set 'version=\"{{{placeholder}}}\"')")
    if not isinstance(value, str):
        raise ConfigError("version", f"must be text, not {describe(value)}; quote it in the "
                          f'YAML, e.g. version: "{value}"')
    resolve_version(value)  # raises ConfigError("version", ...) for a bad template
    return value


def _parse_splits(value: Any) -> tuple[tuple[str, float], ...]:
    if value is None:
        return (("train", 1.0),)
    if not isinstance(value, Mapping) or not value:
        raise ConfigError("splits", "must be a mapping of split name to fraction, e.g. "
                          "{train: 0.8, validation: 0.1, test: 0.1}")
    splits = []
    for name, fraction in value.items():
        key = f"splits.{name}"
        if not isinstance(name, str) or not _SPLIT_RE.match(name):
            hint = " (YAML reads unquoted yes/no/on/off as booleans: quote it)" \
                if isinstance(name, bool) else ""
            raise ConfigError(key, f"{name!r} is not a valid split name; use lower-case "
                              f"letters, digits and _{hint}")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
                or not math.isfinite(fraction):
            raise ConfigError(key, f"must be a number between 0 and 1, not {fraction!r}")
        if fraction <= 0:
            raise ConfigError(key, f"must be greater than 0 (got {fraction}); remove the split "
                              "instead")
        splits.append((name, float(fraction)))
    total = math.fsum(f for _, f in splits)
    if abs(total - 1.0) > 1e-6:
        listed = ", ".join(f"{n}: {f:g}" for n, f in splits)
        raise ConfigError("splits", f"fractions must sum to 1, but {listed} sum to {total:g}")
    return tuple(splits)


def _parse_key(value: Any, known_columns: Sequence[str] | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError("key", f"must be the name of a source column, not {value!r}")
    if known_columns is not None and value not in known_columns:
        close = difflib.get_close_matches(value, known_columns, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise ConfigError("key", f"the source has no column {value!r}{hint}; columns: "
                          f"{', '.join(known_columns)}")
    return value


def _plain(value: Any) -> Any:
    """YAML data as JSON-safe data (YAML can produce dates and sets)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value
