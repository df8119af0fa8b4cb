"""Dead-letter records: what every failed input row becomes.

One record per failed input row, in the JSON shape of the product contract:
``{"source", "row", "key", "stage", "reason", "feature", "message", "input",
"errors"}`` (``errors``: every fault of the row, the first being the one the
record names), plus ``rows`` for a record that stands for a whole file.
Reason codes are stable snake_case strings listed in `REASONS`; the README's
reason table is the user-facing copy of that list.
"""

from __future__ import annotations

import base64
import itertools
import math
from typing import Any, Mapping, Sequence

__all__ = ["MAX_INLINE_CHARS", "MAX_INLINE_ITEMS", "STAGES", "REASONS", "RowError",
           "counted_rows", "dead_letter", "row_faults", "json_safe", "printable_name", "printable_text",
           "rows_of"]

STAGES = ("read", "decode", "check", "encode")

# reason code -> one line for the README. Codes are part of the contract:
# never rename one, only add.
REASONS: dict[str, str] = {
    # stage "read": the input file or line could not be read as a row
    "read_error": "the file could not be read (I/O error, permission denied, vanished after listing)",
    "empty_file": "the file is empty (0 bytes)",
    "path_outside_root": "a path taken from the data points outside source.path (absolute, `..`, or a symlink leading out)",
    "csv_ragged_row": "a CSV row has more or fewer fields than the header",
    "json_invalid": "a JSONL line is not valid JSON or not a JSON object",
    "invalid_utf8": "text (a CSV/JSONL line, a JSON array element, a Parquet row's text, a `string` feature value, a file or folder name) is not valid UTF-8",
    "csv_bad_header": "a CSV file has no usable header row (empty, or duplicate column names); the file is not read",
    "csv_malformed": "a CSV record has broken quoting (an unterminated quoted field, text after a closing quote, or a bare CR)",
    "parquet_invalid": "a Parquet file or one of its row groups cannot be decoded",
    "unlabeled_image": "an image file has no label (no class folder, or no entry in the labels table)",
    "not_a_mapping": "an element handed to WriteDataset is not a mapping of column name to value",
    "labels_invalid": "a labels-table row lacks `file` or `label`, or lists a file already listed",
    "invalid_encoding": "CSV text is not valid in the file's declared `source.csv.encoding` (that record; a header or `utf-16` text: the file, or its rest)",
    "json_array_invalid": "a JSON file is not one array of objects, or an element of it is not an object",
    "avro_invalid": "an Avro file or one of its blocks cannot be decoded, a length or count of records in it is false, or a compressed block inflates past 256 MiB",
    "tfrecord_corrupt": "a TFRecord file has a record whose length or data checksum is wrong, or that ends early, or its gzip stream is damaged (the records before are kept; the rest of the file cannot be framed)",
    "example_invalid": "a TFRecord record is not a serialized tf.train.Example",
    # stage "decode": image bytes
    "image_corrupt": "the image data cannot be decoded (not an image, or a broken chunk/marker)",
    "image_truncated": "the image data ends early",
    "image_format_not_allowed": "the image format or color mode is not in source.image.formats",
    "image_too_small": "the image is smaller than source.image.min_size",
    "image_too_large": "the image is larger than source.image.max_size or exceeds the decompression-bomb pixel limit; it is never decoded",
    # stage "check": schema checks per feature
    "missing_value": "a required feature has no value and no default",
    "type_mismatch": "a value cannot be converted to the feature's declared type",
    "wrong_length": "the number of values does not match the feature's shape",
    "out_of_range": "a number is below `min` or above `max`",
    "not_allowed": "a value is not in the feature's `values` set",
    "unknown_label": "a value is not in the feature's vocabulary",
    "too_long": "a bytes/string value is longer than `max_bytes`",
    "nan_or_inf": "a float is NaN or infinite and `allow_nan` is false",
    "float32_overflow": "a float's magnitude is too large for float32 (it would become inf)",
    "int64_overflow": "an integer does not fit in int64",
    "invalid_timestamp": "text of a timestamp feature is not ISO 8601 or does not match the feature's `format`",
    "nonexistent_time": "a local time of a timestamp feature falls in a daylight-saving gap of its `timezone` (the clocks skip it)",
    "ambiguous_time": "a local time of a timestamp feature happens twice in its `timezone` (a daylight-saving overlap) and `ambiguous` is `error`",
    "duplicate": "the row equals an earlier row in the features `validation.duplicates` compares, and `validation.duplicates.dedupe` removes it (the record's `input.duplicate_of` names the row kept)",
    # stage "encode"
    "internal_error": "an unexpected error while converting the row (a bug: the message holds the traceback)",
}


class RowError(Exception):
    """A row cannot become an Example. Carries what its dead letter says."""

    def __init__(self, reason: str, message: str, *, feature: str | None = None,
                 stage: str = "check"):
        super().__init__(message)
        if reason not in REASONS:
            raise ValueError(f"unregistered dead-letter reason {reason!r}")
        if stage not in STAGES:
            raise ValueError(f"unknown dead-letter stage {stage!r}")
        self.reason = reason
        self.message = message
        self.feature = feature
        self.stage = stage

    def __reduce__(self):
        return (_rebuild_row_error, (self.reason, self.message, self.feature, self.stage))


def _rebuild_row_error(reason, message, feature, stage):
    return RowError(reason, message, feature=feature, stage=stage)


def dead_letter(*, source: str, row: int | None, key: Any, stage: str, reason: str,
                feature: str | None, message: str, input: Any, rows: int | None = 1,
                errors: Sequence[Mapping[str, Any]] | None = None) -> dict:
    """Builds one dead-letter record (a JSON-safe dict in the contract's shape).

    Every text in it can be written as UTF-8 (`printable_text`), whatever
    the failed row held: a record that cannot be encoded would fail the
    whole build where it is passed between steps, not just its row.

    `rows`: the input rows the record stands for (`rows_of`): 1 for a row;
    for a file, or the rest of one, that cannot be read, how many rows it
    held when that is known (0 for an empty file) or None when it is not.
    A record for other than one row says so in its ``rows`` field.

    `errors`: every fault of the row as ``{reason, feature, message}``, the
    one the record names first; default: that one alone."""
    if reason not in REASONS:
        raise ValueError(f"unregistered dead-letter reason {reason!r}")
    record = {
        "source": printable_text(source) if isinstance(source, str) else source,
        "row": row,
        "key": json_safe(key),
        "stage": stage,
        "reason": reason,
        "feature": printable_text(feature) if isinstance(feature, str) else feature,
        "message": printable_text(message),
        "input": json_safe(input),
        "errors": [_fault(fault) for fault in errors] if errors else [None],
    }
    # (keys sorted, as the sink writes nested objects)
    record["errors"][0] = {"feature": record["feature"], "message": record["message"],
                           "reason": record["reason"]}
    if rows != 1:
        record["rows"] = rows
    return record


def _fault(fault: Mapping[str, Any]) -> dict:
    feature = fault.get("feature")
    return {"feature": printable_text(feature) if isinstance(feature, str) else feature,
            "message": printable_text(str(fault.get("message", ""))),
            "reason": fault["reason"]}


def row_faults(first: RowError, more: Sequence[RowError]) -> list[dict]:
    """`first` and every other fault in `more` (repeats left out), as the
    ``errors`` of a dead letter."""
    faults, seen = [], set()
    for error in (first, *more):
        fault = (error.reason, error.feature, error.message)
        if fault not in seen:
            seen.add(fault)
            faults.append({"reason": error.reason, "feature": error.feature,
                           "message": error.message})
    return faults


def rows_of(record: Mapping) -> int | None:
    """How many input rows a dead-letter record stands for: 1 for a row, the
    rows of a file (or of its unread rest) that could not be read, or None
    when that number is unknown (a file that cannot be decoded, or is cut
    short)."""
    return record.get("rows", 1)


def counted_rows(record: Mapping) -> int:
    """The rows a record adds to the build's counts: `rows_of`, or 1 when
    that is unknown (such a record fails the error budget by itself)."""
    rows = record.get("rows", 1)
    return 1 if rows is None else rows


def _escape(char: str, file_name: bool) -> str:
    code = ord(char)
    if file_name and 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # the undecodable byte of an OS name
    return f"\\u{code:04x}"


def printable_text(text: str, *, file_name: bool = False) -> str:
    """`text` if it can be written as UTF-8, else `text` with each unpaired
    surrogate (U+D800-U+DFFF; JSON's ``"\\ud800"``, or how Python holds a
    file name's undecodable bytes) written as the escape ``\\ud800``, or
    with `file_name` as the byte it stands for, ``\\xe9``. Other text is
    kept as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(_escape(char, file_name) if "\ud800" <= char <= "\udfff" else char
                       for char in text)


def printable_name(path: str) -> str:
    """A file or folder name as rows, dead letters and the manifest show it:
    `printable_text` with undecodable bytes written ``\\xNN``."""
    return printable_text(path, file_name=True)


_MAX_INLINE_BYTES = 64
# A dead letter describes a row; it must not copy a hostile one whole (a CSV
# field of 200 MB, a row with a million columns). Beyond these sizes values
# are summarised, so one record stays within a few hundred KB.
MAX_INLINE_CHARS = 4096
MAX_INLINE_ITEMS = 1000
_HEAD_CHARS = 256


def json_safe(value: Any) -> Any:
    """Converts a raw input value into something `json.dumps` accepts, losslessly
    where it can: bytes that are UTF-8 stay text, other bytes become
    ``{"base64": ...}``, non-finite floats become strings.

    Large values are summarised, never embedded whole: bytes longer than 64
    as ``{"bytes": N, "head": <base64 of the first 32>}``, text longer than
    `MAX_INLINE_CHARS` as ``{"chars": N, "head": <its first 256 characters>}``,
    lists and mappings of more than `MAX_INLINE_ITEMS` entries as
    ``{"items": N, "head": <the first MAX_INLINE_ITEMS>}``.
    Text that is not valid UTF-8 (unpaired surrogates) is shown escaped
    (`printable_text`)."""
    if isinstance(value, str):
        if len(value) > MAX_INLINE_CHARS:
            return {"chars": len(value), "head": printable_text(value[:_HEAD_CHARS])}
        return printable_text(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) > _MAX_INLINE_BYTES:
            return {"bytes": len(raw), "head": base64.b64encode(raw[:32]).decode("ascii")}
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, Mapping):
        items = {printable_text(str(k)): json_safe(v) for k, v in itertools.islice(value.items(),
                                                                   MAX_INLINE_ITEMS)}
        return items if len(value) <= MAX_INLINE_ITEMS else {"items": len(value), "head": items}
    if isinstance(value, (list, tuple)):
        items = [json_safe(v) for v in itertools.islice(value, MAX_INLINE_ITEMS)]
        return items if len(value) <= MAX_INLINE_ITEMS else {"items": len(value), "head": items}
    if hasattr(value, "tolist"):  # numpy / pyarrow scalars and arrays
        return json_safe(value.tolist())
    if hasattr(value, "isoformat"):  # dates and times from Parquet
        return value.isoformat()
    return repr(value)
