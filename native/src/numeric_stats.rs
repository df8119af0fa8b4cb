//! A numeric feature's statistics updated by one batch in one call: the
//! batch's partial (`stats::int_partial` / `float_partial`) folded into
//! what `FeatureStatistics` holds for the feature, as
//! `schemas/stats/numeric.py` (`python_update`, the reference) does it
//! with numpy: the value histogram merged (`ValueHistogram.of_counts`) and
//! the theta hashes screened as `distinct.HashedTheta.add` screens them.
//!
//! So only the merged histogram (at most `HISTOGRAM_BUCKETS` buckets) and
//! the hashes the sketch keeps go back to Python, not four arrays of the
//! batch's length for numpy to coarsen, merge and screen again. Every
//! allocation is sized by the lengths given.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::stats::{self, Candidates, Numeric};

/// At most this many buckets are filled (`histogram.HISTOGRAM_BUCKETS`).
pub const HISTOGRAM_BUCKETS: usize = 2048;

/// A `ValueHistogram`'s buckets: `ordered_keys` shifted right by `shift`,
/// distinct and ascending, and how many values each holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Buckets {
    pub shift: u32,
    pub keys: Vec<u64>,
    pub counts: Vec<u64>,
}

/// `histogram._coarsened`: sorted keys shifted right by `by` bits (< 64),
/// equal keys' counts added (wrapping as numpy's int64 sums do).
fn coarsened(keys: &[u64], counts: &[u64], by: u32) -> (Vec<u64>, Vec<u64>) {
    let (mut distinct, mut added) = (Vec::with_capacity(keys.len()), Vec::with_capacity(keys.len()));
    for (key, count) in keys.iter().zip(counts) {
        let key = key >> by;
        match distinct.last() {
            Some(last) if *last == key => {
                let total: &mut u64 = added.last_mut().expect("a count per key");
                *total = total.wrapping_add(*count);
            }
            _ => {
                distinct.push(key);
                added.push(*count);
            }
        }
    }
    (distinct, added)
}

/// `histogram._occupied`: the buckets sorted keys (at least one) fill
/// once shifted right by `by` bits.
fn occupied(keys: &[u64], by: u32) -> usize {
    1 + keys.windows(2).filter(|pair| pair[0] >> by != pair[1] >> by).count()
}

/// `ValueHistogram._fitted`: the finest further shift (a binary search, as
/// the result is the one smallest that fills few enough buckets) at which
/// the keys fill at most `HISTOGRAM_BUCKETS` buckets.
fn fitted(shift: u32, keys: Vec<u64>, counts: Vec<u64>) -> Buckets {
    if keys.len() <= HISTOGRAM_BUCKETS {
        return Buckets { shift, keys, counts };
    }
    let (mut fine, mut coarse) = (0, 63 - shift.min(63));
    while fine < coarse {
        let middle = (fine + coarse) / 2;
        if occupied(&keys, middle) <= HISTOGRAM_BUCKETS {
            coarse = middle;
        } else {
            fine = middle + 1;
        }
    }
    let (keys, counts) = coarsened(&keys, &counts, fine);
    Buckets { shift: shift + fine, keys, counts }
}

/// Two runs of ascending distinct keys as one, equal keys' counts added.
fn merged_runs(a: (&[u64], &[u64]), b: (&[u64], &[u64])) -> (Vec<u64>, Vec<u64>) {
    let total = a.0.len() + b.0.len();
    let (mut keys, mut counts) = (Vec::with_capacity(total), Vec::with_capacity(total));
    let (mut i, mut j) = (0, 0);
    while i < a.0.len() && j < b.0.len() {
        let (left, right) = (a.0[i], b.0[j]);
        if left < right {
            keys.push(left);
            counts.push(a.1[i]);
            i += 1;
        } else if right < left {
            keys.push(right);
            counts.push(b.1[j]);
            j += 1;
        } else {
            keys.push(left);
            counts.push(a.1[i].wrapping_add(b.1[j]));
            i += 1;
            j += 1;
        }
    }
    keys.extend_from_slice(&a.0[i..]);
    counts.extend_from_slice(&a.1[i..]);
    keys.extend_from_slice(&b.0[j..]);
    counts.extend_from_slice(&b.1[j..]);
    (keys, counts)
}

/// `ValueHistogram.of_counts(keys, counts, held)`: a batch's distinct keys
/// (ascending, at least one) with their counts, alone or merged into the
/// buckets held (whose shift, at most 63, the union needs at least): the
/// batch's keys coarsened to that shift first, as Python's are.
pub fn merged_buckets(held: Option<&Buckets>, keys: &[u64], counts: &[u64]) -> Buckets {
    let Some(held) = held else { return fitted(0, keys.to_vec(), counts.to_vec()) };
    let (batch_keys, batch_counts) = coarsened(keys, counts, held.shift.min(63));
    held_with(held, &batch_keys, &batch_counts)
}

/// The buckets held merged with a batch's buckets at their shift
/// (distinct, ascending), fitted again.
fn held_with(held: &Buckets, batch_keys: &[u64], batch_counts: &[u64]) -> Buckets {
    // (held keys that are not distinct and ascending, which `ValueHistogram`
    // never holds, give a histogram as wrong as they are, never a panic)
    let (keys, counts) = merged_runs((&held.keys, &held.counts), (batch_keys, batch_counts));
    fitted(held.shift.min(63), keys, counts)
}

/// The largest theta (DataSketches' MAX_THETA): a sketch in exact mode.
const THETA_MAX: u64 = i64::MAX as u64;

/// Whether `screened_update` gives a batch's `update` (its precondition):
/// a histogram held at a shift over 0 (its buckets are coarser than the
/// values) and a sketch past its nominal entries (a theta that screens
/// most hashes out), as every batch of a wide column has after its first.
pub fn screens(held: &Buckets, theta: u64) -> bool {
    held.shift > 0 && theta < THETA_MAX
}

/// `update` of a batch of little-endian int64 or float64 `words` where
/// `screens` holds, without sorting the values: in the one pass that
/// counts and sums them, each value's bucket at the held shift is taken
/// (the batch's buckets, then counted, are what `merged_buckets` merges:
/// `coarsened` of its distinct keys) and each value's theta hash screened.
/// A value's theta candidate is the value (an int as it is, within 2**53
/// or beyond; a float as the double of its float32), so the hashes of
/// every value, repeats cut by `smallest_distinct`, are those of the
/// distinct candidates. The partial's keys and counts are left empty
/// (Python takes the merged buckets only).
pub fn screened_update(words: impl Iterator<Item = u64>, is_int: bool, held: &Buckets, theta: u64,
                       most: usize) -> Update {
    let shift = held.shift.min(63);
    let mut buckets = Vec::with_capacity(words.size_hint().0);
    let (mut first, mut last) = (u64::MAX, 0);
    let mut hashes = Vec::new();
    let mut take = |double: f64, candidate: u64| {
        let bucket = stats::ordered_key(double) >> shift;
        first = first.min(bucket);
        last = last.max(bucket);
        buckets.push(bucket);
        let hash = stats::theta_hash(candidate);
        if hash < theta && hash != 0 {
            hashes.push(hash);
        }
    };
    let mut partial = if is_int {
        stats::int_sums(words.map(|word| word as i64), |value| take(value as f64, value as u64)).0
    } else {
        stats::float_sums(words.map(f64::from_bits), |key| {
            let double = stats::key_double(key);
            take(double, double.to_bits())
        })
    };
    let (Some(low), Some(high)) = (partial.low, partial.high) else {
        return Update { partial, range: None, buckets: None };
    };
    let (batch_keys, batch_counts) = counted(buckets, first, last, 64 - shift);
    stats::smallest_distinct(&mut hashes, most);
    partial.hashes = hashes;
    Update { partial, range: Some((stats::as_double(low), stats::as_double(high))),
             buckets: Some(held_with(held, &batch_keys, &batch_counts)) }
}

/// Buckets (from `first` to `last`, each below 2**bits) -> (distinct
/// ones ascending, how often each occurs): counted in an array where they
/// span no more than about twice their number (a batch's buckets at a
/// coarse shift mostly do), else sorted.
fn counted(mut buckets: Vec<u64>, first: u64, last: u64, bits: u32) -> (Vec<u64>, Vec<u64>) {
    let span = last.wrapping_sub(first);
    if first <= last && span < 2 * buckets.len() as u64 + 4096 {
        let mut counts = vec![0u64; span as usize + 1];
        for bucket in &buckets {
            counts[(bucket - first) as usize] += 1; // (first <= bucket <= last)
        }
        let keys = (first..=last).zip(&counts).filter(|(_, count)| **count > 0).map(|(key, _)| key).collect();
        counts.retain(|count| *count > 0);
        return (keys, counts);
    }
    crate::radix::radix_sort(&mut buckets, bits);
    stats::run_lengths(&buckets, |bucket| bucket)
}

/// One batch folded into a feature's statistics: its partial with the
/// histogram's range (the batch's values as doubles), the merged buckets
/// (None without a finite value: the held ones stand) and, in `partial.
/// hashes`, the theta hashes of its candidates that `HashedTheta.add`
/// keeps (below `theta`, not 0), each hashed and screened in one pass,
/// then cut to the `most` smallest distinct ones, ascending.
///
/// `most` is one more than the sketch's nominal entries: the sketch ends
/// as the nominal smallest distinct hashes of all its values, theta the
/// next, and a hash past the batch's `most` smallest has that many
/// smaller ones beside it, so it is never one of them (nor theta). Sent
/// back ascending, they merge into the sketch's held hashes without a sort.
pub struct Update {
    pub partial: Numeric,
    pub range: Option<(f64, f64)>,
    pub buckets: Option<Buckets>,
}

pub fn update((mut partial, candidates): (Numeric, Candidates), held: Option<&Buckets>, theta: u64,
              most: usize) -> Update {
    if partial.keys.is_empty() {
        return Update { partial, range: None, buckets: None };
    }
    let range = (stats::unordered_key(partial.keys[0]), stats::unordered_key(partial.keys[partial.keys.len() - 1]));
    let buckets = merged_buckets(held, &partial.keys, &partial.counts);
    let kept = |hash: &u64| *hash < theta && *hash != 0;
    let mut hashes: Vec<u64> = match &candidates {
        Candidates::OfKeys { is_int } => partial.keys.iter()
            .map(|key| stats::theta_hash(Candidates::of_key(*key, *is_int))).filter(kept).collect(),
        Candidates::Every(values) => values.iter().map(|word| stats::theta_hash(*word)).filter(kept).collect(),
    };
    stats::smallest_distinct(&mut hashes, most);
    partial.hashes = hashes;
    Update { partial, range: Some(range), buckets: Some(buckets) }
}

/// Little-endian 8-byte words of a buffer; a length not a multiple of 8 is a ValueError.
fn words(bytes: &[u8]) -> PyResult<Vec<u64>> {
    crate::packed::words(bytes, "a packed column's").map_err(PyValueError::new_err)
}

type UpdateTuple = (u64, u64, u64, PyObject, PyObject, Vec<(i128, i32)>, Vec<(u128, i32)>,
                    Option<(f64, f64)>, Option<(u32, Py<PyBytes>, Py<PyBytes>)>, Py<PyBytes>);

/// `numeric_update(values, is_int, held, theta, most) -> (nan, inf, finite,
/// low, high, sum, squares, range, buckets, hashes)`: `update` of the partial of
/// a buffer of little-endian int64 or float64 values, as
/// `schemas/stats/numeric.py` reads it: held None or (shift, keys, counts)
/// of the histogram held (packed words, keys ascending); low and high int,
/// float or None; sum and squares [(value, shift)] terms; range None or the
/// batch's (min, max) as doubles; buckets None or the merged (shift, keys,
/// counts); hashes packed words, ascending. A buffer whose length is not a multiple
/// of 8, keys and counts of different lengths, or a shift over 63 is a
/// ValueError.
#[pyfunction]
#[pyo3(name = "numeric_update", signature = (values, is_int, held, theta, most))]
pub fn numeric_update_py(py: Python<'_>, values: PyBuffer<u8>, is_int: bool,
                         held: Option<(u32, PyBuffer<u8>, PyBuffer<u8>)>, theta: u64,
                         most: usize) -> PyResult<UpdateTuple> {
    let held = match held {
        None => None,
        Some((shift, keys, counts)) => {
            let keys = crate::with_bytes(py, &keys, words)??;
            let counts = crate::with_bytes(py, &counts, words)??;
            if shift > 63 || keys.len() != counts.len() {
                return Err(PyValueError::new_err("a held histogram's shift is over 63 or its keys and counts differ in number"));
            }
            Some(Buckets { shift, keys, counts })
        }
    };
    let done = crate::with_bytes(py, &values, |bytes| {
        if bytes.len() % 8 != 0 {
            return Err(PyValueError::new_err("a packed column's length is not a multiple of 8"));
        }
        let values = crate::packed::iter_words(bytes);
        crate::guarded(|| {
            if let Some(held) = held.as_ref().filter(|held| screens(held, theta)) {
                return screened_update(values, is_int, held, theta, most);
            }
            let runs = if is_int {
                stats::int_runs(values.map(|word| word as i64))
            } else {
                stats::float_runs(values.map(f64::from_bits))
            };
            update(runs, held.as_ref(), theta, most)
        })
    })??;
    let bound = |value: Option<stats::Value>| -> PyResult<PyObject> {
        Ok(match value {
            None => py.None(),
            Some(stats::Value::Int(number)) => number.into_pyobject(py)?.into_any().unbind(),
            Some(stats::Value::Float(number)) => number.into_pyobject(py)?.into_any().unbind(),
        })
    };
    let partial = &done.partial;
    let buckets = match &done.buckets {
        None => None,
        Some(buckets) => Some((buckets.shift, crate::packed_words(py, &buckets.keys)?,
                               crate::packed_words(py, &buckets.counts)?)),
    };
    Ok((partial.nan, partial.inf, partial.finite, bound(partial.low)?, bound(partial.high)?,
        partial.sum.clone(), partial.squares.clone(), done.range, buckets,
        crate::packed_words(py, &partial.hashes)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The histogram of keys with counts as the definition says: the finest
    /// shift from `least` at which at most HISTOGRAM_BUCKETS are filled.
    fn reference(pairs: &[(u64, u64)], least: u32) -> Buckets {
        let mut sorted = pairs.to_vec();
        sorted.sort_unstable();
        for shift in least..64 {
            let (keys, counts) = coarsened(&sorted.iter().map(|p| p.0).collect::<Vec<_>>(),
                                           &sorted.iter().map(|p| p.1).collect::<Vec<_>>(), shift);
            if keys.len() <= HISTOGRAM_BUCKETS {
                return Buckets { shift, keys, counts };
            }
        }
        unreachable!("at shift 63 at most two buckets are filled")
    }

    fn distinct_run(mut keys: Vec<u64>) -> (Vec<u64>, Vec<u64>) {
        keys.sort_unstable();
        let counts: Vec<u64> = keys.iter().map(|key| key % 5 + 1).collect();
        let (keys, counts) = coarsened(&keys, &counts, 0);
        (keys, counts)
    }

    #[test]
    fn a_batch_alone_is_fitted_from_shift_zero() {
        let keys: Vec<u64> = (0..5000u64).map(|key| key * 3 + (1 << 63)).collect();
        let counts = vec![1; keys.len()];
        let buckets = merged_buckets(None, &keys, &counts);
        assert_eq!(buckets, reference(&keys.iter().map(|key| (*key, 1)).collect::<Vec<_>>(), 0));
        assert!(buckets.shift > 0 && buckets.keys.len() <= HISTOGRAM_BUCKETS);
    }

    #[test]
    fn screening_keeps_hashes_below_theta_and_not_zero() {
        let words = [0u64, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let hashes: Vec<u64> = words.iter().map(|word| stats::theta_hash(*word)).collect();
        let mut sorted = hashes.clone();
        sorted.sort_unstable();
        let theta = sorted[6];
        let partial = Numeric { keys: vec![5], counts: vec![1], ..Numeric::default() };
        let done = update((partial.clone(), Candidates::Every(words.to_vec())), None, theta, 100);
        let mut kept: Vec<u64> = hashes.into_iter().filter(|hash| *hash < theta).collect();
        kept.sort_unstable();
        assert_eq!(kept, sorted[..6]);
        assert_eq!(done.partial.hashes, kept);
        assert_eq!(done.buckets.map(|b| b.keys), Some(vec![5]));
        let fewest = update((partial, Candidates::Every(words.to_vec())), None, theta, 2);
        assert_eq!(fewest.partial.hashes, kept[..2]);
    }

    /// What Python takes of an `Update`: all but the partial's keys,
    /// counts and candidates.
    fn taken(done: Update) -> (Numeric, Option<(f64, f64)>, Option<Buckets>) {
        let partial = Numeric { keys: vec![], counts: vec![], candidates: vec![], ..done.partial };
        (partial, done.range, done.buckets)
    }

    proptest! {
        #[test]
        fn screening_unsorted_values_is_the_sorted_update(values in prop::collection::vec(any::<u64>(), 0..3000),
                                                          narrow in 0u32..64, is_int in any::<bool>(),
                                                          shift in 1u32..64, held in prop::collection::vec(any::<u64>(), 0..300),
                                                          theta in any::<u64>(), most in 0usize..5000) {
            // narrow: values sharing their top bits, as a column's do, and repeating
            let values: Vec<u64> = values.into_iter().map(|word| if is_int { ((word as i64) >> narrow) as u64 } else { word >> narrow | 0x3FF0 << 48 }).collect();
            let (keys, counts) = distinct_run(held.into_iter().map(|key| key >> shift).collect());
            let held = Buckets { shift, keys, counts };
            let theta = theta.min(THETA_MAX - 1); // (what `screens` asks)
            prop_assert!(screens(&held, theta));
            let runs = if is_int {
                stats::int_runs(values.iter().map(|word| *word as i64))
            } else {
                stats::float_runs(values.iter().map(|word| f64::from_bits(*word)))
            };
            let sorted = update(runs, Some(&held), theta, most);
            let screened = screened_update(values.iter().copied(), is_int, &held, theta, most);
            prop_assert_eq!(taken(screened), taken(sorted));
        }

        #[test]
        fn merging_gives_the_histogram_of_the_union(held in prop::collection::vec(any::<u64>(), 1..3000),
                                                    batch in prop::collection::vec(any::<u64>(), 1..3000),
                                                    narrow in 0u32..50) {
            // narrow: keys sharing their top bits, as a column's values do
            let squeeze = |keys: Vec<u64>| keys.into_iter().map(|key| (key >> narrow) | (1 << 63)).collect();
            let (held_keys, held_counts) = distinct_run(squeeze(held));
            let (batch_keys, batch_counts) = distinct_run(squeeze(batch));
            let first = merged_buckets(None, &held_keys, &held_counts);
            let pairs: Vec<(u64, u64)> = held_keys.iter().copied().zip(held_counts.iter().copied()).collect();
            prop_assert_eq!(&first, &reference(&pairs, 0));
            let merged = merged_buckets(Some(&first), &batch_keys, &batch_counts);
            let mut all = pairs.clone();
            all.extend(batch_keys.iter().copied().zip(batch_counts.iter().copied()));
            prop_assert_eq!(merged, reference(&all, first.shift));
        }

        #[test]
        fn hostile_held_buckets_never_panic(held in prop::collection::vec((any::<u64>(), any::<u64>()), 0..200),
                                            shift in 0u32..64, values in prop::collection::vec(any::<u64>(), 0..300),
                                            is_int in any::<bool>(), theta in any::<u64>(), most in 0usize..400) {
            // unsorted, repeated, wrapping counts: garbage in, no panic out
            let held = Buckets { shift, keys: held.iter().map(|p| p.0).collect(), counts: held.iter().map(|p| p.1).collect() };
            let runs = if is_int {
                stats::int_runs(values.iter().map(|word| *word as i64))
            } else {
                stats::float_runs(values.iter().map(|word| f64::from_bits(*word)))
            };
            let whole = stats::float_partial(values.iter().map(|word| f64::from_bits(*word)));
            let done = update(runs, Some(&held), theta, most);
            if !is_int {
                // the hashes kept are the `most` smallest distinct ones the
                // whole partial's candidates have below theta
                let mut screened: Vec<u64> = whole.hashes.into_iter().filter(|hash| *hash < theta && *hash != 0).collect();
                screened.sort_unstable();
                screened.dedup();
                screened.truncate(most);
                prop_assert_eq!(&done.partial.hashes, &screened);
            }
            prop_assert!(done.partial.hashes.len() <= most);
            prop_assert!(done.partial.hashes.windows(2).all(|pair| pair[0] < pair[1]));
            prop_assert!(done.partial.hashes.iter().all(|hash| *hash < theta && *hash != 0));
            if let Some(buckets) = done.buckets {
                prop_assert!(buckets.shift <= 63 && buckets.keys.len() == buckets.counts.len());
            }
        }
    }
}
