"""The `output:` and `dead_letter:` sections: where shards go, how big, and the error budget."""

from __future__ import annotations

import math
import os
import re
import warnings
from typing import Any

from ...schemas.errors import ConfigError
from ...transforms.array_record import FILE_FORMATS, ArrayRecordMissing, require_array_record
from ...transforms.tfrecord import COMPRESSIONS, indexable
from .keys import section
from .model import (DEFAULT_MAX_ERROR_RATE, DEFAULT_SHARD_SIZE, LARGE_SHARD_SIZE, MIN_SHARD_SIZE,
                    ConfigWarning, DeadLetterConfig, OutputConfig)
from .paths import absolute, is_url, local_path, parse_path, url_protocol

__all__ = ["parse_dead_letter", "parse_output", "parse_size", "refuse_process_local_output"]

_OUTPUT_KEYS = ("path", "format", "compression", "shard_size", "shuffle", "index",
                "shard_count_multiple")

# The largest output.shard_count_multiple: a split of that many shards
# already holds 10 TB at the smallest recommended shard size.
MAX_SHARD_COUNT_MULTIPLE = 100_000


_DEAD_LETTER_KEYS = ("max_error_rate", "max_errors")


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


# The spellings of _SIZE_UNITS' units that are mixed case on purpose; any
# other unit must be all lower or all upper case.
_CANONICAL_UNITS = ("B", "kB", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")


_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_output(value: Any) -> tuple[OutputConfig, dict]:
    body = section(value, "output", _OUTPUT_KEYS, required=True)
    path = parse_path(body.get("path"), "output.path", "out/my_dataset")
    if not is_url(path) and os.path.isfile(local_path(path)):
        raise ConfigError("output.path", f"{path} is a file; the output is a directory")
    file_format = _parse_format(body.get("format", "tfrecord"))
    compression = body.get("compression", "none")
    if file_format == "array_record" and compression != "none":
        raise ConfigError("output.compression", f"{compression!r} does not apply to "
                          "format array_record: an ArrayRecord file compresses each of its "
                          "chunks itself (zstd); leave compression out")
    if compression not in COMPRESSIONS:
        hint = " (use gzip; it is the only compression TFRecordDataset reads besides zlib)" \
            if isinstance(compression, str) and compression.lower() in ("gz", "zlib", "zip") \
            else ""
        raise ConfigError("output.compression", f"must be gzip or none, not "
                          f"{compression!r}{hint}")
    shard_size = parse_size(body.get("shard_size", DEFAULT_SHARD_SIZE), "output.shard_size")
    if shard_size < MIN_SHARD_SIZE:
        raise ConfigError("output.shard_size", f"{shard_size} bytes is below the minimum of "
                          "1MB; recommended are 100MB to 1GB")
    if shard_size > LARGE_SHARD_SIZE:
        warnings.warn(f"output.shard_size: {shard_size} bytes is above 4 GiB; shards that "
                      "large are slow to copy, checksum and retry (recommended: 100MB to 1GB)",
                      ConfigWarning, stacklevel=2)
    shuffle = body.get("shuffle", True)
    if not isinstance(shuffle, bool):
        raise ConfigError("output.shuffle", f"must be true or false, not {shuffle!r}")
    index = _parse_index(body.get("index"), compression, file_format)
    multiple = body.get("shard_count_multiple", 1)
    if isinstance(multiple, bool) or not isinstance(multiple, int) \
            or not 1 <= multiple <= MAX_SHARD_COUNT_MULTIPLE:
        raise ConfigError("output.shard_count_multiple", f"must be a whole number from 1 to "
                          f"{MAX_SHARD_COUNT_MULTIPLE:,} (the hosts that read a split's "
                          f"shards as files), not {multiple!r}")
    output = OutputConfig(path=absolute(path), compression=compression,
                          shard_size=shard_size, shuffle=shuffle, index=index,
                          shard_count_multiple=multiple, file_format=file_format)
    return output, {"path": path, "format": file_format, "compression": compression,
                    "shard_size": shard_size,
                    "shuffle": shuffle, "index": index, "shard_count_multiple": multiple}


def _parse_format(value: Any) -> str:
    """``output.format``: "tfrecord" (default) or "array_record", which
    needs the `array_record` package (the `array_record` extra)."""
    if value not in FILE_FORMATS:
        raise ConfigError("output.format", f"must be one of {', '.join(FILE_FORMATS)}, not "
                          f"{value!r}")
    if value == "array_record":
        try:
            require_array_record()
        except ArrayRecordMissing as error:
            raise ConfigError("output.format", str(error)) from None
    return value


def _parse_index(value: Any, compression: str, file_format: str) -> bool:
    """``output.index``: whether every shard gets an index file; by default
    uncompressed TFRecord shards do; gzip ones cannot (no random access)
    and ArrayRecord ones need none (the format indexes its records)."""
    if value is None:
        return indexable(compression) and file_format == "tfrecord"
    if not isinstance(value, bool):
        raise ConfigError("output.index", f"must be true or false, not {value!r}")
    if value and file_format == "array_record":
        raise ConfigError("output.index", "format array_record has no index files: an "
                          "ArrayRecord file keeps the index of its records in its own footer; "
                          "leave index out")
    if value and not indexable(compression):
        raise ConfigError("output.index", "gzip shards have no index: a gzip file has no "
                          "random access (a reader must inflate every byte before a record "
                          "to reach it); use compression: none for indexed shards, or "
                          "leave index out")
    return value


def refuse_process_local_output(path: str, key: str = "output.path") -> None:
    """Raises ConfigError for an output whose data lives only in this process
    (``memory://``): a command exits when its build ends, and a dataset
    published there would be gone with it. The library may still write to
    one (the data lives as long as the process that reads it)."""
    if is_url(path) and url_protocol(path) == "memory":
        raise ConfigError(key, f"{path} is memory://, which lives only inside this process: "
                          "the dataset would be gone when the command exits; use a local "
                          "path or an object store URL (gs://, s3://)")


def parse_size(value: Any, key: str = "size") -> int:
    """A byte count from an integer (bytes) or text with a unit: B, KB/MB/GB/TB
    (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024). ``"1.5GB"`` is 1.5e9.
    A unit is read case-insensitively only when written all in lower or all in
    upper case (``256mb``, ``1GIB``); mixed spellings other than the ones
    above (``Mb``: megabits; ``mB``; ``Mib``) are refused, not guessed."""
    if isinstance(value, bool):
        raise ConfigError(key, f"must be a size such as 256MB, not {value!r}")
    if isinstance(value, int):
        number, unit = value, ""
    elif isinstance(value, float) and value.is_integer():
        number, unit = int(value), ""
    elif isinstance(value, str) and (match := _SIZE_RE.match(value)):
        number, unit = match.group(1), match.group(2).lower()
    else:
        raise ConfigError(key, f"{value!r} is not a size; write bytes as an integer or a number "
                          "with a unit: 256MB, 1GiB, 500KB")
    written = match.group(2) if isinstance(value, str) else ""
    if unit not in _SIZE_UNITS:
        raise ConfigError(key, f"unknown unit {written!r} in {_shown(value)}; use B, KB, MB, "
                          "GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)")
    if written not in _CANONICAL_UNITS and written not in (written.lower(), written.upper()):
        # "Mb" is megabits by convention, "mB" millibytes: refuse rather than guess.
        raise ConfigError(key, f"ambiguous unit {written!r} in {_shown(value)} (Mb reads as "
                          f"megabits, mB as millibytes); write "
                          f"{number}{written.upper().replace('IB', 'iB')} for bytes "
                          "(B, KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: powers "
                          "of 1024; all-lower-case 256mb is read as bytes too)")
    size = float(number) * _SIZE_UNITS[unit] if isinstance(number, str) and "." in number \
        else int(number) * _SIZE_UNITS[unit]
    if size <= 0:
        raise ConfigError(key, f"must be positive, not {value!r}")
    return int(size)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def parse_dead_letter(value: Any) -> DeadLetterConfig:
    body = section(value, "dead_letter", _DEAD_LETTER_KEYS, required=False)
    rate = body.get("max_error_rate", DEFAULT_MAX_ERROR_RATE)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) \
            or not 0 <= rate <= 1:
        raise ConfigError("dead_letter.max_error_rate", f"must be a fraction between 0 and 1 "
                          f"(0.01 = 1% of input rows may fail), not {rate!r}")
    max_errors = body.get("max_errors")
    if max_errors is not None and (isinstance(max_errors, bool) or not isinstance(max_errors, int)
                                   or max_errors < 0):
        raise ConfigError("dead_letter.max_errors", f"must be a non-negative integer (a row "
                          f"count) or null, not {max_errors!r}")
    return DeadLetterConfig(max_error_rate=float(rate), max_errors=max_errors)
