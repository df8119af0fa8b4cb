"""The baseline a build compares with (pipelines/publish/baseline.py, gates.py): an earlier
version's files are untrusted input, read by verify's path rules; a damaged one is named,
warned of and compared with as nothing, and a gate that needs it says it is unusable."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.pipelines.publish.gates import StatisticsCheck
from recordforge.schemas.drift import Gate
from recordforge.schemas.stats import FeatureStatistics

GATES = (Gate("validation.max_row_change", "row_change", 0.5),
         Gate("validation.features.x.max_js", "js", 0.5, "x"),
         Gate("validation.features.c.max_linf", "linf", 0.5, "c"),
         Gate("validation.features.x.max_missing", "missing", 0.5, "x"))
COMPARING = {"row_change", "js", "linf"}


def _entries() -> dict:
    return {"x": FeatureStatistics.from_values("numeric", "float", 100,
                                               [i / 7 for i in range(100)]).to_json(),
            "c": FeatureStatistics.from_values("string", "bytes", 100,
                                               [b"ab"[i % 2:i % 2 + 1] for i in range(100)]
                                               ).to_json(),
            "l": FeatureStatistics.from_values("vocabulary", "int64", 100,
                                               [i % 2 for i in range(100)],
                                               vocabulary=("cat", "dog")).to_json()}


def _stats_document(version: str) -> dict:
    return {"format": "recordforge.stats/1", "name": "d", "version": version,
            "splits": {"train": {"num_examples": 100, "features": _entries()}}}


def _publish_stats(out, version: str, document) -> None:
    (out / version).mkdir(parents=True, exist_ok=True)
    data = document if isinstance(document, bytes) else json.dumps(document).encode()
    (out / version / "stats.json").write_bytes(data)
    (out / "LATEST").write_text(version + "\n")


def _check(out, staging):
    """The statistics hook of a build of version v9 of `out`: (outcome, its hook)."""
    staging.mkdir(exist_ok=True)
    hook = StatisticsCheck(str(out), ["x", "c", "l"], GATES)
    manifest = {"name": "d", "version": "v9", "splits": {"train": {"num_examples": 100}}}
    failure = hook(str(staging), manifest, {"statistics": {"train": _entries()}})
    assert failure is None  # the same data: nothing to fail, whatever the baseline
    # what was written is what the outcome holds, and is strict JSON
    assert json.loads((staging / "drift.json").read_text()) == hook.outcome.drift
    return hook.outcome


def _assert_unusable(outcome, named: str, err: str) -> None:
    """No comparison was made, every comparing gate says the baseline is
    unusable, and the warning names the file."""
    assert outcome.drift["previous_version"] is None
    comparing = [result for result in outcome.gates if result.gate.measure in COMPARING]
    assert comparing and all(result.value is None and result.passed for result in comparing)
    assert all("baseline is unusable" in result.message and named in result.message
               for result in comparing), [result.message for result in comparing]
    assert "warning" in err and named in err


def test_a_sound_baseline_is_compared_with(tmp_path, capsys):
    out = tmp_path / "out"
    _publish_stats(out, "v1", _stats_document("v1"))
    outcome = _check(out, tmp_path / "staging")
    assert outcome.drift["previous_version"] == "v1"
    assert all(result.value is not None for result in outcome.gates)
    assert "warning" not in capsys.readouterr().err


# --- hostile documents ---------------------------------------------------------------

_NOT_A_COUNT = st.one_of(st.integers(max_value=-1), st.just(float("nan")), st.just(float("inf")),
                         st.floats(0.5, 1e9).filter(lambda x: x != int(x)),
                         st.text(max_size=5), st.lists(st.integers(), max_size=3),
                         st.booleans(), st.none(), st.dictionaries(st.text(max_size=2),
                                                                    st.integers(), max_size=2))
_NOT_A_KIND = st.one_of(st.text(max_size=6).filter(
    lambda text: text not in ("numeric", "vocabulary", "string", "bytes")), _NOT_A_COUNT)
_NOT_A_FLAG = _NOT_A_COUNT.filter(lambda value: not isinstance(value, bool))
# (path into the document, values that cannot stand there)
_FIELDS = [
    (("splits", "train", "num_examples"), _NOT_A_COUNT),
    (("splits", "train", "features", "x", "kind"), _NOT_A_KIND),
    (("splits", "train", "features", "x", "num_values"), _NOT_A_COUNT),
    (("splits", "train", "features", "x", "numeric", "count"), _NOT_A_COUNT),
    (("splits", "train", "features", "x", "numeric", "nan"), _NOT_A_COUNT),
    (("splits", "train", "features", "x", "numeric"), _NOT_A_COUNT),
    (("splits", "train", "features", "c", "string", "top_values"),
     _NOT_A_COUNT.filter(lambda value: value != [])),  # no top values is sound
    (("splits", "train", "features", "c", "string", "top_values", 0, "count"), _NOT_A_COUNT),
    (("splits", "train", "features", "c", "string", "exact"), _NOT_A_FLAG),
    (("splits", "train", "features", "l", "vocabulary", "counts", "cat"), _NOT_A_COUNT),
    (("splits", "train", "features"), _NOT_A_COUNT.filter(lambda v: not isinstance(v, dict))),
    (("splits", "train"), _NOT_A_COUNT.filter(lambda v: not isinstance(v, dict))),
    (("splits",), _NOT_A_COUNT.filter(lambda v: not isinstance(v, dict))),
]


@st.composite
def _hostile_documents(draw) -> bytes:
    how = draw(st.sampled_from(["field", "nested", "bytes", "top"]))
    if how == "nested":  # deeper than any parser's stack
        depth = draw(st.sampled_from([100, 5_000, 200_000]))
        bracket = draw(st.sampled_from(["[", "{\"a\":"]))
        return (bracket * depth).encode()
    if how == "bytes":
        return draw(st.sampled_from([b"\xff\xfe{", b"{\"format\": ", b"", b"NaN",
                                     json.dumps(_stats_document("v1"))[:-3].encode()]))
    if how == "top":
        return json.dumps(draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(),
                                         st.text(max_size=4), st.none()))).encode()
    path, values = draw(st.sampled_from(_FIELDS))
    document = _stats_document("v1")
    place = document
    for key in path[:-1]:
        place = place[key]
    place[path[-1]] = draw(values)
    return json.dumps(document).encode()  # NaN and Infinity as Python writes them


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=_hostile_documents())
def test_a_hostile_previous_stats_json_is_named_and_compared_with_as_nothing(tmp_path_factory,
                                                                            capsys, data):
    root = tmp_path_factory.mktemp("hostile")
    out = root / "out"
    _publish_stats(out, "v1", data)
    capsys.readouterr()
    outcome = _check(out, root / "staging")
    _assert_unusable(outcome, str(out / "v1" / "stats.json"), capsys.readouterr().err)


# --- files that lead elsewhere, block or never end -------------------------------------

def _outside_copy(tmp_path, name: str):
    """A sound stats.json outside the output root: reading it is reading elsewhere."""
    other = tmp_path / name
    other.mkdir(parents=True, exist_ok=True)
    (other / "stats.json").write_text(json.dumps(_stats_document("elsewhere")))
    return other


def _arrange(kind: str, tmp_path, out, name: str) -> str:
    """Lays out `out` so that its baseline is one `kind` of trap; the text
    the warning must name."""
    (out / "v1").mkdir(parents=True)
    (out / "LATEST").write_text("v1\n")
    stats = out / "v1" / "stats.json"
    if kind == "link_outside":
        os.symlink(_outside_copy(tmp_path, name) / "stats.json", stats)
    elif kind == "link_in_version":
        (out / "v1" / "copy.json").write_text(json.dumps(_stats_document("v1")))
        os.symlink(out / "v1" / "copy.json", stats)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", stats)
    elif kind == "fifo":
        os.mkfifo(stats)
    elif kind == "directory":
        stats.mkdir()
    elif kind == "latest_escapes":
        _outside_copy(tmp_path, name)
        (out / "LATEST").write_text(f"../{name}\n")
        return str(out / "LATEST")
    elif kind == "version_link":
        shutil.rmtree(out / "v1")
        os.symlink(_outside_copy(tmp_path, name), out / "v1")
        return str(out / "LATEST")
    return str(stats)


TRAPS = ["link_outside", "link_in_version", "dev_zero", "fifo", "directory", "latest_escapes",
         "version_link"]


@pytest.mark.parametrize("kind", TRAPS)
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text("abcxyz_-.", min_size=1, max_size=12).filter(
    lambda text: text not in (".", "..") and not text.startswith(".")))
def test_an_earlier_version_is_read_by_the_rules_verify_follows(tmp_path_factory, capsys, kind,
                                                                name):
    root = tmp_path_factory.mktemp("trap")
    out = root / "out"
    named = _arrange(kind, root, out, name)
    capsys.readouterr()
    outcome = _check(out, root / "staging")
    err = capsys.readouterr().err
    _assert_unusable(outcome, named, err)
    assert "elsewhere" not in json.dumps(outcome.drift)


def test_a_version_without_statistics_says_so(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "v1").mkdir(parents=True)
    (out / "LATEST").write_text("v1")
    outcome = _check(out, tmp_path / "staging")
    _assert_unusable(outcome, str(out / "v1" / "stats.json"), capsys.readouterr().err)
    assert "statistics off" in outcome.gates[0].message


def test_no_earlier_version_needs_no_warning(tmp_path, capsys):
    outcome = _check(tmp_path / "out", tmp_path / "staging")
    assert outcome.drift["previous_version"] is None
    assert all("no published version" in result.message for result in outcome.gates
               if result.gate.measure in COMPARING)
    assert "warning" not in capsys.readouterr().err



def test_an_output_that_cannot_be_read_is_warned_of(tmp_path):
    from recordforge.pipelines.publish.baseline import load_baselines
    baselines, warnings = load_baselines("nosuchprotocol://bucket/out")
    assert baselines == [] and len(warnings) == 1
    assert "nosuchprotocol://bucket/out cannot be read for a baseline" in warnings[0]
