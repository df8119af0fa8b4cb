"""duplicates.json: the exact duplicates a build found, its gates, and the file read back by `verify`.

The pipeline counts duplicates (`transforms.duplicates`) and hands them to
the driver in ``_pipeline_result.json``; `DuplicatesCheck` (one of
`finalize`'s statistics hooks, before the report and before anything is
published) writes ``duplicates.json`` into staging and checks the gates
``validation.duplicates.max_fraction`` and ``max_cross_split``: a crossed
gate fails the build like the statistics gates (nothing published, LATEST
unchanged, the report and duplicates.json kept under ``.failed/``).
docs/duplicates.md describes the file.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...schemas.duplicates import MAX_PAIRS
from ...transforms.layout import DUPLICATES_FILE
from .dataset_paths import parse_json, read_limited
from .file_checks import Problem
from .output import Output
from .stats_files import dumps_json

__all__ = ["DUPLICATES_FORMAT", "DuplicatesCheck", "describe_duplicates", "duplicates_document",
           "duplicates_problems", "gate_results"]

DUPLICATES_FORMAT = 1
# duplicates.json holds counts per split and pair of splits and at most
# MAX_PAIRS pairs: far below this, whatever the dataset.
MAX_DUPLICATES_BYTES = 16 << 20
_COUNTS = ("duplicate_rows", "cross_split_rows", "rows_checked", "num_examples", "removed")


def _counts(found: Mapping[str, Any], order: Sequence[str], examples: int) -> dict:
    """The counts of a rendered part, splits and pairs in configured order."""
    pairs = [f"{a}/{b}" for index, a in enumerate(order) for b in order[index + 1:]]
    return {"duplicate_rows": found["duplicate_rows"],
            "duplicate_fraction": found["duplicate_rows"] / examples if examples else 0.0,
            "cross_split_rows": found["cross_split_rows"],
            "within_split": {split: found["within_split"][split] for split in order},
            "across_splits": {pair: found["across_splits"][pair] for pair in pairs}}


def duplicates_document(found: Mapping[str, Any], manifest: Mapping[str, Any],
                        features: Sequence[str] | None, dedupe: str | None = None,
                        left: Mapping[str, Any] | None = None,
                        near: Mapping[str, Any] | None = None,
                        near_threshold: int | None = None) -> dict:
    """``duplicates.json`` from the pipeline's ``duplicates`` result
    (`schemas.duplicates.render_part`) and the manifest's example counts;
    with `dedupe`, `left` is what the published version still holds
    (``duplicates_left``), which the gates measure; `near` is the summary
    of near-duplicate image pairs at `near_threshold` (image sources)."""
    examples = sum(split.get("num_examples", 0) for split in manifest["splits"].values())
    # In the configured order of splits (the manifest's): the pipeline's
    # result file holds its objects with sorted keys.
    order = list(manifest["splits"])
    document = {"format": DUPLICATES_FORMAT, "name": manifest.get("name"),
                "version": manifest.get("version"),
                "features": list(features) if features is not None else None,
                "num_examples": examples,
                "rows_checked": found["rows_checked"],
                **_counts(found, order, found["rows_checked"]),
                "dedupe": dedupe,
                "removed": found["rows_checked"] - left["rows_checked"] if left else 0,
                "pairs_limit": MAX_PAIRS,
                "pairs": list(found["pairs"])}
    if left is not None:
        document["left"] = _counts(left, order, examples)
    if near is not None:
        document["near_duplicates"] = {
            "threshold": near_threshold, "images_not_hashed": found["images_not_hashed"],
            "pairs": near["pairs"],
            "within_split": {split: near["within_split"][split] for split in order},
            "across_splits": {pair: near["across_splits"][pair]
                              for pair in document["across_splits"]},
            "cross_split_pairs": sum(near["across_splits"].values()),
            "examples": list(near["examples"])}
    return document


def describe_duplicates(document: Mapping[str, Any]) -> str:
    """A duplicates.json document in words: ``"12 rows equal an earlier row
    (0.12%); within train 10; across train/test 2"``. Shared by the build
    summary and the report."""
    rows, fraction = document["duplicate_rows"], document["duplicate_fraction"]
    parts = [f"{rows:,} rows equal an earlier row ({fraction:.2%})"]
    within = ", ".join(f"{split} {count:,}" for split, count in document["within_split"].items()
                       if count)
    across = ", ".join(f"{pair} {count:,}" for pair, count in document["across_splits"].items()
                       if count)
    if within:
        parts.append(f"within {within}")
    if across:
        parts.append(f"across {across}")
    near = document.get("near_duplicates")
    if near:
        parts.append(f"{near['pairs']:,} near-duplicate image pairs (within "
                     f"{near['threshold']} bits), {near['cross_split_pairs']:,} across splits")
    if document.get("dedupe"):
        parts.append(f"{document['removed']:,} removed ({document['dedupe']}), "
                     f"{document['left']['duplicate_rows']:,} left")
    return "; ".join(parts)


def gate_results(document: Mapping[str, Any], max_fraction: float | None,
                 max_cross_split: int | None, max_near_cross_split: int | None = None
                 ) -> list[dict]:
    """Each configured gate as ``{"key", "measure", "limit", "value",
    "passed", "message"}``, in the config's order."""
    measured = {**(document.get("left") or document),
                "cross_split_pairs": (document.get("near_duplicates") or {}).get(
                    "cross_split_pairs", 0)}
    gates = []
    for key, measure, limit in (("max_fraction", "duplicate_fraction", max_fraction),
                                ("max_cross_split", "cross_split_rows", max_cross_split),
                                ("max_near_cross_split", "cross_split_pairs",
                                 max_near_cross_split)):
        if limit is None:
            continue
        value = measured[measure]
        passed = value <= limit
        gates.append({"key": f"validation.duplicates.{key}", "measure": measure,
                      "limit": limit, "value": value, "passed": passed,
                      "message": f"validation.duplicates.{key}: {measure} = {value:g} "
                                 f"{'within' if passed else 'above'} the limit {limit:g}"})
    return gates


class DuplicatesCheck:
    """`finalize`'s hook for duplicates: writes ``duplicates.json`` into
    staging, evaluates the gates and keeps the document for the report.
    Returns the failure message (None: passed). Pickles as plain values."""

    def __init__(self, features: Sequence[str] | None, max_fraction: float | None,
                 max_cross_split: int | None, dedupe: str | None = None,
                 near_threshold: int | None = None, max_near_cross_split: int | None = None):
        self._features = tuple(features) if features is not None else None
        self._dedupe = dedupe
        self._near_threshold = near_threshold
        self._max_near_cross_split = max_near_cross_split
        self._max_fraction = max_fraction
        self._max_cross_split = max_cross_split
        self.document: dict | None = None

    @classmethod
    def for_config(cls, config, near_threshold: int | None = None
                   ) -> "DuplicatesCheck | None":
        """The hook of a build of `config` (a `DatasetConfig`) that finds
        near-duplicate images at `near_threshold` (None: none), or None when
        duplicate detection is off."""
        duplicates = config.validation.duplicates
        if duplicates is None:
            return None
        return cls(duplicates.features, duplicates.max_fraction, duplicates.max_cross_split,
                   duplicates.dedupe, near_threshold, duplicates.max_near_cross_split)

    def __call__(self, staging_url: str, manifest: dict, result: dict) -> str | None:
        found = result.get("duplicates")
        if found is None:
            return "duplicate detection is on but the pipeline gave no duplicates result"
        left = result.get("duplicates_left")
        if self._dedupe is not None and left is None:
            return "duplicate removal is on but the pipeline gave no result of what it left"
        near = result.get("near_duplicates")
        if self._near_threshold is not None and near is None:
            return "near-duplicate detection is on but the pipeline gave no near-duplicate result"
        document = duplicates_document(found, manifest, self._features, self._dedupe, left,
                                       near, self._near_threshold)
        if document["rows_checked"] != document["num_examples"] + document["removed"]:
            return (f"duplicate detection checked {document['rows_checked']} rows but the "
                    f"build made {document['num_examples']} examples and removed "
                    f"{document['removed']}; nothing was published")
        document["gates"] = gate_results(document, self._max_fraction, self._max_cross_split,
                                         self._max_near_cross_split)
        self.document = document
        out = Output(staging_url)
        out.write_atomic(out.path(DUPLICATES_FILE), dumps_json(document))
        failed = [gate["message"] for gate in document["gates"] if not gate["passed"]]
        if not failed:
            return None
        return ("duplicate gates failed; nothing was published:\n"
                + "\n".join(f"  {message}" for message in failed))

    @property
    def summary_lines(self) -> list[str]:
        """The build summary's line, once the hook has run."""
        return ([f"duplicates: {describe_duplicates(self.document)}"]
                if self.document is not None else [])

    @property
    def report_sections(self) -> dict:
        """The keyword arguments that give the report its duplicates section."""
        return {"duplicates": self.document} if self.document is not None else {}


def _count_problem(document: Mapping, key: str) -> str | None:
    value = document.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"{key} is not a count"
    return None


def _shape_problems(document: Any) -> list[str]:
    """What keeps a parsed duplicates.json from being one recordforge wrote."""
    if not isinstance(document, dict):
        return ["is not a JSON object"]
    if document.get("format") != DUPLICATES_FORMAT:
        return [f"has format {document.get('format')!r}, not {DUPLICATES_FORMAT}"]
    problems = [problem for key in _COUNTS if (problem := _count_problem(document, key))]
    for key in ("within_split", "across_splits"):
        counts = document.get(key)
        if not isinstance(counts, dict) or any(_count_problem(counts, name) for name in counts):
            problems.append(f"{key} is not a mapping of names to counts")
    pairs = document.get("pairs")
    if not isinstance(pairs, list) or len(pairs) > MAX_PAIRS or not all(
            isinstance(pair, dict) and isinstance(pair.get("earlier"), dict)
            and isinstance(pair.get("later"), dict) for pair in pairs):
        problems.append(f"pairs is not a list of at most {MAX_PAIRS} pairs of rows")
    near = document.get("near_duplicates")
    if near is not None and not (
            isinstance(near, dict) and not _count_problem(near, "pairs")
            and isinstance(near.get("examples"), list) and len(near["examples"]) <= MAX_PAIRS):
        problems.append(f"near_duplicates is not a count of pairs with at most {MAX_PAIRS} "
                        "examples")
    return problems


def duplicates_problems(fs, version_dir: str, manifest: Mapping[str, Any]) -> list[Problem]:
    """`verify`'s check of a version's duplicates.json, read as untrusted
    input (size-limited, depth-limited JSON): its shape, and that its split
    names and example count are the manifest's. Nothing when absent."""
    path = f"{version_dir}/{DUPLICATES_FILE}"
    if not fs.exists(path):
        return []
    try:
        document = parse_json(read_limited(fs, path, MAX_DUPLICATES_BYTES))
    except (OSError, ValueError) as error:
        return [Problem(DUPLICATES_FILE, str(error), code="duplicates")]
    problems = _shape_problems(document)
    if not problems:
        splits = sorted(manifest["splits"])
        examples = sum(split["num_examples"] for split in manifest["splits"].values())
        if sorted(document["within_split"]) != splits:
            problems.append(f"names the splits {sorted(document['within_split'])}, the "
                            f"manifest {splits}")
        if document["num_examples"] != examples:
            problems.append(f"counts {document['num_examples']} examples, the manifest "
                            f"{examples}")
        if document["rows_checked"] != examples + document["removed"]:
            problems.append(f"checked {document['rows_checked']} rows, not the "
                            f"{examples} examples and {document['removed']} removed")
    return [Problem(DUPLICATES_FILE, problem, code="duplicates") for problem in problems]
