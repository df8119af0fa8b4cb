"""Errors raised while reading a config: each names the key path at fault."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """An invalid dataset config.

    key: dotted path of the offending key, e.g. ``features.label.vocabulary``.
    problem: what is wrong and how to fix it.
    """

    def __init__(self, key: str, problem: str):
        # Messages quote what the config or the data held (a key, a value, a
        # list of columns), which may be huge: a CSV header of a million
        # columns once made an 8.9 MB message. Every message is bounded here.
        key = _bounded(str(key), MAX_KEY_CHARS)
        problem = _bounded(str(problem), MAX_PROBLEM_CHARS)
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


MAX_KEY_CHARS = 200
MAX_PROBLEM_CHARS = 2000


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"
