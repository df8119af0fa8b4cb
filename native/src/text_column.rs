//! A text feature's checked column as Python takes it: every row's UTF-8
//! value back to back in one bytes object, with where each starts and ends
//! (little-endian int64, one more than the rows), which
//! `schemas/text_column.py` (`TextColumn`) reads as a sequence of str, and
//! the text statistics (`text_stats`) take whole. No str is made per row.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::column::Column;
use crate::py_bytes::{packed_words, written_bytes};
use crate::rules::Value;

const OFFSET_SIZE: usize = 8;

/// How many bytes every row's value of a text column (a placeholder, the
/// empty text, where a row holds none: the states say which) holds
/// together. An error for a number (no text column holds one) or, unless
/// `validated`, a value that is not UTF-8.
fn total_size(values: &[Value], validated: bool) -> Result<usize, String> {
    let mut total = 0usize;
    for value in values {
        let Value::Bytes(text) = value else { return Err("a text column holds a number".into()) };
        // (`validated`: cut from a run `table::check_run` found valid UTF-8
        // whole, at ASCII bytes, which never fall inside a character)
        if !validated {
            std::str::from_utf8(text).map_err(|error| error.to_string())?;
        }
        total += text.len();
    }
    Ok(total)
}

/// A value of a column `total_size` found all text.
fn text_of<'v>(value: &Value<'v>) -> &'v [u8] {
    match value {
        Value::Bytes(text) => text,
        Value::Int(_) | Value::Float(_) => b"",
    }
}

/// `texts` joined into `data` (exactly as long as they are together), and
/// the offsets that cut them apart.
fn join_into(texts: &[&[u8]], data: &mut [u8]) -> Vec<u8> {
    let mut offsets = Vec::with_capacity((texts.len() + 1) * OFFSET_SIZE);
    offsets.extend_from_slice(&0i64.to_le_bytes());
    let mut end = 0;
    for text in texts {
        data[end..end + text.len()].copy_from_slice(text);
        end += text.len();
        offsets.extend_from_slice(&(end as i64).to_le_bytes());
    }
    offsets
}

/// `values` (a text column's) joined, and the offsets that cut them apart
/// (as `text_column_objects` gives them to Python).
#[cfg(test)]
pub(crate) fn joined(values: &[Value], validated: bool) -> Result<(Vec<u8>, Vec<u8>), String> {
    let total = total_size(values, validated)?;
    let texts: Vec<&[u8]> = values.iter().map(text_of).collect();
    let mut data = vec![0u8; total];
    let offsets = join_into(&texts, &mut data);
    Ok((data, offsets))
}

/// The values `offsets` cuts out of `data` (as `joined` makes them); None
/// for offsets that are not a whole number of int64, fall, or run past
/// `data`, or for `data` not valid UTF-8 or cut inside a character (so
/// that every value is UTF-8: `data` is checked once, not each value).
pub fn column_values<'a>(data: &'a [u8], offsets: &[u8]) -> Option<Vec<&'a [u8]>> {
    if offsets.len() % OFFSET_SIZE != 0 || offsets.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(data).ok()?;
    let mut bounds = offsets.chunks_exact(OFFSET_SIZE)
        .map(|chunk| i64::from_le_bytes(chunk.try_into().expect("8 bytes")));
    let mut start = usize::try_from(bounds.next()?).ok()?;
    let mut values = Vec::with_capacity(offsets.len() / OFFSET_SIZE - 1);
    for end in bounds {
        let end = usize::try_from(end).ok()?;
        // (None where the range falls, runs past the text or cuts a character)
        values.push(text.get(start..end)?.as_bytes());
        start = end;
    }
    Some(values)
}

/// The values at `rows` (row numbers, in any order, repeats allowed) of
/// the column `offsets` cuts out of `data`, and how many bytes they hold
/// together. None where a row number is negative or past the last row, or
/// a taken row's bounds fall or run past `data` (the caller's reference
/// then says what is wrong), or a total past usize; the values are bytes,
/// UTF-8 or not.
fn taken_values<'a>(data: &'a [u8], offsets: &[u64], rows: &[u64]) -> Option<(Vec<&'a [u8]>, usize)> {
    let count = offsets.len().checked_sub(1)?;
    let mut values = Vec::with_capacity(rows.len());
    let mut total = 0usize;
    for row in rows {
        let row = usize::try_from(*row).ok().filter(|row| *row < count)?;
        let (start, end) = (usize::try_from(offsets[row]).ok()?, usize::try_from(offsets[row + 1]).ok()?);
        values.push(data.get(start..end)?);
        total = total.checked_add(end - start)?;
    }
    Some((values, total))
}

/// `taken_values` joined, and the offsets that cut them apart:
/// `TextColumn.take`'s buffers, with no index per byte.
#[cfg(test)]
fn taken(data: &[u8], offsets: &[u64], rows: &[u64]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (values, total) = taken_values(data, offsets, rows)?;
    let mut joined = vec![0u8; total];
    let cuts = join_into(&values, &mut joined);
    Some((joined, cuts))
}

/// `text_column_take(data, offsets, rows) -> (data, offsets) | None`: the
/// rows at `rows` (packed int64 row numbers) of a `TextColumn`'s buffers,
/// joined straight into the bytes given back (`taken_values`), as
/// `schemas/text_column.py` (`TextColumn.take`; `python_take` is the
/// reference) reads it. Offsets or rows not a whole number of int64 are a
/// ValueError.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn text_column_take<'py>(py: Python<'py>, data: &Bound<'py, PyBytes>, offsets: &Bound<'py, PyBytes>,
                             rows: PyBuffer<u8>) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let bounds = crate::packed::words(offsets.as_bytes(), "a text column's offsets'").map_err(PyValueError::new_err)?;
    let rows = crate::with_bytes(py, &rows, |bytes| crate::packed::words(bytes, "a text column's taken rows'"))?
        .map_err(PyValueError::new_err)?;
    let Some((values, total)) = taken_values(data.as_bytes(), &bounds, &rows) else { return Ok(None) };
    let mut cuts = Vec::new();
    let joined = PyBytes::new_with(py, total, |joined| {
        cuts = join_into(&values, joined);
        Ok(())
    })?;
    Ok(Some((joined, PyBytes::new(py, &cuts))))
}

/// A text feature's checked column for Python, `(data, offsets, states)`:
/// `joined`'s two buffers as bytes, and one state byte per row
/// (`column::PRESENT`, ...) or None when every row holds its value.
pub(crate) fn text_column_objects(py: Python<'_>, column: &Column, validated: bool) -> PyResult<PyObject> {
    let total = total_size(&column.values, validated).map_err(|error| {
        if validated { PyRuntimeError::new_err(error) } else { PyValueError::new_err(error) }
    })?;
    // (the texts and their offsets written straight into the bytes objects:
    // no list of the texts, no buffer of their own first, no zeroing first)
    let data = written_bytes(py, total, |data| {
        let mut end = 0;
        for text in column.values.iter().map(text_of) {
            // (`total` bytes in all: `total_size` summed these same values)
            data[end..end + text.len()].write_copy_of_slice(text);
            end += text.len();
        }
        end
    })?;
    let mut end = 0i64;
    let ends = column.values.iter().map(|value| {
        end += text_of(value).len() as i64;
        end.to_le_bytes()
    });
    let offsets = packed_words(py, column.values.len() + 1, std::iter::once(0i64.to_le_bytes()).chain(ends))?;
    let states = column.complete().is_none().then(|| PyBytes::new(py, &column.states));
    Ok((data, offsets, states).into_pyobject(py)?.into_any().unbind())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn joined_values_cut_back_apart(texts in prop::collection::vec(".{0,6}", 0..40)) {
            let values: Vec<Value> = texts.iter().map(|text| Value::Bytes(text.as_bytes())).collect();
            let (data, offsets) = joined(&values, false).unwrap();
            let back = column_values(&data, &offsets).unwrap();
            prop_assert_eq!(back, texts.iter().map(|text| text.as_bytes()).collect::<Vec<_>>());
        }

        #[test]
        fn any_offsets_are_read_safely(data in prop::collection::vec(any::<u8>(), 0..40),
                                       offsets in prop::collection::vec(any::<u8>(), 0..80),
                                       small in prop::collection::vec(-2i64..45, 0..10)) {
            let _ = column_values(&data, &offsets);
            let packed: Vec<u8> = small.iter().flat_map(|at| at.to_le_bytes()).collect();
            if let Some(values) = column_values(&data, &packed) {
                prop_assert_eq!(values.len() + 1, small.len());
                prop_assert!(values.iter().all(|value| std::str::from_utf8(value).is_ok()));
            }
        }
    }

    proptest! {
        #[test]
        fn taken_rows_are_the_rows_picked(texts in prop::collection::vec(".{0,6}", 1..40),
                                          picks in prop::collection::vec(any::<prop::sample::Index>(), 0..60)) {
            let values: Vec<Value> = texts.iter().map(|text| Value::Bytes(text.as_bytes())).collect();
            let (data, offsets) = joined(&values, false).unwrap();
            let bounds = crate::packed::words(&offsets, "offsets'").unwrap();
            let rows: Vec<u64> = picks.iter().map(|pick| pick.index(texts.len()) as u64).collect();
            let (picked, cuts) = taken(&data, &bounds, &rows).unwrap();
            let expected: Vec<&[u8]> = rows.iter().map(|row| texts[*row as usize].as_bytes()).collect();
            prop_assert_eq!(column_values(&picked, &cuts).unwrap(), expected);
        }

        #[test]
        fn any_bounds_and_rows_are_taken_safely(data in prop::collection::vec(any::<u8>(), 0..40),
                                                bounds in prop::collection::vec(-2i64..45, 0..10),
                                                rows in prop::collection::vec(-2i64..12, 0..20)) {
            let bounds: Vec<u64> = bounds.iter().map(|at| *at as u64).collect();
            let rows: Vec<u64> = rows.iter().map(|row| *row as u64).collect();
            if let Some((picked, cuts)) = taken(&data, &bounds, &rows) {
                prop_assert_eq!(cuts.len(), (rows.len() + 1) * OFFSET_SIZE);
                prop_assert!(picked.len() <= rows.len() * data.len());
            }
        }
    }

    #[test]
    fn numbers_and_bad_utf8_are_refused() {
        assert!(joined(&[Value::Int(1)], true).is_err());
        assert!(joined(&[Value::Bytes(b"\xff")], false).is_err());
        assert!(joined(&[Value::Bytes(b"\xff")], true).is_ok());
        assert_eq!(column_values(b"ab", &[0u8; 0]), None);
        assert_eq!(column_values(b"\xff", &[0i64.to_le_bytes(), 1i64.to_le_bytes()].concat()), None);
    }
}
