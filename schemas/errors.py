"""Errors raised while reading a config: each names the key path at fault."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """An invalid dataset config.

    key: dotted path of the offending key, e.g. ``features.label.vocabulary``.
    problem: what is wrong and how to fix it.
    """

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem
