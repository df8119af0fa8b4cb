//! The tf.train.Example wire format of one scalar feature's map entry, as
//! `schemas/example.py` (`scalar_entry_encoder`, `example_head`) writes it.

use std::mem::MaybeUninit;

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

/// Names up to this long are written with an entry's head into the room
/// `put_in_room` makes; an entry with a longer one is written by `plain`.
const SHORT_NAME: usize = 48;

/// The room an entry but for its text value takes at most with a short
/// name: 22 bytes before the name, the name, 22 after it and 12 of an
/// int64's payload (6 of a float's, 11 of a text's head).
const ROOM: usize = 22 + SHORT_NAME + 22 + 12;

/// Bytes written one after another into the spare capacity of the
/// entries (`put_in_room`): no capacity check, call or stored length per
/// byte as `Vec::push` has, and no copy from a buffer on the stack.
struct Room<'a> {
    slots: &'a mut [MaybeUninit<u8>],
    len: usize,
}

// (Inlined, all of it: the room's length then stays in a register.)
impl Room<'_> {
    #[inline(always)]
    fn byte(&mut self, byte: u8) {
        self.slots[self.len].write(byte);
        self.len += 1;
    }

    #[inline(always)]
    fn bytes(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.byte(*byte);
        }
    }

    #[inline(always)]
    fn varint(&mut self, value: u64) {
        let mut rest = value;
        while rest >= 0x80 {
            self.byte((rest as u8 & 0x7F) | 0x80);
            rest >>= 7;
        }
        self.byte(rest as u8);
    }

    /// The head of a feature's map entry around a list payload of
    /// `payload_size` bytes (`plain::put_entry_head`), for a short name.
    #[inline(always)]
    fn entry_head(&mut self, name: &[u8], kind: ListKind, payload_size: usize) {
        debug_assert!(name.len() <= SHORT_NAME);
        let key_field = 1 + varint_len(name.len() as u64) + name.len();
        let feature_size = 1 + varint_len(payload_size as u64) + payload_size;
        let entry_size = key_field + 1 + varint_len(feature_size as u64) + feature_size;
        self.byte(0x0a);
        self.varint(entry_size as u64);
        self.byte(0x0a);
        self.varint(name.len() as u64);
        self.bytes(name);
        self.byte(0x12);
        self.varint(feature_size as u64);
        self.byte(kind as u8);
        self.varint(payload_size as u64);
    }
}

/// Appends what `write` writes into a `Room` of `ROOM` bytes (more is a
/// panic, never a write out of bounds).
#[inline(always)]
fn put_in_room(out: &mut Vec<u8>, write: impl FnOnce(&mut Room)) {
    out.reserve(ROOM);
    let start = out.len();
    let mut room = Room { slots: &mut out.spare_capacity_mut()[..ROOM], len: 0 };
    write(&mut room);
    let written = room.len;
    // SAFETY: `room` wrote its slots in order from the first, `written`
    // of them (each write indexed, so within the spare capacity): the
    // `written` bytes past the length are initialized.
    unsafe { out.set_len(start + written) };
}

/// Appends a feature's map entry around a list payload of `payload_size`
/// bytes (the payload itself follows): entry tag and length, key, Feature
/// tag and length, list tag and length.
pub fn put_entry_head(out: &mut Vec<u8>, name: &[u8], kind: ListKind, payload_size: usize) {
    if name.len() > SHORT_NAME {
        return plain::put_entry_head(out, name, kind, payload_size);
    }
    put_in_room(out, |room| room.entry_head(name, kind, payload_size));
}

/// The entry of an int64 feature holding `value` (one packed varint).
pub fn put_int64_entry(out: &mut Vec<u8>, name: &[u8], value: i64) {
    if name.len() > SHORT_NAME {
        return plain::put_int64_entry(out, name, value);
    }
    let packed = varint_len(value as u64);
    put_in_room(out, |room| {
        room.entry_head(name, ListKind::Int64, 1 + varint_len(packed as u64) + packed);
        room.byte(0x0a);
        room.varint(packed as u64);
        room.varint(value as u64);
    });
}

/// The entry of a float feature holding `value` as float32.
pub fn put_float_entry(out: &mut Vec<u8>, name: &[u8], value: f32) {
    if name.len() > SHORT_NAME {
        return plain::put_float_entry(out, name, value);
    }
    put_in_room(out, |room| {
        room.entry_head(name, ListKind::Float, 6);
        room.bytes(&[0x0a, 0x04]);
        room.bytes(&value.to_le_bytes());
    });
}

/// The entry of a bytes feature holding `value`.
pub fn put_bytes_entry(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if name.len() > SHORT_NAME {
        return plain::put_bytes_entry(out, name, value);
    }
    put_in_room(out, |room| {
        room.entry_head(name, ListKind::Bytes, 1 + varint_len(value.len() as u64) + value.len());
        room.byte(0x0a);
        room.varint(value.len() as u64);
    });
    out.extend_from_slice(value);
}

/// The same entries written a push at a time: for a long name, and the
/// reference the tests hold the writers above to.
mod plain {
    use super::{put_varint, varint_len, ListKind};

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

    pub fn put_int64_entry(out: &mut Vec<u8>, name: &[u8], value: i64) {
        let packed = varint_len(value as u64);
        put_entry_head(out, name, ListKind::Int64, 1 + varint_len(packed as u64) + packed);
        out.push(0x0a);
        put_varint(out, packed as u64);
        put_varint(out, value as u64);
    }

    pub fn put_float_entry(out: &mut Vec<u8>, name: &[u8], value: f32) {
        put_entry_head(out, name, ListKind::Float, 6);
        out.extend_from_slice(&[0x0a, 0x04]);
        out.extend_from_slice(&value.to_le_bytes());
    }

    pub fn put_bytes_entry(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        put_entry_head(out, name, ListKind::Bytes, 1 + varint_len(value.len() as u64) + value.len());
        out.push(0x0a);
        put_varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }
}

/// Appends a serialized Example made of its map entries, concatenated in
/// key order (`example_from_entries`).
pub fn put_example(out: &mut Vec<u8>, entries: &[u8]) {
    out.push(0x0a);
    put_varint(out, entries.len() as u64);
    out.extend_from_slice(entries);
}

/// The size of the Example `put_example` writes of `entries_size` bytes of entries.
pub fn example_size(entries_size: usize) -> usize {
    1 + varint_len(entries_size as u64) + entries_size
}

/// `put_example` into `out`, which is exactly `example_size` long.
pub fn example_at(out: &mut [u8], entries: &[u8]) {
    let (head, body) = out.split_at_mut(out.len() - entries.len());
    head[0] = 0x0a;
    let mut rest = entries.len() as u64;
    for byte in &mut head[1..] {
        // (the varint's bytes fill the head: all but the last have the high bit)
        *byte = (rest as u8 & 0x7F) | if rest >= 0x80 { 0x80 } else { 0 };
        rest >>= 7;
    }
    body.copy_from_slice(entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_example_written_in_place_is_put_examples(
                // (sizes whose length varint takes one, two and three bytes)
                entries in prop::collection::vec(any::<u8>(), 0..300),
                padding in prop::sample::select(vec![0usize, 16_000, 16_500])) {
            let entries = [entries, vec![7; padding]].concat();
            let mut expected = Vec::new();
            put_example(&mut expected, &entries);
            let mut out = vec![0xff; example_size(entries.len())];
            example_at(&mut out, &entries);
            prop_assert_eq!(out, expected);
        }

        #[test]
        fn entries_are_the_plain_writers_bytes(
                before in prop::collection::vec(any::<u8>(), 0..40),
                name in prop::collection::vec(any::<u8>(), 0..80),
                number in any::<i64>(), float in any::<f32>(),
                text in prop::collection::vec(any::<u8>(), 0..300),
                payload_size in prop_oneof![0usize..300, Just(usize::MAX >> 8)],
                kind in prop::sample::select(vec![ListKind::Bytes, ListKind::Float, ListKind::Int64])) {
            // (after some bytes already held, as a row's later entries are)
            let (mut found, mut expected) = (before.clone(), before);
            put_int64_entry(&mut found, &name, number);
            plain::put_int64_entry(&mut expected, &name, number);
            put_float_entry(&mut found, &name, float);
            plain::put_float_entry(&mut expected, &name, float);
            put_bytes_entry(&mut found, &name, &text);
            plain::put_bytes_entry(&mut expected, &name, &text);
            put_entry_head(&mut found, &name, kind, payload_size);
            plain::put_entry_head(&mut expected, &name, kind, payload_size);
            prop_assert_eq!(found, expected);
        }

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
