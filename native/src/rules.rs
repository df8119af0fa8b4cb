//! The table kernels' compiled plan and value rules, shared by the CSV,
//! Arrow and JSONL kernels: each feature's rule and declared null texts,
//! what orders rows, the check of a field against its rule (the fast path's
//! number syntax, `number_text`, and ranges), and the wire entry and
//! sortable key of a checked value.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::number_text::{parse_float, parse_int};
use crate::timestamp::TimestampRule;
use crate::wire;

/// How one feature converts its field (the fast path's rules).
#[derive(Debug, Clone)]
pub enum Rule {
    /// int64: `[+-]?[0-9]+`, lo <= value <= hi, in `allowed` if given.
    Int { lo: i64, hi: i64, allowed: Option<HashSet<i64>> },
    /// float: the decimal syntax both Python's float() and Rust read the
    /// same way, lo <= value <= hi (finite), in `allowed` if given.
    Float { lo: f64, hi: f64, allowed: Option<Vec<f64>> },
    /// string or bytes: non-empty text, at most `limit` bytes, in `allowed`.
    Text { limit: u64, allowed: Option<HashSet<Vec<u8>>> },
    /// int64 with a vocabulary: the exact label -> its id.
    Label { ids: LabelIds },
    /// timestamp: ISO 8601 text -> its count of the unit (`timestamp.rs`).
    Timestamp(TimestampRule),
}

impl Rule {
    /// A value of the type the rule checks, standing where a row has none.
    pub(crate) fn placeholder(&self) -> Value<'static> {
        match self {
            Rule::Float { .. } => Value::Float(0.0),
            Rule::Text { .. } => Value::Bytes(b""),
            Rule::Int { .. } | Rule::Label { .. } | Rule::Timestamp(_) => Value::Int(0),
        }
    }
}

/// A vocabulary's labels -> their ids, looked up once per row and
/// feature: hashed by `LabelHasher` rather than the default SipHash, whose
/// seeding guards against inputs chosen to collide. Here only the labels
/// (the schema's) are stored, and a field, whatever it holds, is looked
/// up in a table whose layout they alone decide.
pub type LabelIds = HashMap<Vec<u8>, i64, BuildHasherDefault<LabelHasher>>;

/// A multiply-rotate hash of 8 bytes at a time (as rustc's FxHasher),
/// finished by murmur3's 64-bit mix so that the low bits the table
/// indexes by depend on every byte.
#[derive(Debug, Default, Clone, Copy)]
pub struct LabelHasher(u64);

impl LabelHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// The 1 to 7 bytes after a slice's whole words as one word, read as two
/// overlapping loads that together cover every byte (equal tails give
/// equal words; the slice's length, hashed first, tells the lengths
/// apart). Not copied into a zeroed word first: that copy was a call to
/// memcpy, and its byte stores read back as one word stalled the load
/// (a third of the label lookup's time, perf annotate).
#[inline(always)]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    let u16_at = |at: usize| u64::from(u16::from_le_bytes([rest[at], rest[at + 1]]));
    let u32_at = |at: usize| u64::from(u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes")));
    match n {
        4.. => u32_at(0) | u32_at(n - 4) << 32,
        2.. => u16_at(0) | u16_at(n - 2) << 16,
        _ => rest.first().map_or(0, |byte| u64::from(*byte)),
    }
}

impl Hasher for LabelHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("chunks of 8")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            self.add(tail_word(rest));
        }
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        let mut hash = self.0;
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        hash ^ (hash >> 33)
    }
}

#[derive(Debug, Clone)]
pub struct Feature {
    pub name: Vec<u8>,
    pub column: usize,
    pub rule: Rule,
    /// The feature's declared null texts, or None for the standard rule
    /// (whose missing values Python converts).
    pub nulls: Option<Nulls>,
}

/// What orders rows: nothing, a feature's checked number, or a column's text.
#[derive(Debug, Clone, Copy)]
pub enum Key {
    None,
    Feature(usize),
    Text(usize),
}

impl Key {
    /// The position of the feature whose value keys a row, if one does:
    /// the kernels keep that value alone of a row's.
    pub fn feature(self) -> Option<usize> {
        match self {
            Key::Feature(position) => Some(position),
            Key::None | Key::Text(_) => None,
        }
    }
}

/// A compiled plan: the features in the order their entries are written.
#[derive(Debug, Clone)]
pub struct Plan {
    pub width: usize,
    pub features: Vec<Feature>,
    pub key: Key,
}

/// One checked value, as the Python path holds it (text borrowed from the run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Int(i64),
    Float(f64),
    Bytes(&'a [u8]),
}

/// What a row holds for a feature whose value is missing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Absent {
    /// Left out of the Example (optional, no default).
    Omit,
    /// Python decides (a required feature's dead letter, a text default).
    Decline,
    /// The default's checked value (a number or a vocabulary id).
    Default(Value<'static>),
}

/// A feature's `null_values` as the kernel applies them.
#[derive(Debug, Clone)]
pub struct Nulls {
    pub texts: HashSet<Vec<u8>>,
    /// Blank text is missing too (a number feature listing `""`).
    pub blank: bool,
    pub absent: Absent,
}
/// The value `rule` stores for `field`, or None when the fast path would
/// not take it as it stands.
#[inline(always)]
pub fn check<'a>(rule: &Rule, field: &'a [u8]) -> Option<Value<'a>> {
    match rule {
        // (the number tested as read: not wrapped, and its rule matched
        // again, by `checked_number`, which cost a call per field)
        Rule::Int { lo, hi, allowed } => {
            let number = parse_int(field)?;
            int_taken(*lo, *hi, allowed.as_ref(), number).then_some(Value::Int(number))
        }
        Rule::Float { lo, hi, allowed } => {
            let number = parse_float(field)?;
            float_taken(*lo, *hi, allowed.as_deref(), number).then_some(Value::Float(number))
        }
        Rule::Text { limit, allowed } => {
            let fits = !field.is_empty() && (field.len() as u64) <= *limit;
            (fits && allowed.as_ref().is_none_or(|set| set.contains(field))).then_some(Value::Bytes(field))
        }
        Rule::Label { ids } => ids.get(field).map(|id| Value::Int(*id)),
        Rule::Timestamp(rule) => rule.check(field).map(Value::Int),
    }
}

/// `value` when a number `rule` (Int or Float, of the same kind) takes it
/// as it stands: inside lo..hi and in `allowed`; shared by the CSV and the
/// Arrow kernels (`arrow.rs`), whose numbers come parsed or typed.
#[inline(always)]
pub(crate) fn checked_number<'a>(rule: &Rule, value: Value<'a>) -> Option<Value<'a>> {
    match (rule, value) {
        (Rule::Int { lo, hi, allowed }, Value::Int(number)) => {
            int_taken(*lo, *hi, allowed.as_ref(), number).then_some(value)
        }
        (Rule::Float { lo, hi, allowed }, Value::Float(number)) => {
            float_taken(*lo, *hi, allowed.as_deref(), number).then_some(value)
        }
        _ => None,
    }
}

/// An int rule takes `number`: inside lo..hi and in `allowed`.
#[inline(always)]
fn int_taken(lo: i64, hi: i64, allowed: Option<&HashSet<i64>>, number: i64) -> bool {
    lo <= number && number <= hi && allowed.is_none_or(|set| set.contains(&number))
}

/// A float rule takes `number`: inside lo..hi (NaN fails both
/// comparisons; infinities are outside) and in `allowed`.
#[inline(always)]
fn float_taken(lo: f64, hi: f64, allowed: Option<&[f64]>, number: f64) -> bool {
    lo <= number && number <= hi && allowed.is_none_or(|values| values.contains(&number))
}

pub(crate) fn put_entry(out: &mut Vec<u8>, feature: &Feature, value: &Value) {
    match value {
        Value::Int(number) => wire::put_int64_entry(out, &feature.name, *number),
        Value::Float(number) => wire::put_float_entry(out, &feature.name, *number as f32),
        Value::Bytes(data) => wire::put_bytes_entry(out, &feature.name, data),
    }
}

/// Appends `keys.sortable_key` of a checked value.
pub(crate) fn put_value_key(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Int(number) => put_int_key(out, *number),
        Value::Float(number) => put_float_key(out, *number),
        Value::Bytes(data) => put_text_key(out, data),
    }
}

pub(crate) fn put_int_key(out: &mut Vec<u8>, number: i64) {
    let magnitude = number.unsigned_abs();
    let size = (64 - magnitude.leading_zeros() as usize).div_ceil(8);
    out.push(0x02);
    if number >= 0 {
        out.push(0x80 + size as u8);
        out.extend_from_slice(&magnitude.to_be_bytes()[8 - size..]);
    } else {
        // 256**size + number: the low `size` bytes of two's complement.
        out.push(0x7F - size as u8);
        out.extend_from_slice(&(number as u64).to_be_bytes()[8 - size..]);
    }
}

fn put_float_key(out: &mut Vec<u8>, number: f64) {
    // One NaN (sorting after +inf), and -0.0 == 0.0.
    let number = if number.is_nan() { f64::NAN } else if number == 0.0 { 0.0 } else { number };
    let bits = number.to_bits();
    let bits = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    out.push(0x03);
    out.extend_from_slice(&bits.to_be_bytes());
}

pub(crate) fn put_text_key(out: &mut Vec<u8>, text: &[u8]) {
    out.push(0x04);
    out.extend_from_slice(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn int_key(number: i64) -> Vec<u8> {
        let mut key = Vec::new();
        put_int_key(&mut key, number);
        key
    }

    #[test]
    fn int_keys_match_the_reference() {
        // sortable_key(n) in Python for a few n.
        assert_eq!(int_key(0), b"\x02\x80".to_vec());
        assert_eq!(int_key(255), b"\x02\x81\xff".to_vec());
        assert_eq!(int_key(-1), b"\x02\x7e\xff".to_vec());
        assert_eq!(int_key(-256), b"\x02\x7d\xff\x00".to_vec());
        assert_eq!(int_key(-257), b"\x02\x7d\xfe\xff".to_vec());
    }

    proptest! {
        #[test]
        fn labels_are_found_as_a_default_hash_map_finds_them(
                labels in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 0..40),
                others in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 0..20)) {
            let ids: LabelIds = labels.iter().cloned().zip(0..).collect();
            let plain: HashMap<Vec<u8>, i64> = labels.iter().cloned().zip(0..).collect();
            prop_assert_eq!(ids.len(), plain.len());
            for text in labels.iter().chain(&others) {
                prop_assert_eq!(ids.get(text), plain.get(text));
            }
        }

        #[test]
        fn a_tail_word_tells_every_byte_apart(tail in prop::collection::vec(any::<u8>(), 1..8),
                                              at in any::<prop::sample::Index>(), flip in 1u8..) {
            let mut changed = tail.clone();
            changed[at.index(tail.len())] ^= flip;
            prop_assert_eq!(tail_word(&tail), tail_word(&tail.clone()));
            prop_assert_ne!(tail_word(&tail), tail_word(&changed));
        }

        #[test]
        fn int_keys_sort_like_the_numbers(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(a.cmp(&b), int_key(a).cmp(&int_key(b)));
        }
    }
}
