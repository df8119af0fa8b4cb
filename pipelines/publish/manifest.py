"""The published dataset's self-description: building, writing and checking `manifest.json`.

`build_manifest` turns what a build measured (shards, dead letters, counts)
plus what the config declared (name, features, vocabularies, splits) into the
manifest dict of the product contract, with a fixed key order:

    format, name, version, created, compression, file_format (ArrayRecord
    output only), features, vocabularies,
    splits, num_input_rows, dead_letter, inputs (when known), cache (when
    the build cache was used), files, config, tool

`dumps_manifest` serializes it deterministically (2-space indent, UTF-8,
trailing newline): splits follow the configured split order, shards are
sorted by file name, dead-letter reasons and files are sorted. Two builds of
the same inputs therefore differ only in `created` (and `cache`, which says
how much of each build came from the build cache).

`load_manifest` is the reader's side: it parses a manifest and checks every
field a verifier or a reader relies on, raising `ManifestError` (naming the
field) for anything malformed.

Shard file names follow `transforms.layout.shard_file_name`; `SHA256SUMS`
is `checksums`' job. Nothing here touches a filesystem; `finalizing` and
`verify` do the I/O.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from typing import Any, Iterable, Mapping, Sequence

from ...transforms.layout import (index_file_name, parse_shard_file_name, shard_file_format,
                                  shard_suffix)
from ...transforms.tfrecord import indexable
from ..version import __version__

__all__ = [
    "SPREAD_LIMIT",
    "shard_size_spread",
    "FORMAT",
    "SHA256_HEX",
    "ManifestError",
    "build_manifest",
    "compression_label",
    "compression_from_label",
    "file_format_of",
    "dumps_manifest",
    "index_files",
    "is_relative_inside",
    "load_manifest",
    "utc_timestamp",
    "with_files",
]

FORMAT = "recordforge.manifest/1"
TOOL_NAME = "recordforge"

_COMPRESSION_LABELS = {"gzip": "GZIP", "none": "NONE"}
# The shard file formats; a manifest without ``file_format`` (every one
# written before ArrayRecord output, and every TFRecord build's) is tfrecord.
_FILE_FORMATS = ("tfrecord", "array_record")
_STORED_TYPES = ("int64", "float", "bytes")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")  # a sha256 digest as the manifest writes it


class ManifestError(ValueError):
    """A manifest (or the inputs to one) is malformed. `field` is the dotted
    path of the offending field, e.g. ``splits.train.shards[3].sha256``."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


def utc_timestamp(now: _dt.datetime | None = None) -> str:
    """`now` (default: the current time) as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    if now.tzinfo is None:
        raise ValueError("utc_timestamp needs a timezone-aware datetime")
    return now.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def compression_label(compression: str) -> str:
    """"gzip" -> "GZIP", "none" -> "NONE" (the manifest's spelling)."""
    try:
        return _COMPRESSION_LABELS[compression]
    except KeyError:
        raise ManifestError("compression", f"must be 'gzip' or 'none', got {compression!r}") from None


def compression_from_label(label: str) -> str:
    """The inverse of `compression_label`: "GZIP" -> "gzip"."""
    for compression, known in _COMPRESSION_LABELS.items():
        if label == known:
            return compression
    raise ManifestError("compression", f"must be 'GZIP' or 'NONE', got {label!r}")


def file_format_of(manifest: Mapping[str, Any]) -> str:
    """A manifest's shard file format: its ``file_format``, "tfrecord" when absent."""
    return manifest.get("file_format", "tfrecord")


def _check_file_format(file_format: Any, compression: str) -> str:
    """``file_format`` must be one of the formats; "array_record" only with
    compression "none" (its chunks are compressed inside the file)."""
    if file_format not in _FILE_FORMATS:
        raise ManifestError("file_format", f"must be one of {list(_FILE_FORMATS)}, got "
                            f"{file_format!r}"[:300])
    if file_format == "array_record" and compression != "none":
        raise ManifestError("compression", "must be 'NONE' for file_format 'array_record' "
                            f"(its chunks are compressed inside the file), got "
                            f"{compression_label(compression)!r}")
    return file_format


def _check_shards(split: str, shards: Sequence[Mapping[str, Any]], compression: str,
                  field: str, file_format: str = "tfrecord") -> None:
    """Shard names must be exactly <split>-00000..<n-1>-of-<n> with the
    suffix of the compression and file format: a gap means a shard (and
    its rows) went missing."""
    count = len(shards)
    seen = set()
    for position, shard in enumerate(shards):
        where = f"{field}[{position}]"
        parsed = parse_shard_file_name(shard["file"])
        if parsed is None:
            raise ManifestError(f"{where}.file", f"{shard['file']!r} is not a shard file name "
                                "(<split>-<index:05d>-of-<count:05d>.tfrecord[.gz] or "
                                ".array_record)")
        name_split, index, of, name_compression = parsed
        if name_split != split:
            raise ManifestError(f"{where}.file", f"{shard['file']!r} does not belong to split {split!r}")
        if name_compression != compression or shard_file_format(shard["file"]) != file_format:
            raise ManifestError(f"{where}.file", f"{shard['file']!r} does not have the suffix "
                                f"{shard_suffix(compression, file_format)!r} of compression "
                                f"{compression!r} and file format {file_format!r}")
        if of != count:
            raise ManifestError(f"{where}.file", f"{shard['file']!r} says {of} shards but split "
                                f"{split!r} has {count}")
        if index in seen or index >= count:
            raise ManifestError(f"{where}.file", f"{shard['file']!r} repeats or exceeds shard "
                                f"index range 0..{count - 1}")
        seen.add(index)
        for key in ("num_examples", "num_bytes"):
            value = shard.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ManifestError(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
        if not isinstance(shard.get("sha256"), str) or not SHA256_HEX.match(shard["sha256"]):
            raise ManifestError(f"{where}.sha256", f"must be 64 lowercase hex digits, got "
                                f"{shard.get('sha256')!r}")
        if "index" in shard and file_format == "array_record":
            raise ManifestError(f"{where}.index", "an ArrayRecord shard has no index file (it "
                                "indexes its records in its own footer)")
        if "index" in shard:
            _check_index(shard["file"], shard["index"], compression, f"{where}.index")


_INDEX_KEYS = ("file", "num_bytes", "sha256")


def _check_index(shard_file: str, index: Any, compression: str, where: str) -> None:
    """A shard's ``index`` entry: exactly ``{"file": "<shard>.index",
    "num_bytes", "sha256"}``, only for an uncompressed shard. A shard
    without one has no index."""
    if not indexable(compression):
        raise ManifestError(where, f"a {compression} shard has no index (no random access)")
    if not isinstance(index, Mapping) or sorted(index) != sorted(_INDEX_KEYS):
        raise ManifestError(where, f"must be an object with exactly {list(_INDEX_KEYS)}, got "
                            f"{index!r}"[:300])
    if index["file"] != index_file_name(shard_file):
        raise ManifestError(f"{where}.file", f"must be {index_file_name(shard_file)!r}, got "
                            f"{index['file']!r}")
    size = index["num_bytes"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"{where}.num_bytes", f"must be a non-negative integer, got "
                            f"{size!r}")
    if not isinstance(index["sha256"], str) or not SHA256_HEX.match(index["sha256"]):
        raise ManifestError(f"{where}.sha256", f"must be 64 lowercase hex digits, got "
                            f"{index['sha256']!r}")


def _shard_entry(shard: Mapping[str, Any]) -> dict:
    entry = {"file": shard["file"], "num_examples": shard["num_examples"],
             "num_bytes": shard["num_bytes"], "sha256": shard["sha256"]}
    if "index" in shard:
        entry["index"] = dict(shard["index"])
    return entry


def index_files(manifest: Mapping[str, Any]) -> dict[str, dict]:
    """index file -> its shard's manifest entry, for every shard with one."""
    return {shard["index"]["file"]: shard for summary in manifest["splits"].values()
            for shard in summary["shards"] if "index" in shard}


# Beyond this deviation from the split's mean shard size the contract's
# promise (every shard within ±10%) is broken, and the manifest says why.
SPREAD_LIMIT = 0.10


def shard_size_spread(shards: Sequence[Mapping[str, Any]], *,
                      compressed_at_rows: bool = False) -> dict:
    """``{"max_deviation": d}``: the largest deviation of a shard's size from
    the split's mean, as a fraction of the mean (rounded to 4 places), plus
    ``"why"`` when it exceeds `SPREAD_LIMIT`. compressed_at_rows: gzip
    shards cut at rows (shuffled gzip output), whose compressed sizes
    follow their own rows' compression ratio."""
    sizes = [int(shard["num_bytes"]) for shard in shards]
    mean = sum(sizes) / len(sizes)
    deviation = max(abs(size - mean) for size in sizes) / mean if mean else 0.0
    spread: dict[str, Any] = {"max_deviation": round(deviation, 4)}
    if deviation > SPREAD_LIMIT:
        rows = sum(int(shard["num_examples"]) for shard in shards)
        per_shard = rows / len(shards)
        record = sum(sizes) / rows if rows else 0
        if per_shard < 1 / SPREAD_LIMIT:
            spread["why"] = (f"records are large against the shard size: about "
                             f"{per_shard:.1f} records of {record:,.0f} bytes per shard, and "
                             "shards are cut between records, so their sizes cannot come "
                             "closer; a larger output.shard_size evens them out")
        elif compressed_at_rows:
            spread["why"] = ("gzip shards hold equal shares of the split's uncompressed "
                             "records, so their sizes on disk differ as much as their rows' "
                             "compression ratios do: rows that compress unequally across the "
                             "split spread them")
        else:
            spread["why"] = ("shards are cut between chunks of at most output.shard_size "
                             "/ 25 of uncompressed records; records larger than a chunk, or "
                             "very unequal record sizes, make those cuts coarser than ±10%")
    return spread


def build_manifest(*, name: str, version: str, created: str, compression: str,
                   features: Mapping[str, Any], vocabularies: Mapping[str, Sequence[str]],
                   split_names: Sequence[str], shards: Iterable[Mapping[str, Any]],
                   num_input_rows: int, dead_letter: Mapping[str, Any],
                   config: Mapping[str, Any], runner: str,
                   inputs: Mapping[str, Any] | None = None,
                   cache: Mapping[str, int] | None = None,
                   file_format: str = "tfrecord") -> dict:
    """The manifest dict, in the contract's shape and key order.

    shards: the pipeline's shard records ``{"split", "file", "num_examples",
    "num_bytes", "sha256"}`` (and ``"index"``, kept as it is, for a shard
    with an index file) in any order. dead_letter: ``{"num_rows",
    "by_reason", "files", ...}`` (other keys, e.g. samples, are left out).
    inputs: the fingerprints of the files read
    (`transforms.readers.inputs.source_inputs`), kept as ``inputs`` after
    ``dead_letter``; None (a build from a PCollection) leaves it out.
    cache: what the build reused from the build cache and what it converted
    (`pipelines.graph.cache_summary`), kept as ``cache`` after ``inputs``;
    None (no cache used) leaves it out.
    file_format: "tfrecord" (no ``file_format`` key, as in every manifest
    before ArrayRecord output) or "array_record" (``file_format`` after
    ``compression``).
    Raises `ManifestError` for a shard of an unknown split, a gap or clash in
    shard numbering, a wrong suffix or a malformed count or checksum.
    """
    _check_file_format(file_format, compression)
    by_split: dict[str, list] = {split: [] for split in split_names}
    for shard in shards:
        split = shard.get("split")
        if split not in by_split:
            raise ManifestError("splits", f"shard {shard.get('file')!r} belongs to split "
                                f"{split!r}, which is not one of {list(split_names)}")
        by_split[split].append(_shard_entry(shard))
    splits = {}
    for split, entries in by_split.items():
        entries.sort(key=lambda entry: entry["file"])
        _check_shards(split, entries, compression, f"splits.{split}.shards", file_format)
        splits[split] = {
            "num_examples": sum(entry["num_examples"] for entry in entries),
            "num_bytes": sum(entry["num_bytes"] for entry in entries),
            "shards": entries,
        }
        if entries:
            splits[split]["shard_size_spread"] = shard_size_spread(
                entries, compressed_at_rows=compression_label(compression) == "GZIP"
                and bool((config.get("output") or {}).get("shuffle", True)))
    manifest = {
        "format": FORMAT,
        "name": name,
        "version": version,
        "created": created,
        "compression": compression_label(compression),
    }
    if file_format != "tfrecord":
        manifest["file_format"] = file_format
    manifest.update({
        "features": {key: dict(value) for key, value in features.items()},
        "vocabularies": {key: list(value) for key, value in vocabularies.items()},
        "splits": splits,
        "num_input_rows": int(num_input_rows),
        "dead_letter": _dead_letter_block(dead_letter),
    })
    if inputs is not None:
        manifest["inputs"] = {"files": [dict(entry) for entry in inputs.get("files", [])],
                              "skipped": dict(inputs.get("skipped", {}))}
    if cache is not None:
        manifest["cache"] = {key: int(value) for key, value in cache.items()}
    manifest["config"] = config
    manifest["tool"] = {"name": TOOL_NAME, "version": __version__, "runner": runner}
    return manifest


def _dead_letter_block(dead_letter: Mapping[str, Any]) -> dict:
    block = {
        "num_rows": int(dead_letter.get("num_rows", 0)),
        "by_reason": dict(sorted(dead_letter.get("by_reason", {}).items())),
        "files": sorted(dead_letter.get("files", [])),
    }
    if dead_letter.get("uncounted"):
        # dead letters standing for an unknown number of rows (each counted
        # as one), published only under a budget that admits any failure
        block["uncounted"] = int(dead_letter["uncounted"])
    return block


def with_files(manifest: Mapping[str, Any], files: Sequence[Mapping[str, Any]]) -> dict:
    """The manifest with ``files``: the version's other files (report,
    statistics, descriptions for other readers) as ``{"file", "num_bytes",
    "sha256"}``, sorted by name, placed just before ``config``; unchanged
    without any."""
    if not files:
        return dict(manifest)
    ordered = {}
    for key, value in manifest.items():
        if key == "files":
            continue
        if key == "config":
            ordered["files"] = sorted((dict(entry) for entry in files),
                                      key=lambda entry: entry["file"])
        ordered[key] = value
    return ordered


def dumps_manifest(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as UTF-8 JSON bytes, indented by 2, with a final newline.
    Keys keep the dict's order (build_manifest fixes it), so the bytes are a
    function of the content."""
    return (json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _require(mapping: Mapping, key: str, types, field: str):
    if not isinstance(mapping, Mapping) or key not in mapping:
        raise ManifestError(f"{field}{key}", "missing")
    value = mapping[key]
    # bool is an int subclass; a count of `true` is still malformed.
    if not isinstance(value, types) or (types is int and isinstance(value, bool)):
        raise ManifestError(f"{field}{key}", f"has the wrong type ({type(value).__name__})")
    return value


def load_manifest(data: bytes | str) -> dict:
    """Parses and checks a manifest. Returns the dict; raises `ManifestError`
    naming the first malformed field. Checks structure and internal
    consistency (shard names, per-split sums, the row accounting invariant),
    not the files themselves."""
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise ManifestError("", f"not valid JSON ({error})") from None
    except RecursionError:  # JSON nested deeper than the parser's stack
        raise ManifestError("", "not a manifest: JSON nested too deeply to parse") from None
    if not isinstance(manifest, dict):
        raise ManifestError("", "not a JSON object")
    if _require(manifest, "format", str, "") != FORMAT:
        raise ManifestError("format", f"unsupported manifest format {manifest['format']!r} "
                            f"(this recordforge reads {FORMAT!r})")
    for key in ("name", "version", "created"):
        _require(manifest, key, str, "")
    compression = compression_from_label(_require(manifest, "compression", str, ""))
    file_format = _check_file_format(file_format_of(manifest), compression)
    features = _require(manifest, "features", dict, "")
    for feature, spec in features.items():
        where = f"features.{feature}."
        kind = _require(spec, "type", str, where)
        if kind not in _STORED_TYPES:
            raise ManifestError(f"{where}type", f"must be one of {_STORED_TYPES}, got {kind!r}")
        shape = spec.get("shape", [])
        if not (isinstance(shape, list) and len(shape) <= 1
                and all(isinstance(n, int) and (n >= 0 or n == -1) for n in shape)):
            raise ManifestError(f"{where}shape", f"must be [], [N] or [-1], got {shape!r}")
        if not isinstance(spec.get("required", True), bool):
            raise ManifestError(f"{where}required", f"must be true or false, got "
                                f"{spec['required']!r}")
        if "default" in spec:
            _check_default(spec["default"], kind, shape, f"{where}default")
    vocabularies = _require(manifest, "vocabularies", dict, "")
    for key, values in vocabularies.items():
        if not isinstance(values, list):
            raise ManifestError(f"vocabularies.{key}", "must be a list")
    splits = _require(manifest, "splits", dict, "")
    total_examples = 0
    for split, summary in splits.items():
        where = f"splits.{split}."
        shards = _require(summary, "shards", list, where)
        for position, shard in enumerate(shards):
            shard_where = f"{where}shards[{position}]."
            _require(shard, "file", str, shard_where)
            _require(shard, "num_examples", int, shard_where)
            _require(shard, "num_bytes", int, shard_where)
            _require(shard, "sha256", str, shard_where)
        _check_shards(split, shards, compression, f"{where}shards", file_format)
        for key in ("num_examples", "num_bytes"):
            total = _require(summary, key, int, where)
            if total != sum(shard[key] for shard in shards):
                raise ManifestError(f"{where}{key}", f"{total} is not the sum over its shards "
                                    f"({sum(shard[key] for shard in shards)})")
        total_examples += summary["num_examples"]
    num_input_rows = _require(manifest, "num_input_rows", int, "")
    dead = _require(manifest, "dead_letter", dict, "")
    dead_rows = _require(dead, "num_rows", int, "dead_letter.")
    _require(dead, "by_reason", dict, "dead_letter.")
    files = _require(dead, "files", list, "dead_letter.")
    for position, file in enumerate(files):
        if not isinstance(file, str) or not is_relative_inside(file):
            raise ManifestError(f"dead_letter.files[{position}]",
                                f"must be a relative path inside the version, got {file!r}")
    listed = manifest.get("files", [])
    for position, entry in enumerate(listed if isinstance(listed, list) else [None]):
        file = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(file, str) or not is_relative_inside(file):
            raise ManifestError(f"files[{position}].file",
                                f"must be a relative path inside the version, got {file!r}")
        if not isinstance(entry.get("num_bytes"), int) or entry["num_bytes"] < 0:
            raise ManifestError(f"files[{position}].num_bytes",
                                f"must be a byte count, got {entry.get('num_bytes')!r}")
        if not (isinstance(entry.get("sha256"), str) and SHA256_HEX.match(entry["sha256"])):
            raise ManifestError(f"files[{position}].sha256",
                                f"must be 64 hex digits, got {entry.get('sha256')!r}")
    if num_input_rows != total_examples + dead_rows:
        raise ManifestError("num_input_rows", f"{num_input_rows} input rows but "
                            f"{total_examples} examples + {dead_rows} dead letters")
    if "inputs" in manifest:
        _check_inputs(manifest["inputs"])
    _require(manifest, "config", dict, "")
    _require(_require(manifest, "tool", dict, ""), "name", str, "tool.")
    return manifest


def _check_inputs(inputs: Any) -> None:
    """The ``inputs`` block: each file's path and size (and its version
    token, whatever the filesystem gave), and counts of skipped files."""
    files = _require(inputs, "files", list, "inputs.")
    for position, entry in enumerate(files):
        where = f"inputs.files[{position}]."
        _require(entry, "path", str, where)
        if not entry.get("missing"):
            _require(entry, "size", int, where)
    skipped = _require(inputs, "skipped", dict, "inputs.")
    for reason, count in skipped.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ManifestError(f"inputs.skipped.{reason}", f"must be a count, got {count!r}")


def _check_default(default: Any, kind: str, shape: list, field: str) -> None:
    """A feature's ``default`` as `schemas.features.default_as_json` writes
    it: one value for shape [], N values for [N], a list for [-1]."""
    values = default if shape else [default]
    if not shape:
        wanted = "one value"
    else:
        wanted = "a list" if shape[0] == -1 else f"a list of {shape[0]} values"
    if not isinstance(values, list) or (shape and shape[0] != -1 and len(values) != shape[0]):
        raise ManifestError(field, f"must be {wanted} for shape {shape}, got {default!r}")
    for value in values:
        if kind == "int64":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind == "float":
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) \
                or value in ("nan", "inf", "-inf")
        else:
            ok = isinstance(value, str) or (isinstance(value, dict) and list(value) == ["base64"]
                                            and isinstance(value["base64"], str))
        if not ok:
            raise ManifestError(field, f"{value!r} is not a stored {kind} value")


def is_relative_inside(file: str) -> bool:
    """Whether `file` is a relative path that stays inside its directory."""
    parts = file.split("/")
    return bool(file) and not file.startswith("/") and all(part not in ("", ".", "..") for part in parts)
