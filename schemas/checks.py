"""One feature's rules compiled into a converter: raw column value -> the values it stores.

`compile_feature` and `compile_entry` compile a feature's rules once, so per
row the work is a few type tests; elements convert and check by `values`,
the common case takes the `fast_paths`. A converter raises `RowError` naming
the feature and its column, with a stable reason code. The rules of one
feature (also in docs/reasons.md):

- Missing: a column that is absent, None, or the empty text "" (for int64 and
  float also whitespace-only text); with `null_values`, None and exactly the
  listed texts (blank text too for numbers when "" is listed). A missing value takes the feature's
  `default`; without one it is `missing_value` if `required`, else the feature
  is left out of the Example. Use `default: ""` to store empty strings.
- Shapes: a scalar feature takes one value or a one-element list; [N] and [-1]
  take a list (a single value counts as a list of one).
- Each element follows its type's rules (`values`).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Mapping, Sequence

from .dead_letters import RowError
from .errors import ConfigError
from .fast_paths import fast_path
from .features import FeatureSpec
from .values import BYTES_LIKE, BadValue, element_converter, shown

__all__ = ["Converter", "checked_converter", "compile_entry", "compile_feature",
           "stored_defaults", "validate_default"]

_FLOAT32 = struct.Struct("<f")

# A feature converter takes the raw column value and returns the values to
# store (a list or tuple), or None when an optional feature is absent.
Converter = Callable[[Any], "Sequence | None"]


def _missing_value(raw: Any, numeric: bool) -> bool:
    if raw is None:
        return True
    if type(raw) is str:
        return not raw.strip() if numeric else not raw
    return False


def _missing_rule(null_values: Sequence[str] | None, numeric: bool) -> Callable[[Any], bool]:
    """The feature's test for a missing value: the standard rule, or (with
    `null_values`) None and exactly the listed texts, plus blank text for
    numbers when ``""`` is listed."""
    if null_values is None:
        return lambda raw: _missing_value(raw, numeric)
    nulls = frozenset(null_values)
    blank = numeric and "" in nulls

    def missing(raw):
        if raw is None:
            return True
        if type(raw) is str:
            return raw in nulls or (blank and not raw.strip())
        return False

    return missing


def _as_list(raw: Any) -> list | None:
    if isinstance(raw, (list, tuple)):
        return list(raw)
    if hasattr(raw, "tolist") and not isinstance(raw, (str, dict) + BYTES_LIKE):
        listed = raw.tolist()  # numpy / pyarrow arrays
        return listed if isinstance(listed, list) else None
    return None


def compile_feature(spec: FeatureSpec, vocabulary: Sequence[str] | None = None,
                    ) -> tuple[Converter, Callable[[Any], list]]:
    """Builds the converters of one feature.

    Returns (convert, convert_present): convert(raw) -> values to store, or None
    for an absent optional feature, raising RowError; convert_present does the
    same without the missing-value rule (used for defaults).
    vocabulary: the resolved labels of an int64 feature with a vocabulary.
    """
    convert, convert_present = _compile_rules(spec, vocabulary)
    fast = fast_path(spec, vocabulary, convert)
    return (convert if fast is None else fast), convert_present


def compile_entry(spec: FeatureSpec, vocabulary: Sequence[str] | None,
                  list_entry: Callable[[Sequence], bytes],
                  scalar_entry: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """Builds a function raw value -> the feature's encoded Example map entry
    (b"" for an absent optional feature), raising RowError as `convert` does.

    list_entry: values -> entry (`ExampleEncoder.entry_encoder`); scalar_entry:
    one checked value -> entry (`scalar_entry_encoder`). The common case (one
    value of the expected type that passes every check) goes from the raw
    value to the entry bytes in one call, without the list and the dict of
    converted values in between.
    """
    convert, _ = _compile_rules(spec, vocabulary)

    def complete(raw):
        values = convert(raw)
        return b"" if values is None else list_entry(values)

    fast = fast_path(spec, vocabulary, complete, finish=scalar_entry)
    return complete if fast is None else fast


def _compile_rules(spec: FeatureSpec, vocabulary: Sequence[str] | None,
                   ) -> tuple[Converter, Callable[[Any], list]]:
    """(convert, convert_present) with the complete rules (see compile_feature)."""
    element = element_converter(spec, vocabulary)
    name, source, shape = spec.name, spec.source, spec.shape
    numeric = spec.vocabulary is None and spec.stored_kind != "bytes"

    def fail(reason: str, detail: str):
        raise RowError(reason, f"feature {name!r} (column {source!r}): {detail}", feature=name)

    def convert_present(raw):
        items = _as_list(raw)
        try:
            if not shape:
                if items is None:
                    return [element(raw)]
                if len(items) != 1:
                    fail("wrong_length", f"expected one value, got a list of {len(items)}")
                if items[0] is None:
                    fail("type_mismatch", "the list's only element is null")
                return [element(items[0])]
        except BadValue as bad:
            fail(bad.reason, bad.detail)
        if items is None:
            items = [raw]
        if shape[0] != -1 and len(items) != shape[0]:
            fail("wrong_length", f"expected {shape[0]} values, got {len(items)}")
        converted = []
        for index, item in enumerate(items):
            if item is None:
                fail("type_mismatch", f"element {index} is null")
            try:
                converted.append(element(item))
            except BadValue as bad:
                fail(bad.reason, f"element {index}: {bad.detail}")
        return converted

    default = None
    if spec.default is not None:
        default = tuple(convert_present(spec.default))
    required = spec.required
    missing = _missing_rule(spec.null_values, numeric)

    def convert(raw):
        if missing(raw):
            if default is not None:
                return default
            if required:
                fail("missing_value", "no value" + ("" if raw is None else f" ({shown(raw)})"))
            return None
        return convert_present(raw)

    return convert, convert_present


def validate_default(spec: FeatureSpec, *, key_path: str) -> None:
    """Raises ConfigError when the spec's default fails the feature's own checks.

    A default for an `auto` vocabulary is checked once the vocabulary is known
    (`RowEncoder`)."""
    if spec.default is None or spec.vocabulary == "auto":
        return
    vocabulary = spec.vocabulary if isinstance(spec.vocabulary, tuple) else None
    checked_converter(spec, vocabulary, key_path)


def stored_defaults(specs: Sequence[FeatureSpec],
                    vocabularies: Mapping[str, Sequence[str]] | None = None
                    ) -> dict[str, list]:
    """Feature name -> the values the feature stores when its value is
    missing, for every feature with a default (what the manifest states, so
    readers can parse it with that default). Converted by the feature's own
    rules: a vocabulary label becomes its id, text its UTF-8 bytes, a float
    its float32 value. vocabularies: resolved labels by feature name."""
    found = {}
    for spec in specs:
        if spec.default is None:
            continue
        vocabulary = (vocabularies or {}).get(spec.name)
        if vocabulary is None and isinstance(spec.vocabulary, tuple):
            vocabulary = spec.vocabulary
        values = list(compile_feature(spec, vocabulary)[1](spec.default))
        if spec.stored_kind == "float":
            values = [_FLOAT32.unpack(_FLOAT32.pack(value))[0] for value in values]
        found[spec.name] = values
    return found


def checked_converter(spec: FeatureSpec, vocabulary: Sequence[str] | None,
                      key_path: str) -> Converter:
    """`compile_feature`'s converter, raising ConfigError (at `key_path`)
    when the feature's default fails its own checks."""
    try:
        return compile_feature(spec, vocabulary)[0]
    except RowError as error:
        raise ConfigError(key_path, f"the default {spec.default!r} fails this feature's own "
                          f"checks ({error.reason}: {error.message}); fix the default or "
                          f"the checks") from None

