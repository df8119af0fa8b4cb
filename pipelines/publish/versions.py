"""Version names: expanding ``{date}``/``{datetime}`` and checking the result.

A version name becomes a directory under the output root, so it must be a
safe directory name that cannot be mistaken for the staging area or the
``LATEST`` pointer. Errors are `schemas.errors.ConfigError` (key
``version``; the CLI exits 2).
"""

from __future__ import annotations

import datetime as _dt
import re

from ...schemas.errors import ConfigError
from ...transforms.layout import LATEST_FILE

__all__ = ["check_version_name", "resolve_version"]

_VERSION_CHARS = re.compile(r"^[A-Za-z0-9._+=-]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def resolve_version(template: str, now: _dt.datetime | None = None) -> str:
    """Expands ``{date}`` (UTC YYYYMMDD) and ``{datetime}`` (UTC
    YYYYMMDDTHHMMSS) in a version template and checks the resulting name.
    Raises `ConfigError` (key ``version``) for other placeholders or a name
    that cannot be a directory name."""
    if not isinstance(template, str):
        raise ConfigError("version", f"must be a string, got {type(template).__name__}")
    now = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    values = {"date": now.strftime("%Y%m%d"), "datetime": now.strftime("%Y%m%dT%H%M%S")}

    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError("version", f"unknown placeholder {{{name}}} in {template!r}; "
                              "only {date} and {datetime} are allowed")
        return values[name]

    resolved = _PLACEHOLDER.sub(substitute, template)
    if "{" in resolved or "}" in resolved:
        raise ConfigError("version", f"unbalanced brace in {template!r}")
    check_version_name(resolved)
    return resolved


def check_version_name(version: str) -> None:
    """Raises `ConfigError` unless `version` is a safe directory name."""
    problem = None
    if not version:
        problem = "is empty"
    elif "/" in version or "\\" in version:
        problem = "contains a path separator"
    elif ".." in version:
        problem = "contains '..'"
    elif any(ch.isspace() for ch in version):
        problem = "contains whitespace"
    elif version.startswith("."):
        problem = "starts with '.' (names starting with '.' are reserved for staging)"
    elif version == LATEST_FILE:
        problem = f"is {LATEST_FILE!r}, the name of the pointer file"
    elif len(version) > 200:
        problem = "is longer than 200 characters"
    elif not _VERSION_CHARS.match(version):
        problem = "may only use letters, digits and . _ + = -"
    if problem:
        raise ConfigError("version", f"{version!r} {problem}")
