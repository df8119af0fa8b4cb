//! A block of a bucket's framed records gathered in their sorted order, for
//! the shard being written. Mirrors `sorting._gather` in
//! `transforms/writer/sorting.py` (the reference: Arrow's take of the same
//! positions from a binary array): the records are the values of an array
//! given as its offsets (value `i` is `data[offsets[i]..offsets[i + 1]]`),
//! and the gathered values are written back to back straight into the
//! bytes object Python gets, with no offsets of their own and no second
//! buffer.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use std::mem::MaybeUninit;

use crate::py_bytes::written_bytes;
use crate::{packed, with_bytes};

/// Value `i` of `(offsets, data)` as a range of `data`, checked: both ends
/// inside `data` and in order. The offsets are read in place, packed
/// (little-endian words, `whole_words`): a bucket's are megabytes, a block
/// takes a few of them.
fn value_range(offsets: &[u8], data_len: usize, value: u64) -> Result<(usize, usize), String> {
    let values = (offsets.len() / 8).saturating_sub(1);
    if value >= values as u64 {
        return Err(format!("position {value} outside the {values} values"));
    }
    let at = value as usize; // < values: the words at and at + 1 exist
    let start = packed::word_at(offsets, at).expect("a value's first offset");
    let end = packed::word_at(offsets, at + 1).expect("a value's last offset");
    if start > end || end > data_len as u64 {
        return Err(format!("value {at} spans bytes {start}..{end} of {data_len}"));
    }
    Ok((start as usize, end as usize))
}

/// The ranges of the values at `positions`, in that order, and their bytes
/// in all (`offsets` and `positions` packed little-endian words); an
/// error names a buffer that is not whole words, or the first position
/// outside the array or value whose offsets fall outside `data` or run
/// backwards. Each range is checked against `data`, so the total is at
/// most the positions' count times its length: no size here is read
/// unchecked from the input.
pub fn gathered_ranges(offsets: &[u8], data_len: usize, positions: &[u8])
                       -> Result<(Vec<(usize, usize)>, usize), String> {
    packed::whole_words(offsets, "offsets'")?;
    packed::whole_words(positions, "positions'")?;
    let mut ranges = Vec::with_capacity(positions.len() / 8);
    let mut total = 0usize;
    for position in packed::iter_words(positions) {
        let (start, end) = value_range(offsets, data_len, position)?;
        total = total.checked_add(end - start).ok_or("gathered bytes overflow")?;
        ranges.push((start, end));
    }
    Ok((ranges, total))
}

/// Copies the `ranges` of `data` back to back into `out`, which holds
/// exactly their bytes (`gathered_ranges`).
/// `out` may be memory not yet written (a new bytes object's,
/// `py_bytes::written_bytes`); returns the bytes written, all of `out`.
pub fn gather_into(out: &mut [MaybeUninit<u8>], data: &[u8], ranges: &[(usize, usize)]) -> usize {
    let mut at = 0;
    for (index, (start, end)) in ranges.iter().enumerate() {
        if let Some((ahead, _)) = ranges.get(index + crate::PREFETCH_AHEAD) {
            crate::prefetch(data[*ahead..].as_ptr());
        }
        let length = end - start;
        out[at..at + length].write_copy_of_slice(&data[*start..*end]);
        at += length;
    }
    at
}

/// `gather_values(offsets, data, positions) -> bytes`: the values of the
/// binary array `(offsets, data)` at `positions`, back to back (offsets and
/// positions packed little-endian int64, as numpy and Arrow hold them). A
/// position or offset outside the array is a ValueError.
#[pyfunction(name = "gather_values")]
pub fn py_gather_values<'py>(py: Python<'py>, offsets: PyBuffer<u8>, data: PyBuffer<u8>,
                             positions: PyBuffer<u8>) -> PyResult<Bound<'py, PyBytes>> {
    with_bytes(py, &offsets, |offsets| {
        with_bytes(py, &positions, |positions| {
            with_bytes(py, &data, |data| {
                let (ranges, total) = gathered_ranges(offsets, data.len(), positions)
                    .map_err(PyValueError::new_err)?;
                written_bytes(py, total, |out| gather_into(out, data, &ranges))
            })?
        })?
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packed(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|word| word.to_le_bytes()).collect()
    }

    fn gathered(offsets: &[u64], data: &[u8], positions: &[u64]) -> Result<Vec<u8>, String> {
        let (ranges, total) = gathered_ranges(&packed(offsets), data.len(), &packed(positions))?;
        let mut out = vec![MaybeUninit::new(0u8); total];
        assert_eq!(gather_into(&mut out, data, &ranges), total);
        // SAFETY: every byte was made initialized above.
        Ok(out.into_iter().map(|byte| unsafe { byte.assume_init() }).collect())
    }

    proptest! {
        #[test]
        fn gathers_what_indexing_each_value_gives(
                values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..30),
                picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..60)) {
            let mut offsets = vec![0u64];
            let mut data = Vec::new();
            for value in &values {
                data.extend_from_slice(value);
                offsets.push(data.len() as u64);
            }
            let positions: Vec<u64> = if values.is_empty() { Vec::new() }
                else { picks.iter().map(|pick| pick.index(values.len()) as u64).collect() };
            let expected: Vec<u8> = positions.iter().flat_map(|at| values[*at as usize].clone()).collect();
            prop_assert_eq!(gathered(&offsets, &data, &positions), Ok(expected));
        }

        #[test]
        fn hostile_offsets_and_positions_never_panic(
                offsets in proptest::collection::vec(any::<u64>(), 0..12),
                data in proptest::collection::vec(any::<u8>(), 0..64),
                positions in proptest::collection::vec(any::<u64>(), 0..12)) {
            if let Ok(out) = gathered(&offsets, &data, &positions) {
                prop_assert!(out.len() <= positions.len() * data.len());
            }
        }
    }

    #[test]
    fn a_position_past_the_last_value_is_refused() {
        assert!(gathered(&[0, 2], b"ab", &[1]).is_err());
        assert!(gathered(&[], b"", &[0]).is_err());
        assert!(gathered(&[0, 3], b"ab", &[0]).is_err());
        assert!(gathered(&[2, 1], b"ab", &[0]).is_err());
        assert_eq!(gathered(&[0, 1, 2], b"ab", &[1, 0, 1]), Ok(b"bab".to_vec()));
        assert!(gathered(&[0, 2], b"ab", &[u64::MAX]).is_err());
    }

    #[test]
    fn buffers_of_part_words_are_refused() {
        assert!(gathered_ranges(&[0; 15], 2, &[0; 8]).is_err());
        assert!(gathered_ranges(&[0; 16], 2, &[0; 7]).is_err());
        assert_eq!(gathered_ranges(&packed(&[0, 2]), 2, &packed(&[0])), Ok((vec![(0, 2)], 2)));
    }
}
