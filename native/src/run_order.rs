//! The order of a run's rows by ``(key, example)`` (`row_order` and
//! `run_format.write_sorted_run`'s sorts): fixed-width keys (digests) and
//! keys of any width, integers sorting their first 8 bytes and whole keys
//! and examples compared only where those tie. `run.rs` writes the rows
//! in the order found here.

use std::ops::Range;
use std::panic::AssertUnwindSafe;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::framed_keys::KeyColumn;
use crate::run::packed_rows;
use crate::run_rows::RunRows;
use crate::{guarded, with_bytes};

/// The first 8 bytes of `key` (zero-padded) as one big-endian integer: its
/// byte order, where those bytes differ.
pub(crate) fn head(key: &[u8]) -> u64 {
    if let Some(first) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*first); // (no copy of a variable length: a call to memcpy a key)
    }
    let mut bytes = [0u8; 8];
    let take = key.len().min(8);
    bytes[..take].copy_from_slice(&key[..take]);
    u64::from_be_bytes(bytes)
}

/// `rows` ordered by their fixed-width keys as bytes (`width` bytes a
/// row, back to back in `blob`), and the ranges of that order where two
/// rows or more share a key, to be ordered by their examples
/// (`break_ties`): together `row_order.sorted_positions`, where rows equal
/// in key and example may come in any order (their bytes are the same).
/// Integers sort the keys' first 8 bytes; only rows sharing those compare
/// whole keys.
pub fn fixed_key_order(blob: &[u8], width: usize, rows: &[usize]) -> Result<(Vec<usize>, Vec<Range<usize>>), String> {
    if width == 0 || blob.len() % width != 0 {
        return Err(format!("{} key bytes are not keys of {width} bytes", blob.len()));
    }
    let count = blob.len() / width;
    if let Some(row) = rows.iter().find(|row| **row >= count) {
        return Err(format!("row {row} outside {count} rows"));
    }
    let key = |row: usize| &blob[row * width..(row + 1) * width];
    let packed = sorted_packed(rows.iter().map(|&row| (head(key(row)) as u128) << 64 | row as u128).collect());
    let mut order: Vec<usize> = packed.iter().map(|item| *item as u64 as usize).collect();
    let mut ties = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let top = packed[start] >> 64;
        let end = start + packed[start..].iter().take_while(|item| *item >> 64 == top).count();
        if end - start > 1 && width > 8 {
            order[start..end].sort_by(|a, b| key(*a).cmp(key(*b)));
        }
        let mut from = start;
        for at in start + 1..=end {
            if at == end || key(order[at]) != key(order[from]) {
                if at - from > 1 {
                    ties.push(from..at);
                }
                from = at;
            }
        }
        start = end;
    }
    Ok((order, ties))
}

/// `rows` keys of `width` bytes each (back to back in `blob`) ordered by
/// their first 8 bytes (zero-padded) read as one big-endian integer, when
/// no two keys share those bytes: then it is their byte order, the order
/// `row_order._order_by_head` finds with numpy's stable sort. None when two
/// keys share them (the caller compares whole keys and examples). The
/// stable sort finds a bucket's sorted slices and merges them, like
/// numpy's, but on integers it made itself (numpy's took three times as
/// long with the heads' copies and checks around it).
pub fn head_order(blob: &[u8], width: usize) -> Result<Option<Vec<usize>>, String> {
    if width == 0 || blob.len() % width != 0 {
        return Err(format!("{} key bytes are not keys of {width} bytes", blob.len()));
    }
    let mut packed: Vec<u128> = blob.chunks_exact(width).enumerate().map(|(row, key)| (head(key) as u128) << 64 | row as u128).collect();
    packed.sort(); // merges the sorted runs it finds: a bucket's slices
    if packed.windows(2).any(|pair| pair[0] >> 64 == pair[1] >> 64) {
        return Ok(None);
    }
    Ok(Some(packed.iter().map(|item| *item as u64 as usize).collect()))
}

/// `items` sorted: by their top bits first (a counting sort into about
/// one bucket per item), then each bucket on its own, in the caches. The
/// heads of digests are uniform, so the buckets hold a few items each and
/// this takes about half a comparison sort's time; keys sharing their top
/// bits only make a bucket larger (at worst one: the comparison sort).
fn sorted_packed(mut items: Vec<u128>) -> Vec<u128> {
    let count = items.len();
    if count < 1 << 10 {
        items.sort_unstable();
        return items;
    }
    let bits = (usize::BITS - count.leading_zeros()).clamp(8, 16);
    let shift = 128 - bits;
    let mut starts = vec![0usize; (1 << bits) + 1];
    for item in &items {
        starts[(item >> shift) as usize + 1] += 1;
    }
    for bucket in 1..starts.len() {
        starts[bucket] += starts[bucket - 1];
    }
    let mut next = starts.clone();
    let mut out = vec![0u128; count];
    for item in &items {
        let bucket = (item >> shift) as usize;
        out[next[bucket]] = *item;
        next[bucket] += 1;
    }
    for bucket in starts.windows(2) {
        out[bucket[0]..bucket[1]].sort_unstable();
    }
    out
}

/// Orders each tie range of `order` by `example(row)`.
pub fn break_ties<'e>(order: &mut [usize], ties: &[Range<usize>], example: impl Fn(usize) -> &'e [u8]) {
    for range in ties {
        order[range.clone()].sort_by(|a, b| example(*a).cmp(example(*b)));
    }
}

/// Rows ordered by ``(key, example)`` as bytes, keys given per row or
/// none (the example is the key): `run_format.write_sorted_run`'s
/// `sorted` of variable-width keys or of examples (rows equal in both may
/// come in any order: their bytes are the same).
///
/// As `fixed_key_order`, integers sort the keys' first 8 bytes (zero-padded:
/// a key that is a prefix of another ties with it there, never sorts after
/// it) and only rows sharing those compare whole keys and examples: no
/// pointer chased per comparison for keys that differ early (ids, names).
pub fn sorted_rows(keys: Option<&[&[u8]]>, examples: &[&[u8]]) -> Vec<usize> {
    let key = |row: usize| keys.map_or(examples[row], |keys| keys[row]);
    let packed = sorted_packed((0..examples.len()).map(|row| (head(key(row)) as u128) << 64 | row as u128).collect());
    let mut order: Vec<usize> = packed.iter().map(|item| *item as u64 as usize).collect();
    let mut start = 0;
    while start < order.len() {
        let top = packed[start] >> 64;
        let end = start + packed[start..].iter().take_while(|item| *item >> 64 == top).count();
        if end - start > 1 {
            order[start..end].sort_unstable_by(|a, b| key(*a).cmp(key(*b)).then_with(|| examples[*a].cmp(examples[*b])));
        }
        start = end;
    }
    order
}

/// `fixed_key_order(keys, width, examples, rows) -> order | None`:
/// `fixed_key_order` of the rows `rows` (packed int64; None: all) of `examples`, whose
/// keys are `width` bytes each back to back in the buffer `keys`, with
/// ties broken by example (`break_ties`; examples: a list of bytes, or
/// framed records, `run_rows`); the order packed as
/// little-endian int64. None when an example compared is not bytes (the
/// Python path takes it); keys that do not fit `examples`, or a row
/// outside, are a ValueError.
#[pyfunction(name = "fixed_key_order")]
#[pyo3(signature = (keys, width, examples, rows=None))]
pub fn py_fixed_key_order<'py>(py: Python<'py>, keys: PyBuffer<u8>, width: usize, examples: &Bound<'py, PyAny>,
                               rows: Option<PyBuffer<u8>>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let examples = RunRows::new(py, examples)?;
    let count = examples.len();
    let rows = match rows {
        Some(rows) => with_bytes(py, &rows, packed_rows)??,
        None => (0..count).collect(),
    };
    let (mut order, ties) = with_bytes(py, &keys, |blob| {
        if width == 0 || blob.len() != width * count {
            return Err(format!("{} key bytes are not {count} keys of {width} bytes", blob.len()));
        }
        guarded(AssertUnwindSafe(|| fixed_key_order(blob, width, &rows))).map_err(|error| error.to_string())?
    })?
    .map_err(PyValueError::new_err)?;
    if !ties.is_empty() {
        let tied: Vec<usize> = ties.iter().flat_map(|range| order[range.clone()].to_vec()).collect();
        let Some((_items, slices)) = examples.examples(&tied)? else { return Ok(None) };
        let bytes: std::collections::HashMap<usize, &[u8]> = tied.iter().copied().zip(slices).collect();
        guarded(AssertUnwindSafe(|| break_ties(&mut order, &ties, |row| bytes[&row])))?;
    }
    let mut packed = Vec::with_capacity(order.len() * 8);
    for row in &order {
        packed.extend_from_slice(&(*row as i64).to_le_bytes());
    }
    Ok(Some(PyBytes::new(py, &packed)))
}

/// `head_order(keys, width) -> order | None`: `head_order` of the keys
/// `width` bytes each back to back in the buffer `keys`, packed as
/// little-endian int64; None when two keys share their first 8 bytes.
/// Keys that are not whole keys of `width` bytes are a ValueError.
#[pyfunction(name = "head_order")]
pub fn py_head_order<'py>(py: Python<'py>, keys: PyBuffer<u8>, width: usize) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let order = with_bytes(py, &keys, |blob| {
        guarded(AssertUnwindSafe(|| head_order(blob, width))).map_err(|error| error.to_string())?
    })?
    .map_err(PyValueError::new_err)?;
    order.map(|order| {
        PyBytes::new_with(py, order.len() * 8, |packed| {
            for (bytes, row) in packed.chunks_exact_mut(8).zip(&order) {
                bytes.copy_from_slice(&(*row as i64).to_le_bytes());
            }
            Ok(())
        })
    })
    .transpose()
}

/// `sorted_rows(keys, examples, rows=None) -> order | None`: `sorted_rows`
/// of the rows `rows` (packed int64; None: all) of examples (a list of
/// bytes, or framed records, `run_rows`) and their keys (a list of bytes,
/// one per example, a key column ``(buffer, offsets)``,
/// `framed_keys::KeyColumn`, or None: the example is the key), as positions, packed as little-endian int64.
/// None when an item sorted is not bytes (Python sorts any); keys of
/// another count are a ValueError, a row outside the lists an IndexError.
#[pyfunction(name = "sorted_rows")]
#[pyo3(signature = (keys, examples, rows=None))]
pub fn py_sorted_rows<'py>(py: Python<'py>, keys: Option<&Bound<'py, PyAny>>, examples: &Bound<'py, PyAny>,
                           rows: Option<PyBuffer<u8>>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let examples = RunRows::new(py, examples)?;
    // A key column first: getting its offsets' buffer may run an
    // exporter's code, which must be done before any example is borrowed.
    let listed = keys.and_then(|keys| keys.downcast::<PyList>().ok());
    let column = match keys {
        Some(keys) if listed.is_none() => Some(KeyColumn::new(py, keys, examples.len())?),
        _ => None,
    };
    if let Some(keys) = listed {
        if keys.len() != examples.len() {
            return Err(PyValueError::new_err(format!("{} keys for {} rows", keys.len(), examples.len())));
        }
    }
    let rows = match rows {
        Some(rows) => with_bytes(py, &rows, packed_rows)??,
        None => (0..examples.len()).collect(),
    };
    let Some((_items, slices)) = examples.examples(&rows)? else { return Ok(None) };
    let (_key_items, found) = match (listed, &column) {
        (Some(keys), _) => match crate::run_rows::gathered_slices(keys, &rows)? {
            Some((items, found)) => (items, Some(found)),
            None => return Ok(None),
        },
        (None, Some(column)) => (Vec::new(), Some(column.gathered(&rows)?)),
        (None, None) => (Vec::new(), None),
    };
    let key_slices = found.as_deref();
    let order = guarded(AssertUnwindSafe(|| sorted_rows(key_slices, &slices)))?;
    let mut packed = Vec::with_capacity(order.len() * 8);
    for at in &order {
        packed.extend_from_slice(&(rows[*at] as i64).to_le_bytes());
    }
    Ok(Some(PyBytes::new(py, &packed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `fixed_key_order` with its ties broken.
    fn sorted(blob: &[u8], width: usize, examples: &[&[u8]], rows: &[usize]) -> Result<Vec<usize>, String> {
        let (mut order, ties) = fixed_key_order(blob, width, rows)?;
        break_ties(&mut order, &ties, |row| examples[row]);
        Ok(order)
    }

    #[test]
    fn ties_order_by_example() {
        let examples: Vec<&[u8]> = vec![b"b", b"a", b"c", b"a"];
        // keys: [1,1] [1,1] [1,1] [0,1]
        let blob = [1u8, 1, 1, 1, 1, 1, 0, 1];
        assert_eq!(sorted(&blob, 2, &examples, &[0, 1, 2, 3]).unwrap(), vec![3, 1, 0, 2]);
        assert_eq!(sorted(&blob, 2, &examples, &[2, 0]).unwrap(), vec![0, 2]);
    }

    #[test]
    fn bad_rows_are_refused() {
        assert!(fixed_key_order(&[0; 3], 2, &[0]).is_err());
        assert!(fixed_key_order(&[0; 4], 2, &[2]).is_err());
        assert!(fixed_key_order(&[], 0, &[]).is_err());
        assert!(head_order(&[0; 3], 2).is_err());
        assert!(head_order(&[], 0).is_err());
    }

    proptest! {
        #[test]
        fn the_order_sorts_by_key_then_example(
            rows in proptest::collection::vec((proptest::collection::vec(0u8..3, 1..12), proptest::collection::vec(0u8..3, 0..3)), 0..60),
            width in 1usize..12) {
            // Keys of one width (cut or zero-padded), some sharing their first 8 bytes.
            let rows: Vec<(Vec<u8>, Vec<u8>)> = rows.into_iter().map(|(mut key, example)| { key.resize(width, 0); (key, example) }).collect();
            let blob: Vec<u8> = rows.iter().flat_map(|(key, _)| key.clone()).collect();
            let examples: Vec<&[u8]> = rows.iter().map(|(_, example)| example.as_slice()).collect();
            let all: Vec<usize> = (0..rows.len()).collect();
            let order = sorted(&blob, width, &examples, &all).unwrap();
            let mut expected = rows.clone();
            expected.sort();
            let got: Vec<_> = order.iter().map(|row| rows[*row].clone()).collect();
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn the_bucketed_sort_is_a_sort(heads in proptest::collection::vec(any::<u64>(), 0..3000),
                                       shared in 0u32..64) {
            // Heads sharing their top bits (up to all of them): buckets of any fill.
            let items: Vec<u128> = heads.iter().enumerate()
                .map(|(row, head)| ((head >> shared.min(63)) as u128) << 64 | row as u128).collect();
            let mut expected = items.clone();
            expected.sort_unstable();
            prop_assert_eq!(sorted_packed(items), expected);
        }

        #[test]
        fn sorted_rows_sort_by_key_then_example(
            rows in proptest::collection::vec((proptest::collection::vec(0u8..3, 0..4), proptest::collection::vec(0u8..3, 0..4)), 0..60),
            keyed in any::<bool>()) {
            let keys: Vec<&[u8]> = rows.iter().map(|(key, _)| key.as_slice()).collect();
            let examples: Vec<&[u8]> = rows.iter().map(|(_, example)| example.as_slice()).collect();
            let order = sorted_rows(keyed.then_some(keys.as_slice()), &examples);
            let mut expected: Vec<(Vec<u8>, Vec<u8>)> = if keyed { rows.clone() } else {
                rows.iter().map(|(_, example)| (Vec::new(), example.clone())).collect()
            };
            expected.sort();
            let got: Vec<(Vec<u8>, Vec<u8>)> = order.iter().map(|row| {
                (if keyed { rows[*row].0.clone() } else { Vec::new() }, rows[*row].1.clone())
            }).collect();
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn the_head_order_is_the_stable_sort_of_distinct_heads(
            keys in proptest::collection::vec(proptest::collection::vec(0u8..4, 9), 0..3000),
            width in 1usize..10, extra in 0usize..2) {
            // Keys of a few byte values: some share their first 8 bytes, some not.
            let blob: Vec<u8> = keys.iter().flat_map(|key| key[..width].to_vec()).chain(std::iter::repeat_n(0, extra)).collect();
            let found = head_order(&blob, width);
            if extra > 0 && width > 1 {
                prop_assert!(found.is_err());
                return Ok(());
            }
            let whole = &blob[..blob.len() - blob.len() % width];
            let heads: Vec<u64> = whole.chunks_exact(width).map(head).collect();
            let mut expected: Vec<usize> = (0..heads.len()).collect();
            expected.sort_by_key(|row| heads[*row]);
            let distinct = expected.windows(2).all(|pair| heads[pair[0]] != heads[pair[1]]);
            prop_assert_eq!(found.unwrap(), distinct.then_some(expected));
        }

        #[test]
        fn hostile_rows_are_refused_not_followed(
            count in 0usize..10, rows in proptest::collection::vec(0usize..20, 0..20), width in 0usize..4, extra in 0usize..3) {
            let blob = vec![0u8; count * width + extra];
            let fine = width > 0 && blob.len() % width == 0 && rows.iter().all(|row| *row < blob.len() / width);
            prop_assert_eq!(fixed_key_order(&blob, width, &rows).is_ok(), fine);
        }
    }
}
