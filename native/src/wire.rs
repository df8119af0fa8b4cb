//! The tf.train.Example wire format of one scalar feature's map entry, as
//! `schemas/example.py` (`scalar_entry_encoder`, `example_head`) writes it.

/// Appends the protobuf varint of `value` (negative int64s as 10 bytes).
pub fn put_varint(out: &mut Vec<u8>, value: u64) {
    let mut rest = value;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7F) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

pub fn varint_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Which list of Feature's oneof an entry holds (its field tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Bytes = 0x0a,
    Float = 0x12,
    Int64 = 0x1a,
}

/// Appends a feature's map entry around a list payload of `payload_size`
/// bytes (the payload itself follows): entry tag and length, key, Feature
/// tag and length, list tag and length.
pub fn put_entry_head(out: &mut Vec<u8>, name: &[u8], kind: ListKind, payload_size: usize) {
    let key_field = 1 + varint_len(name.len() as u64) + name.len();
    let feature_size = 1 + varint_len(payload_size as u64) + payload_size;
    let entry_size = key_field + 1 + varint_len(feature_size as u64) + feature_size;
    out.push(0x0a);
    put_varint(out, entry_size as u64);
    out.push(0x0a);
    put_varint(out, name.len() as u64);
    out.extend_from_slice(name);
    out.push(0x12);
    put_varint(out, feature_size as u64);
    out.push(kind as u8);
    put_varint(out, payload_size as u64);
}

/// The entry of an int64 feature holding `value` (one packed varint).
pub fn put_int64_entry(out: &mut Vec<u8>, name: &[u8], value: i64) {
    let packed = varint_len(value as u64);
    put_entry_head(out, name, ListKind::Int64, 1 + varint_len(packed as u64) + packed);
    out.push(0x0a);
    put_varint(out, packed as u64);
    put_varint(out, value as u64);
}

/// The entry of a float feature holding `value` as float32.
pub fn put_float_entry(out: &mut Vec<u8>, name: &[u8], value: f32) {
    put_entry_head(out, name, ListKind::Float, 6);
    out.extend_from_slice(&[0x0a, 0x04]);
    out.extend_from_slice(&value.to_le_bytes());
}

/// The entry of a bytes feature holding `value`.
pub fn put_bytes_entry(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    put_entry_head(out, name, ListKind::Bytes, 1 + varint_len(value.len() as u64) + value.len());
    out.push(0x0a);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// Appends a serialized Example made of its map entries, concatenated in
/// key order (`example_from_entries`).
pub fn put_example(out: &mut Vec<u8>, entries: &[u8]) {
    out.push(0x0a);
    put_varint(out, entries.len() as u64);
    out.extend_from_slice(entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_len_is_the_bytes_put(value in any::<u64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            prop_assert_eq!(out.len(), varint_len(value));
        }
    }

    #[test]
    fn entries_match_the_python_encoder() {
        // encode_example({"a": 1, "b": -3, "c": 1.5, "d": b"xy"}) in Python.
        let expected: &[u8] = b"\n=\n\n\n\x01a\x12\x05\x1a\x03\n\x01\x01\n\x13\n\x01b\x12\x0e\x1a\x0c\n\n\xfd\xff\xff\xff\xff\xff\xff\xff\xff\x01\n\r\n\x01c\x12\x08\x12\x06\n\x04\x00\x00\xc0?\n\x0b\n\x01d\x12\x06\n\x04\n\x02xy";
        let mut entries = Vec::new();
        put_int64_entry(&mut entries, b"a", 1);
        put_int64_entry(&mut entries, b"b", -3);
        put_float_entry(&mut entries, b"c", 1.5);
        put_bytes_entry(&mut entries, b"d", b"xy");
        let mut example = Vec::new();
        put_example(&mut example, &entries);
        assert_eq!(example, expected);
    }
}
