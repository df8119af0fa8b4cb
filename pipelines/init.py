"""`recordforge init SOURCE`: a dataset config inferred from a table or an image directory.

A table is sampled (the first `--rows` rows, 10,000 by default, of the
files the build would read, in listing order; memory is bounded by the
sample) and each column gets a feature: its type (int64, float, string,
bytes, timestamp for ISO 8601 text and native dates/times), its shape (a
list column is ``[-1]``), ``required: false`` with the null tokens seen
(``null_values``, the spellings pandas also reads as missing) where some
rows have none, nested objects as dotted paths. Observed ranges and small
value sets are written as comments. An image directory gets the image
features and a class vocabulary from its folders; its images are checked as
the build checks them (every pixel decoded), and the error budget is set
above the share that fails, so that building the output without edits
succeeds.

The config is written as YAML text (`-o FILE`, or standard output); it is
checked by `load_config` before it is written.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import sys
from collections import Counter
from typing import Any, Sequence

from ..schemas.errors import ConfigError
from ..transforms.readers.csv_dialect import CsvOptions
from ..transforms.readers.image_items import known_labels
from ..transforms.readers.images import ImageOptions, image_columns
from ..transforms.readers.listing import list_files, list_images
from ..transforms.readers.rows import SourceRow, each_row
from ..transforms.readers.tables import iter_table
from .config.dataset import config_from_dict
from .config.model import DEFAULT_EXTENSIONS
from .config.yaml_safe import safe_load

__all__ = ["infer_config", "main"]

DEFAULT_SAMPLE_ROWS = 10_000
# Images checked at most (listing order); the rest are assumed alike.
_MAX_IMAGES_CHECKED = 2_000
# Texts read as missing: pandas' default `na_values`, so that a dataset built
# from the inferred config reads back as `pandas.read_csv` reads the table.
NULL_TOKENS = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
_SMALL_SET = 10
_INT_RE = re.compile(r"[+-]?\d{1,18}")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_ISO_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?"
                          r"(Z|[+-]\d{2}:?\d{2})?)?")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_TYPES_BY_SUFFIX = {suffix: kind for kind, suffixes in DEFAULT_EXTENSIONS.items()
                    for suffix in suffixes if kind != "images"}
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp")


# --- what the source is ---------------------------------------------------------------

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
        counts: Counter = Counter()
        for _, _, files in os.walk(path):
            for file in files:
                suffix = os.path.splitext(file)[1].lower()
                if suffix in _IMAGE_SUFFIXES:
                    counts["images"] += 1
                elif suffix in _TYPES_BY_SUFFIX:
                    counts[_TYPES_BY_SUFFIX[suffix]] += 1
        if counts:
            return counts.most_common(1)[0][0]
    raise ConfigError("source.type", f"cannot tell what {path} holds from its name; pass "
                      "--type (csv, jsonl, json, parquet, avro, tfrecord or images)")


def _sniff_csv(path: str) -> CsvOptions:
    """The dialect of the first CSV file at `path`: encoding (UTF-8, UTF-16
    by its mark, else cp1252) and delimiter (the one of , ; tab | that splits
    the first lines into the same number of fields, most of them)."""
    _, files = list_files(path, (".csv", ".tsv", ".txt"))
    if not files:
        return CsvOptions()
    with open(files[0], "rb") as f:
        head = f.read(1 << 16)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        encoding = "utf-16"
    else:
        try:
            head.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError as error:
            encoding = "utf-8" if error.start > len(head) - 4 else "cp1252"
    text = head.decode(encoding if encoding != "utf-8" else "utf-8", "ignore")
    lines = [line for line in text.splitlines()[:50] if line.strip()][:-1] or text.splitlines()
    best, best_score = ",", 0
    for delimiter in (",", ";", "\t", "|"):
        counts = [line.count(delimiter) for line in lines]
        if counts and min(counts) > 0 and len(set(counts)) == 1 and counts[0] > best_score:
            best, best_score = delimiter, counts[0]
    return CsvOptions(delimiter=best, encoding=encoding)


# --- one column's values -> one feature -----------------------------------------------

class _Column:
    """What the sample shows of one column (or nested path)."""

    def __init__(self):
        self.kinds: Counter = Counter()
        self.nulls: Counter = Counter()  # null tokens (text) and None
        self.absent = 0
        self.present = 0
        self.list_lengths: set[int] = set()
        self.values: Counter = Counter()
        self.many = False
        self.low = self.high = None
        self.inf = False
        self.null_texts_are_data = False

    def add(self, value: Any, text_source: bool) -> None:
        if value is None:
            self.nulls[None] += 1
            return
        if isinstance(value, (list, tuple)):
            self.list_lengths.add(len(value))
            for item in value:
                if item is not None:
                    self._scalar(item, text_source)
            self.present += 1
            return
        if isinstance(value, str) and value in NULL_TOKENS:
            if text_source:
                self.nulls[value] += 1
                return
            # JSON, Parquet and Avro text is data (pandas keeps "" and "NA"
            # too): the feature then reads nothing but null as missing.
            self.null_texts_are_data = True
        self.present += 1
        self._scalar(value, text_source)

    def _scalar(self, value: Any, text_source: bool) -> None:
        kind = _kind(value, text_source)
        self.kinds[kind] += 1
        if kind in ("int", "float"):
            number = float(value) if kind == "float" else int(value)
            if kind == "float" and math.isinf(number):
                self.inf = True
            elif not (isinstance(number, float) and math.isnan(number)):
                self.low = number if self.low is None else min(self.low, number)
                self.high = number if self.high is None else max(self.high, number)
        if not self.many and kind in ("int", "text", "bool"):
            self.values[int(value) if kind in ("int", "bool") else value] += 1
            if len(self.values) > _SMALL_SET:
                self.many = True

    def feature(self, rows: int) -> tuple[dict, str]:
        """(feature settings, comment)."""
        kinds = set(self.kinds)
        if not kinds:
            ftype = "string"
        elif kinds <= {"int", "bool"}:
            ftype = "int64"
        elif kinds <= {"int", "float", "bool"}:
            ftype = "float"
        elif kinds == {"date"}:
            ftype = "date"
        elif kinds <= {"datetime", "date"}:
            ftype = "datetime"
        elif kinds == {"bytes"}:
            ftype = "bytes"
        else:
            ftype = "string"
        body: dict[str, Any] = {}
        comment = []
        if ftype in ("date", "datetime"):
            body["type"] = "timestamp"
            body["unit"] = "days" if ftype == "date" else "us"
        else:
            body["type"] = ftype
        if self.list_lengths:
            body["shape"] = [-1]
        if self.null_texts_are_data:
            body["null_values"] = []
        if ftype == "float" and self.inf:
            body["allow_nan"] = True
        missing = sum(self.nulls.values()) + self.absent
        if missing:
            body["required"] = False
            tokens = sorted(token for token in self.nulls if token is not None)
            if tokens and tokens != [""]:
                body["null_values"] = tokens
            seen = ", ".join(json.dumps(t) for t in tokens) or "none"
            comment.append(f"missing in {missing} of {rows} rows (null texts seen: {seen})")
        if self.low is not None and ftype in ("int64", "float"):
            comment.append(f"observed {self.low:g} .. {self.high:g}")
        if not self.many and self.values and ftype in ("int64", "string"):
            shown = ", ".join(json.dumps(v) if isinstance(v, str) else str(v)
                              for v in sorted(self.values, key=str))
            comment.append(f"values seen: {shown}")
        return body, "; ".join(comment)


def _kind(value: Any, text_source: bool) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, _dt.datetime):
        return "datetime"
    if isinstance(value, _dt.date):
        return "date"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, str):
        if text_source:
            stripped = value.strip()
            if _INT_RE.fullmatch(stripped) and abs(int(stripped)) < 2**63:
                return "int"
            if _FLOAT_RE.fullmatch(stripped) or stripped.lower() in ("inf", "-inf", "+inf"):
                return "float"
        if _ISO_DATE_RE.fullmatch(value.strip()):
            return "date" if len(value.strip()) == 10 else "datetime"
        return "text"
    if hasattr(value, "item"):  # numpy scalars
        return _kind(value.item(), text_source)
    return "text"


def _sample_table(path: str, kind: str, rows: int, options: CsvOptions | None
                  ) -> tuple[dict[tuple, _Column], int, int]:
    """(column path -> what was seen, rows sampled, rows that failed to read)."""
    fs, files = list_files(path, DEFAULT_EXTENSIONS[kind] if os.path.isdir(path) else None)
    columns: dict[tuple, _Column] = {}
    sampled = failed = 0
    text_source = kind == "csv"
    for fs_path in files:
        for item in each_row(iter_table(fs_path, kind, options, fs=fs)):
            if not isinstance(item, SourceRow):
                failed += 1
                continue
            flat: dict[tuple, Any] = {}
            _flatten(item.values, (), flat, nested=kind != "csv")
            for key in flat:
                if key not in columns:
                    column = _Column()
                    column.absent = sampled  # absent from every row before this one
                    columns[key] = column
            for key, column in columns.items():
                if key in flat:
                    column.add(flat[key], text_source)
                else:
                    column.absent += 1
            sampled += 1
            if sampled >= rows:
                return columns, sampled, failed
    return columns, sampled, failed


def _flatten(values: dict, prefix: tuple, out: dict, nested: bool) -> None:
    for key, value in values.items():
        path = prefix + (str(key),)
        if nested and isinstance(value, dict) and value:
            _flatten(value, path, out, nested)
        else:
            out[path] = value


# --- the config -----------------------------------------------------------------------

def _name_of(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    for _ in range(2):
        base = os.path.splitext(base)[0] if "." in base else base
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._-") or "dataset"
    return name[:64]


def _key(text: str) -> str:
    return text if _PLAIN_KEY.fullmatch(text) and text not in ("true", "false", "null",
                                                                "yes", "no", "on", "off") \
        else json.dumps(text)


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str):
        return _key(value) if value and not value[0].isdigit() and not value.startswith(
            ("-", ".", "+")) else json.dumps(value)
    return json.dumps(value)


def _table_features(columns: dict[tuple, _Column], rows: int, kind: str
                    ) -> list[tuple[str, dict, str]]:
    features = []
    for path, column in columns.items():
        body, comment = column.feature(rows)
        name = "/".join(path) if len(path) > 1 else path[0]
        if len(path) > 1:
            body = {"type": body.pop("type"),
                    "from": ".".join(path) if not any("." in k for k in path) else list(path),
                    **body}
        elif kind != "csv" and "." in path[0]:
            body = {"type": body.pop("type"), "from": [path[0]], **body}
        features.append((name, body, comment))
    return features


def infer_config(path: str, *, source_type: str | None = None,
                 rows: int = DEFAULT_SAMPLE_ROWS, output: str | None = None) -> str:
    """The config inferred from `path` as YAML text (see the module); raises
    ConfigError when nothing usable is found."""
    kind = source_type or detect_type(path)
    name = _name_of(path)
    lines = [f"# Inferred by `recordforge init` from {path}.",
             "# Check the types and the checks, then: recordforge build THIS_FILE",
             f"name: {name}", 'version: "1.0.0"', "source:", f"  type: {kind}",
             f"  path: {json.dumps(path)}"]
    budget = 0.01
    if kind == "images":
        features, budget, notes = _image_features(path)
        lines += notes
    else:
        options = _sniff_csv(path) if kind == "csv" else None
        if options is not None and not options.is_default:
            csv_section = {"delimiter": options.delimiter}
            if options.encoding != "utf-8":
                csv_section["encoding"] = options.encoding
            lines.append(f"  csv: {_flow(csv_section)}")
        columns, sampled, failed = _sample_table(path, kind, rows, options)
        if not columns:
            raise ConfigError("source.path", f"no readable rows in {path}; is --type {kind} "
                              "right?")
        lines.append(f"# {sampled} rows sampled" + (f"; {failed} could not be read"
                                                     if failed else ""))
        features = _table_features(columns, sampled, kind)
        if failed:
            budget = min(1.0, max(0.01, math.ceil(failed / (sampled + failed) * 150) / 100))
    lines.append("features:")
    width = max(len(_key(n)) for n, _, _ in features) + 1
    for feature, body, comment in features:
        line = f"  {_key(feature) + ':':<{width}} {_flow(body)}"
        lines.append(line + (f"  # {comment}" if comment else ""))
    lines += ["output:", f"  path: {json.dumps(output or os.path.join('out', name))}",
              "dead_letter:", f"  max_error_rate: {budget}"]
    text = "\n".join(lines) + "\n"
    config_from_dict(safe_load(text, origin="init"))  # what is written builds
    return text


def _image_features(path: str) -> tuple[list[tuple[str, dict, str]], float, list[str]]:
    _, listed, _ = list_images(path, _IMAGE_SUFFIXES)
    if not listed:
        raise ConfigError("source.path", f"no image files under {path}")
    suffixes = sorted({os.path.splitext(rel)[1].lower() for _, rel in listed})
    labels = known_labels(path, "directory", suffixes)
    checked = listed[:_MAX_IMAGES_CHECKED]
    options = ImageOptions(formats=("JPEG", "PNG", "GIF", "WEBP", "BMP"), decode="full")
    formats: Counter = Counter()
    failures: Counter = Counter()
    sizes = []
    for fs_path, rel in checked:
        try:
            with open(fs_path, "rb") as f:
                columns = image_columns(f.read(), rel, options)
        except Exception as error:  # noqa: BLE001 - counted by its reason, as the build will
            failures[getattr(error, "reason", type(error).__name__)] += 1
            continue
        formats[columns["format"]] += 1
        sizes.append((columns["width"], columns["height"]))
    failed = sum(failures.values())
    budget = max(0.01, math.ceil(failed / len(checked) * 150) / 100) if failed else 0.01
    notes = ["  labels: directory", f"  extensions: {_flow(suffixes)}", "  image:",
             f"    formats: {_flow(sorted(formats) or ['JPEG', 'PNG'])}",
             "    decode: full               # decode every pixel: truncated files become "
             "dead letters"]
    if sizes:
        notes.append(f"    # sizes seen: {min(w for w, _ in sizes)}x{min(h for _, h in sizes)}"
                     f" .. {max(w for w, _ in sizes)}x{max(h for _, h in sizes)} over "
                     f"{len(sizes)} images")
    if failed:
        notes.append(f"# {failed} of {len(checked)} images fail the checks "
                     f"({', '.join(f'{r}: {n}' for r, n in failures.most_common())}): "
                     f"max_error_rate is set above that")
    features = [("image/encoded", {"type": "bytes", "from": "image"}, ""),
                ("image/height", {"type": "int64", "from": "height"}, ""),
                ("image/width", {"type": "int64", "from": "width"}, ""),
                ("image/format", {"type": "string", "from": "format"}, ""),
                ("image/filename", {"type": "string", "from": "path"}, "")]
    if labels:
        shown = ", ".join(labels[:_SMALL_SET]) + (", ..." if len(labels) > _SMALL_SET else "")
        features += [("label", {"type": "int64", "from": "label", "vocabulary": "auto"},
                      f"{len(labels)} classes: {shown}"),
                     ("label/text", {"type": "string", "from": "label"}, "")]
    return features, budget, notes


def main(argv: Sequence[str] | None = None) -> int:
    """`recordforge init SOURCE [--type T] [-o FILE] [--rows N] [--output-path URL]`."""
    parser = argparse.ArgumentParser(
        prog="recordforge init",
        description="Infer a dataset config from a table (a bounded sample of its rows) or "
                    "an image directory.")
    parser.add_argument("source", help="a table file, glob or directory, or an image directory")
    parser.add_argument("--type", dest="source_type",
                        choices=["csv", "jsonl", "json", "parquet", "avro", "tfrecord", "images"],
                        help="source type (default: from the file names)")
    parser.add_argument("-o", "--out", help="write the config here (default: standard output)")
    parser.add_argument("--rows", type=int, default=DEFAULT_SAMPLE_ROWS,
                        help=f"rows sampled from a table (default {DEFAULT_SAMPLE_ROWS})")
    parser.add_argument("--output-path", help="the config's output.path (default out/NAME)")
    args = parser.parse_args(list(argv or []))
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    try:
        text = infer_config(args.source, source_type=args.source_type, rows=args.rows,
                            output=args.output_path)
    except ConfigError as error:
        print(f"recordforge init: {error}", file=sys.stderr)
        return 2
    if args.out:
        if os.path.exists(args.out):
            print(f"recordforge init: {args.out} exists; not overwritten", file=sys.stderr)
            return 2
        with open(args.out, "x", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
