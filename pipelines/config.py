"""Dataset configs and runner profiles: YAML in, frozen dataclasses out.

`load_config` reads a dataset config (YAML, safe loading only), applies the
command line's ``--set key.path=value`` overrides and ``--output URL``, and
checks everything a build needs before any pipeline starts. Every mistake
raises `schemas.errors.ConfigError` naming the dotted key at fault and how to
fix it; nothing is checked later that could have been checked here.

Paths: a relative ``source.path``, ``source.labels`` or ``output.path`` is
relative to the current working directory (like every command-line tool), not
to the config file. The dataclasses hold absolute paths so worker processes
with another working directory read the same files; `DatasetConfig.resolved`
(recorded in the manifest) keeps the paths as written, so the manifest does
not depend on where the build ran.

`load_runner_profile` reads the Beam option sets in ``configs/runners/``.
Nothing here imports Beam.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import datetime as _dt
import difflib
import glob
import importlib.resources
import math
import os
import re
import warnings
from typing import Any, Mapping, Sequence

import yaml

from ..schemas.errors import ConfigError
from ..schemas.features import FeatureSpec, parse_features

__all__ = [
    "SOURCE_TYPES",
    "COMPRESSIONS",
    "IMAGE_COLUMNS",
    "DEFAULT_SHARD_SIZE",
    "MIN_SHARD_SIZE",
    "ConfigWarning",
    "SourceConfig",
    "OutputConfig",
    "DeadLetterConfig",
    "DatasetConfig",
    "load_config",
    "config_from_dict",
    "apply_override",
    "parse_size",
    "load_runner_profile",
    "runner_profile_names",
]

SOURCE_TYPES = ("images", "csv", "jsonl", "parquet")
COMPRESSIONS = ("gzip", "none")
# The columns an image row offers (the product contract's list).
IMAGE_COLUMNS = ("image", "path", "label", "height", "width", "channels", "format")

DEFAULT_SHARD_SIZE = 256 * 10**6
MIN_SHARD_SIZE = 10**6
# Above this a shard is awkward to copy, checksum or retry; allowed, but said.
LARGE_SHARD_SIZE = 4 * 2**30
DEFAULT_MAX_ERROR_RATE = 0.01
DEFAULT_EXTENSIONS = {
    "images": (".jpg", ".jpeg", ".png"),
    "csv": (".csv",),
    "jsonl": (".jsonl", ".ndjson"),
    "parquet": (".parquet",),
}
IMAGE_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF")
_FORMAT_ALIASES = {"JPG": "JPEG", "TIF": "TIFF"}
# How many local table files we open to learn their columns at load time;
# beyond that the columns count as unknown rather than slowing every build.
_MAX_HEADER_FILES = 50
_MAX_CONFIG_BYTES = 1 << 20
# A real config is a few levels deep and has a few hundred values. Far beyond
# that it is hostile or broken (deep nesting would exhaust the stack of the
# recursive steps below; YAML aliases can expand a small file into billions of
# values), so it is refused before anything walks it.
_MAX_CONFIG_DEPTH = 32
_MAX_CONFIG_VALUES = 100_000

_TOP_KEYS = ("name", "version", "source", "features", "splits", "key", "output", "dead_letter")
_SOURCE_KEYS = ("type", "path", "labels", "extensions", "image")
_IMAGE_KEYS = ("formats", "modes", "min_size", "max_size", "decode", "resize", "encode")
_OUTPUT_KEYS = ("path", "compression", "shard_size", "shuffle")
_DEAD_LETTER_KEYS = ("max_error_rate", "max_errors")
# Names people bring from other tools, which difflib does not find.
_KEY_ALIASES = {
    "dataset": "name", "dead_letters": "dead_letter", "deadletter": "dead_letter",
    "errors": "dead_letter", "schema": "features", "split": "splits", "sink": "output",
    "input": "source", "dir": "path", "directory": "path", "url": "path", "format": "type",
    "kind": "type", "shards": "shard_size", "shard_bytes": "shard_size",
    "compress": "compression", "codec": "compression", "label": "labels",
    "error_rate": "max_error_rate", "max_error": "max_errors", "exts": "extensions",
}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SPLIT_RE = re.compile(r"^[a-z0-9_]+$")
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB_CHARS = re.compile(r"[*?\[]")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


class ConfigWarning(UserWarning):
    """A config that is valid but probably not what was meant."""


@dataclasses.dataclass(frozen=True)
class SourceConfig:
    """Where rows come from.

    type: "images" | "csv" | "jsonl" | "parquet".
    path: local path (absolute) or fsspec URL; tables: file, glob or directory.
    labels: images only: "directory" (parent folder name) or a csv/jsonl table
      with columns file,label; None for tables.
    extensions: lower-case file suffixes with their dot, used when listing a directory.
    image: image checks and transforms (images only), else None.
    """

    type: str
    path: str
    labels: str | None = None
    extensions: tuple[str, ...] = ()
    image: Any = None  # recordforge.transforms.images.ImageOptions


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """Where and how the dataset is written.

    path: local path (absolute) or fsspec URL of the dataset root.
    compression: "gzip" | "none".
    shard_size: target bytes per shard file as written.
    shuffle: True orders rows by stable key hash, False by key.
    """

    path: str
    compression: str = "none"
    shard_size: int = DEFAULT_SHARD_SIZE
    shuffle: bool = True


@dataclasses.dataclass(frozen=True)
class DeadLetterConfig:
    """The error budget: above it the build fails and nothing is published.

    max_error_rate: fraction of input rows allowed to fail, in [0, 1].
    max_errors: absolute cap on failed rows, or None for no cap.
    """

    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    max_errors: int | None = None


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """A checked dataset config.

    version: the template as written (may hold {date} / {datetime});
      `recordforge.pipelines.publish.resolve_version` expands it.
    splits: (name, fraction) pairs in config order; fractions sum to 1.
    key: the column whose value assigns split and order, or None (row content).
    resolved: the whole config as plain JSON-safe data (defaults filled,
      overrides applied, paths as written) for the manifest.
    """

    name: str
    version: str
    source: SourceConfig
    features: tuple[FeatureSpec, ...]
    splits: tuple[tuple[str, float], ...]
    key: str | None
    output: OutputConfig
    dead_letter: DeadLetterConfig
    resolved: dict = dataclasses.field(default_factory=dict, compare=False)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)


# --- loading ------------------------------------------------------------------------


def load_config(path: str, overrides: Sequence[str] = (), output: str | None = None
                ) -> DatasetConfig:
    """Reads, overrides and checks the dataset config at `path` (a local file).

    overrides: ``"a.b=value"`` strings; each value is parsed as YAML (so
      ``--set output.shuffle=false`` gives a bool and ``splits={a: 0.5, b: 0.5}``
      a mapping) and applied before validation.
    output: replaces ``output.path``.
    Raises ConfigError (key "" for a file that cannot be read or parsed).
    """
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("", f"config file {path} does not exist") from None
    except OSError as error:
        raise ConfigError("", f"cannot read config file {path}: {error.strerror or error}") from None
    if len(data) > _MAX_CONFIG_BYTES:
        raise ConfigError("", f"config file {path} is larger than 1 MiB; is it the right file?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError("", f"config file {path} is not UTF-8 text (byte {error.start})") from None
    raw = _safe_load(text, origin=path)
    if raw is None:
        raise ConfigError("", f"config file {path} is empty; start from configs/examples/")
    return config_from_dict(raw, overrides=overrides, output=output)


def config_from_dict(raw: Any, overrides: Sequence[str] = (), output: str | None = None
                     ) -> DatasetConfig:
    """Checks an already-parsed config (the YAML document as plain data)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("", "the config must be a YAML mapping with keys such as name, "
                          f"version, source, features, output (got {type(raw).__name__})")
    _check_shape(raw)
    data = copy.deepcopy(dict(raw))
    for assignment in overrides:
        data = apply_override(data, assignment)
    _check_shape(data)  # override values are YAML too
    if output is not None:
        if not isinstance(data.get("output"), (Mapping, type(None))):
            raise ConfigError("output", "must be a mapping with path, compression, shard_size, shuffle")
        data["output"] = {**(data.get("output") or {}), "path": output}
    return _parse(data)


def apply_override(data: dict, assignment: str) -> dict:
    """Returns a copy of `data` with one ``key.path=value`` override applied.

    The key path is matched greedily against existing keys, so a feature name
    holding dots (``features.img.v2.max=3``) still finds ``img.v2``.
    """
    if not isinstance(assignment, str) or "=" not in assignment:
        raise ConfigError("--set", f"expected KEY=VALUE (e.g. output.shard_size=512MB), got "
                          f"{assignment!r}")
    key_text, value_text = assignment.split("=", 1)
    key_text = key_text.strip()
    if not key_text or any(not part for part in key_text.split(".")):
        raise ConfigError("--set", f"empty key in {assignment!r}; write e.g. output.shuffle=false")
    value = _safe_load(value_text, origin=f"--set {key_text}") if value_text.strip() else None
    data = copy.deepcopy(data)
    node: dict = data
    parts = key_text.split(".")
    walked: list[str] = []
    while True:
        head = _longest_existing_key(node, parts)
        walked.append(head)
        parts = parts[len(head.split(".")):]
        if not parts:
            node[head] = value
            return data
        child = node.get(head)
        if child is None:
            child = node[head] = {}
        if not isinstance(child, dict):
            raise ConfigError(".".join(walked), f"is {type(child).__name__}, not a mapping, so "
                              f"--set {key_text}=... cannot set a key inside it")
        node = child


def _check_shape(data: Any) -> None:
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
            children = [(_join(key, str(k)), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        if depth >= _MAX_CONFIG_DEPTH:
            raise ConfigError(key, f"nested deeper than {_MAX_CONFIG_DEPTH} levels (or refers "
                              "to itself through a YAML alias)")
        stack.extend((child, depth + 1, child_key) for child_key, child in children)


def _longest_existing_key(node: Mapping, parts: list[str]) -> str:
    for n in range(len(parts), 1, -1):
        candidate = ".".join(parts[:n])
        if candidate in node:
            return candidate
    return parts[0]


class _StrictSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses duplicate keys (PyYAML keeps the last one
    silently, which hides typos and merge mistakes)."""

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            # e.g. `!!set` on a scalar: the base class raises its YAML error.
            return super().construct_mapping(node, deep=deep)
        seen = {}
        for key_node, _ in node.value:
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


_StrictSafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictSafeLoader.construct_mapping)


def _safe_load(text: str, *, origin: str) -> Any:
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


# --- checking -----------------------------------------------------------------------


def _parse(data: dict) -> DatasetConfig:
    _check_keys(data, _TOP_KEYS, "")
    name = _parse_name(data.get("name"))
    version = _parse_version(data.get("version"))
    source, source_resolved = _parse_source(data.get("source"))
    known_columns = _known_columns(source)
    features = parse_features(data.get("features"), key_path="features",
                              known_columns=known_columns)
    splits = _parse_splits(data.get("splits"))
    key = _parse_key(data.get("key"), known_columns)
    output, output_resolved = _parse_output(data.get("output"))
    dead_letter = _parse_dead_letter(data.get("dead_letter"))
    resolved = {
        "name": name,
        "version": version,
        "source": source_resolved,
        "features": _plain(data["features"]),
        "splits": {split: fraction for split, fraction in splits},
        "key": key,
        "output": output_resolved,
        "dead_letter": dataclasses.asdict(dead_letter),
    }
    return DatasetConfig(name=name, version=version, source=source, features=features,
                         splits=splits, key=key, output=output, dead_letter=dead_letter,
                         resolved=resolved)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _check_keys(mapping: Mapping, allowed: Sequence[str], prefix: str) -> None:
    for key in mapping:
        if key in allowed:
            continue
        word = str(key)
        hint = ""
        if word.lower() in _KEY_ALIASES and _KEY_ALIASES[word.lower()] in allowed:
            hint = f"; did you mean `{_KEY_ALIASES[word.lower()]}`?"
        else:
            close = difflib.get_close_matches(word.lower(), allowed, n=1, cutoff=0.6)
            if close:
                hint = f"; did you mean `{close[0]}`?"
        raise ConfigError(_join(prefix, word), f"unknown key{hint} (valid keys here: "
                          f"{', '.join(allowed)})")


def _section(value: Any, key: str, allowed: Sequence[str], *, required: bool) -> dict:
    if value is None:
        if required:
            raise ConfigError(key, f"missing; add a `{key}:` mapping with keys "
                              f"{', '.join(allowed)}")
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping with keys {', '.join(allowed)}, not "
                          f"{_describe(value)}")
    _check_keys(value, allowed, key)
    return dict(value)


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else \
        type(value).__name__


def _parse_name(value: Any) -> str:
    if value is None:
        raise ConfigError("name", "missing; add e.g. `name: flowers`")
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ConfigError("name", f"{value!r} is not a valid dataset name; use letters, digits "
                          "and . _ - (starting with a letter or digit)")
    # The name keys the blake2b hash that assigns splits, and blake2b keys
    # are at most 64 bytes.
    if len(value.encode("utf-8")) > 64:
        raise ConfigError("name", "is longer than 64 characters; shorten it")
    return value


def _parse_version(value: Any) -> str:
    if value is None:
        raise ConfigError("version", 'missing; add e.g. `version: "1.0.0"` or, for scheduled '
                          'builds, `version: "{date}"`')
    if isinstance(value, Mapping) and len(value) == 1 and next(iter(value.values())) is None:
        # `version: {date}` unquoted is a YAML flow mapping {"date": None}.
        placeholder = next(iter(value))
        raise ConfigError("version", f"YAML reads an unquoted {{{placeholder}}} as a mapping; "
                          f'quote it: version: "{{{placeholder}}}" (on the command line: '
                          f"--set 'version=\"{{{placeholder}}}\"')")
    if not isinstance(value, str):
        raise ConfigError("version", f"must be text, not {_describe(value)}; quote it in the "
                          f'YAML, e.g. version: "{value}"')
    # Imported here: publish owns the version rules and is only needed to check them.
    from .publish import resolve_version
    resolve_version(value)  # raises ConfigError("version", ...) for a bad template
    return value


def _is_url(path: str) -> bool:
    return bool(_URL_RE.match(path)) and not path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _parse_path(value: Any, key: str, example: str) -> str:
    if value is None:
        raise ConfigError(key, f"missing; add e.g. `{key.split('.')[-1]}: {example}`")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a local path or URL (text), not {_describe(value)}")
    return value


def _parse_source(value: Any) -> tuple[SourceConfig, dict]:
    body = _section(value, "source", _SOURCE_KEYS, required=True)
    kind = body.get("type")
    if kind is None:
        raise ConfigError("source.type", f"missing; set it to one of {', '.join(SOURCE_TYPES)}")
    if kind not in SOURCE_TYPES:
        close = difflib.get_close_matches(str(kind), SOURCE_TYPES, n=1, cutoff=0.5)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise ConfigError("source.type", f"unknown source type {kind!r}{hint}; use one of "
                          f"{', '.join(SOURCE_TYPES)}")
    path = _parse_path(body.get("path"), "source.path", "data/")
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
    image, image_resolved = (_parse_image(body.get("image")) if kind == "images"
                             else (None, None))
    source = SourceConfig(type=kind, path=_absolute(path), labels=(
        labels if labels in (None, "directory") else _absolute(labels)),
        extensions=extensions, image=image)
    resolved = {"type": kind, "path": path, "labels": labels, "extensions": list(extensions),
                "image": image_resolved}
    return source, resolved


def _absolute(path: str) -> str:
    return path if _is_url(path) else os.path.abspath(_local(path))


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
    if _is_url(value):
        return value
    local = _local(value)
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
    if _is_url(path):
        return  # remote listings are slow and may need credentials the workers have
    local = _local(path)
    where = f"(relative paths are resolved against the current directory, {os.getcwd()})"
    if _GLOB_CHARS.search(local):
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
    local = _local(path)
    if _GLOB_CHARS.search(local):
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


def _known_columns(source: SourceConfig) -> tuple[str, ...] | None:
    """The columns rows will offer, when knowable before the run: the image
    columns, or the union of local CSV headers / Parquet schemas. None when
    unknown (remote or compressed tables, JSONL, many files)."""
    if source.type == "images":
        return IMAGE_COLUMNS
    if source.type == "jsonl" or _is_url(source.path):
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


def _parse_image(value: Any) -> tuple[Any, dict]:
    body = _section(value, "source.image", _IMAGE_KEYS, required=False)
    formats = body.get("formats", ["JPEG", "PNG"])
    if isinstance(formats, str):
        formats = [formats]
    if not isinstance(formats, (list, tuple)) or not formats:
        raise ConfigError("source.image.formats", f"must be a non-empty list from "
                          f"{', '.join(IMAGE_FORMATS)}")
    formats = tuple(dict.fromkeys(_image_format(f, "source.image.formats", IMAGE_FORMATS)
                                  for f in formats))
    modes = _parse_modes(body.get("modes"))
    min_size = _size_pair(body.get("min_size", [1, 1]), "source.image.min_size")
    max_size = _size_pair(body.get("max_size", [8192, 8192]), "source.image.max_size")
    if min_size[0] > max_size[0] or min_size[1] > max_size[1]:
        raise ConfigError("source.image.min_size", f"{list(min_size)} is larger than max_size "
                          f"{list(max_size)}")
    decode = body.get("decode", "header")
    if decode not in ("header", "full"):
        raise ConfigError("source.image.decode", f"must be `header` (parse the header only, "
                          f"fast) or `full` (decode every pixel), not {decode!r}")
    resize_max_side, resize_size = _parse_resize(body.get("resize"))
    encode_format, encode_quality = _parse_encode(body.get("encode"))
    # Imported here so loading a table config never imports the image stack.
    from ..transforms.images import ImageOptions
    try:
        options = ImageOptions(formats=formats, min_size=min_size, max_size=max_size,
                               decode=decode, resize_max_side=resize_max_side,
                               resize_size=resize_size, encode_format=encode_format,
                               encode_quality=encode_quality, modes=modes)
    except (TypeError, ValueError) as error:
        raise ConfigError("source.image", str(error)) from None
    resolved = {
        "formats": list(formats), "modes": None if modes is None else list(modes),
        "min_size": list(min_size), "max_size": list(max_size),
        "decode": decode,
        "resize": (None if resize_max_side is None and resize_size is None else
                   {"max_side": resize_max_side} if resize_max_side is not None else
                   {"size": list(resize_size)}),
        "encode": (None if encode_format is None else
                   {"format": encode_format, "quality": encode_quality}),
    }
    return options, resolved


# Pillow's color modes an image file can be stored in.
IMAGE_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV",
               "I", "F", "I;16", "I;16B", "I;16L")


def _parse_modes(value: Any) -> tuple[str, ...] | None:
    """`source.image.modes`: the allowed color modes, or null for any."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError("source.image.modes", f"must be a non-empty list of Pillow color "
                          f"modes ({', '.join(IMAGE_MODES)}) or null for any")
    for mode in value:
        if mode not in IMAGE_MODES:
            raise ConfigError("source.image.modes", f"{mode!r} is not a Pillow color mode; "
                              f"use {', '.join(IMAGE_MODES)}")
    return tuple(dict.fromkeys(value))


def _image_format(value: Any, key: str, allowed: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"{value!r} is not an image format; use {', '.join(allowed)}")
    upper = _FORMAT_ALIASES.get(value.upper(), value.upper())
    if upper not in allowed:
        raise ConfigError(key, f"{value!r} is not supported; use {', '.join(allowed)}")
    return upper


def _size_pair(value: Any, key: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ConfigError(key, f"must be [width, height] in pixels (two positive integers), "
                          f"not {value!r}")
    return int(value[0]), int(value[1])


def _parse_resize(value: Any) -> tuple[int | None, tuple[int, int] | None]:
    if value is None:
        return None, None
    body = _section(value, "source.image.resize", ("max_side", "size"), required=False)
    if len(body) != 1:
        raise ConfigError("source.image.resize", "give exactly one of `{max_side: N}` (keep "
                          "the aspect ratio) or `{size: [width, height]}`")
    if "max_side" in body:
        side = body["max_side"]
        if isinstance(side, bool) or not isinstance(side, int) or side < 1:
            raise ConfigError("source.image.resize.max_side", f"must be a positive integer "
                              f"(pixels), not {side!r}")
        return side, None
    return None, _size_pair(body["size"], "source.image.resize.size")


def _parse_encode(value: Any) -> tuple[str | None, int | None]:
    if value is None:
        return None, None
    body = _section(value, "source.image.encode", ("format", "quality"), required=False)
    if "format" not in body:
        raise ConfigError("source.image.encode.format", "missing; use JPEG or PNG")
    from ..transforms.images import ENCODE_FORMATS
    fmt = _image_format(body["format"], "source.image.encode.format", ENCODE_FORMATS)
    quality = body.get("quality")
    if quality is not None:
        if fmt == "PNG":
            raise ConfigError("source.image.encode.quality", "PNG is lossless and has no "
                              "quality; remove it")
        if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
            raise ConfigError("source.image.encode.quality", f"must be an integer from 1 to "
                              f"100, not {quality!r}")
    elif fmt != "PNG":
        quality = 90
    return fmt, quality


def _parse_splits(value: Any) -> tuple[tuple[str, float], ...]:
    if value is None:
        return (("train", 1.0),)
    if not isinstance(value, Mapping) or not value:
        raise ConfigError("splits", "must be a mapping of split name to fraction, e.g. "
                          "{train: 0.8, validation: 0.1, test: 0.1}")
    splits = []
    for name, fraction in value.items():
        key = f"splits.{name}"
        if not isinstance(name, str) or not _SPLIT_RE.match(name):
            hint = " (YAML reads unquoted yes/no/on/off as booleans: quote it)" \
                if isinstance(name, bool) else ""
            raise ConfigError(key, f"{name!r} is not a valid split name; use lower-case "
                              f"letters, digits and _{hint}")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
                or not math.isfinite(fraction):
            raise ConfigError(key, f"must be a number between 0 and 1, not {fraction!r}")
        if fraction <= 0:
            raise ConfigError(key, f"must be greater than 0 (got {fraction}); remove the split "
                              "instead")
        splits.append((name, float(fraction)))
    total = math.fsum(f for _, f in splits)
    if abs(total - 1.0) > 1e-6:
        listed = ", ".join(f"{n}: {f:g}" for n, f in splits)
        raise ConfigError("splits", f"fractions must sum to 1, but {listed} sum to {total:g}")
    return tuple(splits)


def _parse_key(value: Any, known_columns: Sequence[str] | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError("key", f"must be the name of a source column, not {value!r}")
    if known_columns is not None and value not in known_columns:
        close = difflib.get_close_matches(value, known_columns, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise ConfigError("key", f"the source has no column {value!r}{hint}; columns: "
                          f"{', '.join(known_columns)}")
    return value


def _parse_output(value: Any) -> tuple[OutputConfig, dict]:
    body = _section(value, "output", _OUTPUT_KEYS, required=True)
    path = _parse_path(body.get("path"), "output.path", "out/my_dataset")
    if not _is_url(path) and os.path.isfile(_local(path)):
        raise ConfigError("output.path", f"{path} is a file; the output is a directory")
    compression = body.get("compression", "none")
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
    output = OutputConfig(path=_absolute(path), compression=compression,
                          shard_size=shard_size, shuffle=shuffle)
    return output, {"path": path, "compression": compression, "shard_size": shard_size,
                    "shuffle": shuffle}


def parse_size(value: Any, key: str = "size") -> int:
    """A byte count from an integer (bytes) or text with a unit: B, KB/MB/GB/TB
    (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024). ``"1.5GB"`` is 1.5e9."""
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
    if unit not in _SIZE_UNITS:
        raise ConfigError(key, f"unknown unit {unit!r} in {value!r}; use B, KB, MB, GB, TB "
                          "(powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)")
    size = float(number) * _SIZE_UNITS[unit] if isinstance(number, str) and "." in number \
        else int(number) * _SIZE_UNITS[unit]
    if size <= 0:
        raise ConfigError(key, f"must be positive, not {value!r}")
    return int(size)


def _parse_dead_letter(value: Any) -> DeadLetterConfig:
    body = _section(value, "dead_letter", _DEAD_LETTER_KEYS, required=False)
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


def _plain(value: Any) -> Any:
    """YAML data as JSON-safe data (YAML can produce dates and sets)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


# --- runner profiles ----------------------------------------------------------------


def runner_profile_names() -> list[str]:
    """Names of the runner profiles shipped in ``configs/runners/``."""
    folder = importlib.resources.files("recordforge.configs") / "runners"
    return sorted(entry.name[:-len(".yaml")] for entry in folder.iterdir()
                  if entry.name.endswith(".yaml"))


def load_runner_profile(name_or_path: str, environ: Mapping[str, str] | None = None
                        ) -> list[str]:
    """The Beam options of a runner profile, ready for `PipelineOptions`.

    name_or_path: a shipped profile name (``direct``, ``dataflow``, ...) or the
      path of a YAML file with an ``args:`` list of ``--flag=value`` strings.
    ``${VAR}`` in a flag is replaced by the environment variable VAR (from
    `environ`, default os.environ); an unset variable is a ConfigError.
    ``${VAR:-default}`` uses the default when VAR is unset or empty, and a flag
    left with an empty value (``--flag=``) is dropped, so Beam's own default applies.
    """
    environ = os.environ if environ is None else environ
    label = f"runner profile {name_or_path}"
    if os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        try:
            with open(name_or_path, encoding="utf-8") as f:
                text = f.read()
        except OSError as error:
            raise ConfigError("", f"cannot read {label}: {error.strerror or error}") from None
    else:
        resource = importlib.resources.files("recordforge.configs") / "runners" / \
            f"{name_or_path}.yaml"
        if not re.match(r"^[a-z0-9_-]+$", name_or_path) or not resource.is_file():
            raise ConfigError("", f"unknown {label}; shipped profiles: "
                              f"{', '.join(runner_profile_names())} (or give a file path)")
        text = resource.read_text(encoding="utf-8")
    data = _safe_load(text, origin=label)
    if not isinstance(data, Mapping) or "args" not in data:
        raise ConfigError("args", f"{label} must be a mapping with an `args:` list of Beam "
                          "options")
    _check_keys(data, ("description", "args"), "")
    args = data["args"]
    if not isinstance(args, list):
        raise ConfigError("args", f"{label}: must be a list of --flag=value strings")
    result = []
    for i, arg in enumerate(args):
        if not isinstance(arg, str) or not arg.startswith("--"):
            raise ConfigError(f"args[{i}]", f"{label}: {arg!r} is not a Beam option; write "
                              "--flag=value")

        def substitute(match: re.Match, i=i) -> str:
            var, default = match.group(1), match.group(3)
            if environ.get(var):
                return environ[var]
            if match.group(2) is not None:
                return default
            raise ConfigError(f"args[{i}]", f"{label}: environment variable {var} is not "
                              f"set (needed by {arg})")

        expanded = _ENV_RE.sub(substitute, arg)
        if not expanded.endswith("="):
            result.append(expanded)
    return result
