"""The `source:` section: what to read, checked against the files that are there."""

from __future__ import annotations

import csv
import difflib
import glob
import os
from typing import Any

from ...schemas.errors import ConfigError
from .image import parse_image
from .keys import section
from .model import DEFAULT_EXTENSIONS, IMAGE_COLUMNS, SOURCE_TYPES, SourceConfig
from .paths import GLOB_CHARS, absolute, is_url, local_path, parse_path

__all__ = ["parse_source", "source_columns"]

_SOURCE_KEYS = ("type", "path", "labels", "extensions", "image")


# How many local table files we open to learn their columns at load time;
# beyond that the columns count as unknown rather than slowing every build.
_MAX_HEADER_FILES = 50


def parse_source(value: Any) -> tuple[SourceConfig, dict]:
    body = section(value, "source", _SOURCE_KEYS, required=True)
    kind = body.get("type")
    if kind is None:
        raise ConfigError("source.type", f"missing; set it to one of {', '.join(SOURCE_TYPES)}")
    if kind not in SOURCE_TYPES:
        close = difflib.get_close_matches(str(kind), SOURCE_TYPES, n=1, cutoff=0.5)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise ConfigError("source.type", f"unknown source type {kind!r}{hint}; use one of "
                          f"{', '.join(SOURCE_TYPES)}")
    path = parse_path(body.get("path"), "source.path", "data/")
    extensions = _parse_extensions(body.get("extensions"), kind)
    labels = None
    if kind == "images":
        labels = _parse_labels(body.get("labels", "directory"))
    elif "labels" in body:
        raise ConfigError("source.labels", f"applies to image sources only; a {kind} table "
                          "has its label in a column (use `from:` in features)")
    if kind != "images" and body.get("image") is not None:
        raise ConfigError("source.image", f"applies to image sources only (source.type is {kind})")
    _check_source_exists(path, kind, extensions)
    image, image_resolved = (parse_image(body.get("image")) if kind == "images"
                             else (None, None))
    source = SourceConfig(type=kind, path=absolute(path), labels=(
        labels if labels in (None, "directory") else absolute(labels)),
        extensions=extensions, image=image)
    resolved = {"type": kind, "path": path, "labels": labels, "extensions": list(extensions),
                "image": image_resolved}
    return source, resolved


def _parse_extensions(value: Any, kind: str) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_EXTENSIONS[kind]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError("source.extensions", "must be a non-empty list of file suffixes, "
                          "e.g. [.jpg, .png]")
    normalized = []
    for item in value:
        if not isinstance(item, str) or not item.strip(".") or "/" in item or " " in item:
            raise ConfigError("source.extensions", f"{item!r} is not a file suffix; write e.g. "
                              ".jpg")
        item = item.lower()
        normalized.append(item if item.startswith(".") else "." + item)
    return tuple(dict.fromkeys(normalized))


def _parse_labels(value: Any) -> str:
    if value == "directory":
        return value
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("source.labels", "must be `directory` (the parent folder names the "
                          "class) or the path of a csv/jsonl table with columns file,label")
    lowered = value.lower()
    if not lowered.endswith((".csv", ".jsonl", ".ndjson")):
        raise ConfigError("source.labels", f"{value!r} is neither `directory` nor a .csv/.jsonl "
                          "table with columns file,label")
    if is_url(value):
        return value
    local = local_path(value)
    if not os.path.isfile(local):
        raise ConfigError("source.labels", f"labels table {value} does not exist (relative "
                          f"paths are resolved against the current directory, {os.getcwd()})")
    if lowered.endswith(".csv"):
        header = _csv_header(local)
        if header is not None and not {"file", "label"} <= set(header):
            raise ConfigError("source.labels", f"labels table {value} must have the columns "
                              f"file and label; its header is {', '.join(header)}")
    return value


def _check_source_exists(path: str, kind: str, extensions: tuple[str, ...]) -> None:
    if is_url(path):
        return  # remote listings are slow and may need credentials the workers have
    local = local_path(path)
    where = f"(relative paths are resolved against the current directory, {os.getcwd()})"
    if GLOB_CHARS.search(local):
        if kind == "images":
            raise ConfigError("source.path", "must be a directory for an image source, not a "
                              "glob; use source.extensions to choose the files")
        if not any(os.path.isfile(p) for p in glob.iglob(local, recursive=True)):
            raise ConfigError("source.path", f"the pattern {path} matches no files {where}")
        return
    if not os.path.exists(local):
        raise ConfigError("source.path", f"{path} does not exist {where}")
    if kind == "images" and not os.path.isdir(local):
        raise ConfigError("source.path", f"{path} is a file; an image source is a directory "
                          "of class folders (labels: directory) or of images")
    if os.path.isdir(local) and _first_file(local, extensions) is None:
        raise ConfigError("source.path", f"no files ending in {', '.join(extensions)} under "
                          f"{path}; check the path or set source.extensions")


def _first_file(root: str, extensions: tuple[str, ...]) -> str | None:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.lower().endswith(extensions) and not name.startswith("."):
                return os.path.join(dirpath, name)
    return None


def _table_files(path: str, extensions: tuple[str, ...]) -> list[str] | None:
    """Local table files the source will read, or None if there are too many to peek at."""
    local = local_path(path)
    if GLOB_CHARS.search(local):
        found = [p for p in glob.iglob(local, recursive=True) if os.path.isfile(p)]
    elif os.path.isdir(local):
        found = []
        for dirpath, dirnames, filenames in os.walk(local):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            found.extend(os.path.join(dirpath, name) for name in filenames
                         if name.lower().endswith(extensions) and not name.startswith("."))
            if len(found) > _MAX_HEADER_FILES:
                return None
    else:
        found = [local]
    return sorted(found) if len(found) <= _MAX_HEADER_FILES else None


def source_columns(source: SourceConfig) -> tuple[str, ...] | None:
    """The columns rows will offer, when knowable before the run: the image
    columns, or the union of local CSV headers / Parquet schemas. None when
    unknown (remote or compressed tables, JSONL, many files)."""
    if source.type == "images":
        return IMAGE_COLUMNS
    if source.type == "jsonl" or is_url(source.path):
        return None
    files = _table_files(source.path, source.extensions)
    if not files:
        return None
    columns: dict[str, None] = {}
    for path in files:
        if source.type == "csv":
            if not path.lower().endswith(".csv"):
                return None  # compressed or unusual files: the reader knows, we do not
            header = _csv_header(path)
        else:
            header = _parquet_columns(path)
        if header is None:
            return None  # unreadable here: the build reports it per file as a dead letter
        columns.update(dict.fromkeys(header))
    return tuple(columns)


def _csv_header(path: str) -> list[str] | None:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def _parquet_columns(path: str) -> list[str] | None:
    import pyarrow.parquet as pq  # only parquet sources pay for the import
    try:
        return list(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - any unreadable file means "columns unknown"
        return None
