"""`--set key.path=value`: one override applied to the config's plain data."""

from __future__ import annotations

import copy
from typing import Mapping

from ...schemas.errors import ConfigError
from .yaml_safe import safe_load

__all__ = ["apply_override", "set_value"]

def apply_override(data: dict, assignment: str) -> dict:
    """Returns a copy of `data` with one ``key.path=value`` override applied.

    The key path is matched greedily against existing keys, so a feature name
    holding dots (``features.img.v2.max=3``) still finds ``img.v2``.
    """
    if not isinstance(assignment, str) or "=" not in assignment:
        raise ConfigError("--set", f"expected KEY=VALUE (e.g. output.shard_size=512MB), got "
                          f"{assignment!r}")
    key_text, value_text = assignment.split("=", 1)
    key_text = key_text.strip()
    if not key_text or any(not part for part in key_text.split(".")):
        raise ConfigError("--set", f"empty key in {assignment!r}; write e.g. output.shuffle=false")
    value = safe_load(value_text, origin=f"--set {key_text}") if value_text.strip() else None
    return set_value(data, key_text, value)


def set_value(data: dict, key_text: str, value) -> dict:
    """Returns a copy of `data` with the dotted key `key_text` set to
    `value` (a Python value, used as given), matched as `apply_override`
    matches it."""
    if not isinstance(key_text, str) or not key_text.strip() \
            or any(not part for part in key_text.strip().split(".")):
        raise ConfigError("--set", f"empty key in {key_text!r}; write e.g. output.shuffle")
    key_text = key_text.strip()
    data = copy.deepcopy(data)
    node: dict = data
    parts = key_text.split(".")
    walked: list[str] = []
    while True:
        head = _longest_existing_key(node, parts)
        walked.append(head)
        parts = parts[len(head.split(".")):]
        if not parts:
            node[head] = value
            return data
        child = node.get(head)
        if child is None:
            child = node[head] = {}
        if not isinstance(child, dict):
            raise ConfigError(".".join(walked), f"is {type(child).__name__}, not a mapping, so "
                              f"--set {key_text}=... cannot set a key inside it")
        node = child


def _longest_existing_key(node: Mapping, parts: list[str]) -> str:
    for n in range(len(parts), 1, -1):
        candidate = ".".join(parts[:n])
        if candidate in node:
            return candidate
    return parts[0]
