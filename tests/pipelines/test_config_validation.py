"""The ``validation:`` section (pipelines/config/validation.py): the baseline to compare
with, and the gates, each mistake a ConfigError naming its key."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from recordforge.pipelines.config.validation import parse_validation
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.feature_config import parse_features

FEATURES = parse_features({"price": {"type": "float"}, "n": {"type": "int64"},
                           "city": {"type": "string"}, "blob": {"type": "bytes"}})
_VERSION = st.from_regex(r"\A[A-Za-z0-9_+=-][A-Za-z0-9._+=-]{0,30}\Z").filter(
    lambda name: ".." not in name and name not in ("LATEST", "latest"))


@given(_VERSION)
def test_a_version_name_pins_the_baseline(version):
    config, resolved = parse_validation({"baseline": version}, FEATURES)
    assert (config.baseline_version, config.baseline_last) == (version, None)
    assert resolved["baseline"] == version


@given(st.integers(1, 100))
def test_the_last_n_versions_can_be_the_baselines(last):
    config, resolved = parse_validation({"baseline": {"last": last}}, FEATURES)
    assert (config.baseline_version, config.baseline_last) == (None, last)
    assert resolved["baseline"] == {"last": last}


def test_latest_is_the_default_baseline():
    for value in ({}, {"baseline": None}, {"baseline": "latest"}):
        config, resolved = parse_validation(value, FEATURES)
        assert (config.baseline_version, config.baseline_last) == (None, None)
        assert resolved["baseline"] == "latest"


@given(st.one_of(
    st.text(min_size=1, max_size=12).filter(lambda name: any(
        bad in name for bad in ("/", "\\", "..", " ", "\t"))),
    st.sampled_from(["", ".staging", "LATEST"]),
    st.floats(allow_nan=False), st.booleans(), st.lists(st.integers(), max_size=2),
    st.integers(max_value=0).map(lambda n: {"last": n}),
    st.integers(min_value=101).map(lambda n: {"last": n}),
    st.sampled_from([{"last": True}, {"last": 2.5}, {"last": "3"}, {"first": 2}, {}])))
def test_a_wrong_baseline_is_a_config_error_naming_its_key(value):
    with pytest.raises(ConfigError) as error:
        parse_validation({"baseline": value}, FEATURES)
    assert error.value.key.startswith("validation.baseline")


@given(st.floats(0, 1), st.sampled_from(["price", "n"]))
def test_max_nonfinite_gates_numeric_features(limit, name):
    config, _ = parse_validation({"features": {name: {"max_nonfinite": limit}}}, FEATURES)
    assert [(gate.measure, gate.limit, gate.feature) for gate in config.gates] == [
        ("nonfinite", limit, name)]


@pytest.mark.parametrize("name", ["city", "blob"])
def test_max_nonfinite_on_other_features_is_refused(name):
    with pytest.raises(ConfigError) as error:
        parse_validation({"features": {name: {"max_nonfinite": 0.1}}}, FEATURES)
    assert error.value.key == f"validation.features.{name}.max_nonfinite"
    assert "numeric" in error.value.problem
