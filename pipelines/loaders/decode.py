"""A serialized Example -> numpy values, shaped as the manifest's features say (no TensorFlow).

The mapping follows `recordforge.tf`'s parse spec, so every framework reads
the same values: ``int64`` -> `np.int64`, ``float`` -> `np.float32`,
``bytes`` (and strings) stay `bytes`. A feature of shape ``[]`` or ``[N]``
that every record holds is fixed: an array of that shape (``[]`` a 0-d
array; a bytes feature its one `bytes`, or a list of N), its stated
``default`` when a record lacks it. Shape ``[-1]``, or a feature that may
be absent (``"required": false``), is variable: a 1-D array (a list of
`bytes`), empty when absent. Anything else in a record (a fixed feature
missing without a default, a wrong count or kind) raises
`RecordDecodeError` naming the shard, the record and the feature.
"""

from __future__ import annotations

import base64
from typing import Any, Callable, Mapping

import numpy as np

from ...schemas.example import ExampleDecodeError, example_features
from ..publish.held_manifest import DatasetCorrupt

__all__ = ["ExampleDecoder", "RecordDecodeError"]

_DTYPES = {"int64": np.int64, "float": np.float32}


class RecordDecodeError(DatasetCorrupt):
    """A record whose CRCs check out is not an Example of the manifest's features."""


def _default(spec: Mapping[str, Any]) -> list | None:
    """The stated default as a list of values (the manifest's encoding:
    floats may be "nan"/"inf" strings, bytes ``{"base64": ...}``)."""
    if "default" not in spec:
        return None
    values = spec["default"] if spec.get("shape") else [spec["default"]]
    if spec["type"] == "float":
        return [float(value) for value in values]
    if spec["type"] == "bytes":
        return [base64.b64decode(value["base64"]) if isinstance(value, dict) else value
                for value in values]
    return list(values)


class _Feature:
    """How one feature's values become the reader's value."""

    def __init__(self, name: str, spec: Mapping[str, Any]):
        self.name, self.kind = name, spec["type"]
        shape = list(spec.get("shape", []))
        self.variable = shape == [-1] or spec.get("required") is False
        self.count = shape[0] if shape else 1
        self.fixed_scalar = not shape and not self.variable
        self.default = _default(spec)
        self.dtype = _DTYPES.get(self.kind)

    def value(self, features: Mapping[str, tuple[str | None, list]], where: Callable[[], str]):
        """This feature's value from a record's features (`example_features`)."""
        found = features.get(self.name)
        if found is None:
            values = self._absent(True, where)
        else:
            kind, values = found
            if kind is None:
                values = self._absent(False, where)
            elif values and kind != self.kind:
                raise RecordDecodeError(f"{where()}: feature {self.name!r} holds {kind} values, "
                                        f"but the manifest says {self.kind}")
        if not self.variable and len(values) != self.count:
            shape = "[]" if self.fixed_scalar else f"[{self.count}]"
            raise RecordDecodeError(f"{where()}: feature {self.name!r} holds {len(values)} "
                                    f"values, but its shape is {shape}")
        if self.dtype is None:
            return values[0] if self.fixed_scalar else list(values)
        if self.fixed_scalar:
            return np.array(values[0], dtype=self.dtype)
        return np.fromiter(values, dtype=self.dtype, count=len(values))

    def _absent(self, missing: bool, where: Callable[[], str]) -> list:
        """The values of a feature a record lacks (`missing`) or holds with
        no kind set (no values, as TensorFlow reads it)."""
        if not missing or self.variable:
            return []
        if self.default is None:
            raise RecordDecodeError(f"{where()}: feature {self.name!r} is missing and the "
                                    "manifest gives it no default")
        return self.default


class ExampleDecoder:
    """Serialized Examples -> ``{feature: value}`` by a manifest's
    `features` (module docstring). Picklable."""

    def __init__(self, features: Mapping[str, Mapping[str, Any]]):
        self.features = dict(features)
        self._plan = [_Feature(name, spec) for name, spec in sorted(self.features.items())]

    def __getstate__(self) -> dict:
        return {"features": self.features}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["features"])

    def decode(self, record, shard: str, index: int) -> dict:
        """`record` (bytes or a buffer), record `index` of the shard `shard`
        names, decoded."""
        def where() -> str:
            return f"{shard}: record {index}"

        try:
            features = example_features(record)
        except ExampleDecodeError as error:
            raise RecordDecodeError(f"{where()}: {error}") from None
        return {feature.name: feature.value(features, where) for feature in self._plan}
