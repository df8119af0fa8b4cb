//! The table kernel for Arrow arrays: a record batch's columns, given as
//! their plain buffers (validity bitmap, values, offsets, as pyarrow's
//! `Array.buffers()` gives them, with the array's offset and length) ->
//! each row's serialized Example and key and the checked values per
//! feature, as `table::convert_run` gives them for a CSV run.
//!
//! It mirrors the Python fast path (`schemas/fast_paths.py`, `columns.py`)
//! for the Python values pyarrow makes of these arrays (`to_pydict`): an
//! int64 feature takes an integer array's values (or text that
//! `rules::check` reads), a float feature a float array's (float32 widened
//! to a double, as pyarrow does), a string feature non-empty UTF-8 text, a
//! bytes feature binary values, a vocabulary the exact label. Anything
//! else (a null, a bool, a float for an int64 feature, an integer beyond
//! int64, ...) declines its row, which the Python path converts or writes
//! as a dead letter, exactly as without the extension. Buffers that do not
//! hold what their offsets and lengths say are refused whole.

use pyo3::prelude::*;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;

use crate::nulls::Part;
use crate::rules::{self, Feature, Key, Plan, Rule, Value};
use crate::table::{Columns, Converted, Rows};

/// An array's physical layout (pyarrow's type names in `from_name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Int(usize),
    UInt(usize),
    Float32,
    Float64,
    Bool,
    /// Text or binary with int32 (4) or int64 (8) offsets.
    Utf8(usize),
    Binary(usize),
}

impl Layout {
    pub fn from_name(name: &str) -> Option<Layout> {
        Some(match name {
            "int8" => Layout::Int(1),
            "int16" => Layout::Int(2),
            "int32" => Layout::Int(4),
            "int64" => Layout::Int(8),
            "uint8" => Layout::UInt(1),
            "uint16" => Layout::UInt(2),
            "uint32" => Layout::UInt(4),
            "uint64" => Layout::UInt(8),
            "float" => Layout::Float32,
            "double" => Layout::Float64,
            "bool" => Layout::Bool,
            "string" => Layout::Utf8(4),
            "large_string" => Layout::Utf8(8),
            "binary" => Layout::Binary(4),
            "large_binary" => Layout::Binary(8),
            _ => return None,
        })
    }

    /// Bytes per value of a fixed-width layout; None for bits and offsets.
    fn width(self) -> Option<usize> {
        match self {
            Layout::Int(width) | Layout::UInt(width) => Some(width),
            Layout::Float32 => Some(4),
            Layout::Float64 => Some(8),
            Layout::Bool | Layout::Utf8(_) | Layout::Binary(_) => None,
        }
    }
}

/// One array's buffers, borrowed from their owner (pyarrow), not yet checked.
#[derive(Debug, Clone, Copy)]
pub struct Array<'a> {
    pub layout: Layout,
    pub offset: usize,
    pub length: usize,
    pub validity: Option<&'a [u8]>,
    pub values: &'a [u8],
    pub offsets: Option<&'a [u8]>,
}

/// Why a batch is handed back whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// A buffer is shorter than the array's offset and length need.
    ShortBuffer { column: usize },
    /// Offsets that fall outside the data or run backwards.
    BadOffsets { column: usize, row: usize },
    /// Text that is not UTF-8 (the reader checks; pyarrow would not make a str).
    NotUtf8 { column: usize, row: usize },
    /// A column the plan reads is absent, of a layout the kernel lacks, or
    /// not `count` rows long; or the plan reads no column at all.
    Columns,
}

/// One value as the Python path sees it (`to_pydict`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Field<'a> {
    Null,
    Int(i64),
    /// An unsigned value beyond int64 (a Python int no int64 feature takes).
    Huge,
    Float(f64),
    Bool,
    Text(&'a [u8]),
    Binary(&'a [u8]),
}

/// An array whose buffers were checked against its offset and length.
#[derive(Debug, Clone, Copy)]
struct Checked<'a> {
    array: Array<'a>,
    column: usize,
}

/// `length` bits or items past `offset`, as a count of items, without overflow.
fn end_of(offset: usize, length: usize) -> Option<usize> {
    offset.checked_add(length)
}

impl<'a> Array<'a> {
    /// The array, once every buffer holds what its offset and length say
    /// (and offsets, where there are some, rise within the data).
    fn checked(self, column: usize) -> Result<Checked<'a>, BatchError> {
        let short = BatchError::ShortBuffer { column };
        let end = end_of(self.offset, self.length).ok_or(short.clone())?;
        if let Some(validity) = self.validity {
            if validity.len() < end.div_ceil(8) {
                return Err(short);
            }
        }
        match (self.layout, self.layout.width()) {
            (_, Some(width)) => {
                if end.checked_mul(width).is_none_or(|bytes| self.values.len() < bytes) {
                    return Err(short);
                }
            }
            (Layout::Bool, None) => {
                if self.values.len() < end.div_ceil(8) {
                    return Err(short);
                }
            }
            (Layout::Utf8(size) | Layout::Binary(size), None) => {
                let offsets = self.offsets.ok_or(short.clone())?;
                let needed = end.checked_add(1).and_then(|count| count.checked_mul(size));
                if needed.is_none_or(|bytes| offsets.len() < bytes) {
                    return Err(short);
                }
                let mut previous = offset_at(offsets, size, self.offset);
                for row in 0..self.length {
                    let next = offset_at(offsets, size, self.offset + row + 1);
                    match (previous, next) {
                        (Some(start), Some(stop)) if start <= stop && stop <= self.values.len() => {}
                        _ => return Err(BatchError::BadOffsets { column, row }),
                    }
                    previous = next;
                }
                if self.length == 0 && previous.is_none_or(|start| start > self.values.len()) {
                    return Err(BatchError::BadOffsets { column, row: 0 });
                }
            }
            _ => return Err(short),
        }
        Ok(Checked { array: self, column })
    }
}

/// The offset at `index` of an int32 (`size` 4) or int64 offsets buffer,
/// or None when it is negative; `index` must lie inside the buffer.
fn offset_at(offsets: &[u8], size: usize, index: usize) -> Option<usize> {
    let at = index * size;
    let value = if size == 4 {
        i64::from(i32::from_ne_bytes(offsets[at..at + 4].try_into().ok()?))
    } else {
        i64::from_ne_bytes(offsets[at..at + 8].try_into().ok()?)
    };
    usize::try_from(value).ok()
}

fn bit(bits: &[u8], index: usize) -> bool {
    bits[index / 8] >> (index % 8) & 1 == 1
}

/// The `width` bytes of item `index` of a checked fixed-width buffer.
fn item(values: &[u8], width: usize, index: usize) -> &[u8] {
    &values[index * width..(index + 1) * width]
}

impl<'a> Checked<'a> {
    /// Row `row`'s value (row < length, which the caller checked).
    fn field(&self, row: usize) -> Result<Field<'a>, BatchError> {
        let array = &self.array;
        let index = array.offset + row;
        if array.validity.is_some_and(|bits| !bit(bits, index)) {
            return Ok(Field::Null);
        }
        let values = array.values;
        Ok(match array.layout {
            Layout::Int(width) => {
                let mut wide = [0u8; 8];
                let bytes = item(values, width, index);
                // Sign-extend a narrower integer from its top byte (native order).
                let negative = if cfg!(target_endian = "little") { bytes[width - 1] } else { bytes[0] } >= 0x80;
                wide.fill(if negative { 0xFF } else { 0 });
                if cfg!(target_endian = "little") {
                    wide[..width].copy_from_slice(bytes);
                } else {
                    wide[8 - width..].copy_from_slice(bytes);
                }
                Field::Int(i64::from_ne_bytes(wide))
            }
            Layout::UInt(width) => {
                let mut wide = [0u8; 8];
                let bytes = item(values, width, index);
                if cfg!(target_endian = "little") {
                    wide[..width].copy_from_slice(bytes);
                } else {
                    wide[8 - width..].copy_from_slice(bytes);
                }
                i64::try_from(u64::from_ne_bytes(wide)).map_or(Field::Huge, Field::Int)
            }
            Layout::Float32 => Field::Float(f64::from(f32::from_ne_bytes(item(values, 4, index).try_into().unwrap_or_default()))),
            Layout::Float64 => Field::Float(f64::from_ne_bytes(item(values, 8, index).try_into().unwrap_or_default())),
            Layout::Bool => Field::Bool,
            Layout::Utf8(size) | Layout::Binary(size) => {
                let offsets = array.offsets.unwrap_or_default();
                // Checked in `Array::checked`: both inside the data, rising.
                let start = offset_at(offsets, size, index).unwrap_or(0);
                let stop = offset_at(offsets, size, index + 1).unwrap_or(0);
                let data = values.get(start..stop).ok_or(BatchError::BadOffsets { column: self.column, row })?;
                if matches!(array.layout, Layout::Binary(_)) {
                    Field::Binary(data)
                } else if std::str::from_utf8(data).is_ok() {
                    Field::Text(data)
                } else {
                    return Err(BatchError::NotUtf8 { column: self.column, row });
                }
            }
        })
    }
}

/// The value a feature's `rule` stores for `field`, or None when the fast
/// path would not take it as it stands. `text`: a string feature (its rule
/// is `Rule::Text`); a bytes feature takes binary values, empty ones too.
pub(crate) fn check<'a>(rule: &Rule, text: bool, field: Field<'a>) -> Option<Value<'a>> {
    match (rule, field) {
        (Rule::Int { .. }, Field::Int(number)) => rules::checked_number(rule, Value::Int(number)),
        (Rule::Float { .. }, Field::Float(number)) => rules::checked_number(rule, Value::Float(number)),
        (Rule::Int { .. } | Rule::Float { .. } | Rule::Label { .. } | Rule::Timestamp(_), Field::Text(data)) => {
            rules::check(rule, data)
        }
        (Rule::Text { .. }, Field::Text(data)) if text => rules::check(rule, data),
        (Rule::Text { limit, allowed }, Field::Binary(data)) if !text => {
            let fits = (data.len() as u64) <= *limit;
            (fits && allowed.as_ref().is_none_or(|set| set.contains(data))).then_some(Value::Bytes(data))
        }
        _ => None,
    }
}

/// What `feature` makes of an Arrow or JSON `field` (`nulls::Part`):
/// `text` and `nullable` as `convert_batch` takes them for it.
pub(crate) fn field_part<'a>(feature: &Feature, text: bool, nullable: bool, field: Field<'a>) -> Part<'a> {
    let checked = || check(&feature.rule, text, field);
    match field {
        Field::Null if nullable => Part::Omitted,
        // (only text, a Python str, can be one of the null texts)
        Field::Text(data) => feature.part(Some(data), checked),
        _ => feature.part(None, checked),
    }
}

/// A raw key column's key (`BatchConverter.key_of` of its Python value):
/// non-empty text or an int64; anything else declines the row.
pub(crate) fn put_raw_key(out: &mut Vec<u8>, field: Field) -> bool {
    match field {
        Field::Text(data) if !data.is_empty() => rules::put_text_key(out, data),
        Field::Int(number) => rules::put_int_key(out, number),
        _ => return false,
    }
    true
}

/// Converts a batch of `count` rows held as `arrays` (one per column of
/// the batch, None where the caller has no buffers for it) by `plan`.
/// `text[i]`: feature i is a string feature; `nullable[i]`: a null leaves
/// feature i out of the row's Example (optional without a default), where
/// otherwise it declines the row.
pub fn convert_batch<'a>(arrays: &[Option<Array<'a>>], count: usize, plan: &Plan, text: &[bool],
                         nullable: &[bool]) -> Result<Converted<'a>, BatchError> {
    let mut converted = Converted::default();
    converted.checked = convert_batch_into(arrays, count, plan, text, nullable, &mut converted)?;
    Ok(converted)
}

/// As `convert_batch`, each row given to `rows` as it is converted; gives
/// the checked columns.
pub fn convert_batch_into<'a>(arrays: &[Option<Array<'a>>], count: usize, plan: &Plan, text: &[bool],
                              nullable: &[bool], rows: &mut impl Rows) -> Result<Columns<'a>, BatchError> {
    let column = |index: usize| -> Result<Checked<'a>, BatchError> {
        match arrays.get(index) {
            Some(Some(array)) if array.length == count => array.checked(index),
            _ => Err(BatchError::Columns),
        }
    };
    let features_told = text.len() == plan.features.len() && nullable.len() == plan.features.len();
    if plan.features.is_empty() || arrays.len() != plan.width || !features_told {
        return Err(BatchError::Columns);
    }
    // Every column read is checked before any row: `count` is then the
    // length of a buffer that exists, and capacities may follow it.
    let features = plan.features.iter().map(|feature| column(feature.column)).collect::<Result<Vec<_>, _>>()?;
    let key_column = match plan.key {
        Key::Text(index) => Some(column(index)?),
        _ => None,
    };
    let mut checked: Columns = plan.features.iter().map(|_| Some(Vec::with_capacity(count))).collect();
    // One row's entries and key, reused from row to row.
    let (mut entries, mut key) = (Vec::new(), Vec::new());
    // Per feature: its checked value, or None (left out, or declining the row).
    let mut values: Vec<Option<Value>> = Vec::with_capacity(plan.features.len());
    for row in 0..count {
        entries.clear();
        values.clear();
        let mut declined = false;
        for (position, (feature, array)) in plan.features.iter().zip(&features).enumerate() {
            let field = array.field(row)?;
            let part = field_part(feature, text[position], nullable[position], field);
            declined |= part == Part::Declined;
            values.push(part.record(feature, &mut entries, &mut checked[position]));
        }
        key.clear();
        let keyed = match (plan.key, key_column) {
            (Key::None, _) => true,
            (Key::Feature(position), _) => match &values[position] {
                Some(value) => { rules::put_value_key(&mut key, value); true }
                None => false,
            },
            (Key::Text(_), Some(array)) => put_raw_key(&mut key, array.field(row)?),
            (Key::Text(_), None) => false,
        };
        if keyed && !declined {
            rows.taken(&entries, (!matches!(plan.key, Key::None)).then_some(&key[..]));
        } else {
            rows.declined();
        }
    }
    Ok(checked)
}

/// A byte view of a pyarrow buffer (its format is "b") or any other
/// contiguous buffer of bytes.
enum ByteBuffer {
    Unsigned(PyBuffer<u8>),
    Signed(PyBuffer<i8>),
}

impl ByteBuffer {
    fn of(object: &Bound<'_, PyAny>) -> PyResult<ByteBuffer> {
        PyBuffer::<u8>::get(object).map(ByteBuffer::Unsigned)
            .or_else(|_| PyBuffer::<i8>::get(object).map(ByteBuffer::Signed))
    }

    /// The bytes, valid while `self` (and the GIL: `_py`) is held.
    fn bytes<'b>(&'b self, _py: Python<'_>) -> PyResult<&'b [u8]> {
        let (pointer, length, contiguous) = match self {
            ByteBuffer::Unsigned(buffer) => (buffer.buf_ptr(), buffer.len_bytes(), buffer.is_c_contiguous()),
            ByteBuffer::Signed(buffer) => (buffer.buf_ptr(), buffer.len_bytes(), buffer.is_c_contiguous()),
        };
        if !contiguous {
            return Err(PyValueError::new_err("the buffer must be contiguous"));
        }
        if length == 0 || pointer.is_null() {
            return Ok(&[]);
        }
        // SAFETY: the PyBuffer holds the exporter's buffer for as long as
        // `self` lives (the returned borrow cannot outlive it), the region
        // is `length` contiguous initialised bytes, and the GIL keeps other
        // Python threads from writing it (pyarrow buffers are immutable).
        Ok(unsafe { std::slice::from_raw_parts(pointer as *const u8, length) })
    }
}

/// One column's description from Python: (type name, offset, length,
/// validity | None, values, offsets | None).
type ColumnBuffers<'py> = (String, usize, usize, Option<Bound<'py, PyAny>>, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// `convert_arrow_batch(columns, count, plan) -> (examples, keys, checked, digests, declined) | None`:
/// a record batch of `count` rows, each column given as `ColumnBuffers` (or
/// None), converted by `plan` (a `CsvPlan` whose width is the batch's
/// column count; a "text" rule's `as_str` marks a string feature, else a
/// bytes one) as `convert_csv_run` answers. None when the kernel does not
/// take the batch (a column it lacks, buffers that do not hold what they
/// say, text that is not UTF-8): the Python path takes it.
#[pyfunction]
pub(crate) fn convert_arrow_batch(py: Python<'_>, columns: Vec<Option<ColumnBuffers<'_>>>, count: usize,
                           plan: &crate::CsvPlan) -> PyResult<Option<crate::ConvertedObjects>> {
    let mut held = Vec::with_capacity(columns.len());
    for described in &columns {
        held.push(match described {
            Some((kind, offset, length, validity, values, offsets)) => match Layout::from_name(kind) {
                Some(layout) => Some((layout, *offset, *length, validity.as_ref().map(ByteBuffer::of).transpose()?,
                                      ByteBuffer::of(values)?, offsets.as_ref().map(ByteBuffer::of).transpose()?)),
                None => None,
            },
            None => None,
        });
    }
    let mut arrays = Vec::with_capacity(held.len());
    for column in &held {
        arrays.push(match column {
            Some((layout, offset, length, validity, values, offsets)) => Some(Array {
                layout: *layout,
                offset: *offset,
                length: *length,
                validity: validity.as_ref().map(|buffer| buffer.bytes(py)).transpose()?,
                values: values.bytes(py)?,
                offsets: offsets.as_ref().map(|buffer| buffer.bytes(py)).transpose()?,
            }),
            None => None,
        });
    }
    // (no capacity: `count` is not yet checked against the buffers, and the
    // lists grow as the rows come)
    let mut rows = crate::py_rows::PyRows::new(py, 0);
    let converted = crate::guarded(std::panic::AssertUnwindSafe(|| {
        convert_batch_into(&arrays, count, &plan.plan, &plan.as_str, &plan.nullable, &mut rows)
    }))?;
    let Ok(columns) = converted else { return Ok(None) };
    Ok(Some(crate::py_rows::converted_objects(py, rows, &columns, plan, false)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table;
    use proptest::prelude::*;

    fn plan(key: Key) -> Plan {
        Plan {
            width: 3,
            features: vec![
                Feature { name: b"a".to_vec(), column: 0, rule: Rule::Int { lo: -5, hi: i64::MAX, allowed: None }, nulls: None },
                Feature { name: b"b".to_vec(), column: 1, rule: Rule::Float { lo: -3.0e38, hi: 3.0e38, allowed: None }, nulls: None },
                Feature { name: b"c".to_vec(), column: 2, rule: Rule::Text { limit: 4, allowed: None }, nulls: None },
            ],
            key,
        }
    }

    fn ints(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|value| value.to_ne_bytes()).collect()
    }

    fn offsets(values: &[i32]) -> Vec<u8> {
        values.iter().flat_map(|value| value.to_ne_bytes()).collect()
    }

    #[test]
    fn a_batch_converts_like_the_csv_kernel() {
        let (a, b) = (ints(&[1, -7]), [1.5f64, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect::<Vec<_>>());
        let (text, text_offsets) = (b"xyzlong!".to_vec(), offsets(&[0, 3, 8]));
        let arrays = [
            Some(Array { layout: Layout::Int(8), offset: 0, length: 2, validity: None, values: &a, offsets: None }),
            Some(Array { layout: Layout::Float64, offset: 0, length: 2, validity: None, values: &b, offsets: None }),
            Some(Array { layout: Layout::Utf8(4), offset: 0, length: 2, validity: None, values: &text, offsets: Some(&text_offsets) }),
        ];
        let converted = convert_batch(&arrays, 2, &plan(Key::Feature(0)), &[false, false, true], &[false; 3]).unwrap();
        let csv = table::convert_run(b"1,1.5,xyz\n", 1, &Plan { width: 3, ..plan(Key::Feature(0)) }).unwrap();
        assert_eq!(converted.example(0), csv.example(0));
        assert_eq!(converted.key(0), csv.key(0));
        // -7 is below the bound, "long!" over the limit: declined.
        assert_eq!(converted.example(1), None);
        assert!(converted.checked[0].is_none() && converted.checked[2].is_none());
    }

    #[test]
    fn narrow_integers_are_sign_extended_and_slices_offset() {
        let values = [0x80u8, 0x7F, 0xFF];
        let array = Array { layout: Layout::Int(1), offset: 1, length: 2, validity: Some(&[0b101]), values: &values, offsets: None };
        let checked = array.checked(0).unwrap();
        assert_eq!(checked.field(0), Ok(Field::Null));
        assert_eq!(checked.field(1), Ok(Field::Int(-1)));
        let huge = u64::MAX.to_ne_bytes();
        let array = Array { layout: Layout::UInt(8), offset: 0, length: 1, validity: None, values: &huge, offsets: None };
        assert_eq!(array.checked(0).unwrap().field(0), Ok(Field::Huge));
    }

    #[test]
    fn inconsistent_buffers_are_refused() {
        let values = ints(&[1, 2]);
        let array = Array { layout: Layout::Int(8), offset: 1, length: 2, validity: None, values: &values, offsets: None };
        assert_eq!(array.checked(0).err(), Some(BatchError::ShortBuffer { column: 0 }));
        let bad = offsets(&[0, 5, 2]);
        let array = Array { layout: Layout::Binary(4), offset: 0, length: 2, validity: None, values: b"abcde", offsets: Some(&bad) };
        assert_eq!(array.checked(0).err(), Some(BatchError::BadOffsets { column: 0, row: 1 }));
        let negative = offsets(&[-1, 0]);
        let array = Array { layout: Layout::Binary(4), offset: 0, length: 1, validity: None, values: b"", offsets: Some(&negative) };
        assert_eq!(array.checked(0).err(), Some(BatchError::BadOffsets { column: 0, row: 0 }));
        let array = Array { layout: Layout::Int(8), offset: usize::MAX, length: 2, validity: None, values: &values, offsets: None };
        assert!(array.checked(0).is_err());
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        prop::sample::select(vec![Layout::Int(1), Layout::Int(4), Layout::Int(8), Layout::UInt(2), Layout::UInt(8),
                                  Layout::Float32, Layout::Float64, Layout::Bool, Layout::Utf8(4), Layout::Utf8(8),
                                  Layout::Binary(4), Layout::Binary(8)])
    }

    /// A column of any layout whose buffers hold arbitrary bytes and
    /// whose offset and length are arbitrary too: hostile descriptions.
    fn hostile_array() -> impl Strategy<Value = (Layout, usize, usize, Option<Vec<u8>>, Vec<u8>, Option<Vec<u8>>)> {
        (layouts(), 0usize..12, prop_oneof![0usize..12, Just(usize::MAX / 4), Just(usize::MAX)],
         prop::option::of(prop::collection::vec(any::<u8>(), 0..4)),
         prop::collection::vec(any::<u8>(), 0..40),
         prop::option::of(prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 3, 8, 40, 0x7F, 0x80, 0xFF]), 0..48)))
    }

    proptest! {
        #[test]
        fn any_buffers_convert_or_are_refused_without_panic(
                columns in prop::collection::vec(prop::option::of(hostile_array()), 3),
                count in prop_oneof![0usize..12, Just(usize::MAX)],
                key in prop::sample::select(vec![Key::None, Key::Feature(0), Key::Text(2)])) {
            let arrays: Vec<Option<Array>> = columns.iter().map(|column| column.as_ref().map(|(layout, offset, length, validity, values, offsets)| Array {
                layout: *layout, offset: *offset, length: *length, validity: validity.as_deref(), values, offsets: offsets.as_deref(),
            })).collect();
            if let Ok(converted) = convert_batch(&arrays, count, &plan(key), &[false, false, true], &[true, false, false]) {
                prop_assert_eq!(converted.examples.len(), count);
                for row in 0..count {
                    if let Some(example) = converted.example(row) {
                        prop_assert!(!example.is_empty());
                    }
                }
                let hasher = crate::digest::RowHasher::new(b"salt").unwrap();
                prop_assert_eq!(converted.digests(&hasher).len(), count * crate::digest::DIGEST_SIZE);
            }
        }

        #[test]
        fn consistent_slices_convert_like_their_values(
                numbers in prop::collection::vec(prop::option::of(any::<i64>()), 1..16),
                texts in prop::collection::vec(prop::collection::vec(prop::sample::select(b"ab\xc3\xa9\xff1".to_vec()), 0..6), 16),
                start in 0usize..16, nullable in any::<bool>()) {
            // An int64 column and a text column of the same rows, sliced
            // from `start` (offsets past zero), nulls where `numbers` has None.
            let rows = numbers.len();
            let start = start.min(rows);
            let values: Vec<u8> = numbers.iter().flat_map(|number| number.unwrap_or(0).to_ne_bytes()).collect();
            let mut validity = vec![0u8; rows.div_ceil(8)];
            for (row, number) in numbers.iter().enumerate() {
                if number.is_some() {
                    validity[row / 8] |= 1 << (row % 8);
                }
            }
            let mut data = Vec::new();
            let mut ends = vec![0i64];
            for text in &texts[..rows] {
                data.extend_from_slice(text);
                ends.push(data.len() as i64);
            }
            let offsets: Vec<u8> = ends.iter().flat_map(|end| end.to_ne_bytes()).collect();
            let count = rows - start;
            let arrays = [
                Some(Array { layout: Layout::Int(8), offset: start, length: count, validity: Some(&validity), values: &values, offsets: None }),
                Some(Array { layout: Layout::Float64, offset: 0, length: count, validity: None, values: &vec![0u8; 8 * count], offsets: None }),
                Some(Array { layout: Layout::Utf8(8), offset: start, length: count, validity: None, values: &data, offsets: Some(&offsets) }),
            ];
            let plan = Plan { width: 3, ..plan(Key::Text(2)) };
            match convert_batch(&arrays, count, &plan, &[false, false, true], &[nullable, false, false]) {
                Ok(converted) => {
                    for row in 0..count {
                        let (number, text) = (numbers[start + row], &texts[start + row]);
                        // A null int is left out when nullable, else declines.
                        let number_ok = number.map_or(nullable, |n| n >= -5);
                        let taken = number_ok && !text.is_empty() && text.len() <= 4;
                        prop_assert_eq!(converted.example(row).is_some(), taken);
                        if taken {
                            let mut key = vec![0x04];
                            key.extend_from_slice(text);
                            prop_assert_eq!(converted.key(row), Some(&key[..]));
                        }
                    }
                }
                Err(error) => {
                    let bad = texts[start..rows].iter().position(|text| std::str::from_utf8(text).is_err());
                    prop_assert_eq!(Some(error), bad.map(|row| BatchError::NotUtf8 { column: 2, row }));
                }
            }
        }

        #[test]
        fn every_int_reads_back_from_any_width(value in any::<i64>(), width in prop::sample::select(vec![1usize, 2, 4, 8])) {
            let bytes = value.to_ne_bytes();
            let narrow = if cfg!(target_endian = "little") { &bytes[..width] } else { &bytes[8 - width..] };
            let expected = match width { 1 => i64::from(value as i8), 2 => i64::from(value as i16), 4 => i64::from(value as i32), _ => value };
            let array = Array { layout: Layout::Int(width), offset: 0, length: 1, validity: None, values: narrow, offsets: None };
            prop_assert_eq!(array.checked(0).unwrap().field(0), Ok(Field::Int(expected)));
        }
    }
}
