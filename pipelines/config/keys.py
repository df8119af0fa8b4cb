"""A config section's keys: unknown ones are refused with a did-you-mean hint."""

from __future__ import annotations

import difflib
from typing import Any, Mapping, Sequence

from ...schemas.errors import ConfigError

__all__ = ["check_keys", "describe", "join_key", "section"]

# Names people bring from other tools, which difflib does not find.
_KEY_ALIASES = {
    "dataset": "name", "dead_letters": "dead_letter", "deadletter": "dead_letter",
    "errors": "dead_letter", "schema": "features", "split": "splits", "sink": "output",
    "input": "source", "dir": "path", "directory": "path", "url": "path", "format": "type",
    "kind": "type", "shards": "shard_size", "shard_bytes": "shard_size",
    "compress": "compression", "codec": "compression", "label": "labels",
    "error_rate": "max_error_rate", "max_error": "max_errors", "exts": "extensions",
}


def join_key(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def check_keys(mapping: Mapping, allowed: Sequence[str], prefix: str) -> None:
    for key in mapping:
        if key in allowed:
            continue
        word = str(key)
        hint = ""
        if word.lower() in _KEY_ALIASES and _KEY_ALIASES[word.lower()] in allowed:
            hint = f"; did you mean `{_KEY_ALIASES[word.lower()]}`?"
        else:
            close = difflib.get_close_matches(word.lower(), allowed, n=1, cutoff=0.6)
            if close:
                hint = f"; did you mean `{close[0]}`?"
        raise ConfigError(join_key(prefix, word), f"unknown key{hint} (valid keys here: "
                          f"{', '.join(allowed)})")


def section(value: Any, key: str, allowed: Sequence[str], *, required: bool) -> dict:
    if value is None:
        if required:
            raise ConfigError(key, f"missing; add a `{key}:` mapping with keys "
                              f"{', '.join(allowed)}")
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping with keys {', '.join(allowed)}, not "
                          f"{describe(value)}")
    check_keys(value, allowed, key)
    return dict(value)


def describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else \
        type(value).__name__
