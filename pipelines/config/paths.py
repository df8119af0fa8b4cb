"""Paths in a config: local paths (made absolute) and fsspec URLs (kept as written).

A relative path is relative to the current working directory (like every
command-line tool), not to the config file; ``~`` and ``~user`` at its start
are the home directory, as in a shell (a config or a quoted ``--output`` is
not expanded by one). The dataclasses hold absolute paths so worker
processes with another working directory read the same files. A URL must
name a filesystem fsspec knows, with its package installed: checked here,
before anything runs, so a typo or a missing extra is a config error.
"""

from __future__ import annotations

import os
import re
from typing import Any

import fsspec

from ...schemas.errors import ConfigError
from .keys import describe

__all__ = ["GLOB_CHARS", "absolute", "check_url", "is_url", "local_path", "parse_path",
           "url_protocol"]

_COMMON_PROTOCOLS = ("gs", "s3", "abfs", "hdfs", "http")

_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


GLOB_CHARS = re.compile(r"[*?\[]")


def is_url(path: str) -> bool:
    return bool(_URL_RE.match(path)) and not path.startswith("file://")


def local_path(path: str) -> str:
    """A local path or file:// URL as a path, with a leading ``~`` expanded."""
    return os.path.expanduser(path[len("file://"):] if path.startswith("file://") else path)


def url_protocol(path: str) -> str:
    """The scheme of a URL, lower case (``"s3"`` for ``s3://bucket/x``)."""
    return path.split("://", 1)[0].lower()


def check_url(path: str, key: str) -> None:
    """Raises ConfigError when URL `path` names no filesystem fsspec knows,
    or one whose package is not installed."""
    protocol = url_protocol(path)
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as error:
        raise ConfigError(key, f"{protocol}:// needs a package that is not installed: {error} "
                          "(recordforge's extras: pip install 'recordforge[gcs]', "
                          "'recordforge[s3]')") from None
    except ValueError:
        known = ", ".join(f"{name}://" for name in _COMMON_PROTOCOLS)
        raise ConfigError(key, f"unknown protocol {protocol!r}: no filesystem is registered "
                          f"for {protocol}://; use a local path or a URL such as {known}"
                          ) from None


def absolute(path: str) -> str:
    return path if is_url(path) else os.path.abspath(local_path(path))


def parse_path(value: Any, key: str, example: str) -> str:
    if value is None:
        raise ConfigError(key, f"missing; add e.g. `{key.split('.')[-1]}: {example}`")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a local path or URL (text), not {describe(value)}")
    if is_url(value):
        check_url(value, key)
    return value
