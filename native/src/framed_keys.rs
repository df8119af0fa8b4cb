//! A batch's row keys as one buffer, as `transforms/framed_keys.py`'s
//! `FramedKeys` holds them: every key back to back, each row's start
//! offset (int64, one more than the rows) and which rows have no key. A
//! table kernel gives its keys so (`py_rows::FramedRows`), not as a bytes
//! object per row, and the run kernels (`run::py_write_run`,
//! `run_order::py_sorted_rows`) take them so: ``(buffer, offsets)``, the
//! offsets packed little-endian int64.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::{packed, with_bytes};

/// Keys back to back: row `i`'s spans `bytes[offsets[i]..offsets[i + 1]]`;
/// a row without a key spans none and is marked in `missing`.
pub struct KeyBuffer {
    pub bytes: Vec<u8>,
    /// One more than the rows, from 0 to `bytes.len()`.
    pub offsets: Vec<i64>,
    /// One byte a row: 1 where the row has no key.
    pub missing: Vec<u8>,
    /// How many rows have no key.
    pub nones: usize,
}

impl KeyBuffer {
    /// For about `count` rows (a capacity only).
    pub fn new(count: usize) -> Self {
        let mut offsets = Vec::with_capacity(count + 1);
        offsets.push(0);
        KeyBuffer { bytes: Vec::new(), offsets, missing: Vec::with_capacity(count), nones: 0 }
    }

    /// Appends a row's key, or a row without one.
    pub fn push(&mut self, key: Option<&[u8]>) {
        match key {
            Some(key) => {
                self.bytes.extend_from_slice(key);
                self.missing.push(0);
            }
            None => {
                self.missing.push(1);
                self.nones += 1;
            }
        }
        self.offsets.push(self.bytes.len() as i64);
    }

    /// Row `row`'s key, None when it has none.
    pub fn key(&self, row: usize) -> Option<&[u8]> {
        (self.missing[row] == 0).then(|| &self.bytes[self.offsets[row] as usize..self.offsets[row + 1] as usize])
    }
}

/// How many keys `offsets` cut a buffer of `length` bytes into: they must
/// run from 0 to `length`, never going back; an error otherwise.
pub fn check_offsets(length: usize, offsets: impl IntoIterator<Item = i64>) -> Result<usize, String> {
    let mut offsets = offsets.into_iter();
    if offsets.next() != Some(0) {
        return Err(format!("key offsets must run from 0 to {length}"));
    }
    let (mut last, mut keys) = (0i64, 0usize);
    for offset in offsets {
        if offset < last {
            return Err(format!("key offset {offset} after {last} goes back"));
        }
        (last, keys) = (offset, keys + 1);
    }
    if last as u64 != length as u64 {
        return Err(format!("key offsets must run from 0 to {length}"));
    }
    Ok(keys)
}

/// A key column from Python, ``(buffer, offsets)`` (`FramedKeys.native`):
/// the buffer (a bytes object: immutable, so the slices hold while it is
/// held) and its keys. Anything else is a ValueError, as are offsets that
/// do not cut the buffer into `count` keys.
pub struct KeyColumn<'py> {
    pub buffer: Bound<'py, PyBytes>,
    pub offsets: Vec<i64>,
}

impl<'py> KeyColumn<'py> {
    pub fn new(py: Python<'py>, keys: &Bound<'py, PyAny>, count: usize) -> PyResult<Self> {
        let (buffer, packed) = column_parts(keys)?;
        let offsets = with_bytes(py, &packed, |bytes| packed::signed_words(bytes, "key offsets'"))?
            .map_err(PyValueError::new_err)?;
        let keys = check_offsets(buffer.as_bytes().len(), offsets.iter().copied()).map_err(PyValueError::new_err)?;
        if keys != count {
            return Err(PyValueError::new_err(format!("{keys} keys for {count} rows")));
        }
        Ok(KeyColumn { buffer, offsets })
    }

    /// The keys of `rows`, in their order, read in place (no slice made
    /// for a key not asked for); a row outside the keys is an IndexError.
    pub fn gathered(&self, rows: &[usize]) -> PyResult<Vec<&[u8]>> {
        let buffer = self.buffer.as_bytes();
        let keys = self.offsets.len().saturating_sub(1);
        rows.iter().map(|row| {
            if *row >= keys {
                return Err(pyo3::exceptions::PyIndexError::new_err(format!("row {row} outside {keys} keys")));
            }
            // (`new` checked the offsets: this only keeps a bug from panicking)
            buffer.get(self.offsets[*row] as usize..self.offsets[row + 1] as usize)
                .ok_or_else(|| PyValueError::new_err("key offsets must cut the buffer"))
        }).collect()
    }
}

/// The two parts of a key column from Python, ``(buffer, offsets)``: the
/// buffer (a bytes object) and the offsets' buffer, unchecked; anything
/// else is a ValueError.
pub fn column_parts<'py>(keys: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyBytes>, PyBuffer<u8>)> {
    let bad = || PyValueError::new_err("keys must be a list of bytes or a (buffer, offsets) tuple");
    let tuple = keys.downcast::<PyTuple>().map_err(|_| bad())?;
    if tuple.len() != 2 {
        return Err(bad());
    }
    let buffer = tuple.get_item(0)?.downcast_into::<PyBytes>().map_err(|_| bad())?;
    Ok((buffer, PyBuffer::<u8>::get(&tuple.get_item(1)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_buffer_holds_each_key_and_cuts_back_into_them(keys in prop::collection::vec(
                prop::option::of(prop::collection::vec(any::<u8>(), 0..20)), 0..40)) {
            let mut buffer = KeyBuffer::new(keys.len());
            for key in &keys {
                buffer.push(key.as_deref());
            }
            prop_assert_eq!(buffer.nones, keys.iter().filter(|key| key.is_none()).count());
            for (row, key) in keys.iter().enumerate() {
                prop_assert_eq!(buffer.key(row), key.as_deref());
            }
            prop_assert_eq!(check_offsets(buffer.bytes.len(), buffer.offsets.iter().copied()), Ok(keys.len()));
            let cut: Vec<&[u8]> = buffer.offsets.windows(2).map(|pair| &buffer.bytes[pair[0] as usize..pair[1] as usize]).collect();
            let expected: Vec<&[u8]> = keys.iter().map(|key| key.as_deref().unwrap_or(b"")).collect();
            prop_assert_eq!(cut, expected);
        }

        #[test]
        fn offsets_that_do_not_cut_the_buffer_are_refused(buffer in prop::collection::vec(any::<u8>(), 0..30),
                                                          offsets in prop::collection::vec(-3i64..40, 0..8)) {
            let cuts = offsets.first() == Some(&0) && offsets.last() == Some(&(buffer.len() as i64))
                && offsets.windows(2).all(|pair| pair[0] <= pair[1]);
            prop_assert_eq!(check_offsets(buffer.len(), offsets.iter().copied()).is_ok(), cuts);
            if cuts {
                prop_assert_eq!(check_offsets(buffer.len(), offsets.iter().copied()), Ok(offsets.len() - 1));
            }
        }
    }
}
