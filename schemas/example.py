"""The `tf.train.Example` codec, without TensorFlow.

Messages: `tensorflow.Example`, `Features`, `Feature`, `BytesList`, `FloatList`
and `Int64List` with the package, names and field numbers of TensorFlow's
`tensorflow/core/example/example.proto` and `feature.proto` (numbers packed,
as proto3 does). They are built at import time from a descriptor written out
below, in a private descriptor pool, rather than from checked-in `_pb2` code:
generated code is tied to the protoc version that made it (code from a newer
protoc refuses to load on an older protobuf runtime), and registering
`tensorflow.Example` in the default pool would clash with TensorFlow's own
copy when both are imported in one process. The descriptor is wire-identical
to TensorFlow's; the tests check it against independently generated code.

Encoding: `ExampleEncoder` writes the protobuf wire format directly for a fixed
set of features, with map entries in key order (see `ExampleEncoder`), at
about twice the speed of building protobuf messages; the tests hold it
byte-for-byte to protobuf's own serialization. Decoding goes through protobuf
itself, so what we write is always read back by an independent parser.
"""

from __future__ import annotations

import math
import operator
import struct
from typing import Any, Iterable, Mapping, Sequence

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from .native import kernels

__all__ = [
    "BYTES",
    "FEATURE_KINDS",
    "FLOAT",
    "INT64",
    "ExampleDecodeError",
    "ExampleEncoder",
    "ExampleValueError",
    "decode_example",
    "decode_features",
    "encode_example",
    "example_from_entries",
    "example_head",
    "example_class",
    "example_features",
    "example_values",
    "parse_example",
    "scalar_entry_encoder",
]

INT64 = "int64"
FLOAT = "float"
BYTES = "bytes"
FEATURE_KINDS = (INT64, FLOAT, BYTES)

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class ExampleValueError(ValueError):
    """A value cannot be stored in an Example (wrong type, or it does not fit
    int64 / float32)."""


class ExampleDecodeError(ValueError):
    """Bytes that do not parse as a tensorflow.Example."""


# --- messages ---------------------------------------------------------------

def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="recordforge/tensorflow_example.proto", package="tensorflow", syntax="proto3")

    def add_list(name: str, value_type: int, packed: bool) -> None:
        msg = proto.message_type.add(name=name)
        value = msg.field.add(name="value", number=1, type=value_type,
                              label=field.LABEL_REPEATED)
        if packed:
            value.options.packed = True

    add_list("BytesList", field.TYPE_BYTES, packed=False)
    add_list("FloatList", field.TYPE_FLOAT, packed=True)
    add_list("Int64List", field.TYPE_INT64, packed=True)

    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for name, number, type_name in (("bytes_list", 1, ".tensorflow.BytesList"),
                                    ("float_list", 2, ".tensorflow.FloatList"),
                                    ("int64_list", 3, ".tensorflow.Int64List")):
        feature.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                          label=field.LABEL_OPTIONAL, type_name=type_name, oneof_index=0)

    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=field.TYPE_MESSAGE,
                    label=field.LABEL_OPTIONAL, type_name=".tensorflow.Feature")
    features.field.add(name="feature", number=1, type=field.TYPE_MESSAGE,
                       label=field.LABEL_REPEATED,
                       type_name=".tensorflow.Features.FeatureEntry")

    example = proto.message_type.add(name="Example")
    example.field.add(name="features", number=1, type=field.TYPE_MESSAGE,
                      label=field.LABEL_OPTIONAL, type_name=".tensorflow.Features")
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
_Example = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("tensorflow.Example"))


def example_class() -> type:
    """The `tensorflow.Example` message class (from recordforge's private pool)."""
    return _Example


# --- wire encoding ----------------------------------------------------------

# Varints of 0..16383 (every length below 16 KiB and most small ints) come
# from a table; longer ones are computed.
_SMALL_VARINTS = tuple(
    bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(1 << 14))


def _varint(value: int) -> bytes:
    if 0 <= value < 16384:
        return _SMALL_VARINTS[value]
    if 0 < value < 1 << 21:  # ids and counts up to two million: no loop
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0:
        value += 1 << 64  # int64 negatives are 10-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


# Wire tags: field 1 / 2 / 3, wire type 2 (length-delimited).
_TAG1, _TAG2, _TAG3 = b"\x0a", b"\x12", b"\x1a"


def _int64_payload(values: Sequence[int]) -> bytes:
    """The Int64List message holding `values` (packed varints)."""
    integers = []
    for value in values:
        try:
            value = operator.index(value)  # ints, bools and numpy integers; not floats
        except TypeError:
            raise ExampleValueError(f"{value!r} is not an integer") from None
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ExampleValueError(f"{value!r} does not fit in int64")
        integers.append(value)
    packed = b"".join([_varint(v) for v in integers])
    return _length_delimited(_TAG1, packed) if packed else b""


_FLOAT32_MAX = 3.4028235677973366e38  # largest double that rounds to a finite float32


def _float_payload(values: Sequence[float]) -> bytes:
    """The FloatList message holding `values` (packed little-endian float32)."""
    try:
        packed = struct.pack(f"<{len(values)}f", *values)
    except OverflowError:
        bad = next(v for v in values if math.isfinite(v) and abs(v) >= _FLOAT32_MAX)
        raise ExampleValueError(f"{bad!r} does not fit in float32") from None
    except struct.error:
        bad = next(v for v in values if not isinstance(v, (int, float)))
        raise ExampleValueError(f"{bad!r} is not a number") from None
    return _length_delimited(_TAG1, packed) if packed else b""


def _bytes_payload(values: Sequence[bytes]) -> bytes:
    """The BytesList message holding `values`."""
    try:
        return b"".join([_TAG1 + _varint(len(v)) + v for v in values])
    except TypeError:
        bad = next(v for v in values if not isinstance(v, bytes))
        raise ExampleValueError(f"{bad!r} is not bytes") from None


_PAYLOADS = {INT64: _int64_payload, FLOAT: _float_payload, BYTES: _bytes_payload}
# Field of Feature's oneof that holds each kind.
_KIND_TAGS = {BYTES: _TAG1, FLOAT: _TAG2, INT64: _TAG3}


def _prefixer(name: str, kind: str):
    """A function payload size -> the bytes of a feature's map entry that
    precede its payload (entry tag and length, key, Feature tag and length,
    list tag and length).

    Every length prefix of an entry whose payload has a given size is the same,
    so prefixes are cached per payload size: the common case (a scalar) costs a
    dictionary lookup and one concatenation rather than five length encodings.
    """
    key_field = _length_delimited(_TAG1, name.encode("utf-8"))
    kind_tag = _KIND_TAGS[kind]
    prefixes: dict[int, bytes] = {}

    def prefix_for(size: int) -> bytes:
        prefix = prefixes.get(size)
        if prefix is None:
            feature_size = 1 + len(_varint(size)) + size
            entry_size = len(key_field) + 1 + len(_varint(feature_size)) + feature_size
            prefix = (_TAG1 + _varint(entry_size) + key_field + _TAG2 + _varint(feature_size)
                      + kind_tag + _varint(size))
            if len(prefixes) < 4096:
                prefixes[size] = prefix
        return prefix

    return prefix_for


def _entry_encoder(name: str, kind: str):
    """A function values -> the complete Features map entry for one feature."""
    payload_of = _PAYLOADS[kind]
    prefix_for = _prefixer(name, kind)

    if kind == INT64:
        def encode(values):
            if len(values) == 1:
                value = values[0]
                if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
                    packed = _varint(value)
                    payload = _TAG1 + _SMALL_VARINTS[len(packed)] + packed
                    return prefix_for(len(payload)) + payload
            payload = payload_of(values)
            return prefix_for(len(payload)) + payload
    elif kind == FLOAT:
        pack_one = struct.Struct("<f").pack

        def encode(values):
            if len(values) == 1:
                try:
                    payload = b"\x0a\x04" + pack_one(values[0])
                except (OverflowError, struct.error):
                    payload = payload_of(values)  # raises the explanatory error
                return prefix_for(6) + payload
            payload = payload_of(values)
            return prefix_for(len(payload)) + payload
    else:
        def encode(values):
            if len(values) == 1:
                value = values[0]
                if type(value) is bytes:
                    payload = _TAG1 + _varint(len(value)) + value
                    return prefix_for(len(payload)) + payload
            payload = payload_of(values)
            return prefix_for(len(payload)) + payload
    return encode


def scalar_entry_encoder(name: str, kind: str):
    """A function value -> the complete Features map entry of feature `name`
    holding that one value; the bytes equal `ExampleEncoder` output for
    ``[value]``.

    No checks, for values a schema check has already accepted: an int within
    int64 (kind "int64"), a float that fits float32 ("float"), bytes ("bytes").
    Row encoders call it once per feature per row, so each kind gets its own
    shortest path.
    """
    if kind not in _PAYLOADS:
        raise ValueError(f"feature {name!r}: kind must be one of {FEATURE_KINDS}, got {kind!r}")
    prefix_for = _prefixer(name, kind)
    small = _SMALL_VARINTS
    if kind == INT64:
        def encode(value):
            packed = small[value] if 0 <= value < 16384 else _varint(value)
            payload = _TAG1 + small[len(packed)] + packed
            return prefix_for(len(payload)) + payload
    elif kind == FLOAT:
        head = prefix_for(6) + b"\x0a\x04"  # every one-float payload is 6 bytes
        pack_one = struct.Struct("<f").pack

        def encode(value):
            return head + pack_one(value)
    else:
        def encode(value):
            size = len(value)
            length = small[size] if size < 16384 else _varint(size)
            return prefix_for(1 + len(length) + size) + _TAG1 + length + value
    return encode


def example_from_entries(entries: bytes) -> bytes:
    """A serialized Example from its Features map entries, concatenated in
    key order (as `ExampleEncoder` orders them)."""
    return example_head(len(entries)) + entries


def example_head(size: int) -> bytes:
    """The bytes of a serialized Example before its map entries, when the
    entries take `size` bytes."""
    return _TAG1 + _varint(size)


class ExampleEncoder:
    """Serializes Examples with a fixed set of features.

    kinds: feature name -> "int64" | "float" | "bytes". `encode` takes
    feature name -> list of values (ints, floats, bytes); a feature missing
    from the mapping (or mapped to None) is left out of the Example.

    Map entries are written in order of their keys' UTF-8 bytes, as C++
    protobuf and pure-Python protobuf do for deterministic serialization
    (upb's deterministic order differs where one key is a prefix of another;
    any order parses to the same Example). Fixing the order here keeps output
    byte-identical whatever protobuf backend a worker happens to have.
    """

    def __init__(self, kinds: Mapping[str, str]):
        for name, kind in kinds.items():
            if kind not in _PAYLOADS:
                raise ValueError(f"feature {name!r}: kind must be one of {FEATURE_KINDS}, "
                                 f"got {kind!r}")
        names = sorted(kinds, key=lambda n: n.encode("utf-8"))
        self._entries = tuple((name, _entry_encoder(name, kinds[name])) for name in names)
        self.kinds = dict(kinds)

    def __reduce__(self):
        return (ExampleEncoder, (self.kinds,))

    @property
    def names(self) -> tuple[str, ...]:
        """The feature names in the order their entries are written."""
        return tuple(name for name, _ in self._entries)

    def entry_encoder(self, name: str):
        """The function values -> complete map entry of feature `name`
        (raises `ExampleValueError` for values that cannot be stored)."""
        for entry_name, encode_entry in self._entries:
            if entry_name == name:
                return encode_entry
        raise KeyError(name)

    def encode(self, values: Mapping[str, Sequence]) -> bytes:
        parts = []
        get = values.get
        for name, encode_entry in self._entries:
            feature_values = get(name)
            if feature_values is not None:
                try:
                    parts.append(encode_entry(feature_values))
                except ExampleValueError as error:
                    raise ExampleValueError(f"feature {name!r}: {error}") from None
        features = b"".join(parts)
        return _TAG1 + _varint(len(features)) + features


def _infer(name: str, value: Any) -> tuple[str, list]:
    if isinstance(value, tuple) and len(value) == 2 and value[0] in FEATURE_KINDS:
        kind, values = value
        return kind, _normalise(name, kind, list(values))
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ExampleValueError(
            f"feature {name!r}: an empty list has no type; pass ('int64'|'float'|'bytes', [])")
    if all(isinstance(v, (bytes, str)) for v in values):
        kind = BYTES
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        kind = INT64
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        kind = FLOAT
    else:
        raise ExampleValueError(
            f"feature {name!r}: values must all be ints, all numbers, or all bytes/str; "
            f"got {sorted({type(v).__name__ for v in values})}")
    return kind, _normalise(name, kind, values)


def _normalise(name: str, kind: str, values: list) -> list:
    if kind == BYTES:
        return [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    if kind == FLOAT:
        return [float(v) for v in values]
    return values


def encode_example(features: Mapping[str, Any]) -> bytes:
    """Serializes one Example from feature name -> value.

    A value is an int, float, bytes or str (str is stored as UTF-8 bytes), a
    list of one kind of them, or an explicit ``(kind, values)`` pair (needed
    for an empty list). Ints are stored as int64, floats as float32: a value
    that does not fit raises `ExampleValueError`.
    """
    kinds = {}
    values = {}
    for name, value in features.items():
        if not isinstance(name, str):
            raise ExampleValueError(f"feature names must be str, got {name!r}")
        kinds[name], values[name] = _infer(name, value)
    return ExampleEncoder(kinds).encode(values)


_KIND_BY_FIELD = {"bytes_list": BYTES, "float_list": FLOAT, "int64_list": INT64}


def parse_example(data) -> Any:
    """A serialized Example (bytes or any buffer) -> the protobuf message;
    `ExampleDecodeError` for bytes that are not one. For readers that take
    a few values of their own from it without a dict of every feature."""
    example = _Example()
    try:
        example.ParseFromString(data)
    except message.DecodeError as error:
        raise ExampleDecodeError(f"not a tf.train.Example ({error})") from None
    return example


def _feature_values(feature) -> tuple[str, list]:
    which = feature.WhichOneof("kind")
    if which is None:
        return BYTES, []
    return _KIND_BY_FIELD[which], list(getattr(feature, which).value)


def decode_example(data: bytes) -> dict[str, tuple[str, list]]:
    """Parses a serialized Example into feature name -> (kind, values).

    Floats come back as the float32 values stored (as Python floats). A
    feature with no kind set decodes as ("bytes", []), as TensorFlow does not
    distinguish it either. Raises `ExampleDecodeError` for bytes that are not
    an Example.
    """
    return {name: _feature_values(feature)
            for name, feature in parse_example(data).features.feature.items()}


# The kernels reading a canonical Example, or None (Python path).
_canonical_values = None if kernels() is None else kernels().example_values
_canonical_features = None if kernels() is None else kernels().example_features


def example_values(data) -> dict[str, list]:
    """Feature name -> values of a serialized Example (`data`: bytes or any
    buffer), in name order: `decode_example` without the kinds. Raises
    `ExampleDecodeError` as `decode_example` does. Where the native kernels
    run, an Example in the canonical encoding (one features field, one
    list per feature, numbers packed, no name twice: what every
    deterministic serializer writes) is read by the kernel
    (native/src/example_values.rs), about ten times faster than protobuf's
    parse and map walk; anything else, valid or not, is left to protobuf.
    Both give the same dict."""
    if _canonical_values is not None:
        found = _canonical_values(data)
        if found is not None:
            return found
    return {name: values for name, (_, values) in sorted(decode_example(data).items())}


def example_features(data) -> dict[str, tuple[str | None, list]]:
    """A serialized Example's features (`data`: bytes or any buffer): name
    -> (kind, values), in name order, the kind None for a feature with no
    list set (no values: TensorFlow reads it so, where `decode_example`
    says "bytes"; a manifest's default fills it). Read by the native kernel
    where the Example is canonical (as `example_values`), by protobuf
    otherwise; raises `ExampleDecodeError` for bytes that are not an
    Example."""
    if _canonical_features is not None:
        found = _canonical_features(data)
        if found is not None:
            return found
    features = {}
    for name, feature in sorted(parse_example(data).features.feature.items()):
        which = feature.WhichOneof("kind")
        features[name] = ((None, []) if which is None else
                          (_KIND_BY_FIELD[which], list(getattr(feature, which).value)))
    return features


def decode_features(data: bytes, names: Iterable[str]) -> dict[str, tuple[str, list]]:
    """`decode_example` restricted to the features in `names`; those absent
    from the Example are left out. The whole message is still parsed (damage
    raises `ExampleDecodeError` alike), but only the named values become
    Python objects: for a pass that needs one or two features of every record
    (label counts) that is about 4x faster on table rows."""
    features = parse_example(data).features.feature
    return {name: _feature_values(features[name]) for name in names if name in features}
