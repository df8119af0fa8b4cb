"""Config and command-line edges: URLs, `~`, YAML merge keys, size units and
the length of error messages, each over generated variants.

Every one ends in a loaded config or a `ConfigError` naming the key (the
CLI's exit 2), never another exception, a guess or a megabyte of message.
"""

from __future__ import annotations

import copy
import itertools
import textwrap

import fsspec
import pytest
from fsspec.registry import known_implementations
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines import cli
from recordforge.pipelines.config import config_from_dict, load_config, parse_size
from recordforge.schemas.errors import MAX_KEY_CHARS, MAX_PROBLEM_CHARS, ConfigError

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
MAX_MESSAGE = MAX_KEY_CHARS + MAX_PROBLEM_CHARS + 80


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("id,name,score\n1,a,0.5\n2,b,0.25\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


TABLE = {
    "name": "tbl", "version": "1.0.0",
    "source": {"type": "csv", "path": "data/t.csv"},
    "features": {"id": {"type": "int64"}, "score": {"type": "float"}},
    "output": {"path": "out/tbl"},
}


def _known(protocol: str) -> bool:
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError):
        return protocol in known_implementations
    return True


# --- URLs -----------------------------------------------------------------------------

@SETTINGS
@given(protocol=st.from_regex(r"[a-z][a-z0-9+.-]{0,12}", fullmatch=True).filter(
    lambda p: not _known(p) and p != "file"), key=st.sampled_from(["output.path", "source.path"]))
def test_an_unknown_protocol_is_a_config_error_naming_the_key(workdir, protocol, key):
    data = copy.deepcopy(TABLE)
    section, field = key.split(".")
    data[section][field] = f"{protocol}://bucket/x"
    with pytest.raises(ConfigError) as raised:
        config_from_dict(data)
    assert raised.value.key == key and "unknown protocol" in raised.value.problem


def test_a_protocol_whose_package_is_missing_names_the_package(workdir):
    with pytest.raises(ConfigError) as raised:
        config_from_dict(TABLE, output="abfs://container/x")
    assert raised.value.key == "output.path" and "adlfs" in raised.value.problem


@pytest.mark.parametrize("url", ["nosuchproto://x", "NoSuchProto://bucket/out", "abfs://c/x"])
def test_build_with_a_bad_output_url_exits_2_without_a_traceback(workdir, capsys, url):
    config = workdir / "c.yaml"
    config.write_text(yaml.safe_dump(TABLE))
    assert cli.main(["build", str(config), "--output", url]) == 2
    err = capsys.readouterr().err
    assert "output.path" in err and "Traceback" not in err


# --- ~ --------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["~/{}", "file://~/{}"])
def test_a_leading_tilde_is_the_home_directory(workdir, monkeypatch, form):
    home = workdir / "home"
    (home / "tables").mkdir(parents=True)
    (home / "tables" / "t.csv").write_text("id,score\n1,0.5\n")
    monkeypatch.setenv("HOME", str(home))
    data = copy.deepcopy(TABLE)
    data["source"]["path"] = form.format("tables/t.csv")
    config = config_from_dict(data, output=form.format("out"))
    assert config.source.path == str(home / "tables" / "t.csv")
    assert config.output.path == str(home / "out")
    # The manifest records the paths as written, not where they led.
    assert config.resolved["output"]["path"] == form.format("out")
    assert not (workdir / "~").exists()


# --- YAML merge keys ------------------------------------------------------------------

def test_yaml_merge_keys_merge_and_own_keys_override(workdir):
    path = workdir / "merge.yaml"
    path.write_text(textwrap.dedent("""\
        name: tbl
        version: "1.0.0"
        source: {type: csv, path: data/t.csv}
        features:
          id: &number {type: int64, min: 0, max: 9}
          score:
            <<: *number
            type: float
            max: 1
        output: {path: out/tbl}
        """))
    config = load_config(str(path))
    by_name = {spec.name: spec for spec in config.features}
    assert (by_name["id"].type, by_name["id"].min, by_name["id"].max) == ("int64", 0, 9)
    assert (by_name["score"].type, by_name["score"].min, by_name["score"].max) == \
        ("float", 0, 1)


_PLAIN = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                         st.integers(-3, 3) | st.text("xyz", max_size=3), max_size=4)


@SETTINGS
@given(base=_PLAIN, own=_PLAIN)
def test_a_merge_equals_writing_the_keys_out(base, own):
    from recordforge.pipelines.config.yaml_safe import safe_load

    document = {"base": base, "merged": {"<<": "*anchor", **own}}
    text = yaml.safe_dump(document).replace("base:", "base: &anchor", 1) \
        .replace("'<<': '*anchor'", "<<: *anchor")
    if not base:
        text = text.replace("base: &anchor {}", "base: &anchor {}")
    loaded = safe_load(text, origin="t")
    assert loaded["merged"] == {**base, **own}


@pytest.mark.parametrize("text, problem", [
    ("a: {<<: 5}", "expected a mapping"),
    ("a: {x: 1, x: 2}", "appears twice"),
    ("b: &m {x: 1}\na: {<<: *m, y: 2, y: 3}", "appears twice"),
])
def test_bad_merges_and_duplicates_are_config_errors(text, problem):
    from recordforge.pipelines.config.yaml_safe import safe_load

    with pytest.raises(ConfigError) as raised:
        safe_load(text, origin="t")
    assert problem in raised.value.problem


# --- size units -----------------------------------------------------------------------

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _spellings(unit: str) -> list[str]:
    return sorted({"".join(chars) for chars in itertools.product(
        *[(c.lower(), c.upper()) for c in unit])})


@SETTINGS
@given(number=st.integers(1, 4096), unit=st.sampled_from(sorted(_UNITS)), data=st.data())
def test_a_unit_is_read_only_when_its_case_is_not_ambiguous(number, unit, data):
    spelling = data.draw(st.sampled_from(_spellings(unit)))
    canonical = spelling in ("B", "kB", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
    unambiguous = canonical or spelling in (spelling.lower(), spelling.upper())
    text = f"{number}{spelling}"
    if unambiguous:
        assert parse_size(text, "output.shard_size") == number * _UNITS[unit]
    else:
        with pytest.raises(ConfigError) as raised:
            parse_size(text, "output.shard_size")
        assert raised.value.key == "output.shard_size" and "ambiguous" in raised.value.problem


@pytest.mark.parametrize("text", ["1Mb", "1mB", "256Gb", "2Mib", "1kb ", "1Kb"])
def test_megabits_are_not_megabytes(text):
    if text.strip() == "1kb":
        assert parse_size(text, "k") == 1000
        return
    with pytest.raises(ConfigError):
        parse_size(text, "k")


# --- message length -------------------------------------------------------------------

_HUGE = st.integers(10_000, 300_000).map(lambda n: "c" * n)


@SETTINGS
@given(huge=_HUGE, where=st.sampled_from(["feature", "from", "key", "type", "split", "unit",
                                          "top", "name"]))
def test_error_messages_are_bounded(workdir, huge, where):
    data = copy.deepcopy(TABLE)
    if where == "feature":
        data["features"][huge] = {"type": "bogus"}
    elif where == "from":
        data["features"]["id"]["from"] = huge
    elif where == "key":
        data["key"] = huge
    elif where == "type":
        data["features"]["id"]["type"] = huge
    elif where == "split":
        data["splits"] = {huge.upper(): 1.0}
    elif where == "unit":
        data["output"]["shard_size"] = f"1{huge}"
    elif where == "top":
        data[huge] = 1
    else:
        data["name"] = huge
    with pytest.raises(ConfigError) as raised:
        config_from_dict(data)
    assert len(str(raised.value)) <= MAX_MESSAGE


def test_a_header_of_a_million_columns_gives_a_short_message(workdir, capsys):
    columns = [f"column_{i}" for i in range(1_000_000)]
    (workdir / "data" / "wide.csv").write_text(",".join(columns) + "\n" + ",".join(
        "1" for _ in range(3)) + "\n")
    data = copy.deepcopy(TABLE)
    data["source"]["path"] = "data/wide.csv"
    data["key"] = "no_such_column"
    with pytest.raises(ConfigError) as raised:
        config_from_dict(data)
    assert len(str(raised.value)) <= MAX_MESSAGE  # the columns are listed, then cut
    assert "columns: column_0, column_1" in str(raised.value)
    assert "more characters" in str(raised.value)
