"""Did the pipeline lose rows or fail too many? Reading `_pipeline_result.json` and checking it.

The pipeline's last step writes ``<staging>/_pipeline_result.json``::

    {"shards": [{"split", "file", "num_examples", "num_bytes", "sha256",
                 "written_crc32c": {file: crc}}, ...],
     "dead_letter": {"num_rows", "by_reason": {reason: n}, "uncounted": n,
                     "files": [...], "samples": {reason: dead-letter record}},
     "num_input_rows": int,
     "label_counts": {split: {label: examples}}}

(`files` relative to the staging directory, e.g. ``dead_letter/part-00000.jsonl``.)

`read_pipeline_result` checks its shape; `check_accounting` the row
accounting invariant (``num_input_rows == Σ num_examples +
dead_letter.num_rows``; a failure is a bug that lost or duplicated rows);
`check_error_budget` the error budget (`max_error_rate` of the input rows,
and `max_errors` rows if given), naming the top reasons with a sample row
each; `check_some_examples` that some row became an example (when every
row failed, a budget that admits it must not end in a message about split
fractions). Each raises `BuildFailed`.

Rows are input rows: a dead letter for a file that could not be read
stands for every row it held when that is known (the rows of a Parquet row
group, from the footer; none for an empty file). When it is not (a file
that cannot be decoded, a compressed file cut short: ``"rows": null`` in
the record), the rows lost are unknown; each such record counts as one row
and in ``uncounted``, and fails the error budget by itself unless the
budget admits any number of failed rows (no ``max_errors`` and a
``max_error_rate`` of 1 or none).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ...transforms.layout import RESULT_FILE
from ...transforms.urls import redact_url
from .errors import BuildFailed
from .output import Output, load_json

__all__ = ["check_accounting", "check_error_budget", "check_some_examples",
           "read_pipeline_result", "reason_lines", "top_reasons"]

_TOP_REASONS = 5
_MAX_SAMPLE_CHARS = 240


def read_pipeline_result(out: Output, directory: str, display_url: str) -> dict:
    """The pipeline result of the staging directory `directory` (a path of
    ``out.fs``; `display_url` names it in messages). Raises `BuildFailed`
    when it is missing or malformed."""
    data = out.read_bytes(f"{directory}/{RESULT_FILE}")
    if data is None:
        raise BuildFailed(f"{display_url}/{RESULT_FILE} is missing: the pipeline did "
                          "not finish")
    result = load_json(data)
    problem = _result_problem(result)
    if problem:
        raise BuildFailed(f"{display_url}/{RESULT_FILE} is malformed: {problem}")
    return result


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _result_problem(result: Any) -> str | None:
    if not isinstance(result, dict):
        return "not a JSON object"
    if not _is_count(result.get("num_input_rows")):
        return "num_input_rows must be a non-negative integer"
    shards = result.get("shards")
    if not isinstance(shards, list):
        return "shards must be a list"
    for position, shard in enumerate(shards):
        if not isinstance(shard, dict) or not all(key in shard for key in (
                "split", "file", "num_examples", "num_bytes", "sha256")):
            return f"shards[{position}] needs split, file, num_examples, num_bytes, sha256"
        if not (_is_count(shard["num_examples"]) and _is_count(shard["num_bytes"])):
            return f"shards[{position}]: counts must be non-negative integers"
        crcs = shard.get("written_crc32c", {})
        if not (isinstance(crcs, dict) and all(
                isinstance(file, str) and _is_count(crc) and crc < 1 << 32
                for file, crc in crcs.items())):
            return f"shards[{position}]: written_crc32c must map file names to CRC-32Cs"
    dead = result.get("dead_letter")
    if not isinstance(dead, dict) or not _is_count(dead.get("num_rows")):
        return "dead_letter.num_rows must be a non-negative integer"
    if not _is_count(dead.get("uncounted", 0)):
        return "dead_letter.uncounted must be a non-negative integer"
    if not isinstance(dead.get("by_reason", {}), dict):
        return "dead_letter.by_reason must be an object"
    label_counts = result.get("label_counts", {})
    if not (isinstance(label_counts, dict) and all(
            isinstance(counts, dict) and all(map(_is_count, counts.values()))
            for counts in label_counts.values())):
        return "label_counts must map each split to {label: non-negative integer}"
    if not isinstance(dead.get("files", []), list):
        return "dead_letter.files must be a list"
    if not isinstance(dead.get("samples", {}), dict):
        return "dead_letter.samples must be an object"
    return None


def check_accounting(result: dict) -> None:
    """Every input row is in a shard or a dead letter, exactly once."""
    examples = sum(shard["num_examples"] for shard in result["shards"])
    dead = result["dead_letter"]["num_rows"]
    rows = result["num_input_rows"]
    if rows != examples + dead:
        difference = rows - examples - dead
        what = f"{difference} rows lost" if difference > 0 else f"{-difference} rows duplicated"
        raise BuildFailed(
            f"row accounting failed: {rows} input rows but {examples} examples in shards + "
            f"{dead} dead letters ({what}). This is a bug in recordforge or a runner that "
            "ran a step twice; nothing was published")
    by_reason = result["dead_letter"].get("by_reason", {})
    if by_reason and sum(by_reason.values()) != dead:
        raise BuildFailed(f"row accounting failed: dead_letter.by_reason sums to "
                          f"{sum(by_reason.values())} but dead_letter.num_rows is {dead}")


def _format_sample(record: Any) -> str:
    if not isinstance(record, Mapping):
        return ""
    where = str(record.get("source") or "?")
    if record.get("row") is not None:
        where += f" row {record['row']}"
    if record.get("key") is not None:
        where += f" key {json.dumps(record['key'], ensure_ascii=False)}"
    message = str(record.get("message", ""))
    if record.get("feature") and repr(record["feature"]) not in message:
        where += f" feature {record['feature']!r}"
    # A file-level message names its file already.
    text = message if message.startswith(f"{where}:") else f"{where}: {message}"
    return redact_url(text if len(text) <= _MAX_SAMPLE_CHARS else text[:_MAX_SAMPLE_CHARS] + "…")


def top_reasons(dead: Mapping) -> list[tuple[str, int, Any]]:
    samples = dead.get("samples") or {}
    ranked = sorted(dead.get("by_reason", {}).items(), key=lambda item: (-item[1], item[0]))
    return [(reason, count, samples.get(reason)) for reason, count in ranked[:_TOP_REASONS]]


def check_error_budget(result: dict, max_error_rate: float | None,
                       max_errors: int | None) -> None:
    """Raises `BuildFailed` (with the top reasons) when more rows failed than
    `max_error_rate` of the input rows or `max_errors` allow."""
    rows = result["num_input_rows"]
    dead = result["dead_letter"]
    failed = dead["num_rows"]
    uncounted = dead.get("uncounted", 0)
    limits = []
    if max_error_rate is not None and failed > max_error_rate * rows:
        limits.append(f"max_error_rate={max_error_rate:g} ({int(max_error_rate * rows)} rows)")
    if max_errors is not None and failed > max_errors:
        limits.append(f"max_errors={max_errors}")
    unbounded = max_errors is None and (max_error_rate is None or max_error_rate >= 1)
    if not limits and not (uncounted and not unbounded):
        return
    rate = failed / rows if rows else 1.0
    reasons = top_reasons(dead)
    if limits:
        lines = [f"build failed: {failed} of {rows} input rows ({rate:.2%}) failed, above the "
                 f"error budget {' and '.join(limits)}; nothing was published"]
    else:
        lines = [f"build failed: {uncounted} input file(s), or the rest of them, could not "
                 "be read, so how many rows were lost is unknown and the error budget cannot "
                 "be met; nothing was published (their dead letters say \"rows\": null)"]
    raise BuildFailed("\n".join(lines + ["top reasons:"] + reason_lines(reasons)), reasons=reasons)


def reason_lines(reasons: list[tuple[str, int, Any]], indent: str = "  ") -> list[str]:
    """One line per `top_reasons` entry: the reason, its rows and a sample."""
    lines = []
    for reason, count, sample in reasons:
        line = f"{indent}{reason}: {count} rows"
        example = _format_sample(sample)
        lines.append(f"{line}, e.g. {example}" if example else line)
    return lines


def check_some_examples(result: dict) -> None:
    """Raises `BuildFailed` when no row became an example, saying why: the
    inputs held no rows, or every row failed (with the top reasons)."""
    if any(shard["num_examples"] for shard in result["shards"]):
        return
    rows = result["num_input_rows"]
    dead = result["dead_letter"]
    if not dead["num_rows"]:
        raise BuildFailed("build failed: the inputs held no rows, so every split is empty; "
                          "nothing was published")
    uncounted = dead.get("uncounted", 0)
    unknown = (f", {uncounted} of them for input file(s) that could not be read (how many "
               "rows those held is unknown)" if uncounted else "")
    reasons = top_reasons(dead)
    lines = [f"build failed: every input row failed ({dead['num_rows']} of {rows} rows are "
             f"dead letters{unknown}), so every split is empty; nothing was published"]
    raise BuildFailed("\n".join(lines + ["top reasons:"] + reason_lines(reasons)), reasons=reasons)
