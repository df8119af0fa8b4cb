"""The names of a dataset's files and folders on disk.

One place for every name a build writes or a reader looks for, so the shard
writer and the dead-letter sink (here in transforms) and publishing,
verification, inspection and progress (in pipelines) agree on them::

    <output>/
      LATEST                               LATEST_FILE
      .staging/                            STAGING_DIR: builds in progress
        <version>.<build_id>/              a build's staging directory
          _tmp/                            TMP_DIR: scratch, deleted before publishing
          _pipeline_result.json            RESULT_FILE: what the pipeline wrote, for the driver
        <version>.<build_id>.owner.json    OWNER_SUFFIX, and the other STAGING_SUFFIXES
        <version>.commit.lock              LOCK_SUFFIX
      .failed/<version>.<build_id>/        FAILED_DIR: dead letters, report and statistics of a failed build
      <version>/
        manifest.json                      MANIFEST_FILE
        SHA256SUMS                         SHA256SUMS_FILE
        report.html                        REPORT_FILE
        dataset_info.json, features.json   DATASET_INFO_FILE, FEATURES_FILE (TFDS; no gzip)
        croissant.json                     CROISSANT_FILE
        stats.json                         STATS_FILE: statistics per split and feature
        drift.json                         DRIFT_FILE: against the previous version, and the gates
        duplicates.json                    DUPLICATES_FILE: exact duplicates and leakage between splits
        <split>-<index:05d>-of-<count:05d>.tfrecord[.gz]   shard_file_name
        <split>-<index:05d>-of-<count:05d>.tfrecord.index  index_file_name (uncompressed only)
        <split>-<index:05d>-of-<count:05d>.array_record    the same, output.format: array_record
        dead_letter/part-00000.jsonl       DEAD_LETTER_DIR, dead_letter_part_name

A small file is written under `temporary_name` and renamed
(`transforms.files.write_atomic`); `TEMPORARY_TAIL` is the pattern of what
that name adds, so a cleanup can tell a killed writer's leftovers.
"""

from __future__ import annotations

import re
import uuid

__all__ = [
    "CACHE_DIR",
    "ARRAY_RECORD_SUFFIX",
    "ASIDE_SUFFIX",
    "held_copy_name",
    "DEAD_LETTER_DIR",
    "DRIFT_FILE",
    "DUPLICATES_FILE",
    "FAILED_DIR",
    "LATEST_FILE",
    "LATEST_TMP_SUFFIX",
    "LOCK_BROKEN_SUFFIX",
    "LOCK_SUFFIX",
    "LOCK_TMP_SUFFIX",
    "MANIFEST_FILE",
    "DATASET_INFO_FILE",
    "FEATURES_FILE",
    "CROISSANT_FILE",
    "FINALIZE_FILES",
    "INDEX_SUFFIX",
    "OWNER_SUFFIX",
    "REPORT_FILE",
    "RESULT_FILE",
    "SHA256SUMS_FILE",
    "SHARD_FILE_NAME",
    "SHARD_SUFFIXES",
    "STAGING_DIR",
    "STAGING_SUFFIXES",
    "STATS_FILE",
    "TEMPORARY_TAIL",
    "TMP_DIR",
    "dead_letter_part_name",
    "index_file_name",
    "is_shard_file",
    "parse_shard_file_name",
    "shard_file_format",
    "shard_file_name",
    "shard_suffix",
    "temporary_name",
]

# --- the output root -----------------------------------------------------------------
LATEST_FILE = "LATEST"  # the name of the newest published version
STAGING_DIR = ".staging"
FAILED_DIR = ".failed"
CACHE_DIR = ".cache"  # the build cache's pieces (`transforms.cache`), unless cache.path says

# --- a version directory -------------------------------------------------------------
MANIFEST_FILE = "manifest.json"  # written last: its presence means the version is complete
SHA256SUMS_FILE = "SHA256SUMS"
REPORT_FILE = "report.html"
# Descriptions for readers without recordforge (written beside the manifest).
DATASET_INFO_FILE = "dataset_info.json"  # TFDS, uncompressed output only
FEATURES_FILE = "features.json"  # TFDS, uncompressed output only
CROISSANT_FILE = "croissant.json"  # Croissant 1.1 JSON-LD
STATS_FILE = "stats.json"  # statistics per split and feature
DRIFT_FILE = "drift.json"  # against the version LATEST named, and the validation gates
DUPLICATES_FILE = "duplicates.json"  # exact duplicates within and across splits, and their gates
# What publishing writes into a staging directory, beside what the pipeline wrote.
FINALIZE_FILES = (MANIFEST_FILE, SHA256SUMS_FILE, REPORT_FILE, DATASET_INFO_FILE, FEATURES_FILE,
                  CROISSANT_FILE, STATS_FILE, DRIFT_FILE, DUPLICATES_FILE)
DEAD_LETTER_DIR = "dead_letter"

# --- a staging directory (beside what becomes the version) ---------------------------
TMP_DIR = "_tmp"
RESULT_FILE = "_pipeline_result.json"

# --- names a build creates in .staging beside its directory --------------------------
# All start with <version>.<build_id>, so a cleanup can attribute them to a
# build: its owner file, the commit's aside copy of an old version, the
# temporary name of LATEST, and the commit lock's temporary and broken copies.
OWNER_SUFFIX = ".owner.json"
ASIDE_SUFFIX = ".old"
LATEST_TMP_SUFFIX = ".latest.tmp"
LOCK_TMP_SUFFIX = ".lock.tmp"
LOCK_BROKEN_SUFFIX = ".lock.broken"
STAGING_SUFFIXES = (OWNER_SUFFIX, ASIDE_SUFFIX, LOCK_TMP_SUFFIX, LOCK_BROKEN_SUFFIX,
                    LATEST_TMP_SUFFIX)
LOCK_SUFFIX = ".commit.lock"  # <version>.commit.lock: one per version, not per build

# --- shards --------------------------------------------------------------------------
_SUFFIXES = {"gzip": ".tfrecord.gz", "none": ".tfrecord"}
# An ArrayRecord shard (`transforms.array_record`) compresses its own chunks,
# so it has one suffix, the one TFDS and Grain give such files.
ARRAY_RECORD_SUFFIX = ".array_record"
SHARD_SUFFIXES = tuple(_SUFFIXES[compression] for compression in ("none", "gzip")) + (
    ARRAY_RECORD_SUFFIX,)
SHARD_FILE_NAME = "{split}-{index:05d}-of-{count:05d}{suffix}"
_SHARD_NAME = re.compile(
    r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})"
    r"(?P<suffix>\.tfrecord(?:\.gz)?|\.array_record)$")

# A shard's index file (`transforms.tfrecord.index`) is its name plus this.
INDEX_SUFFIX = ".index"

# --- temporary names -----------------------------------------------------------------
TEMPORARY_TAIL = r"\.[0-9a-f]{32}\.tmp"


def shard_suffix(compression: str, file_format: str = "tfrecord") -> str:
    """``.tfrecord.gz`` for "gzip", ``.tfrecord`` for "none";
    ``.array_record`` for file_format "array_record" (always "none": its
    chunks are compressed inside the file); KeyError otherwise."""
    if file_format == "array_record" and compression == "none":
        return ARRAY_RECORD_SUFFIX
    if file_format != "tfrecord":
        raise KeyError((file_format, compression))
    return _SUFFIXES[compression]


def held_copy_name(version: str, build_id: str) -> str:
    """``<version>.<build_id>``, at the top of the output: where an overwrite
    on an object store keeps the version it replaces while LATEST names it
    (a valid version name, so readers of LATEST read it like any other)."""
    return f"{version[:160].rstrip('.')}.{build_id}"


def shard_file_name(split: str, index: int, count: int, compression: str,
                    file_format: str = "tfrecord") -> str:
    """``<split>-<index:05d>-of-<count:05d>.tfrecord[.gz]`` (or ``.array_record``)."""
    return SHARD_FILE_NAME.format(split=split, index=index, count=count,
                                  suffix=shard_suffix(compression, file_format))


def parse_shard_file_name(file: str) -> tuple[str, int, int, str] | None:
    """(split, index, count, compression) of a shard file name, or None if
    the name is not one."""
    match = _SHARD_NAME.match(file)
    if not match:
        return None
    compression = "gzip" if match["suffix"].endswith(".gz") else "none"
    return match["split"], int(match["index"]), int(match["count"]), compression


def shard_file_format(file: str) -> str:
    """"array_record" for a name ending ``.array_record``, else "tfrecord"."""
    return "array_record" if file.endswith(ARRAY_RECORD_SUFFIX) else "tfrecord"


def index_file_name(shard_file: str) -> str:
    """``<shard file>.index``: the name of a shard's index file, beside it."""
    return shard_file + INDEX_SUFFIX


def is_shard_file(name: str) -> bool:
    """Whether a file name has a shard's suffix (``.tfrecord``, ``.tfrecord.gz``
    or ``.array_record``)."""
    return name.endswith(SHARD_SUFFIXES)


def dead_letter_part_name(index: int) -> str:
    """``part-<index:05d>.jsonl``, the index-th dead-letter file."""
    return f"part-{index:05d}.jsonl"


def temporary_name(path: str) -> str:
    """A fresh name beside `path` to write it under before renaming:
    ``<path>.<32 hex digits>.tmp``."""
    return f"{path}.{uuid.uuid4().hex}.tmp"
