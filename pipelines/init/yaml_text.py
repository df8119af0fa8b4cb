"""init's YAML text: every key and value written through PyYAML's safe dumper.

One quoting rule for the whole config: PyYAML's safe dumper quotes exactly the
scalars that its (YAML 1.1) loader would read as something else (`NULL`,
`True`, `ON`, `~`, `1.5`, `x: y`, control characters), and the config is
read back by that loader, so what is read is what was written.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["comment", "flow"]


def _dump(value: Any, style: str | None) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, default_style=style,
                          allow_unicode=True, sort_keys=False, width=float("inf"))
    # A plain scalar document ends with an explicit end marker; a value on one
    # line of a mapping has no use for it.
    return text.removesuffix("\n...\n").removesuffix("\n")


def _scalar(value: Any) -> str:
    text = _dump(value, None)
    if not text.isprintable():
        # The dumper folds text holding line breaks (also U+0085, U+2028) over
        # several lines, where a loader may read them as spaces; a
        # double-quoted scalar escapes them and keeps the feature on one line.
        text = _dump(value, '"')
    return text


def flow(value: Any) -> str:
    """`value` (dicts, lists, text, numbers, booleans, None) as one line of flow YAML."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return _scalar(value)


def comment(text: str) -> str:
    """`text` fit for a YAML comment: on one line (line breaks and other
    control characters written as escapes, which a comment cannot hold)."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
