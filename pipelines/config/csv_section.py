"""The `source.csv:` section: the CSV dialect and the texts read as missing."""

from __future__ import annotations

from typing import Any

from ...schemas.errors import ConfigError
from ...transforms.readers.csv_dialect import CSV_ENCODINGS, CsvOptions, check_encoding
from .keys import section

__all__ = ["parse_csv_section"]

_CSV_KEYS = ("delimiter", "quote", "header", "columns", "encoding", "null_values")

# Names people write for a tab; YAML's '\t' in single quotes is two characters.
_TAB_NAMES = {"\\t": "\t", "tab": "\t", "TAB": "\t"}


def parse_csv_section(value: Any) -> tuple[CsvOptions, tuple[str, ...] | None, dict]:
    """``source.csv`` -> (dialect, null_values or None for the default ``[""]``,
    the section as resolved for the manifest)."""
    body = section(value, "source.csv", _CSV_KEYS, required=False) or {}
    delimiter = _one_character(_TAB_NAMES.get(body.get("delimiter", ","),
                                              body.get("delimiter", ",")),
                               "source.csv.delimiter", 'e.g. ";", "|" or "\\t" (tab)')
    if delimiter in ("\n", "\r"):
        raise ConfigError("source.csv.delimiter", "cannot be a line end")
    quote = body.get("quote", '"')
    if quote in (None, "", False):
        quote = None
    else:
        quote = _one_character(quote, "source.csv.quote",
                               "e.g. '\"' or \"'\", or null for no quoting")
        if quote == delimiter or quote in ("\n", "\r"):
            raise ConfigError("source.csv.quote", f"{quote!r} cannot quote fields separated by "
                              f"{delimiter!r}; choose another character")
    header = body.get("header", True)
    if not isinstance(header, bool):
        raise ConfigError("source.csv.header", f"must be true (the first line names the "
                          f"columns) or false (set source.csv.columns), not {header!r}")
    columns = _parse_columns(body.get("columns"), header)
    encoding = body.get("encoding", "utf-8")
    if not isinstance(encoding, str):
        raise ConfigError("source.csv.encoding", f"must be one of {', '.join(CSV_ENCODINGS)}")
    try:
        encoding = check_encoding(encoding)
    except ValueError as error:
        raise ConfigError("source.csv.encoding", f"{error}; use one of "
                          f"{', '.join(CSV_ENCODINGS)}") from None
    nulls = body.get("null_values", [""])
    if isinstance(nulls, str):
        nulls = [nulls]
    if (not isinstance(nulls, (list, tuple)) or not all(isinstance(v, str) for v in nulls)):
        raise ConfigError("source.csv.null_values", "must be a list of text values read as "
                          'missing, e.g. ["", NA, "-"] (quote values YAML reads otherwise, '
                          "such as null or NaN)")
    nulls = tuple(dict.fromkeys(nulls))
    options = CsvOptions(delimiter=delimiter, quote=quote, header=header, columns=columns,
                         encoding=encoding)
    resolved = {"delimiter": delimiter, "quote": quote, "header": header,
                "columns": None if columns is None else list(columns), "encoding": encoding,
                "null_values": list(nulls)}
    return options, (None if nulls == ("",) else nulls), resolved


def _one_character(value: Any, key: str, example: str) -> str:
    if not isinstance(value, str) or len(value) != 1:
        raise ConfigError(key, f"must be one character, not {value!r}; {example}")
    return value


def _parse_columns(value: Any, header: bool) -> tuple[str, ...] | None:
    if header:
        if value is not None:
            raise ConfigError("source.csv.columns", "names the columns of files without a "
                              "header line; with header: true the header names them (set "
                              "header: false to use this list)")
        return None
    if value is None:
        raise ConfigError("source.csv.columns", "missing: with header: false, list the "
                          "column names in file order, e.g. columns: [id, name, price]")
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, str) and v for v in value)):
        raise ConfigError("source.csv.columns", "must be a non-empty list of column names "
                          "(text), in file order")
    duplicates = sorted({v for v in value if list(value).count(v) > 1})
    if duplicates:
        raise ConfigError("source.csv.columns", f"names {', '.join(map(repr, duplicates))} "
                          "more than once; each column needs its own name")
    return tuple(value)
