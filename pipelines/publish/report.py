"""The build report: one self-contained ``report.html`` per published version, gathered and written.

`write_report` shows what the manifest says (examples and bytes per split,
every shard's size against the ±10% band, dead letters by reason with a sample
row each), label counts per split (counted by the build's pipeline, or by a
streaming pass over the shards), a few thumbnails per class (from the first
records of the shards) and the build's throughput. This module gathers
them from the version's files (`gather_samples`, `dead_letter_samples`)
and writes the page (`transforms.files.write_atomic`); `report_html`
renders it, escaping everything that comes from the data.

The build driver calls `write_staged_report(staging_url, manifest,
label_counts=..., wall_seconds=...)` from `publish.finalize`'s report hook, so the report is
listed in ``SHA256SUMS`` like every other file.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import fsspec

from ..progress import human_bytes
from ...schemas.example import ExampleDecodeError, decode_features
from ...schemas.features import label_feature, label_text
from ...transforms.files import write_atomic
from ...transforms.array_record import ArrayRecordError
from ...transforms.layout import REPORT_FILE, STAGING_DIR, shard_file_format
from ...transforms.tfrecord import TFRecordError, read_records
from .array_record_copies import url_records
from .report_html import render_report
from .baseline import BaselineChoice, load_baselines

__all__ = [
    "previous_statistics",
    "write_report",
    "write_staged_report",
    "gather_samples",
    "dead_letter_samples",
]

THUMBNAILS_PER_CLASS = 4
# Thumbnails come from the first records only: the work stays bounded
# however large the dataset (label counts still read every record).
MAX_THUMBNAIL_RECORDS = 2000
# Stop looking for one sample per reason after this many dead-letter lines.
MAX_DEAD_LETTER_LINES = 100_000
_IMAGE_FEATURES = ("image/encoded", "image")


# --- gathering ------------------------------------------------------------------------


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def _shard_records(url: str):
    """The records of the shard at `url`, TFRecord or ArrayRecord (its name says)."""
    if shard_file_format(url) == "array_record":
        return url_records(url)
    return read_records(url)


def _label_feature(manifest: Mapping[str, Any]) -> tuple[str | None, list[str] | None]:
    """(feature to count labels by, its vocabulary or None)."""
    return label_feature(manifest.get("features") or {}, manifest.get("vocabularies") or {})


def _image_feature(manifest: Mapping[str, Any]) -> str | None:
    features = manifest.get("features") or {}
    for name in _IMAGE_FEATURES:
        if features.get(name, {}).get("type") == "bytes":
            return name
    return None


def _label_of(features: Mapping[str, tuple[str, list]], name: str,
              vocabulary: Sequence[str] | None) -> str | None:
    kind_values = features.get(name)
    if not kind_values or not kind_values[1]:
        return None
    return label_text(kind_values[1][0], vocabulary)


def gather_samples(version_dir: str, manifest: Mapping[str, Any], *,
                   thumbnails_per_class: int = THUMBNAILS_PER_CLASS,
                   max_thumbnail_records: int = MAX_THUMBNAIL_RECORDS,
                   count_labels: bool = True,
                   ) -> tuple[dict[str, dict[str, int]] | None, dict[str, list[bytes]] | None]:
    """Streams the shards of a (staged or published) version once.

    Returns ``(label_counts, thumbnails)``: split -> label -> examples (None
    when the dataset has no label feature, or with count_labels=False, which
    stops reading once the thumbnails are taken: every class of the label's
    vocabulary has its thumbnails, or the cap is reached) and label -> up to
    `thumbnails_per_class` raw image values taken from the first
    `max_thumbnail_records` records (None without an image feature). Memory
    holds one record at a time plus the counts and the kept images.
    """
    label_name, vocabulary = _label_feature(manifest)
    image_name = _image_feature(manifest)
    counting = label_name is not None and count_labels
    if not counting and image_name is None:
        return None, None
    label_counts: dict[str, dict[str, int]] = {}
    thumbnails: dict[str, list[bytes]] = {}
    wanted = [name for name in (label_name, image_name) if name is not None]
    labels_only = [label_name] if label_name is not None else []
    scanned = 0
    # Classes still short of thumbnails; without a vocabulary, unknown.
    missing = set(vocabulary) if vocabulary and image_name is not None else None

    def thumbnails_taken() -> bool:
        return scanned >= max_thumbnail_records or missing == set()

    for split, info in (manifest.get("splits") or {}).items():
        counts = label_counts.setdefault(split, {})
        for shard in info.get("shards", []):
            # Without label counting only thumbnails are wanted.
            if not counting and thumbnails_taken():
                break
            try:
                for record in _shard_records(_join(version_dir, shard["file"])):
                    try:
                        # Only the label and image: decoding every feature of
                        # every record made this pass as slow as the build's
                        # own row checks.
                        features = decode_features(
                            record, labels_only if thumbnails_taken() else wanted)
                    except ExampleDecodeError:
                        continue  # verification reports damaged records; the report skips
                    label = _label_of(features, label_name, vocabulary) if label_name else None
                    if label is not None:
                        counts[label] = counts.get(label, 0) + 1
                    if image_name is not None and not thumbnails_taken():
                        kept = thumbnails.setdefault(label if label is not None else "", [])
                        values = features.get(image_name, ("bytes", []))[1]
                        if len(kept) < thumbnails_per_class and values:
                            kept.append(values[0])
                            if len(kept) == thumbnails_per_class and missing:
                                missing.discard(label)
                    scanned += 1
                    if not counting and thumbnails_taken():
                        break
            except (TFRecordError, ArrayRecordError):
                continue  # a damaged shard fails verification; the report shows the rest
    return (label_counts if counting else None,
            {k: v for k, v in thumbnails.items() if v} if image_name is not None else None)


def dead_letter_samples(version_dir: str, manifest: Mapping[str, Any], *,
                        max_lines: int = MAX_DEAD_LETTER_LINES) -> dict[str, dict]:
    """reason -> the first dead-letter record with that reason, read from the
    version's dead-letter files (bounded: stops once every reason has one)."""
    dead = manifest.get("dead_letter") or {}
    wanted = set((dead.get("by_reason") or {}).keys())
    samples: dict[str, dict] = {}
    lines = 0
    for name in dead.get("files") or []:
        if wanted <= samples.keys() or lines >= max_lines:
            break
        try:
            with fsspec.open(_join(version_dir, name), "rt", encoding="utf-8",
                             errors="replace") as f:
                for line in f:
                    lines += 1
                    if lines > max_lines:
                        break
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    reason = record.get("reason") if isinstance(record, dict) else None
                    if isinstance(reason, str) and reason not in samples:
                        samples[reason] = record
                        if wanted <= samples.keys():
                            break
        except (OSError, FileNotFoundError):
            continue
    return samples


def previous_statistics(staging_url: str, drift: Mapping[str, Any] | None
                        ) -> dict | None:
    """The ``stats.json`` of the version `drift` compares with, read from
    the output that holds staging directory `staging_url`
    (``<output>/.staging/<version>.<build_id>``), for the drift charts.
    None when there is none, or it cannot be read: the charts are then
    drawn from drift.json alone (the gates never depend on this)."""
    version = drift.get("previous_version") if isinstance(drift, Mapping) else None
    parts = staging_url.rstrip("/").rsplit("/", 2)
    if not isinstance(version, str) or len(parts) != 3 or parts[1] != STAGING_DIR \
            or not parts[0]:
        return None
    # The same checked read as the gates' baseline: an earlier version's
    # files are untrusted input (links, FIFOs, sizes, nesting).
    baselines, _ = load_baselines(parts[0], BaselineChoice(version=version))
    return baselines[0].stats if baselines else None


def write_report(version_dir: str, manifest: Mapping[str, Any], *,
                 thumbnails: Mapping[str, Sequence[bytes]] | None = None,
                 label_counts: Mapping[str, Mapping[str, int]] | None = None,
                 throughput: Mapping[str, Any] | None = None,
                 statistics: Mapping[str, Any] | None = None,
                 drift: Mapping[str, Any] | None = None,
                 previous: Mapping[str, Any] | None = None,
                 duplicates: Mapping[str, Any] | None = None) -> str:
    """Writes ``<version_dir>/report.html`` (local path or fsspec URL) and
    returns its path. Dead-letter samples are read from the version's
    dead-letter files. previous: the stats.json drift compares with, for
    the drift charts. Written under a temporary name, then renamed."""
    page = render_report(manifest, thumbnails=thumbnails, label_counts=label_counts,
                         throughput=throughput,
                         dead_letter_samples=dead_letter_samples(version_dir, manifest),
                         statistics=statistics, drift=drift, previous=previous,
                         duplicates=duplicates)
    target = _join(version_dir, REPORT_FILE)
    fs, path = fsspec.core.url_to_fs(target)
    write_atomic(fs, path, page.encode("utf-8"))
    return target


def _throughput(manifest: Mapping[str, Any], wall_seconds: float | None) -> dict | None:
    if not wall_seconds or wall_seconds <= 0:
        return None
    splits = (manifest.get("splits") or {}).values()
    examples = sum(int(s.get("num_examples", 0)) for s in splits)
    size = sum(int(s.get("num_bytes", 0)) for s in splits)
    rows = manifest.get("num_input_rows")
    result: dict[str, Any] = {"wall_seconds": round(float(wall_seconds), 1)}
    if isinstance(rows, int):
        result["input_rows_per_second"] = rows / wall_seconds
    result["examples_per_second"] = examples / wall_seconds
    result["output_per_second"] = f"{human_bytes(size / wall_seconds)}/s"
    return result


def write_staged_report(staging_url: str, manifest: Mapping[str, Any], *,
                        label_counts: Mapping[str, Mapping[str, int]] | None = None,
                        wall_seconds: float | None = None,
                        statistics: Mapping[str, Any] | None = None,
                        drift: Mapping[str, Any] | None = None,
                        duplicates: Mapping[str, Any] | None = None) -> str:
    """Writes the report into the staging directory (the `publish.finalize`
    report hook), with the build's statistics, drift and duplicates when given (and the
    previous version's statistics for the drift charts, `previous_statistics`).
    Label counts are the pipeline's when given (split ->
    label -> examples), else counted from the staged shards; thumbnails
    come from the first records of the shards."""
    if label_counts is not None and _label_feature(manifest)[0] is not None:
        _, thumbnails = gather_samples(staging_url, manifest, count_labels=False)
        label_counts = {split: dict(label_counts.get(split, {}))
                        for split in manifest.get("splits") or {}}
    else:
        label_counts, thumbnails = gather_samples(staging_url, manifest)
    return write_report(staging_url, manifest, thumbnails=thumbnails, label_counts=label_counts,
                        throughput=_throughput(manifest, wall_seconds),
                        statistics=statistics, drift=drift, duplicates=duplicates,
                        previous=previous_statistics(staging_url, drift) if statistics else None)
