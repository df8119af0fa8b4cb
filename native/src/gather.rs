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

use crate::{guarded, packed, with_bytes};

/// Value `i` of `(offsets, data)` as a range of `data`, checked: both ends
/// inside `data` and in order.
fn value_range(offsets: &[u64], data_len: usize, value: u64) -> Result<(usize, usize), String> {
    let at = usize::try_from(value).ok()
        .filter(|at| at.checked_add(1).is_some_and(|next| next < offsets.len()))
        .ok_or_else(|| format!("position {value} outside the {} values", offsets.len().saturating_sub(1)))?;
    let (start, end) = (offsets[at], offsets[at + 1]);
    if start > end || end > data_len as u64 {
        return Err(format!("value {at} spans bytes {start}..{end} of {data_len}"));
    }
    Ok((start as usize, end as usize))
}

/// The ranges of the values at `positions`, in that order, and their bytes
/// in all; an error names the first position outside the array or value
/// whose offsets fall outside `data` or run backwards. Each range is
/// checked against `data`, so the total is at most `positions.len()` times
/// its length: no size here is read unchecked from the input.
pub fn gathered_ranges(offsets: &[u64], data_len: usize, positions: &[u64])
                       -> Result<(Vec<(usize, usize)>, usize), String> {
    let mut ranges = Vec::with_capacity(positions.len());
    let mut total = 0usize;
    for position in positions {
        let (start, end) = value_range(offsets, data_len, *position)?;
        total = total.checked_add(end - start).ok_or("gathered bytes overflow")?;
        ranges.push((start, end));
    }
    Ok((ranges, total))
}

/// Copies the `ranges` of `data` back to back into `out`, which holds
/// exactly their bytes (`gathered_ranges`).
pub fn gather_into(out: &mut [u8], data: &[u8], ranges: &[(usize, usize)]) {
    let mut at = 0;
    for (index, (start, end)) in ranges.iter().enumerate() {
        if let Some((ahead, _)) = ranges.get(index + crate::PREFETCH_AHEAD) {
            crate::prefetch(data[*ahead..].as_ptr());
        }
        let length = end - start;
        out[at..at + length].copy_from_slice(&data[*start..*end]);
        at += length;
    }
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
                let offsets = packed::words(offsets, "offsets'").map_err(PyValueError::new_err)?;
                let positions = packed::words(positions, "positions'").map_err(PyValueError::new_err)?;
                let (ranges, total) = gathered_ranges(&offsets, data.len(), &positions)
                    .map_err(PyValueError::new_err)?;
                PyBytes::new_with(py, total, |out| {
                    // Unwind-safe: after a panic the half-written object is dropped.
                    guarded(std::panic::AssertUnwindSafe(|| gather_into(out, data, &ranges)))
                })
            })?
        })?
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gathered(offsets: &[u64], data: &[u8], positions: &[u64]) -> Result<Vec<u8>, String> {
        let (ranges, total) = gathered_ranges(offsets, data.len(), positions)?;
        let mut out = vec![0u8; total];
        gather_into(&mut out, data, &ranges);
        Ok(out)
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
    }
}
