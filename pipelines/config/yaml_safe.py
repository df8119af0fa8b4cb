"""YAML text in, plain data out: safe loading with limits on duplicates, depth and size.

Configs and runner profiles are data: only a `yaml.SafeLoader` subclass ever
reads them (no tags that construct objects), duplicate keys are refused, and
documents that nest or expand (through aliases) far beyond any real config
are refused before anything walks them recursively.
"""

from __future__ import annotations

from typing import Any, Mapping

import yaml

from ...schemas.errors import ConfigError
from .keys import join_key

__all__ = ["MAX_CONFIG_BYTES", "check_shape", "safe_load"]

MAX_CONFIG_BYTES = 1 << 20


# A real config is a few levels deep and has a few hundred values. Far beyond
# that it is hostile or broken (deep nesting would exhaust the stack of the
# recursive steps below; YAML aliases can expand a small file into billions of
# values), so it is refused before anything walks it.
_MAX_CONFIG_DEPTH = 32


_MAX_CONFIG_VALUES = 100_000


def check_shape(data: Any) -> None:
    """Raises ConfigError for data nested deeper than `_MAX_CONFIG_DEPTH`
    (which includes any self-referencing structure) or holding more than
    `_MAX_CONFIG_VALUES` values once YAML aliases are expanded. Iterative, and
    stops counting at the limit, so hostile input costs bounded work."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    seen = 0
    while stack:
        value, depth, key = stack.pop()
        seen += 1
        if seen > _MAX_CONFIG_VALUES:
            raise ConfigError(key, f"the config holds more than {_MAX_CONFIG_VALUES} values "
                              "(counting each use of a YAML alias); is it the right file?")
        if isinstance(value, Mapping):
            children = [(join_key(key, str(k)), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        if depth >= _MAX_CONFIG_DEPTH:
            raise ConfigError(key, f"nested deeper than {_MAX_CONFIG_DEPTH} levels (or refers "
                              "to itself through a YAML alias)")
        stack.extend((child, depth + 1, child_key) for child_key, child in children)


class _StrictSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses duplicate keys (PyYAML keeps the last one
    silently, which hides typos and merge mistakes).

    Merge keys (``<<: *defaults``) work as in YAML 1.1: the merged mapping's
    keys come first and the mapping's own keys override them; only a key
    written twice in the mapping itself is a duplicate."""

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            # e.g. `!!set` on a scalar: the base class raises its YAML error.
            return super().construct_mapping(node, deep=deep)
        own = [(key_node, value) for key_node, value in node.value
               if key_node.tag != _MERGE_TAG]
        if len(own) != len(node.value):
            self.flatten_mapping(node)  # raises a YAML error for a bad merge value
        seen = {}
        for key_node, _ in own:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key; the base class reports it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice (first on line "
                    f"{seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_MERGE_TAG = "tag:yaml.org,2002:merge"


_StrictSafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictSafeLoader.construct_mapping)


def safe_load(text: str, *, origin: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        # PyYAML composes nested collections recursively.
        raise ConfigError("", f"{origin}: invalid YAML: nested too deeply to parse") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark else origin
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError("", f"{where}: invalid YAML: {problem}") from None
