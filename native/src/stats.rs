//! A batch's statistics partials in one pass each: what
//! `schemas/stats/numeric.py` (`python_parts`, the reference) gives for an
//! int64 or float64 array, number for number, and the theta sketch of a
//! batch's texts that `schemas/stats/distinct.py` would make with one
//! DataSketches update per text (`text_theta`), byte for byte.
//!
//! For floats the statistics describe the stored float32 values: each value
//! is rounded to float32, NaN and infinities are counted apart, -0.0 counts
//! as 0.0. Of the finite values: their count, min and max, the exact sum
//! and sum of squares as integer terms (value, power of two) that Python
//! adds up as its exact integers, the distinct histogram keys
//! (`histogram.ordered_keys` of each value as a double) with their counts,
//! and the theta sketch's candidates (`distinct.theta_candidates`) with the
//! hash DataSketches compares against its theta (`distinct.theta_hashes`).
//! Nothing is sized by anything but the input's length.

use crate::murmur::{fmix64, murmur3_x64_128};
use crate::radix::radix_sort;

/// The 2**53 below which every int converts to a double exactly
/// (`sums.EXACT_INT`): such ints are theta candidates once each.
const EXACT_INT: u64 = 1 << 53;

/// The partial of one batch of one numeric feature.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Numeric {
    pub nan: u64,
    pub inf: u64,
    /// The finite values' count.
    pub finite: u64,
    /// Their min and max (ints, or doubles of float32 values), None without one.
    pub low: Option<Value>,
    pub high: Option<Value>,
    /// sum = Σ value * 2**shift over (value, shift), exactly.
    pub sum: Vec<(i128, i32)>,
    pub squares: Vec<(u128, i32)>,
    /// Distinct `ordered_keys`, ascending, and how often each occurs.
    pub keys: Vec<u64>,
    pub counts: Vec<u64>,
    /// The theta sketch's candidates (int64 or float64 as their 8 bytes) and
    /// the hash of each.
    pub candidates: Vec<u64>,
    pub hashes: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
}

/// A value as a double (an int rounded to the nearest).
pub fn as_double(value: Value) -> f64 {
    match value {
        Value::Int(number) => number as f64,
        Value::Float(number) => number,
    }
}

/// `histogram.ordered_keys` of one double: keys order as the values do.
pub fn ordered_key(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 != 0 { !bits } else { bits | 1 << 63 }
}

pub fn unordered_key(key: u64) -> f64 {
    f64::from_bits(if key >> 63 != 0 { key ^ 1 << 63 } else { !key })
}

/// `distinct.theta_hashes` of one 8-byte word: MurmurHash3_x64_128 with
/// DataSketches' default seed (9001), its first half shifted right by one.
pub fn theta_hash(word: u64) -> u64 {
    const SEED: u64 = 9001;
    let k1 = word.wrapping_mul(0x87C3_7B91_1142_53D5).rotate_left(31).wrapping_mul(0x4CF5_AD43_2745_937F);
    let mut h1 = SEED ^ k1 ^ 8;
    let mut h2 = SEED ^ 8;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    fmix64(h1).wrapping_add(fmix64(h2)) >> 1
}

/// Adjacent equal items of a sorted run -> (distinct keys, counts): each
/// distinct item's `key` (keys ascend as the items do; distinct items of
/// one key, as big ints rounding to one double, are counted together).
/// Items compare as they are, so only a distinct one is converted.
pub fn run_lengths(sorted: &[u64], key: impl Fn(u64) -> u64) -> (Vec<u64>, Vec<u64>) {
    let (mut distinct, mut counts): (Vec<u64>, Vec<u64>) = (Vec::with_capacity(sorted.len()), Vec::with_capacity(sorted.len()));
    let mut start = 0;
    while start < sorted.len() {
        let item = sorted[start];
        let end = start + sorted[start..].iter().take_while(|other| **other == item).count();
        let (mapped, count) = (key(item), (end - start) as u64);
        match distinct.last() {
            Some(last) if *last == mapped => *counts.last_mut().expect("a count per key") += count,
            _ => {
                distinct.push(mapped);
                counts.push(count);
            }
        }
        start = end;
    }
    (distinct, counts)
}

fn with_hashes(mut partial: Numeric, candidates: Vec<u64>) -> Numeric {
    partial.hashes = candidates.iter().map(|word| theta_hash(*word)).collect();
    partial.candidates = candidates;
    partial
}

/// Where a batch's theta candidates (`distinct.theta_candidates`) come
/// from: the value of each distinct key (floats, and ints within 2**53 in
/// magnitude), or every int as it came (others: a repeat costs a hash).
#[derive(Debug, Clone, PartialEq)]
pub enum Candidates {
    OfKeys { is_int: bool },
    Every(Vec<u64>),
}

impl Candidates {
    /// The candidate (an int64's or a double's 8 bytes) of a distinct key.
    pub fn of_key(key: u64, is_int: bool) -> u64 {
        let value = unordered_key(key);
        if is_int { value as i64 as u64 } else { value.to_bits() }
    }

    /// Every candidate, given the batch's distinct keys.
    pub fn words(&self, keys: &[u64]) -> Vec<u64> {
        match self {
            Candidates::OfKeys { is_int } => keys.iter().map(|key| Self::of_key(*key, *is_int)).collect(),
            Candidates::Every(values) => values.clone(),
        }
    }
}

/// The whole partial (candidates and hashes too) of a batch's runs.
fn hashed((partial, candidates): (Numeric, Candidates)) -> Numeric {
    let words = candidates.words(&partial.keys);
    with_hashes(partial, words)
}

/// `int_runs` with the candidates and their hashes.
pub fn int_partial(values: impl Iterator<Item = i64> + Clone) -> Numeric {
    hashed(int_runs(values))
}

/// `float_runs` with the candidates and their hashes.
pub fn float_partial(values: impl Iterator<Item = f64>) -> Numeric {
    hashed(float_runs(values))
}

/// The count, min, max and exact sums of int64 values (`finite`, `low`,
/// `high`, `sum`, `squares`), each value handed to `each` as it comes
/// (one pass); with the min and max.
pub fn int_sums(values: impl Iterator<Item = i64>, mut each: impl FnMut(i64)) -> (Numeric, i64, i64) {
    let mut partial = Numeric::default();
    let (mut low, mut high) = (i64::MAX, i64::MIN);
    let mut sum: i128 = 0;
    let (mut squares, mut carries): (u128, u128) = (0, 0);
    for value in values {
        low = low.min(value);
        high = high.max(value);
        sum += i128::from(value); // |sum| < 2**63 * 2**64: no overflow from a slice
        let (added, carried) = squares.overflowing_add(value.unsigned_abs() as u128 * value.unsigned_abs() as u128);
        squares = added;
        carries += u128::from(carried);
        partial.finite += 1;
        each(value);
    }
    if partial.finite > 0 {
        partial.low = Some(Value::Int(low));
        partial.high = Some(Value::Int(high));
        partial.sum = vec![(sum, 0)];
        partial.squares = vec![(squares, 0), (carries, 128)];
    }
    (partial, low, high)
}

/// The partial of int64 values but its candidates and hashes, and where
/// the candidates come from (one pass over the values, and a second over
/// ints beyond 2**53, which are theta candidates as they come).
pub fn int_runs(values: impl Iterator<Item = i64> + Clone) -> (Numeric, Candidates) {
    // Each int with its sign bit flipped: unsigned order is the ints' order.
    let mut sorted = Vec::with_capacity(values.size_hint().0);
    let (mut partial, low, high) = int_sums(values.clone(), |value| sorted.push(value as u64 ^ 1 << 63));
    if sorted.is_empty() {
        return (partial, Candidates::OfKeys { is_int: true });
    }
    // Ints below 2**31 sort as their 32 bits (the low half, its sign bit flipped).
    let narrow = low >= i64::from(i32::MIN) && high <= i64::from(i32::MAX);
    if narrow {
        sorted.iter_mut().for_each(|key| *key = u64::from(*key as u32 ^ 1 << 31));
    }
    radix_sort(&mut sorted, if narrow { 32 } else { 64 });
    let as_int = |key: u64| if narrow { (key as u32 ^ 1 << 31) as i32 as i64 } else { (key ^ 1 << 63) as i64 };
    // Ints convert to doubles in order (big ones rounding together).
    let (keys, counts) = run_lengths(&sorted, |key| ordered_key(as_int(key) as f64));
    let candidates = if low.unsigned_abs().max(high.unsigned_abs()) <= EXACT_INT {
        Candidates::OfKeys { is_int: true }
    } else {
        Candidates::Every(values.map(|value| value as u64).collect())
    };
    partial.keys = keys;
    partial.counts = counts;
    (partial, candidates)
}

/// The double of a float32 ordered key (`float_sums`).
pub fn key_double(key: u32) -> f64 {
    f64::from(f32::from_bits(if key >> 31 != 0 { key ^ 1 << 31 } else { !key }))
}

/// NaN, infinity and finite counts, min, max and exact sums of float64
/// values as their float32 roundings (-0.0 as 0.0), each finite one handed
/// to `each` as it comes (one pass) as its float32 ordered key (the same
/// order as the doubles').
pub fn float_sums(values: impl Iterator<Item = f64>, mut each: impl FnMut(u32)) -> Numeric {
    let mut partial = Numeric::default();
    // Per float32 exponent field (0 for subnormals, which scale as 1):
    // Σ ±mantissa and Σ mantissa², exact in 128 bits for any slice.
    let mut sums = [0i128; 255];
    let mut squares = [0u128; 255];
    let (mut low, mut high) = (u32::MAX, 0);
    for value in values {
        let single = value as f32 + 0.0; // + 0.0: -0.0 counts as 0.0
        if single.is_nan() {
            partial.nan += 1;
            continue;
        }
        if single.is_infinite() {
            partial.inf += 1;
            continue;
        }
        let bits = single.to_bits();
        let field = ((bits >> 23) & 0xFF) as usize;
        let mantissa = i128::from(bits & 0x7F_FFFF | if field > 0 { 1 << 23 } else { 0 });
        sums[field] += if bits >> 31 != 0 { -mantissa } else { mantissa };
        squares[field] += (mantissa * mantissa) as u128;
        let key = if bits >> 31 != 0 { !bits } else { bits | 1 << 31 };
        low = low.min(key);
        high = high.max(key);
        partial.finite += 1;
        each(key);
    }
    if partial.finite > 0 {
        let scale = |field: usize| field.max(1) as i32 - 150; // mantissa * 2**scale
        partial.sum = (0..255).filter(|f| sums[*f] != 0).map(|f| (sums[f], scale(f))).collect();
        partial.squares = (0..255).filter(|f| squares[*f] != 0).map(|f| (squares[f], 2 * scale(f))).collect();
        partial.low = Some(Value::Float(key_double(low)));
        partial.high = Some(Value::Float(key_double(high)));
    }
    partial
}

/// The partial of float64 values, as their float32 roundings, but its
/// candidates (each distinct key's value) and hashes.
pub fn float_runs(values: impl Iterator<Item = f64>) -> (Numeric, Candidates) {
    let mut sorted = Vec::with_capacity(values.size_hint().0);
    let mut partial = float_sums(values, |key| sorted.push(u64::from(key)));
    if sorted.is_empty() {
        return (partial, Candidates::OfKeys { is_int: false });
    }
    radix_sort(&mut sorted, 32);
    let (keys, counts) = run_lengths(&sorted, |key| ordered_key(key_double(key as u32)));
    partial.keys = keys;
    partial.counts = counts;
    (partial, Candidates::OfKeys { is_int: false })
}

/// DataSketches' default update seed, which every sketch here uses.
pub const THETA_SEED: u64 = 9001;

/// The 16-bit hash of the seed a serialized sketch carries.
fn seed_hash() -> u16 {
    murmur3_x64_128(&THETA_SEED.to_le_bytes(), 0).0 as u16
}

/// A theta sketch of `texts`, serialized as DataSketches serializes the
/// compact (canonical) form of an update sketch with 2**lg_k nominal
/// entries that was given each text (`distinct.compact_theta` of
/// `distinct.add_texts`): the 2**lg_k smallest distinct hashes, ascending,
/// and theta the next one (estimation mode) or the largest (exact); empty
/// texts are skipped, as DataSketches skips them, and so is a hash of 0.
/// Layout (serial version 3, family 3 = compact, little-endian): preamble
/// longs (1 when empty or one entry, 2 exact, 3 estimating), 3, 3, two
/// unused bytes, flags (read-only, compact, ordered; empty), the seed
/// hash; then with 2+ preamble longs the entry count (u32) and 4 unused
/// bytes, with 3 theta (u64); then the entries.
pub fn text_theta<'a>(texts: impl Iterator<Item = &'a [u8]>, lg_k: u32) -> Vec<u8> {
    compact_theta(texts.filter_map(text_hash).collect(), lg_k)
}

/// The hash a theta sketch keeps for a text (MurmurHash3 of its bytes,
/// the first half shifted right by one), None for what DataSketches
/// skips: the empty text, and a hash of 0.
pub fn text_hash(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    Some(murmur3_x64_128(text, THETA_SEED).0 >> 1).filter(|hash| *hash != 0)
}

/// Leaves in `hashes` its `count` smallest distinct values (all of them if
/// fewer), ascending. Past `count`, only those are sorted: a partition
/// around the count-th smallest puts them first in linear time, and while
/// they hold no repeat (hashes of distinct values almost never do) they
/// are the answer; else every hash is sorted.
pub fn smallest_distinct(hashes: &mut Vec<u64>, count: usize) {
    if count > 0 && hashes.len() > count {
        hashes.select_nth_unstable(count - 1);
        let head = &mut hashes[..count];
        head.sort_unstable();
        if head.windows(2).all(|pair| pair[0] != pair[1]) {
            hashes.truncate(count);
            return;
        }
    }
    radix_sort(hashes, 63);
    hashes.dedup();
    hashes.truncate(count);
}

/// The serialized compact theta sketch (as `text_theta` lays it out) of
/// values with the theta hashes `hashes` (repeats allowed).
pub fn compact_theta(mut hashes: Vec<u64>, lg_k: u32) -> Vec<u8> {
    let nominal = 1usize << lg_k.min(26); // (lib.rs takes 5..=26 only, as DataSketches)
    smallest_distinct(&mut hashes, nominal + 1);
    let theta = if hashes.len() > nominal { hashes[nominal] } else { i64::MAX as u64 };
    hashes.truncate(nominal);
    let preamble: u8 = if theta != i64::MAX as u64 { 3 } else if hashes.len() <= 1 { 1 } else { 2 };
    let (read_only, empty, compact, ordered) = (1u8 << 1, 1u8 << 2, 1u8 << 3, 1u8 << 4);
    let flags = read_only | compact | ordered | if hashes.is_empty() { empty } else { 0 };
    let mut out = Vec::with_capacity(8 * (usize::from(preamble) + hashes.len()));
    out.extend_from_slice(&[preamble, 3, 3, 0, 0, flags]);
    out.extend_from_slice(&seed_hash().to_le_bytes());
    if preamble >= 2 {
        out.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
    }
    if preamble == 3 {
        out.extend_from_slice(&theta.to_le_bytes());
    }
    for hash in &hashes {
        out.extend_from_slice(&hash.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(terms: &[(i128, i32)]) -> f64 {
        terms.iter().map(|(value, shift)| *value as f64 * 2f64.powi(*shift)).sum()
    }

    #[test]
    fn theta_hash_matches_datasketches() {
        // theta_hashes(np.array([0, 1, -1])) in Python, which
        // tests/schemas/test_stats_distinct.py holds to the sketches' own.
        assert_eq!(theta_hash(0), 0x2044_80c8_ee61_6be5);
        assert_eq!(theta_hash(1), 0x05a1_86bd_cb7d_f915);
        assert_eq!(theta_hash(-1i64 as u64), 0x0e7b_cfc6_0df3_b26c);
        assert_eq!(theta_hash(1.5f64.to_bits()), 0x0f79_638e_3615_4111);
    }

    #[test]
    fn floats_round_to_float32_and_count_nan_and_inf() {
        let partial = float_partial([f64::NAN, f64::INFINITY, -1e300, 3.5e38, -0.0, 0.0, 1.5].into_iter());
        assert_eq!((partial.nan, partial.inf, partial.finite), (1, 3, 3));
        assert_eq!(partial.low, Some(Value::Float(0.0)));
        assert_eq!(partial.high, Some(Value::Float(1.5)));
        assert_eq!(partial.counts, vec![2, 1]);
        assert_eq!(exact(&partial.sum), 1.5);
    }

    #[test]
    fn empty_and_all_missing_give_no_values() {
        assert_eq!(int_partial([].into_iter()), Numeric::default());
        let partial = float_partial([f64::NAN, f64::NEG_INFINITY].into_iter());
        assert_eq!((partial.nan, partial.inf, partial.finite, partial.low), (1, 1, 0, None));
    }

    #[test]
    fn int_squares_carry_past_128_bits() {
        let partial = int_partial([i64::MIN; 5].into_iter());
        // 5 * 2**126 = 2**128 + 2**126
        assert_eq!(partial.squares, vec![(1 << 126, 0), (1, 128)]);
        assert_eq!(partial.candidates, vec![i64::MIN as u64; 5]);
    }


    #[test]
    fn the_seed_hash_is_datasketches_one() {
        assert_eq!(seed_hash(), 0x93CC);
    }

    #[test]
    fn text_sketches_match_datasketches_bytes() {
        // compact_theta(add_texts(None, items)).serialize() in Python.
        assert_eq!(text_theta([&b""[..]].into_iter(), 12), vec![1, 3, 3, 0, 0, 0x1E, 0xCC, 0x93]);
        let three = text_theta([&b"t0"[..], b"t1", b"t2", b"t1"].into_iter(), 12);
        assert_eq!(&three[..16], &[2, 3, 3, 0, 0, 0x1A, 0xCC, 0x93, 3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(three.len(), 40);
    }

    proptest! {
        #[test]
        fn text_theta_never_panics(texts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..300),
                                   lg_k in 0u32..6) {
            let sketch = text_theta(texts.iter().map(|text| text.as_slice()), lg_k);
            prop_assert!(sketch.len() >= 8 && sketch.len() % 8 == 0);
        }

        #[test]
        fn smallest_distinct_keeps_the_smallest(mut hashes in prop::collection::vec(0u64..600, 0..700),
                                               count in 0usize..300) {
            let mut expected = hashes.clone();
            expected.sort_unstable();
            expected.dedup();
            expected.truncate(count);
            smallest_distinct(&mut hashes, count);
            prop_assert_eq!(hashes, expected);
        }

        #[test]
        fn int_keys_count_every_value(values in prop::collection::vec(any::<i64>(), 0..500)) {
            let partial = int_partial(values.iter().copied());
            prop_assert_eq!(partial.counts.iter().sum::<u64>(), values.len() as u64);
            prop_assert!(partial.keys.windows(2).all(|pair| pair[0] < pair[1]));
            prop_assert_eq!(partial.candidates.len(), partial.hashes.len());
        }

        #[test]
        fn float_partials_never_panic(bits in prop::collection::vec(any::<u64>(), 0..500)) {
            let values: Vec<f64> = bits.iter().map(|b| f64::from_bits(*b)).collect();
            let partial = float_partial(values.iter().copied());
            prop_assert_eq!(partial.nan + partial.inf + partial.finite, values.len() as u64);
            prop_assert_eq!(partial.counts.iter().sum::<u64>(), partial.finite);
            prop_assert!(partial.keys.windows(2).all(|pair| pair[0] < pair[1]));
        }
    }
}
