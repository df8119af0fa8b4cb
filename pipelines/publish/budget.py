"""Did the pipeline lose rows or fail too many? Reading `_pipeline_result.json` and checking it.

The pipeline's last step writes ``<staging>/_pipeline_result.json``::

    {"shards": [{"split", "file", "num_examples", "num_bytes", "sha256"}, ...],
     "dead_letter": {"num_rows", "by_reason": {reason: n}, "files": [...],
                     "samples": {reason: dead-letter record}},
     "num_input_rows": int,
     "label_counts": {split: {label: examples}}}

(`files` relative to the staging directory, e.g. ``dead_letter/part-00000.jsonl``.)

`read_pipeline_result` checks its shape; `check_accounting` the row
accounting invariant (``num_input_rows == Σ num_examples +
dead_letter.num_rows``; a failure is a bug that lost or duplicated rows);
`check_error_budget` the error budget (`max_error_rate` of the input rows,
and `max_errors` rows if given), naming the top reasons with a sample row
each. Each raises `BuildFailed`.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ...transforms.layout import RESULT_FILE
from ...transforms.urls import redact_url
from .errors import BuildFailed
from .output import Output, load_json

__all__ = ["check_accounting", "check_error_budget", "read_pipeline_result"]

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
    dead = result.get("dead_letter")
    if not isinstance(dead, dict) or not _is_count(dead.get("num_rows")):
        return "dead_letter.num_rows must be a non-negative integer"
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
    text = f"{where}: {message}"
    return redact_url(text if len(text) <= _MAX_SAMPLE_CHARS else text[:_MAX_SAMPLE_CHARS] + "…")


def _top_reasons(dead: Mapping) -> list[tuple[str, int, Any]]:
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
    limits = []
    if max_error_rate is not None and failed > max_error_rate * rows:
        limits.append(f"max_error_rate={max_error_rate:g} ({int(max_error_rate * rows)} rows)")
    if max_errors is not None and failed > max_errors:
        limits.append(f"max_errors={max_errors}")
    if not limits:
        return
    rate = failed / rows if rows else 1.0
    reasons = _top_reasons(dead)
    lines = [f"build failed: {failed} of {rows} input rows ({rate:.2%}) failed, above the "
             f"error budget {' and '.join(limits)}; nothing was published", "top reasons:"]
    for reason, count, sample in reasons:
        line = f"  {reason}: {count} rows"
        example = _format_sample(sample)
        lines.append(f"{line}, e.g. {example}" if example else line)
    raise BuildFailed("\n".join(lines), reasons=reasons)
