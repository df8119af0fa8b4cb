"""What the table kernels' differential tests share: the schemas they generate, and a converter with or without the kernel.

Loaded by path in each test module (the suite imports its test
modules as `importlib` does, not as a package). The CSV, Arrow and JSONL
kernel tests and the null-text and timestamp tests draw their schemas
here, so that every kernel is held to the same feature rules.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, strategies as st

from recordforge.schemas.errors import ConfigError
from recordforge.schemas.feature_config import parse_features
from recordforge.transforms import native_rows
from recordforge.transforms.batch_converter import BatchConverter

VOCABULARY = ["cat", "dog", "Cat", " cat", "é"]
# A feature's kinds: "label" is an int64 feature with a vocabulary.
KINDS = ["int64", "float", "string", "bytes", "label", "bool"]
# A default each kind takes, as config text.
DEFAULTS = {"int64": "0", "float": "0", "string": "x", "bytes": "x", "label": "cat", "bool": "0"}

# Salts of the rows' digests: none (no digests), hashlib's empty key
# (plain BLAKE2b), any up to BLAKE2b's longest.
salts = st.one_of(st.none(), st.binary(max_size=64))


@st.composite
def _feature_body(draw, column, kinds) -> dict:
    kind = draw(st.sampled_from(kinds))
    body: dict = {"from": column}
    body.update(type="int64", vocabulary=VOCABULARY) if kind == "label" else body.update(type=kind)
    if kind == "int64":
        if draw(st.booleans()):
            body["min"] = draw(st.integers(-2**64, 100))
        if draw(st.booleans()):
            body["max"] = draw(st.integers(-100, 2**64))
        if draw(st.integers(0, 4)) == 0:
            body["values"] = draw(st.lists(st.integers(-5, 5), min_size=1, max_size=4,
                                           unique=True))
    elif kind == "float":
        if draw(st.booleans()):
            body["min"] = draw(st.floats(-1e40, 10, allow_nan=False))
        if draw(st.booleans()):
            body["max"] = draw(st.floats(-10, 1e40, allow_nan=False))
        body["allow_nan"] = draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            body["values"] = draw(st.lists(st.sampled_from([0.0, 1.0, -0.0, 0.1, 2.5]),
                                           min_size=1, max_size=3, unique=True))
    elif kind in ("string", "bytes"):
        if draw(st.booleans()):
            body["max_bytes"] = draw(st.integers(1, 8))
        if kind == "string" and draw(st.integers(0, 4)) == 0:
            body["values"] = draw(st.lists(st.sampled_from(VOCABULARY), min_size=1,
                                           max_size=3, unique=True))
    if draw(st.booleans()):
        body["required"] = False
    elif draw(st.integers(0, 3)) == 0:
        body["default"] = DEFAULTS[kind]
    return body


def feature_bodies(columns, kinds=KINDS):
    """A feature's config: read from one of `columns` (a name, or a path
    where the source nests), of one of `kinds`, with bounds, allowed
    values, size limits, optional or defaulted."""
    return st.sampled_from(columns).flatmap(lambda column: _feature_body(column, kinds))


@st.composite
def schemas(draw, bodies, keys, *, most: int = 5, nested: bool = False,
            suffixes=("", "x", "_a"), source_nulls=None):
    """(specs, key column or None, label feature or None): 1 to `most`
    features whose configs `bodies` draws, parsed as a build parses them
    (with the source's `null_values` that `source_nulls` draws, if
    given); a schema the parser refuses is drawn again."""
    count = draw(st.integers(1, most))
    features = {f"f{i}{draw(st.sampled_from(suffixes))}": draw(bodies) for i in range(count)}
    null_values = None if source_nulls is None else draw(source_nulls)
    try:
        specs = parse_features(features, nested=nested, null_values=null_values)
    except ConfigError:
        assume(False)
    key = draw(st.one_of(st.none(), st.sampled_from(keys)))
    label = draw(st.one_of(st.none(), st.sampled_from([spec.name for spec in specs])))
    return specs, key, label


def converter(specs, key, native, salt=b"flights") -> BatchConverter:
    """A batch converter with the kernels `native` (None: the Python path)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native_rows, "kernels", lambda: native)
        return BatchConverter(specs, {}, key, digest_salt=salt)


def same(one, other) -> bool:
    """Equal, with NaN equal to NaN (each conversion makes a new float
    object, and nan != nan) and -0.0 apart from 0.0."""
    return repr(one) == repr(other)


def agree(native, outcome, specs, key, label, batch, salt=b"flights") -> None:
    """`batch` converts alike with the kernels and without (`outcome`: the
    differential tests' fixture)."""
    assert same(outcome(converter(specs, key, native, salt), specs, batch, label),
                outcome(converter(specs, key, None, salt), specs, batch, label))
