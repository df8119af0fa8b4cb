"""The `source:` section: what to read, checked against the files that are there."""

from __future__ import annotations

import difflib
import os
from typing import Any

from ...schemas.errors import ConfigError
from ...transforms.readers.csv import read_csv_header
from ...transforms.readers.image_items import folder_labels
from ...transforms.readers.listing import list_files, list_images
from ...transforms.readers.tables import read_table_columns
from .csv_section import parse_csv_section
from .image import parse_image
from .keys import section
from .model import DEFAULT_EXTENSIONS, IMAGE_COLUMNS, SOURCE_TYPES, SourceConfig
from .paths import GLOB_CHARS, absolute, is_url, local_path, parse_path

__all__ = ["parse_source", "source_columns"]

_SOURCE_KEYS = ("type", "path", "labels", "extensions", "image", "csv")


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
    if kind != "csv" and body.get("csv") is not None:
        raise ConfigError("source.csv", f"applies to csv sources only (source.type is {kind})")
    csv_options, null_values, csv_resolved = (parse_csv_section(body.get("csv"))
                                              if kind == "csv" else (None, None, None))
    listed = _check_source_exists(path, kind, extensions)
    if kind == "images" and labels == "directory" and listed is not None:
        _check_class_folders(listed)
    image, image_resolved = (parse_image(body.get("image")) if kind == "images"
                             else (None, None))
    source = SourceConfig(type=kind, path=absolute(path), labels=(
        labels if labels in (None, "directory") else absolute(labels)),
        extensions=extensions, image=image, csv=csv_options, null_values=null_values)
    resolved = {"type": kind, "path": path, "labels": labels, "extensions": list(extensions),
                "image": image_resolved}
    if csv_resolved is not None and "csv" in body:
        resolved["csv"] = csv_resolved
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
        header = read_csv_header(local)
        if header is not None and not {"file", "label"} <= set(header):
            raise ConfigError("source.labels", f"labels table {value} must have the columns "
                              f"file and label; its header is {', '.join(header)}")
    return value


def _check_source_exists(path: str, kind: str, extensions: tuple[str, ...]) -> list | None:
    """Fails unless a local source lists files, by the listing the build uses
    (`readers.listing`); returns what a local directory lists (`_listed`:
    the class folders are checked from it, not from a second listing), else
    None."""
    if is_url(path):
        return None  # remote listings are slow and may need credentials the workers have
    local = local_path(path)
    where = f"(relative paths are resolved against the current directory, {os.getcwd()})"
    if GLOB_CHARS.search(local):
        if kind == "images":
            raise ConfigError("source.path", "must be a directory for an image source, not a "
                              "glob; use source.extensions to choose the files")
        if not list_files(local)[1]:
            raise ConfigError("source.path", f"the pattern {path} matches no files {where}")
        return None
    if not os.path.exists(local):
        raise ConfigError("source.path", f"{path} does not exist {where}")
    if kind == "images" and not os.path.isdir(local):
        raise ConfigError("source.path", f"{path} is a file; an image source is a directory "
                          "of class folders (labels: directory) or of images")
    if not os.path.isdir(local):
        return None
    listed = _listed(local, kind, extensions)
    if not listed:
        raise ConfigError("source.path", f"no files ending in {', '.join(extensions)} under "
                          f"{path}; check the path or set source.extensions")
    return listed


def _check_class_folders(listed: list[tuple[str, str]]) -> None:
    """Class folders that differ only by case (`Cat/`, `cat/`) would be two
    labels of one class on some filesystems and one on others: an error.
    listed: the images' ``(fs_path, rel)`` (`_listed`)."""
    by_folded: dict[str, str] = {}
    for label in folder_labels(listed):
        other = by_folded.setdefault(label.casefold(), label)
        if other != label:
            raise ConfigError("source.path", f"class folders {other!r} and {label!r} differ only "
                              "by case; they would be two labels. Merge or rename one of them")


def _listed(local: str, kind: str, extensions: tuple[str, ...]) -> list:
    """The files the build will read from directory `local`."""
    if kind == "images":
        return list_images(local, extensions)[1]
    return list_files(local, extensions)[1]


def source_columns(source: SourceConfig) -> tuple[str, ...] | None:
    """The columns rows will offer, when knowable before the run: the image
    columns, or the union of the CSV headers / Parquet schemas of the local
    table files the build will read (listed and read as the build does). None
    when unknown (remote tables, JSONL, more than 50 files, a file without a
    usable header or footer)."""
    if source.type == "images":
        return IMAGE_COLUMNS
    if source.type in ("jsonl", "json", "tfrecord") or is_url(source.path):
        return None
    fs, files = list_files(source.path, source.extensions)
    if not files or len(files) > _MAX_HEADER_FILES:
        return None
    columns: dict[str, None] = {}
    for fs_path in files:
        header = read_table_columns(fs, fs_path, source.type, source.csv)
        if header is None:
            return None  # unreadable here: the build reports it per file as a dead letter
        columns.update(dict.fromkeys(header))
    return tuple(columns)
