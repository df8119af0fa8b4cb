"""A stats.json read back: checks that an earlier version's document holds what drift reads, of the types it needs.

An earlier version's files are input like any other: whatever wrote them
(an older recordforge, a hand edit, damage), `compare` and the gates must
never meet a count that is not a count. `stored_statistics_problem` says
where the first field drift would read is missing or wrong, e.g.
``splits.train.num_examples: must be a whole number 0 or more, not -5``;
None when the document can serve as a baseline. Fields drift does not read
are not judged.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from .plan import FORMAT, KINDS

__all__ = ["StoredStatisticsError", "stored_statistics_problem"]


class StoredStatisticsError(ValueError):
    """A field of a stored stats.json that drift cannot use; `where` is its
    path in the document (``splits.train.features.price.numeric.nan``)."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


def stored_statistics_problem(document: Any) -> str | None:
    """Why `document` (parsed stats.json) cannot be compared with, or None."""
    try:
        _check_document(document)
    except StoredStatisticsError as error:
        return str(error)
    return None


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} {text[:37]}..."


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoredStatisticsError(where, f"must be a whole number 0 or more, not "
                                    f"{_describe(value)}")
    return value


def _optional_fraction(value: Any, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= 1:
        raise StoredStatisticsError(where, f"must be a fraction between 0 and 1, not "
                                    f"{_describe(value)}")


def _mapping(value: Any, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise StoredStatisticsError(where, f"must be an object, not {_describe(value)}")
    return value


def _optional_text(value: Any, where: str) -> None:
    if value is not None and not isinstance(value, str):
        raise StoredStatisticsError(where, f"must be text, not {_describe(value)}")


def _check_document(document: Any) -> None:
    document = _mapping(document, "")
    if document.get("format") != FORMAT:
        raise StoredStatisticsError("format", f"must be {FORMAT!r}, not "
                                    f"{_describe(document.get('format'))}")
    for split, info in _mapping(document.get("splits"), "splits").items():
        where = f"splits.{split}"
        info = _mapping(info, where)
        _count(info.get("num_examples"), f"{where}.num_examples")
        for name, entry in _mapping(info.get("features"), f"{where}.features").items():
            _check_entry(_mapping(entry, f"{where}.features.{name}"),
                         f"{where}.features.{name}")


def _check_entry(entry: Mapping, where: str) -> None:
    kind = entry.get("kind")
    if kind not in KINDS:
        raise StoredStatisticsError(f"{where}.kind", f"must be one of {', '.join(KINDS)}, not "
                                    f"{_describe(kind)}")
    _optional_text(entry.get("type"), f"{where}.type")
    for field in ("examples", "num_values"):
        _count(entry.get(field), f"{where}.{field}")
    _optional_fraction(entry.get("missing_fraction"), f"{where}.missing_fraction")
    _SECTIONS[kind](_mapping(entry.get(kind), f"{where}.{kind}"), f"{where}.{kind}")


def _check_numeric(section: Mapping, where: str) -> None:
    _count(section.get("count"), f"{where}.count")
    for field in ("nan", "inf"):
        if field in section:
            _count(section[field], f"{where}.{field}")
    _optional_text(section.get("sketch"), f"{where}.sketch")


def _check_bytes(section: Mapping, where: str) -> None:
    _optional_text(section.get("sketch"), f"{where}.sketch")


def _check_vocabulary(section: Mapping, where: str) -> None:
    for label, count in _mapping(section.get("counts"), f"{where}.counts").items():
        _count(count, f"{where}.counts.{label}")


def _check_string(section: Mapping, where: str) -> None:
    top = section.get("top_values")
    if not isinstance(top, list):
        raise StoredStatisticsError(f"{where}.top_values", f"must be a list, not "
                                    f"{_describe(top)}")
    for index, item in enumerate(top):
        item = _mapping(item, f"{where}.top_values[{index}]")
        if not isinstance(item.get("value"), str):
            raise StoredStatisticsError(f"{where}.top_values[{index}].value", "must be text, "
                                        f"not {_describe(item.get('value'))}")
        _count(item.get("count"), f"{where}.top_values[{index}].count")
    if not isinstance(section.get("exact"), bool):
        raise StoredStatisticsError(f"{where}.exact", f"must be true or false, not "
                                    f"{_describe(section.get('exact'))}")


_SECTIONS: dict[str, Callable[[Mapping, str], None]] = {
    "numeric": _check_numeric, "vocabulary": _check_vocabulary, "string": _check_string,
    "bytes": _check_bytes}
