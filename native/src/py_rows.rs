//! A table kernel's rows and checked columns as the Python objects its
//! callers take (`convert_csv_run`, `convert_checked_run`,
//! `arrow::convert_arrow_batch`), made as the rows come.

use pyo3::prelude::*;
use pyo3::exceptions::PyValueError;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::{digest, guarded, packed_column, table, wire, ConvertedObjects, CsvPlan};

/// `text` as a str. ASCII text (most fields) is copied into a new ASCII
/// str as it is: CPython's UTF-8 decoder reads a field that does not start
/// on an 8-byte boundary (as a run's fields mostly do) a byte at a time.
pub(crate) fn text_object<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyString>> {
    if !text.is_ascii() {
        return Ok(PyString::new(py, text));
    }
    let length = pyo3::ffi::Py_ssize_t::try_from(text.len())
        .map_err(|_| PyValueError::new_err("a text longer than a str holds"))?;
    // SAFETY: PyUnicode_New(n, 127) makes a compact ASCII str of n
    // one-byte characters (its terminator set), whose data PyUnicode_DATA
    // points at; exactly n ASCII bytes are written there before the str
    // is seen by anyone, and a NULL (no memory) is raised as an error.
    unsafe {
        let object = pyo3::ffi::PyUnicode_New(length, 127);
        if object.is_null() {
            return Err(PyErr::fetch(py));
        }
        std::ptr::copy_nonoverlapping(text.as_ptr(), pyo3::ffi::PyUnicode_DATA(object) as *mut u8, text.len());
        Ok(Bound::from_owned_ptr(py, object).downcast_into_unchecked())
    }
}

/// A table kernel's rows as Python objects, made as they come
/// (`table::Rows`): one bytes object (or None: declined) per row for
/// examples and keys. No buffer of the whole batch is written first:
/// each Example is framed in `example`, which stays in cache, and copied
/// once into its bytes object.
pub(crate) struct PyRows<'py> {
    py: Python<'py>,
    examples: Vec<Option<Bound<'py, PyBytes>>>,
    keys: Vec<Option<Bound<'py, PyBytes>>>,
    example: Vec<u8>,
    declined: usize,
}

impl<'py> PyRows<'py> {
    /// For `count` rows (a capacity only: the rows pushed may differ),
    /// which must be a count the caller checked against its input.
    pub(crate) fn new(py: Python<'py>, count: usize) -> Self {
        PyRows { py, examples: Vec::with_capacity(count), keys: Vec::with_capacity(count),
                 example: Vec::new(), declined: 0 }
    }

    /// Every row's digest joined, as `table::Converted::digests`: of its
    /// key, or of its Example without one; 16 zero bytes for a declined
    /// row. (Hashed together at the end, four rows at a time.)
    fn digests(&self, hasher: &digest::RowHasher) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.examples.len() * digest::DIGEST_SIZE);
        let rows = self.examples.iter().zip(&self.keys)
            .map(|(example, key)| example.as_ref().map(|example| key.as_ref().unwrap_or(example).as_bytes()));
        hasher.digest_rows(rows, &mut out);
        out
    }
}

impl table::Rows for PyRows<'_> {
    fn taken(&mut self, entries: &[u8], key: Option<&[u8]>) {
        self.example.clear();
        wire::put_example(&mut self.example, entries);
        self.examples.push(Some(PyBytes::new(self.py, &self.example)));
        self.keys.push(key.map(|key| PyBytes::new(self.py, key)));
    }

    fn declined(&mut self) {
        self.declined += 1;
        self.examples.push(None);
        self.keys.push(None);
    }
}

/// A checked column for Python: its `packed_column` when every row holds
/// its checked value; else (packed values, one state byte per row:
/// `table::PRESENT`, ...), the values packed for numbers (placeholders
/// where a row holds none) and None for text (the batch's own text column
/// is what a text feature stores: no str is made per row).
fn checked_column(py: Python<'_>, column: &table::Column, as_str: bool, validated: bool) -> PyResult<PyObject> {
    if let Some(values) = column.complete() {
        return packed_column(py, values, as_str, validated);
    }
    let packed = match column.values.first() {
        Some(table::Value::Bytes(_)) | None => py.None(),
        Some(_) => packed_column(py, &column.values, as_str, validated)?,
    };
    Ok((packed, PyBytes::new(py, &column.states)).into_pyobject(py)?.into_any().unbind())
}

/// A table kernel's answer for Python (`convert_csv_run`,
/// `arrow::convert_arrow_batch`): `rows`' examples, keys and digests (when
/// the plan has a salt: `PyRows::digests`), per feature its
/// `checked_column`, and how many rows were declined (the caller need not
/// look for a None among the examples).
/// `validated`: as `packed_column`'s.
pub(crate) fn converted_objects(py: Python<'_>, rows: PyRows, columns: &table::Columns, plan: &CsvPlan,
                     validated: bool) -> PyResult<ConvertedObjects> {
    let mut checked = Vec::with_capacity(columns.len());
    for (column, as_str) in columns.iter().zip(&plan.as_str) {
        checked.push(checked_column(py, column, *as_str, validated)?);
    }
    let digests = match &plan.hasher {
        Some(hasher) => {
            // (reads the bytes objects just made: nothing is left half-changed by a panic)
            let joined = guarded(std::panic::AssertUnwindSafe(|| rows.digests(hasher)))?;
            Some(PyBytes::new(py, &joined).unbind())
        }
        None => None,
    };
    Ok((PyList::new(py, rows.examples)?.unbind(),
        PyList::new(py, rows.keys)?.unbind(),
        PyList::new(py, checked)?.unbind(),
        digests,
        rows.declined))
}
