//! A table kernel's rows (framed into one buffer) and checked columns as
//! the Python objects its callers take (`convert_csv_run`, `convert_checked_run`,
//! `arrow::convert_arrow_batch`), made as the rows come.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::column::Column;
use crate::py_bytes::{packed_i64s, packed_words, GrowingBytes};
use crate::rules::Value;
use crate::text_column::text_column_objects;
use crate::{digest, framed_keys, framed_rows, guarded, table, ConvertedObjects, CsvPlan};

/// A table kernel's rows as the Python side takes them (`table::Rows`):
/// every taken row's Example framed as a TFRecord record (length, masked
/// CRC of the length, data, masked CRC of the data) into one buffer, in
/// row order, with each row's start offset; a declined row spans no bytes
/// (its start is the next row's). The keys are held alike, back to back
/// in one buffer (`framed_keys::KeyBuffer`): no bytes object per row.
/// Each Example is written once, in its place in the bytes object Python
/// gets (`GrowingBytes`): the buffer is not copied again.
pub(crate) struct FramedRows<'py> {
    examples: framed_rows::FramedBuffer<GrowingBytes<'py>>,
    keys: framed_keys::KeyBuffer,
    declined: usize,
}

impl<'py> FramedRows<'py> {
    /// For `count` rows (a capacity only: the rows pushed may differ),
    /// which must be a count the caller checked against its input.
    pub(crate) fn new(py: Python<'py>, count: usize) -> Self {
        FramedRows { examples: framed_rows::FramedBuffer::in_store(GrowingBytes::new(py), count),
                     keys: framed_keys::KeyBuffer::new(count), declined: 0 }
    }

    /// Every row's digest joined, as `table::Converted::digests`: of its
    /// key, or of its Example without one; 16 zero bytes for a declined
    /// row. (Hashed together at the end, eight rows at a time.)
    fn digests(&self, hasher: &digest::RowHasher) -> Vec<u8> {
        let count = self.examples.rows();
        let mut out = Vec::with_capacity(count * digest::DIGEST_SIZE);
        let rows = (0..count).map(|row| {
            self.examples.example(row).map(|example| self.keys.key(row).unwrap_or(example))
        });
        hasher.digest_rows(rows, &mut out);
        out
    }
}

impl table::Rows for FramedRows<'_> {
    fn taken(&mut self, entries: &[u8], key: Option<&[u8]>) {
        self.examples.push_example(entries);
        self.keys.push(key);
    }

    fn declined(&mut self) {
        self.declined += 1;
        self.examples.push_declined();
        self.keys.push(None);
    }
}

/// A checked column for Python: a string feature's (`as_str`) as its
/// `text_column_objects` (every row's text in one buffer: no str per row);
/// else its `packed_column` when every row holds its checked value; else
/// (packed values, one state byte per row: `column::PRESENT`, ...), the
/// values packed for numbers (placeholders where a row holds none) and
/// None for a bytes feature's text, which Python does not read.
/// `validated`: every text value is known to be UTF-8 (cut at ASCII
/// commas and line ends from a run `table::check_run` validated whole).
fn checked_column(py: Python<'_>, column: &Column, as_str: bool, validated: bool) -> PyResult<PyObject> {
    if as_str {
        return text_column_objects(py, column, validated);
    }
    if let Some(values) = column.complete() {
        return Ok(packed_column(py, values)?.into_any().unbind());
    }
    let packed = match column.values.first() {
        Some(Value::Bytes(_)) | None => py.None(),
        Some(_) => packed_column(py, &column.values)?.into_any().unbind(),
    };
    Ok((packed, PyBytes::new(py, &column.states)).into_pyobject(py)?.into_any().unbind())
}

/// A numeric column's values packed as numpy reads them (int64 or
/// float64, little-endian), written straight into the bytes object; b""
/// for a bytes feature's column, whose values Python does not read.
fn packed_column<'py>(py: Python<'py>, values: &[Value]) -> PyResult<Bound<'py, PyBytes>> {
    if let Some(Value::Bytes(_)) = values.first() {
        return Ok(PyBytes::new(py, b""));
    }
    let mut text = false;
    let packed = packed_words(py, values.len(), values.iter().map(|value| match value {
        Value::Int(number) => number.to_le_bytes(),
        Value::Float(number) => number.to_le_bytes(),
        Value::Bytes(_) => {
            text = true;
            [0; 8]
        }
    }))?;
    if text {
        return Err(PyRuntimeError::new_err("a numeric column holds text"));
    }
    Ok(packed)
}

/// A batch's keys for Python: ``(buffer, offsets, missing | None)``.
fn key_objects(py: Python<'_>, keys: &framed_keys::KeyBuffer) -> PyResult<PyObject> {
    let missing = (keys.nones > 0).then(|| PyBytes::new(py, &keys.missing));
    Ok((PyBytes::new(py, &keys.bytes), packed_i64s(py, &keys.offsets)?, missing)
        .into_pyobject(py)?.into_any().unbind())
}

/// A table kernel's conversion of a batch into `rows` (`convert`, run so
/// that a panic comes back as a Python error: `guarded`) as the Python
/// objects `converted_objects` gives, text validated; None where the kernel
/// refused the batch (it is not what the reader promised: the Python path
/// takes it). Every convert call ends here.
pub(crate) fn converted_batch<'py, 'a, E>(py: Python<'py>, mut rows: FramedRows<'py>, plan: &CsvPlan,
                                          convert: impl FnOnce(&mut FramedRows<'py>) -> Result<table::Columns<'a>, E>)
                                          -> PyResult<Option<ConvertedObjects>> {
    let converted = guarded(std::panic::AssertUnwindSafe(|| convert(&mut rows)))?;
    let Ok(columns) = converted else { return Ok(None) };
    Ok(Some(converted_objects(py, rows, &columns, plan, true)?))
}

/// A table kernel's answer for Python (`convert_csv_run`,
/// `arrow::convert_arrow_batch`, `json::convert_jsonl_run`): `rows`'
/// framed Examples and their offsets (little-endian int64, one more than
/// the rows: a declined row's span is empty), keys (`framed_keys`:
/// ``(buffer, offsets, missing)``, `missing` one byte a row, 1 where it
/// has no key, or None when every row has one) and digests (when
/// the plan has a salt: `FramedRows::digests`), per feature its
/// `checked_column`, and how many rows were declined (the caller need not
/// look for an empty span).
/// `validated`: as `checked_column`'s.
pub(crate) fn converted_objects<'py>(py: Python<'py>, rows: FramedRows<'py>, columns: &table::Columns, plan: &CsvPlan,
                     validated: bool) -> PyResult<ConvertedObjects> {
    let mut checked = Vec::with_capacity(columns.len());
    for (column, as_str) in columns.iter().zip(&plan.as_str) {
        checked.push(checked_column(py, column, *as_str, validated)?);
    }
    let digests = match &plan.hasher {
        Some(hasher) => {
            // (reads the buffer just made: nothing is left half-changed by a panic)
            let joined = guarded(std::panic::AssertUnwindSafe(|| rows.digests(hasher)))?;
            Some(PyBytes::new(py, &joined).unbind())
        }
        None => None,
    };
    let offsets = packed_i64s(py, &rows.examples.offsets)?.unbind();
    let keys = key_objects(py, &rows.keys)?;
    Ok((rows.examples.into_store().finish().unbind(), offsets, keys, PyList::new(py, checked)?.unbind(),
        digests, rows.declined))
}
