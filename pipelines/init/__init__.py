"""`recordforge init SOURCE`: a dataset config inferred from a table or an image directory.

A table is sampled (the first `--rows` rows, 10,000 by default, of the
files the build would read, in listing order, by the build's own readers;
memory is bounded by the sample) and each column gets the feature that
stores every sampled value exactly (`columns`): int64, float, string,
bytes, or timestamp for native dates and times and for text in ISO 8601 or
another common format (the pattern is written as ``format:``); its shape;
``required: false`` with the null tokens seen where some rows have none.
Nested objects become features reading a list of keys (``from: [user,
city]``); a top-level name stays the plain column name, dots and all. A
column whose values no feature type stores exactly is left out, with a
comment saying why. A CSV file's dialect is sniffed, and its encoding
changed to one that reads every byte if the sample shows the first guess
fails. TFRecord output of recordforge or TFDS is typed by its
``manifest.json`` / ``features.json`` when one sits beside it
(`datasets`). An image directory gets the image features and a class
vocabulary from its folders (`images`).

The config is written as YAML text (`-o FILE`, or standard output), every
key and value through one quoting rule (`yaml_text`); it is checked by
`load_config`'s own parser before it is written.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import NamedTuple, Sequence

from ...schemas.errors import ConfigError
from ..config.dataset import config_from_dict
from ..config.yaml_safe import safe_load
from .columns import propose
from .datasets import Metadata, dataset_name, read_metadata
from .images import image_features
from .sample import Sample, sample_table
from .sniff import csv_dialects, detect_type
from .yaml_text import comment, flow

__all__ = ["infer_config", "main"]

DEFAULT_SAMPLE_ROWS = 10_000
_ENCODING_FAILURES = frozenset({"invalid_utf8", "invalid_encoding"})


class _Table(NamedTuple):
    """What init writes for a table: its dataset name, the lines of its
    ``source`` section after type and path, its features as (name,
    settings or None, comment), the error budget and the sample's summary."""

    name: str
    source_lines: list[str]
    features: list[tuple[str, dict | None, str]]
    budget: float
    summary: str


def _name_of(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    for _ in range(2):
        base = os.path.splitext(base)[0] if "." in base else base
    return _dataset_name(base)


def _dataset_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-") or "dataset"
    return name[:64]


def _budget(failed: int, rows: int) -> float:
    """An error budget above the share of sampled rows that failed to read."""
    if not failed:
        return 0.01
    return min(1.0, max(0.01, math.ceil(failed / (rows + failed) * 150) / 100))


def _sample_csv(path: str, rows: int) -> tuple[Sample, list[str]]:
    """The sample read in the first dialect whose encoding reads every
    sampled byte, and the config lines of that dialect."""
    for options in csv_dialects(path):
        sample = sample_table(path, "csv", rows, options)
        if not sample.failed.keys() & _ENCODING_FAILURES:
            break
    lines = []
    if not options.is_default:
        section = {"delimiter": options.delimiter}
        if options.encoding != "utf-8":
            section["encoding"] = options.encoding
        lines.append(f"  csv: {flow(section)}")
    return sample, lines


def _nothing_read(path: str, kind: str, sample: Sample) -> ConfigError:
    if not sample.failed:
        return ConfigError("source.path", f"no rows in {path}")
    reasons = "; ".join(f"{reason} ({count}): {sample.messages[reason]}"
                        for reason, count in sample.failed.most_common(3))
    # A file that does not parse at all may be another type than its name says.
    hint = f" Is --type {kind} right?" if any(reason.endswith("_invalid")
                                              for reason in sample.failed) else ""
    return ConfigError("source.path", f"no readable rows in {path}: {reasons}.{hint}")


def _table(path: str, kind: str, rows: int) -> _Table:
    source_lines: list[str] = []
    if kind == "csv":
        sample, source_lines = _sample_csv(path, rows)
    else:
        sample = sample_table(path, kind, rows, None)
    if not sample.columns and not sample.objects:
        raise _nothing_read(path, kind, sample)
    if sample.unread:
        # The build would fail on it whatever the budget: say so now.
        raise ConfigError("source.path", f"{sample.unread[0]}; a build cannot count the rows "
                          "lost there, so it would fail: fix or remove that file first")
    metadata = read_metadata(path) if kind == "tfrecord" else None
    name = _name_of(path)
    if kind == "tfrecord":
        name = _dataset_name((metadata and metadata.name) or dataset_name(path))
    failed = sum(sample.failed.values())
    summary = f"# {sample.rows} rows sampled" + (f"; {failed} could not be read ("
                                                 f"{', '.join(sample.failed)})" if failed else "")
    if metadata is not None:
        summary += f"\n# {comment(metadata.note)}"
    return _Table(name, source_lines, _table_features(sample, kind, metadata),
                  _budget(failed, sample.rows), summary)


def _table_features(sample: Sample, kind: str, metadata: Metadata | None
                    ) -> list[tuple[str, dict | None, str]]:
    features: list[tuple[str, dict | None, str]] = []
    used: set[str] = set()
    for path, column in sample.columns.items():
        body, note = propose(column, sample.rows, kind)
        if metadata is not None and len(path) == 1 and path[0] in metadata.features:
            body = _as_declared(metadata.features[path[0]], body)
            note = "; ".join(filter(None, (metadata.comments.get(path[0]), note)))
        if path in sample.objects:
            body, note = None, "it holds objects in some rows and other values in others"
        if "" in path:
            body, note = None, "an empty name cannot be named in `from:`"
        name = _unique("/".join(path), used)
        if body is not None and (len(path) > 1 or name != path[0]):
            # A nested value is named by its list of keys; a plain string is
            # always one top-level column, dots and all.
            body = {"type": body.pop("type"), "from": list(path) if len(path) > 1 else path[0],
                    **body}
        features.append((name, body, note))
    if metadata is not None:
        # Declared but in no sampled record: the build refuses a feature no
        # row holds, so it is named in a comment only.
        for name in sorted(set(metadata.features) - {path[0] for path in sample.columns}):
            features.append((name, None, f"declared {flow(metadata.features[name])}, but in "
                             f"none of the {sample.rows} records sampled"))
    for path in sorted(sample.objects):
        if not any(key[:len(path)] == path for key in sample.columns):
            features.append(("/".join(path), None, "only empty objects {} seen"))
    return features


def _as_declared(declared: dict, sampled: dict | None) -> dict:
    """The writer's declared settings, optional where the sample finds a record without it."""
    body = dict(declared)
    if sampled is not None and sampled.get("required") is False:
        body["required"] = False
    return body


def _unique(name: str, used: set[str]) -> str:
    """`name`, or with a suffix where another feature took it (the top-level
    column ``a/b`` and the nested ``a`` -> ``b``)."""
    candidate, number = name, 1
    while candidate in used:
        number += 1
        candidate = f"{name}_{number}"
    used.add(candidate)
    return candidate


def _feature_lines(features: list[tuple[str, dict | None, str]]) -> list[str]:
    written = [(flow(name) + ":", body, note) for name, body, note in features]
    width = max((len(key) for key, body, _ in written if body is not None), default=0)
    lines = []
    for key, body, note in written:
        if body is None:
            lines.append(f"  # {comment(key)} no feature: {comment(note)}")
            continue
        line = f"  {key:<{width}} {flow(body)}"
        lines.append(line + (f"  # {comment(note)}" if note else ""))
    return lines


def infer_config(path: str, *, source_type: str | None = None,
                 rows: int = DEFAULT_SAMPLE_ROWS, output: str | None = None) -> str:
    """The config inferred from `path` as YAML text (see the module); raises
    ConfigError when nothing usable is found."""
    kind = source_type or detect_type(path)
    if kind == "images":
        features, budget, source_lines = image_features(path)
        table = _Table(_name_of(path), source_lines, features, budget, "")
    else:
        table = _table(path, kind, rows)
    if not any(body is not None for _, body, _ in table.features):
        raise ConfigError("features", f"no column of {path} can be a feature: " + "; ".join(
            f"{name}: {note}" for name, _, note in table.features))
    lines = [f"# Inferred by `recordforge init` from {comment(path)}.",
             "# Check the types and the checks, then: recordforge build THIS_FILE",
             f"name: {flow(table.name)}", "version: '1.0.0'", "source:",
             f"  type: {kind}", f"  path: {flow(path)}", *table.source_lines]
    if table.summary:
        lines.append(table.summary)
    lines += ["features:", *_feature_lines(table.features),
              "output:", f"  path: {flow(output or os.path.join('out', table.name))}",
              "dead_letter:", f"  max_error_rate: {table.budget}"]
    text = "\n".join(lines) + "\n"
    config_from_dict(safe_load(text, origin="init"))  # what is written builds
    return text


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
