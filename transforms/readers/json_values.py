"""What a JSON value in a row is, the one rule of both JSON readers (`jsonl`, `json_array`).

Values are as `json.loads` gives them, except a number too large for a
double (``1e999``), which is kept exactly as a `decimal.Decimal` so that the
checks report it (``float32_overflow``, ``int64_overflow`` for an int64
feature, ``type_mismatch`` for text, as any number) rather than take it as
inf, or as text a string feature would store. Integers of any size stay Python
ints (the checks give ``int64_overflow`` beyond int64). Strings are kept as
written, unpaired surrogates included (``"\\ud800"``, ``"\\udc00"``): the
checks make such text ``invalid_utf8`` for the row, never ``?`` nor the end of
the file. JSON nested deeper than `MAX_JSON_DEPTH` levels is refused by the
readers before anything walks it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

__all__ = ["DECODER", "MAX_JSON_DEPTH", "json_depth_exceeds", "kind_of"]

# JSON nested deeper than this would exhaust the stack of whatever later walks
# the value (checks, dead-letter serialisation), so it is refused at read time.
MAX_JSON_DEPTH = 64


def _finite_or_decimal(literal: str) -> float | Decimal:
    """A JSON number with a fraction or exponent as Python's float, unless
    even a double cannot hold it (``1e999``): then its exact Decimal (see
    the module)."""
    number = float(literal)
    return number if number - number == 0.0 else Decimal(literal)


# (the callback costs no more than json.loads's own float parsing: within
# 3% on lines of four floats)
DECODER = json.JSONDecoder(parse_float=_finite_or_decimal)


def json_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when `value` nests objects/arrays more than `limit` levels deep
    (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def kind_of(value: Any) -> str:
    """The JSON kind of a parsed value, for messages ("a JSON array ...")."""
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number")
