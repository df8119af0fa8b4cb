//! A batch's text partial in one pass: what `schemas/stats/text.py`
//! (`python_text_parts`, the reference) makes of a batch's values of a
//! string feature with a `collections.Counter`, `FrequentValues.of` and a
//! theta sketch, for values that are all kept whole (at most the bound of
//! `frequent.bounded_text` in UTF-8 bytes; the caller checks the bound).
//!
//! Values are counted exactly in a hash table keyed by the MurmurHash3 that
//! the theta sketch takes of each value anyway, so each value's bytes are
//! hashed once; the distinct values' hashes then make the sketch
//! (`stats::compact_theta`). The Misra-Gries purge of `FrequentValues.of`
//! runs on the counts, so only the values it keeps go back to Python, as
//! the index of their first occurrence. Every allocation is sized by the
//! number of values given.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::murmur::murmur3_x64_128;
use crate::stats::{compact_theta, THETA_SEED};
use crate::text_column;

/// One batch's text partial: `FrequentValues(counts, offset)` with counts
/// the kept values (index of the first occurrence, count), in order of
/// first occurrence, and the serialized compact theta sketch.
#[derive(Debug, Clone, PartialEq)]
pub struct TextPartial {
    pub kept: Vec<(usize, u64)>,
    pub offset: u64,
    pub theta: Vec<u8>,
}

/// A distinct value: where it first occurs, its hash, how often it occurs.
struct Distinct {
    first: usize,
    hash: u64,
    count: u64,
}

/// The distinct values of `texts` in order of first occurrence, counted.
fn count_distinct(texts: &[&[u8]]) -> Vec<Distinct> {
    // Open addressing, at most half full: slot -> 1 + index into `distinct`.
    let slots = (2 * texts.len()).next_power_of_two().max(2);
    let mask = slots - 1;
    let mut table = vec![0u32; slots];
    // (sized for every value distinct: never grown while counting)
    let mut distinct: Vec<Distinct> = Vec::with_capacity(texts.len());
    for (index, text) in texts.iter().enumerate() {
        let hash = murmur3_x64_128(text, THETA_SEED).0;
        let mut slot = hash as usize & mask;
        loop {
            match table[slot] {
                0 => {
                    distinct.push(Distinct { first: index, hash, count: 1 });
                    table[slot] = distinct.len() as u32;
                    break;
                }
                held => {
                    let entry = &mut distinct[held as usize - 1];
                    if entry.hash == hash && texts[entry.first] == *text {
                        entry.count += 1;
                        break;
                    }
                    slot = (slot + 1) & mask;
                }
            }
        }
    }
    distinct
}

/// `FrequentValues._purged(counts, 0)` with `capacity`: every value while
/// at most `capacity` are distinct; else the (capacity + 1)-th largest
/// count is subtracted from all, those left above 0 kept, and it is the
/// offset.
fn purged(distinct: &[Distinct], capacity: usize) -> (Vec<(usize, u64)>, u64) {
    let all = || distinct.iter().map(|value| (value.first, value.count));
    if distinct.len() <= capacity {
        return (all().collect(), 0);
    }
    let total: u64 = distinct.iter().map(|value| value.count).sum();
    let excess = total - distinct.len() as u64;
    let threshold = if excess == 0 || excess <= capacity as u64 {
        // at most `capacity` counts above 1: the (capacity + 1)-th largest is 1
        1
    } else {
        let mut counts: Vec<u64> = distinct.iter().map(|value| value.count).collect();
        let cut = counts.len() - capacity - 1;
        *counts.select_nth_unstable(cut).1
    };
    let kept = all().filter(|(_, count)| *count > threshold)
        .map(|(first, count)| (first, count - threshold))
        .collect();
    (kept, threshold)
}

/// The text partial of `texts` (each a value's UTF-8 bytes): frequent
/// values with `capacity` (`frequent.FREQUENT_CAPACITY`) and the theta
/// sketch with 2**lg_k nominal entries, which skips the empty text and a
/// hash of 0 as DataSketches does.
pub fn text_partial(texts: &[&[u8]], capacity: usize, lg_k: u32) -> TextPartial {
    if texts.len() >= u32::MAX as usize {
        // (the table's slots hold u32 indexes; a batch is never this big)
        panic!("a batch of {} texts is too big for the text statistics kernel", texts.len());
    }
    let distinct = count_distinct(texts);
    let hashes = distinct.iter()
        .filter(|value| !texts[value.first].is_empty())
        .map(|value| value.hash >> 1)
        .filter(|hash| *hash != 0)
        .collect();
    let (kept, offset) = purged(&distinct, capacity);
    TextPartial { kept, offset, theta: compact_theta(hashes, lg_k) }
}

/// The UTF-8 of each of `items`, all str or all bytes, while `items` lives;
/// None (the Python path decides) for anything else: mixed types, a str
/// without a UTF-8 form (a lone surrogate), bytes that are not UTF-8, or
/// a value over `bound` bytes (which `frequent.bounded_text` keys by its
/// sha256 rather than keeping whole).
fn utf8_items<'a>(items: &'a [Bound<'_, PyAny>], bound: usize) -> Option<Vec<&'a [u8]>> {
    let as_str = items.first().is_some_and(|first| first.is_instance_of::<PyString>());
    let mut slices = Vec::with_capacity(items.len());
    for item in items {
        let utf8 = if as_str {
            item.downcast::<PyString>().ok()?.to_str().ok()?.as_bytes()
        } else {
            let raw = item.downcast::<PyBytes>().ok()?.as_bytes();
            std::str::from_utf8(raw).ok()?.as_bytes()
        };
        if utf8.len() > bound {
            return None;
        }
        slices.push(utf8);
    }
    Some(slices)
}

/// `text_partial(texts, capacity, bound, lg_k) -> (kept, offset, theta) |
/// None`: `text_partial` of a list of str (or of bytes), as
/// `schemas/stats/text.py` reads it: kept [(index of a value's first
/// occurrence, count)], the offset, the serialized compact theta sketch.
/// None where `utf8_items` declines. lg_k outside DataSketches' 5..=26 is
/// a ValueError.
#[pyfunction]
#[pyo3(name = "text_partial")]
#[allow(clippy::type_complexity)]
pub fn text_partial_py<'py>(py: Python<'py>, texts: &Bound<'py, PyAny>, capacity: usize, bound: usize, lg_k: u32)
                            -> PyResult<Option<(Vec<(usize, u64)>, u64, Bound<'py, PyBytes>)>> {
    check_lg_k(lg_k)?;
    let Ok(list) = texts.downcast::<PyList>() else { return Ok(None) };
    let items: Vec<Bound<'py, PyAny>> = list.iter().collect();
    let Some(slices) = utf8_items(&items, bound) else { return Ok(None) };
    partial_objects(py, &slices, capacity, lg_k)
}

/// `text_column_partial(data, offsets, capacity, bound, lg_k)`: as
/// `text_partial`, of a text column given whole (`text_column`: the values
/// joined in `data`, cut by `offsets`), as `TextColumn` holds it. None for
/// offsets or values `text_column::column_values` refuses, or a value over
/// `bound` bytes.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn text_column_partial<'py>(py: Python<'py>, data: &Bound<'py, PyBytes>, offsets: &Bound<'py, PyBytes>,
                                capacity: usize, bound: usize, lg_k: u32)
                                -> PyResult<Option<(Vec<(usize, u64)>, u64, Bound<'py, PyBytes>)>> {
    check_lg_k(lg_k)?;
    let Some(slices) = text_column::column_values(data.as_bytes(), offsets.as_bytes()) else { return Ok(None) };
    if slices.iter().any(|text| text.len() > bound) {
        return Ok(None);
    }
    partial_objects(py, &slices, capacity, lg_k)
}

fn check_lg_k(lg_k: u32) -> PyResult<()> {
    if !(5..=26).contains(&lg_k) {
        return Err(PyValueError::new_err(format!("lg_k must be from 5 to 26 (DataSketches' range): {lg_k}")));
    }
    Ok(())
}

#[allow(clippy::type_complexity)]
fn partial_objects<'py>(py: Python<'py>, slices: &[&[u8]], capacity: usize, lg_k: u32)
                        -> PyResult<Option<(Vec<(usize, u64)>, u64, Bound<'py, PyBytes>)>> {
    let partial = crate::guarded(|| text_partial(slices, capacity, lg_k))?;
    Ok(Some((partial.kept, partial.offset, PyBytes::new(py, &partial.theta))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::text_theta;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The reference: `FrequentValues.of(Counter(texts))` in plain Rust.
    fn reference(texts: &[&[u8]], capacity: usize) -> (HashMap<Vec<u8>, u64>, u64) {
        let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
        for text in texts {
            *counts.entry(text.to_vec()).or_default() += 1;
        }
        if counts.len() <= capacity {
            return (counts, 0);
        }
        let mut sorted: Vec<u64> = counts.values().copied().collect();
        sorted.sort_unstable();
        let threshold = sorted[sorted.len() - capacity - 1];
        counts.retain(|_, count| *count > threshold);
        counts.values_mut().for_each(|count| *count -= threshold);
        (counts, threshold)
    }

    #[test]
    fn counts_repeats_and_keeps_first_occurrences_in_order() {
        let texts: Vec<&[u8]> = vec![b"b", b"", b"a", b"b", b"", b"b"];
        let partial = text_partial(&texts, 10, 12);
        assert_eq!(partial.kept, vec![(0, 3), (1, 2), (2, 1)]);
        assert_eq!(partial.offset, 0);
        assert_eq!(partial.theta, text_theta(texts.iter().copied(), 12));
    }

    #[test]
    fn all_distinct_above_capacity_keeps_nothing() {
        let texts: Vec<Vec<u8>> = (0..50).map(|i| format!("v{i}").into_bytes()).collect();
        let slices: Vec<&[u8]> = texts.iter().map(|text| text.as_slice()).collect();
        let partial = text_partial(&slices, 8, 12);
        assert_eq!((partial.kept.len(), partial.offset), (0, 1));
    }

    #[test]
    fn no_texts_give_the_empty_sketch() {
        let partial = text_partial(&[], 8, 12);
        assert_eq!((partial.kept.len(), partial.offset), (0, 0));
        assert_eq!(partial.theta, text_theta([].into_iter(), 12));
    }

    proptest! {
        #[test]
        fn matches_a_plain_count_and_never_panics(
            texts in prop::collection::vec(prop::collection::vec(0u8..4, 0..3), 0..400),
            capacity in 0usize..40, lg_k in 5u32..8) {
            let slices: Vec<&[u8]> = texts.iter().map(|text| text.as_slice()).collect();
            let partial = text_partial(&slices, capacity, lg_k);
            let (counts, offset) = reference(&slices, capacity);
            prop_assert_eq!(partial.offset, offset);
            let kept: HashMap<Vec<u8>, u64> = partial.kept.iter()
                .map(|(first, count)| (texts[*first].clone(), *count)).collect();
            prop_assert_eq!(kept.len(), partial.kept.len());
            prop_assert_eq!(kept, counts);
            prop_assert!(partial.kept.windows(2).all(|pair| pair[0].0 < pair[1].0));
            prop_assert!(partial.kept.iter().all(|(first, _)| !slices[..*first].contains(&slices[*first])));
            prop_assert_eq!(partial.theta, text_theta(slices.iter().copied(), lg_k));
        }

        #[test]
        fn a_joined_column_gives_the_partial_of_its_values(
            texts in prop::collection::vec(prop::sample::select(vec!["", "a", "b", "é", "😀", "ab"]), 0..200),
            capacity in 0usize..8) {
            let values: Vec<crate::rules::Value> = texts.iter()
                .map(|text| crate::rules::Value::Bytes(text.as_bytes())).collect();
            let (data, offsets) = text_column::joined(&values, false).unwrap();
            let slices: Vec<&[u8]> = texts.iter().map(|text| text.as_bytes()).collect();
            let whole = text_column::column_values(&data, &offsets).unwrap();
            prop_assert_eq!(text_partial(&whole, capacity, 6), text_partial(&slices, capacity, 6));
        }

        #[test]
        fn arbitrary_bytes_never_panic(texts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..200),
                                       capacity in 0usize..2000) {
            let slices: Vec<&[u8]> = texts.iter().map(|text| text.as_slice()).collect();
            let partial = text_partial(&slices, capacity, 12);
            prop_assert!(partial.theta.len() >= 8);
        }
    }
}
