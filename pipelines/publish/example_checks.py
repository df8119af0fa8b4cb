"""Whether a record read back is an Example of the manifest's features.

`record_problem` says why one record is not (it does not decode, or
`example_problem`: a feature missing, of another type or length, an id
outside its vocabulary, a feature the manifest does not list). Only a deep
verification parses records (`file_checks`, `array_record_checks`), so this
is where protobuf and the in-place scan of large Examples are imported: the
processes that read shards back for their framing and sha256 never import it.
"""

from __future__ import annotations

from typing import Mapping

from ...schemas.example import ExampleDecodeError, example_features
from ...schemas.example_scan import LARGE_EXAMPLE_BYTES, NonCanonicalExample, scan_example

__all__ = ["example_problem", "record_problem"]


def example_problem(decoded: Mapping[str, tuple[str, list]], features: Mapping[str, Mapping],
                    vocabulary_sizes: Mapping[str, int]) -> str | None:
    """Why a decoded Example does not match the manifest's features, or None.

    A feature may be absent exactly when the manifest says ``"required":
    false`` (declared optional, without a default): the build writes every
    other feature into every record, a list of any length ([-1]) included.
    An empty value list matches any stored type.
    """
    for name, spec in features.items():
        shape = spec.get("shape", [])
        found = decoded.get(name)
        if found is None:
            if spec.get("required") is False:
                continue
            return f"feature {name!r} is missing (the manifest does not declare it optional)"
        kind, values = found
        if values and kind != spec["type"]:
            return f"feature {name!r} holds {kind} values, manifest says {spec['type']}"
        expected = 1 if not shape else shape[0]
        if expected != -1 and len(values) != expected:
            return f"feature {name!r} has {len(values)} values, shape {shape} needs {expected}"
        size = vocabulary_sizes.get(name)
        if size is not None:
            for value in values:
                if not 0 <= value < size:
                    return f"feature {name!r}: id {value} is outside its vocabulary (0..{size - 1})"
    extra = sorted(set(decoded) - set(features))
    if extra:
        return f"feature {extra[0]!r} is not in the manifest"
    return None


def _decoded(record: memoryview) -> Mapping:
    """A record's features for `example_problem`: read whole when small
    (`example_features`: a feature with no list set has kind None and no
    values, which match any type), scanned in place (values made on
    demand) when large."""
    if len(record) >= LARGE_EXAMPLE_BYTES:
        return {name: (values.kind, values) for name, values in scan_example(record).items()}
    return example_features(record)


def record_problem(record, features: Mapping, vocabulary_sizes: Mapping) -> str | None:
    """Why one record is not an Example of the manifest's features, or None."""
    try:
        return example_problem(_decoded(record), features, vocabulary_sizes)
    except NonCanonicalExample as error:
        return (f"a {len(record)}-byte Example in a non-canonical encoding ({error}); records "
                f"over {LARGE_EXAMPLE_BYTES} bytes are checked in place, which needs the "
                "encoding every serializer writes")
    except ExampleDecodeError as error:
        return str(error)
