"""What a build says when it ends: a build whose every row failed says so
with the top reasons (not "too few rows"), and the input files are counted
as the manifest's cache block counts them (read, or taken from the cache)."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.pipelines import cli
from recordforge.pipelines.progress import describe_inputs, format_summary
from recordforge.pipelines.publish import BuildFailed
from recordforge.pipelines.publish.budget import check_some_examples
from recordforge.pipelines.publish.report_html import render_report

IN_PROCESS = ["--", "--direct_running_mode=in_memory"]
REASONS = st.sampled_from(["out_of_range", "csv_ragged_row", "not_an_integer", "missing_value",
                           "unknown_label", "json_invalid", "read_error"])


def _result(by_reason: dict, examples: list[int], uncounted: int = 0) -> dict:
    dead = sum(by_reason.values())
    samples = {reason: {"source": "in.csv", "row": i + 2, "key": None, "reason": reason,
                        "message": f"sample of {reason}"}
               for i, reason in enumerate(by_reason)}
    return {"shards": [{"split": "train", "file": f"s{i}", "num_examples": n, "num_bytes": 1,
                        "sha256": "0" * 64} for i, n in enumerate(examples)],
            "dead_letter": {"num_rows": dead, "by_reason": by_reason, "uncounted": uncounted,
                            "files": [], "samples": samples},
            "num_input_rows": dead + sum(examples)}


@settings(max_examples=60, deadline=None)
@given(by_reason=st.dictionaries(REASONS, st.integers(1, 10**6), min_size=1, max_size=7),
       empty_shards=st.integers(0, 3), uncounted=st.integers(0, 1))
def test_every_row_failed_is_said_with_the_top_reasons(by_reason, empty_shards, uncounted):
    result = _result(by_reason, [0] * empty_shards, uncounted=min(uncounted, 1))
    with pytest.raises(BuildFailed) as caught:
        check_some_examples(result)
    message = str(caught.value)
    total = sum(by_reason.values())
    assert f"every input row failed ({total} of {total} rows are dead letters" in message
    assert "nothing was published" in message and "too few rows" not in message
    top = sorted(by_reason.items(), key=lambda item: (-item[1], item[0]))[:5]
    for reason, count in top:
        assert f"  {reason}: {count} rows, e.g. in.csv row" in message
    assert [reason for reason, _, _ in caught.value.reasons] == [r for r, _ in top]
    assert ("could not be read" in message) == bool(uncounted)


@settings(max_examples=30, deadline=None)
@given(by_reason=st.dictionaries(REASONS, st.integers(0, 100), max_size=3),
       examples=st.lists(st.integers(0, 100), min_size=1, max_size=4).filter(any))
def test_a_build_with_examples_passes(by_reason, examples):
    check_some_examples(_result(by_reason, examples))


def test_no_rows_at_all_is_said():
    with pytest.raises(BuildFailed, match="the inputs held no rows"):
        check_some_examples(_result({}, []))


def test_a_build_whose_every_row_fails_says_so(tmp_path, capsys):
    data = tmp_path / "rows.csv"
    data.write_text("id,n\n" + "".join(f"{i},x{i}\n" for i in range(12)) + "12,5,extra\n")
    config = tmp_path / "all_bad.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: all_bad
        version: "1.0.0"
        source: {{type: csv, path: {data}}}
        features: {{id: {{type: int64}}, n: {{type: int64}}}}
        splits: {{train: 0.5, test: 0.5}}
        output: {{path: {tmp_path / 'out'}}}
        dead_letter: {{max_error_rate: 1.0}}
        """))
    assert cli.main(["build", str(config), *IN_PROCESS]) == 1
    err = capsys.readouterr().err
    assert "every input row failed (13 of 13 rows are dead letters)" in err, err
    assert "top reasons:" in err and "csv_ragged_row: 1 rows" in err
    assert "too few rows" not in err and "Traceback" not in err


# --- input files: read or from the cache ------------------------------------------

@settings(max_examples=60, deadline=None)
@given(files=st.integers(0, 50), data=st.data(),
       skipped=st.dictionaries(st.sampled_from(["hidden", "extension"]), st.integers(1, 9)))
def test_input_files_are_counted_as_the_cache_block_says(files, data, skipped):
    reused = data.draw(st.integers(0, files))
    manifest = {"name": "t", "version": "1", "splits": {},
                "inputs": {"files": [{"path": f"f{i}.csv"} for i in range(files)],
                           "skipped": skipped},
                "cache": {"files_reused": reused, "files_converted": files - reused}}
    text = describe_inputs(manifest)
    if reused:
        assert text.startswith(f"{files - reused:,} read, {reused:,} from the cache, ")
    else:
        assert text.startswith(f"{files:,} read, ") and "cache" not in text
    assert f"{sum(skipped.values()):,} skipped" in text
    assert f"input files: {text}" in format_summary(manifest)
    assert f"input files: {text}" in render_report(manifest)


def test_a_rebuild_says_which_inputs_came_from_the_cache(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for index in range(4):
        (data / f"part{index}.csv").write_text(
            "id\n" + "".join(f"{index * 100 + i}\n" for i in range(20)))
    config = tmp_path / "parts.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: parts
        version: "{{datetime}}"
        source: {{type: csv, path: {data}}}
        features: {{id: {{type: int64}}}}
        output: {{path: {tmp_path / 'out'}}}
        """))
    assert cli.main(["build", str(config), "--set", 'version="1"', *IN_PROCESS]) == 0
    assert "input files: 4 read, 0 skipped" in capsys.readouterr().err
    (data / "part2.csv").write_text("id\n" + "".join(f"{900 + i}\n" for i in range(25)))
    assert cli.main(["build", str(config), "--set", 'version="2"', *IN_PROCESS]) == 0
    err = capsys.readouterr().err
    assert "input files: 1 read, 3 from the cache, 0 skipped" in err, err
    page = (tmp_path / "out" / "2" / "report.html").read_text()
    assert "input files: 1 read, 3 from the cache, 0 skipped" in page
