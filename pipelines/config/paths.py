"""Paths in a config: local paths (made absolute) and fsspec URLs (kept as written).

A relative path is relative to the current working directory (like every
command-line tool), not to the config file; the dataclasses hold absolute
paths so worker processes with another working directory read the same files.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ...schemas.errors import ConfigError
from .keys import describe

__all__ = ["GLOB_CHARS", "absolute", "is_url", "local_path", "parse_path"]

_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


GLOB_CHARS = re.compile(r"[*?\[]")


def is_url(path: str) -> bool:
    return bool(_URL_RE.match(path)) and not path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def absolute(path: str) -> str:
    return path if is_url(path) else os.path.abspath(local_path(path))


def parse_path(value: Any, key: str, example: str) -> str:
    if value is None:
        raise ConfigError(key, f"missing; add e.g. `{key.split('.')[-1]}: {example}`")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a local path or URL (text), not {describe(value)}")
    return value
