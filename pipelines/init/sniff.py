"""What a source is: its type from its name, and a CSV file's dialect from its first bytes."""

from __future__ import annotations

import os
from collections import Counter

from ...schemas.errors import ConfigError
from ...transforms.layout import FEATURES_FILE, MANIFEST_FILE
from ...transforms.readers.csv_dialect import CsvOptions
from ...transforms.readers.listing import list_files
from ..config.model import DEFAULT_EXTENSIONS

__all__ = ["IMAGE_SUFFIXES", "csv_dialects", "detect_type"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp")
_TYPES_BY_SUFFIX = {suffix: kind for kind, suffixes in DEFAULT_EXTENSIONS.items()
                    for suffix in suffixes if kind != "images"}
_HEAD_BYTES = 1 << 16
# Tried in this order when the one the first bytes suggest fails further on:
# cp1252 reads most Western text that is not UTF-8, and latin-1 reads every
# byte (including the five cp1252 leaves undefined: 0x81 0x8D 0x8F 0x90 0x9D).
_FALLBACK_ENCODINGS = ("cp1252", "latin-1")


def detect_type(path: str) -> str:
    """The source type of `path`: by its suffix, or for a directory by the
    files in it (images when it holds image files and no table files)."""
    name = path.lower()
    for suffix in (".gz", ".bz2", ".zst", ".xz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for suffix, kind in _TYPES_BY_SUFFIX.items():
        if name.endswith(suffix):
            return kind
    if os.path.isdir(path):
        if _is_dataset_version(path):
            return "tfrecord"
        counts: Counter = Counter()
        for _, _, files in os.walk(path):
            for file in files:
                suffix = os.path.splitext(file)[1].lower()
                if suffix in IMAGE_SUFFIXES:
                    counts["images"] += 1
                elif suffix in _TYPES_BY_SUFFIX:
                    counts[_TYPES_BY_SUFFIX[suffix]] += 1
        if counts:
            return counts.most_common(1)[0][0]
    raise ConfigError("source.type", f"cannot tell what {path} holds from its name; pass "
                      "--type (csv, jsonl, json, parquet, avro, tfrecord or images)")


def _is_dataset_version(path: str) -> bool:
    """A recordforge or TFDS version directory: its metadata is JSON, but
    its data is the TFRecord files beside it."""
    names = os.listdir(path)
    return (any(name in (MANIFEST_FILE, FEATURES_FILE) for name in names)
            and any(".tfrecord" in name for name in names))


def csv_dialects(path: str) -> list[CsvOptions]:
    """The dialects to try for the CSV files at `path`, likeliest first: the
    delimiter (the one of , ; tab | that splits the first lines of the first
    file into the same number of fields, most of them) with the encoding its
    first bytes suggest (UTF-16 by its mark, UTF-8 when they decode, else
    cp1252), then the same delimiter in the encodings that read more bytes."""
    _, files = list_files(path, (".csv", ".tsv", ".txt"))
    if not files:
        return [CsvOptions()]
    with open(files[0], "rb") as f:
        head = f.read(_HEAD_BYTES)
    encoding = _encoding(head)
    delimiter = _delimiter(head.decode(encoding, "ignore"))
    if encoding == "utf-16":
        return [CsvOptions(delimiter=delimiter, encoding=encoding)]
    order = [encoding] + [e for e in _FALLBACK_ENCODINGS if e != encoding]
    return [CsvOptions(delimiter=delimiter, encoding=e) for e in order]


def _encoding(head: bytes) -> str:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    try:
        head.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as error:
        # A character cut at the end of the head is no evidence against UTF-8.
        if error.start > len(head) - 4 and len(head) == _HEAD_BYTES:
            return "utf-8"
    try:
        head.decode("cp1252")
        return "cp1252"
    except UnicodeDecodeError:
        return "latin-1"


def _delimiter(text: str) -> str:
    lines = [line for line in text.splitlines()[:50] if line.strip()][:-1] or text.splitlines()
    best, best_score = ",", 0
    for delimiter in (",", ";", "\t", "|"):
        counts = [line.count(delimiter) for line in lines]
        if counts and min(counts) > 0 and len(set(counts)) == 1 and counts[0] > best_score:
            best, best_score = delimiter, counts[0]
    return best
