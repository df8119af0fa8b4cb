//! recordforge's native kernels, loaded by Python as `recordforge._native`.
//!
//! Each kernel mirrors a Python reference function, one function per job;
//! `schemas/native.py` decides which path runs. Kernels report faults as
//! plain values and leave every message to the Python side, so both paths
//! raise the same words.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pub mod arrow;
pub mod arrow_array;
pub mod column;
pub mod crc;
pub mod csv_marks;
pub mod digest;
pub mod example_values;
pub mod example_table;
pub mod framed_keys;
pub mod framed_rows;
pub mod gather;
mod py_bytes;
mod py_rows;
pub mod radix;
#[cfg(target_os = "linux")]
pub mod read_ahead;
pub mod stats;
pub mod numeric_stats;
pub mod text_stats;
pub mod text_column;
pub mod index;
pub mod json;
pub mod json_scan;
pub mod nulls;
pub mod packed;
mod number_text;
pub mod merge;
pub mod murmur;
pub mod run;
pub mod rules;
pub mod run_order;
pub mod run_rows;
#[cfg(unix)]
pub mod run_sink;
pub mod scan;
pub mod sink;
pub mod table;
pub mod timestamp;
pub mod walk;
pub mod wire;

use std::collections::HashSet;

use pyo3::types::{PyBytes, PyList, PyString};

use py_rows::{converted_batch, FramedRows};

/// A read-only byte view of any contiguous buffer (bytes, bytearray,
/// memoryview), valid while the GIL is held.
fn with_bytes<T>(py: Python<'_>, buffer: &PyBuffer<u8>, job: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("the buffer must be contiguous"));
    }
    let _ = py;
    // SAFETY: PyBuffer holds the exporter's buffer (a bytearray cannot be
    // resized while it is exported) for as long as `buffer` lives, the
    // region is `len_bytes()` contiguous initialised bytes, and the GIL
    // (held throughout: `py`) keeps other Python threads from writing it.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
    Ok(job(bytes))
}

/// Runs a kernel so that a panic (a bug: no input should cause one) comes
/// back as a RuntimeError, an `Exception` the Python side catches to fall
/// back to the reference, rather than PyO3's PanicException, which is not.
fn guarded<T>(job: impl FnOnce() -> T + std::panic::UnwindSafe) -> PyResult<T> {
    std::panic::catch_unwind(job).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        PyRuntimeError::new_err(format!("recordforge native kernel failed: {what}"))
    })
}

/// `crc32c_append(buffer, crc) -> int`: the CRC32C of the bytes `crc` is
/// the CRC32C of, followed by `buffer` (`crc::crc32c_append`; 0 to start):
/// a whole file's CRC taken block by block as it is written or read.
#[pyfunction]
fn crc32c_append(py: Python<'_>, buffer: PyBuffer<u8>, crc: u32) -> PyResult<u32> {
    with_bytes(py, &buffer, |bytes| crc::crc32c_append(crc, bytes))
}

/// `walk_records(buffer) -> (starts, ends, fault)`: the intact records at
/// the head of `buffer`; fault is None or ``(kind, offset, length)`` with
/// kind "length_crc", "too_long" or "data_crc", offset the faulty record's
/// byte offset in `buffer` (its record index is ``len(starts)``) and length
/// its length field (for "too_long").
#[pyfunction]
fn walk_records(py: Python<'_>, buffer: PyBuffer<u8>) -> PyResult<(Vec<usize>, Vec<usize>, Option<(&'static str, usize, u64)>)> {
    let found = with_bytes(py, &buffer, |bytes| guarded(|| walk::walk_records(bytes)))??;
    Ok((found.starts, found.ends, found.fault.map(fault_tuple)))
}

/// `count_walk(buffer) -> (records, end, fault)`: `walk_records` without
/// the lists (`walk::count_records`): how many intact records, where the
/// last ends (0: none), and the fault as `walk_records` gives it.
#[pyfunction]
fn count_walk(py: Python<'_>, buffer: PyBuffer<u8>) -> PyResult<(usize, usize, Option<(&'static str, usize, u64)>)> {
    let found = with_bytes(py, &buffer, |bytes| guarded(|| walk::count_records(bytes)))??;
    Ok((found.records, found.end, found.fault.map(fault_tuple)))
}

/// A walk's fault as Python gets it: ``(kind, offset, length)``.
fn fault_tuple((fault, offset): (walk::Fault, usize)) -> (&'static str, usize, u64) {
    match fault {
        walk::Fault::BadLengthCrc => ("length_crc", offset, 0),
        walk::Fault::TooLong(length) => ("too_long", offset, length),
        walk::Fault::BadDataCrc => ("data_crc", offset, 0),
    }
}

/// `index_lines(buffer, start, offset) -> (lines, next, records, fault)`:
/// the index lines of the records whose header lies in `buffer` from
/// `start` on (`index::index_lines`; offset: the stream offset of
/// `buffer[0]`), where the next header starts (relative to `buffer`), how
/// many records, and None or the fault as `walk_records` gives it.
#[pyfunction]
fn index_lines<'py>(py: Python<'py>, buffer: PyBuffer<u8>, start: usize, offset: u64)
                    -> PyResult<(Bound<'py, PyBytes>, usize, usize, Option<(&'static str, usize, u64)>)> {
    if offset > u64::MAX / 2 {
        return Err(PyValueError::new_err(format!("stream offset {offset} out of range")));
    }
    let found = with_bytes(py, &buffer, |bytes| guarded(|| index::index_lines(bytes, start, offset)))??;
    Ok((PyBytes::new(py, &found.lines), found.next, found.records, found.fault.map(fault_tuple)))
}

/// A compiled table plan (`rules::Plan`), made once per schema and header
/// by `transforms/native_rows.py`.
#[pyclass(frozen, module = "recordforge._native")]
struct CsvPlan {
    plan: rules::Plan,
    /// Per feature: give its checked values as str (a text feature, whose
    /// statistics read the text), rather than nothing.
    as_str: Vec<bool>,
    /// Per feature: a null leaves it out of the Example (optional, no
    /// default), for `arrow::convert_arrow_batch`; else a null declines the row.
    nullable: Vec<bool>,
    /// With a salt, the convert calls also give every row's digest.
    hasher: Option<digest::RowHasher>,
}

/// One feature's rule from its Python description: ("int", lo, hi,
/// allowed | None), ("float", lo, hi, allowed | None), ("text", limit |
/// None, allowed | None[, as_str]), ("timestamp", nanoseconds per unit,
/// naive text is UTC, allowed | None) or ("label", labels).
fn rule_from(rule: &Bound<'_, PyAny>) -> PyResult<rules::Rule> {
    let kind: String = rule.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "int" => rules::Rule::Int {
            lo: rule.get_item(1)?.extract()?,
            hi: rule.get_item(2)?.extract()?,
            allowed: rule.get_item(3)?.extract::<Option<HashSet<i64>>>()?,
        },
        "float" => rules::Rule::Float {
            lo: rule.get_item(1)?.extract()?,
            hi: rule.get_item(2)?.extract()?,
            allowed: rule.get_item(3)?.extract::<Option<Vec<f64>>>()?,
        },
        "text" => rules::Rule::Text {
            limit: rule.get_item(1)?.extract::<Option<u64>>()?.unwrap_or(u64::MAX),
            allowed: rule.get_item(2)?.extract::<Option<HashSet<Vec<u8>>>>()?,
        },
        "timestamp" => rules::Rule::Timestamp(timestamp::TimestampRule {
            per: rule.get_item(1)?.extract()?,
            naive_utc: rule.get_item(2)?.extract()?,
            allowed: rule.get_item(3)?.extract::<Option<HashSet<i64>>>()?,
        }),
        "label" => {
            let labels: Vec<Vec<u8>> = rule.get_item(1)?.extract()?;
            // As Python's {label: i for i, label in ...}: a repeated label keeps its last id.
            let ids: rules::LabelIds = labels.into_iter().enumerate().map(|(id, label)| (label, id as i64)).collect();
            rules::Rule::Label { ids }
        }
        other => return Err(PyValueError::new_err(format!("unknown rule kind {other:?}"))),
    })
}

/// A feature's null texts from their Python description: (texts, blank,
/// absent), absent "omit", "decline", ("int", value) or ("float", value):
/// what a missing value makes of the row (`rules::Absent`).
fn nulls_from(nulls: &Bound<'_, PyAny>) -> PyResult<rules::Nulls> {
    let absent = nulls.get_item(2)?;
    let absent = if let Ok(word) = absent.extract::<String>() {
        match word.as_str() {
            "omit" => rules::Absent::Omit,
            "decline" => rules::Absent::Decline,
            other => return Err(PyValueError::new_err(format!("unknown absent rule {other:?}"))),
        }
    } else {
        let kind: String = absent.get_item(0)?.extract()?;
        rules::Absent::Default(match kind.as_str() {
            "int" => rules::Value::Int(absent.get_item(1)?.extract()?),
            "float" => rules::Value::Float(absent.get_item(1)?.extract()?),
            other => return Err(PyValueError::new_err(format!("unknown default kind {other:?}"))),
        })
    };
    Ok(rules::Nulls {
        texts: nulls.get_item(0)?.extract::<HashSet<Vec<u8>>>()?,
        blank: nulls.get_item(1)?.extract()?,
        absent,
    })
}

#[pymethods]
impl CsvPlan {
    /// width: the header's column count; features: (name, column, rule) in
    /// entry order; key: None, ("feature", position) or ("text", column);
    /// nullable: per feature, whether a null (Arrow input) leaves it out;
    /// salt: None, or the dataset's salt (`splits.dataset_salt`) under
    /// which the convert calls give the rows' digests; nulls: per feature,
    /// None or its declared null texts (`nulls_from`).
    #[new]
    #[pyo3(signature = (width, features, key=None, nullable=None, salt=None, nulls=None))]
    fn new(width: usize, features: Vec<(Vec<u8>, usize, Bound<'_, PyAny>)>, key: Option<(String, usize)>,
           nullable: Option<Vec<bool>>, salt: Option<Vec<u8>>, nulls: Option<Vec<Option<Bound<'_, PyAny>>>>)
           -> PyResult<Self> {
        let nullable = nullable.unwrap_or_else(|| vec![false; features.len()]);
        let nulls = nulls.unwrap_or_else(|| vec![None; features.len()]);
        if nullable.len() != features.len() || nulls.len() != features.len() {
            return Err(PyValueError::new_err("nullable and nulls must say one thing per feature"));
        }
        let mut compiled = Vec::with_capacity(features.len());
        let mut as_str = Vec::with_capacity(features.len());
        for ((name, column, rule), nulls) in features.into_iter().zip(nulls) {
            if column >= width {
                return Err(PyValueError::new_err(format!("column {column} outside a header of {width}")));
            }
            let kind: String = rule.get_item(0)?.extract()?;
            as_str.push(kind == "text" && rule.len()? > 3 && rule.get_item(3)?.extract::<bool>()?);
            let nulls = nulls.map(|nulls| nulls_from(&nulls)).transpose()?;
            compiled.push(rules::Feature { name, column, rule: rule_from(&rule)?, nulls });
        }
        let key = match key {
            None => rules::Key::None,
            Some((kind, at)) if kind == "feature" && at < compiled.len() => rules::Key::Feature(at),
            Some((kind, at)) if kind == "text" && at < width => rules::Key::Text(at),
            Some(other) => return Err(PyValueError::new_err(format!("bad key {other:?}"))),
        };
        let hasher = salt.map(|salt| digest::RowHasher::new(&salt)).transpose().map_err(PyValueError::new_err)?;
        Ok(CsvPlan { plan: rules::Plan { width, features: compiled, key }, as_str, nullable, hasher })
    }
}

/// A table kernel's answer for Python: the Examples framed into one
/// buffer, their offsets (little-endian int64, one more than the rows; a
/// declined row's span is empty), keys (`framed_keys`: buffer, offsets,
/// which rows have none), checked columns, the rows'
/// digests joined (or None) and how many rows were declined.
type ConvertedObjects = (Py<PyBytes>, Py<PyBytes>, PyObject, Py<PyList>, Option<Py<PyBytes>>, usize);

/// A run of CSV lines `check_csv_run` found plain: the run (immutable
/// bytes, kept with it) and where its fields end (`table::RunFields`),
/// which `convert_checked_run` converts without parsing the run again.
/// Made only by `check_csv_run`, so it always holds a checked run.
#[pyclass(frozen, module = "recordforge._native")]
struct CsvRun {
    run: Py<PyBytes>,
    fields: table::RunFields,
}

#[pymethods]
impl CsvRun {
    fn __len__(&self) -> usize {
        self.fields.rows
    }
}

/// `convert_csv_run(run, count, plan) -> (framed, offsets, keys, checked, digests, declined) | None`:
/// a plain CSV run of `count` lines converted by `plan` (as `table::convert_run`):
/// every taken row's Example framed as a TFRecord record into one bytes
/// object, in row order, and the rows' offsets into it (`FramedRows`: a
/// declined row spans no bytes), the keys in one buffer (`py_rows::converted_objects`),
/// per feature its checked values (`py_rows::checked_column`: the
/// `packed_column`, a string feature's text as one buffer and offsets
/// where the plan says `as_str` (`text_column`), or where some row holds
/// none the packed values and each row's state), and with
/// a plan made with a salt every row's digest joined (`table::Converted::digests`), else None; and how many
/// rows it declined. None when the run is not what the reader promises (the
/// Python path takes the batch).
#[pyfunction]
fn convert_csv_run(py: Python<'_>, run: PyBuffer<u8>, count: usize, plan: &CsvPlan)
                   -> PyResult<Option<ConvertedObjects>> {
    with_bytes(py, &run, |bytes| {
        let Ok(fields) = guarded(|| table::counted_fields(bytes, count, plan.plan.width))? else {
            return Ok(None);
        };
        converted_batch(py, FramedRows::new(py, fields.rows), plan, |rows| {
            table::convert_checked_into(bytes, &fields, &plan.plan, rows)
        })
    })?
}

/// `convert_checked_run(checked, plan)`: as `convert_csv_run`, for a run
/// `check_csv_run` checked (a `CsvRun`): its fields are not found again.
#[pyfunction]
fn convert_checked_run(py: Python<'_>, checked: &CsvRun, plan: &CsvPlan)
                       -> PyResult<Option<ConvertedObjects>> {
    let (bytes, fields) = (checked.run.as_bytes(py), &checked.fields);
    converted_batch(py, FramedRows::new(py, fields.rows), plan, |rows| {
        table::convert_checked_into(bytes, fields, &plan.plan, rows)
    })
}

/// `check_csv_run(run, width, delimiter=ord(",")) -> CsvRun | None`: a
/// plain run of CSV lines of `width` fields separated by `delimiter`
/// (`table::check_run_with`: ``len()`` is its rows), or None when it is
/// not one (the reader then reads it record by record). `run` must be
/// bytes: immutable, so the check holds when it is converted.
#[pyfunction]
#[pyo3(signature = (run, width, delimiter = b','))]
fn check_csv_run(py: Python<'_>, run: Bound<'_, PyBytes>, width: usize, delimiter: u8) -> PyResult<Option<CsvRun>> {
    let bytes = run.as_bytes();
    let checked = guarded(|| table::check_run_with(bytes, width, delimiter))?;
    let _ = py;
    Ok(checked.ok().map(|fields| CsvRun { run: run.unbind(), fields }))
}

/// The `bytes` items of `items`, or None when one is of another type (the
/// caller's Python path takes any buffer).
fn bytes_items<'py>(items: &Bound<'py, PyList>) -> Option<Vec<Bound<'py, PyBytes>>> {
    items.iter().map(|item| item.downcast_into::<PyBytes>().ok()).collect()
}

/// How many rows ahead a gather asks the memory for the next rows: the
/// records of a sorted run lie all over the heap, and reading them one
/// after another waits on a cache miss each.
const PREFETCH_AHEAD: usize = 8;

/// A hint that `address` (and the next two cache lines) will be read soon;
/// never a read itself, so any address is harmless.
#[inline]
fn prefetch(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch does not access memory architecturally; it cannot
    // fault, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for line in 0..3 {
            _mm_prefetch::<_MM_HINT_T0>(address.wrapping_add(64 * line) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// The TFRecord framing of `slices`, concatenated, written straight into
/// the bytes object Python gets: no second copy of a shard's worth of
/// records.
fn framed_bytes<'py>(py: Python<'py>, slices: &[&[u8]]) -> PyResult<Bound<'py, PyBytes>> {
    // The sizes of objects that exist: no length here comes from the input's bytes.
    let total: usize = slices.iter().map(|slice| slice.len() + walk::HEADER_SIZE + walk::FOOTER_SIZE).sum();
    py_bytes::written_bytes(py, total, |out| walk::frame_all_uninit(out, slices))
}

/// `frame_records(records) -> bytes | None`: the TFRecord framing of a list
/// of bytes, concatenated (`framing.frame_records`); None when an item is
/// not bytes.
#[pyfunction]
fn frame_records<'py>(py: Python<'py>, records: &Bound<'py, PyList>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let Some(items) = bytes_items(records) else { return Ok(None) };
    let slices: Vec<&[u8]> = items.iter().map(|item| item.as_bytes()).collect();
    Ok(Some(framed_bytes(py, &slices)?))
}

/// ``records[i] for i in order``, each a bytes object, or None when one is
/// not; an index outside `records` is an IndexError. The objects are asked
/// for a few rows ahead (`prefetch`): a sorted order jumps all over the heap.
fn gathered<'py>(records: &Bound<'py, PyList>, order: &[usize]) -> PyResult<Option<Vec<Bound<'py, PyBytes>>>> {
    let mut items = Vec::with_capacity(order.len());
    for (at, index) in order.iter().enumerate() {
        if let Some(ahead) = order.get(at + PREFETCH_AHEAD) {
            if *ahead < records.len() {
                // SAFETY: `ahead` is inside the list (checked just above),
                // whose items the GIL keeps alive; only the address is read.
                prefetch(unsafe { pyo3::ffi::PyList_GET_ITEM(records.as_ptr(), *ahead as isize) } as *const u8);
            }
        }
        // get_item checks the index against the list as it is now.
        let Ok(item) = records.get_item(*index)?.downcast_into::<PyBytes>() else { return Ok(None) };
        items.push(item);
    }
    Ok(Some(items))
}

/// Each slice's size plus `extra`, as little-endian int64s.
fn packed_sizes<'py>(py: Python<'py>, slices: &[&[u8]], extra: usize) -> Bound<'py, PyBytes> {
    let mut sizes = Vec::with_capacity(slices.len() * 8);
    for slice in slices {
        sizes.extend_from_slice(&((slice.len() + extra) as i64).to_le_bytes());
    }
    PyBytes::new(py, &sizes)
}

/// `frame_gathered(records, order) -> (framed, sizes) | None`: the framing
/// of ``records[i] for i in order`` (`frame_records` of them, without the
/// list of them made first) and each one's framed size as little-endian
/// int64; None when a record gathered is not bytes. An index outside
/// `records` is an IndexError.
#[pyfunction]
fn frame_gathered<'py>(py: Python<'py>, records: &Bound<'py, PyList>, order: Vec<usize>)
                       -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let Some(items) = gathered(records, &order)? else { return Ok(None) };
    let slices: Vec<&[u8]> = items.iter().map(|item| item.as_bytes()).collect();
    let sizes = packed_sizes(py, &slices, walk::HEADER_SIZE + walk::FOOTER_SIZE);
    Ok(Some((framed_bytes(py, &slices)?, sizes)))
}

/// `join_gathered(items, order) -> (joined, sizes) | None`: ``b"".join(items[i]
/// for i in order)`` and each one's size as little-endian int64 (a run's
/// key section); None when an item gathered is not bytes.
#[pyfunction]
fn join_gathered<'py>(py: Python<'py>, items: &Bound<'py, PyList>, order: Vec<usize>)
                      -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let Some(found) = gathered(items, &order)? else { return Ok(None) };
    let slices: Vec<&[u8]> = found.iter().map(|item| item.as_bytes()).collect();
    let mut joined = Vec::with_capacity(slices.iter().map(|slice| slice.len()).sum());
    for slice in &slices {
        joined.extend_from_slice(slice);
    }
    Ok(Some((PyBytes::new(py, &joined), packed_sizes(py, &slices, 0))))
}

/// `hash_rows(salt, rows) -> bytes | None`: the keyed BLAKE2b-128 digest of
/// each row (`splits.SplitAssigner.hash_rows`), concatenated; None when a
/// row is not bytes.
#[pyfunction]
fn hash_rows<'py>(py: Python<'py>, salt: &[u8], rows: &Bound<'py, PyList>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let Some(items) = bytes_items(rows) else { return Ok(None) };
    let slices: Vec<&[u8]> = items.iter().map(|item| item.as_bytes()).collect();
    let digests = guarded(|| digest::hash_rows(salt, slices.iter().copied()))?
        .map_err(PyValueError::new_err)?;
    Ok(Some(PyBytes::new(py, &digests)))
}

fn packed_words(py: Python<'_>, words: &[u64]) -> PyResult<Py<PyBytes>> {
    Ok(PyBytes::new_with(py, words.len() * 8, |buffer| {
        for (slot, word) in buffer.chunks_exact_mut(8).zip(words) {
            slot.copy_from_slice(&word.to_le_bytes());
        }
        Ok(())
    })?.unbind())
}

/// `text_theta(texts, lg_k) -> bytes | None`: `stats::text_theta` of a
/// list of str (their UTF-8), the serialized compact sketch; None when an
/// item is not a str or has no UTF-8 form (a lone surrogate): the Python
/// path then decides. lg_k outside DataSketches' 5..=26 is a ValueError.
#[pyfunction]
fn text_theta<'py>(py: Python<'py>, texts: &Bound<'py, PyList>, lg_k: u32) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if !(5..=26).contains(&lg_k) {
        return Err(PyValueError::new_err(format!("lg_k must be from 5 to 26 (DataSketches' range): {lg_k}")));
    }
    let mut items = Vec::with_capacity(texts.len());
    for item in texts.iter() {
        let Ok(text) = item.downcast_into::<PyString>() else { return Ok(None) };
        items.push(text);
    }
    let mut slices = Vec::with_capacity(items.len());
    for text in &items {
        let Ok(utf8) = text.to_str() else { return Ok(None) };
        slices.push(utf8.as_bytes());
    }
    let sketch = guarded(|| stats::text_theta(slices.iter().copied(), lg_k))?;
    Ok(Some(PyBytes::new(py, &sketch)))
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(frame_records, module)?)?;
    module.add_function(wrap_pyfunction!(frame_gathered, module)?)?;
    module.add_function(wrap_pyfunction!(join_gathered, module)?)?;
    module.add_function(wrap_pyfunction!(hash_rows, module)?)?;
    module.add_function(wrap_pyfunction!(crc32c_append, module)?)?;
    module.add_function(wrap_pyfunction!(walk_records, module)?)?;
    module.add_function(wrap_pyfunction!(count_walk, module)?)?;
    module.add_function(wrap_pyfunction!(index_lines, module)?)?;
    module.add_function(wrap_pyfunction!(convert_csv_run, module)?)?;
    module.add_function(wrap_pyfunction!(check_csv_run, module)?)?;
    module.add_function(wrap_pyfunction!(convert_checked_run, module)?)?;
    module.add_class::<CsvRun>()?;
    module.add_function(wrap_pyfunction!(numeric_stats::numeric_update_py, module)?)?;
    module.add_function(wrap_pyfunction!(text_theta, module)?)?;
    module.add_function(wrap_pyfunction!(text_stats::text_partial_py, module)?)?;
    module.add_function(wrap_pyfunction!(text_stats::text_column_partial, module)?)?;
    module.add_function(wrap_pyfunction!(text_column::text_column_take, module)?)?;
    module.add_function(wrap_pyfunction!(arrow::convert_arrow_batch, module)?)?;
    module.add_function(wrap_pyfunction!(arrow::arrow_text_valid, module)?)?;
    module.add_function(wrap_pyfunction!(run::py_fixed_key_order, module)?)?;
    module.add_function(wrap_pyfunction!(run::py_head_order, module)?)?;
    module.add_function(wrap_pyfunction!(run::py_write_run, module)?)?;
    module.add_function(wrap_pyfunction!(run::py_framed_sizes, module)?)?;
    module.add_function(wrap_pyfunction!(run::py_key_nones, module)?)?;
    module.add_function(wrap_pyfunction!(run::py_sorted_rows, module)?)?;
    module.add_function(wrap_pyfunction!(merge::py_merged_order, module)?)?;
    module.add_function(wrap_pyfunction!(gather::py_gather_values, module)?)?;
    module.add_function(wrap_pyfunction!(scan::py_count_newlines_quotes, module)?)?;
    module.add_function(wrap_pyfunction!(scan::py_lone_carriage_return, module)?)?;
    module.add_function(wrap_pyfunction!(json::jsonl_segments, module)?)?;
    module.add_function(wrap_pyfunction!(json::jsonl_keys, module)?)?;
    module.add_function(wrap_pyfunction!(json::convert_jsonl_run, module)?)?;
    module.add_function(wrap_pyfunction!(example_values::example_values, module)?)?;
    module.add_function(wrap_pyfunction!(example_values::example_features, module)?)?;
    module.add_function(wrap_pyfunction!(example_table::example_run_check, module)?)?;
    module.add_function(wrap_pyfunction!(example_table::convert_example_run, module)?)?;
    module.add_class::<CsvPlan>()?;
    #[cfg(target_os = "linux")]
    module.add_class::<read_ahead::PyFileReadAhead>()?;
    Ok(())
}
