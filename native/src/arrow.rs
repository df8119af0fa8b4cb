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
//! hold what their offsets and lengths say are refused whole (`arrow_array`
//! checks and reads an array's buffers).

use pyo3::prelude::*;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;

use crate::arrow_array::{Array, BatchError, Checked, Field, Layout};
use crate::column::Column;
use crate::nulls::Part;
use crate::rules::{self, Feature, Key, Plan, Rule, Value};
use crate::table::{give_row, Columns, Converted, Rows};

/// The value a feature's `rule` stores for `field`, or None when the fast
/// path would not take it as it stands. `text`: a string feature (its rule
/// is `Rule::Text`); a bytes feature takes binary values, empty ones too.
#[inline(always)]
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
#[inline(always)]
pub(crate) fn field_part<'a>(feature: &Feature, text: bool, nullable: bool, field: Field<'a>) -> Part<'a> {
    let null_text = match field {
        Field::Null if nullable => return Part::Omitted,
        // (only text, a Python str, can be one of the null texts)
        Field::Text(data) => Some(data),
        _ => None,
    };
    // (one call of `part`, so that its check is made inline, not called)
    feature.part(null_text, || check(&feature.rule, text, field))
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
    converted.checked = convert_batch_into(arrays, count, plan, text, nullable, false, &mut converted)?;
    Ok(converted)
}

/// As `convert_batch`, each row given to `rows` as it is converted; gives
/// the checked columns. `utf8_known`: `text_valid` (or Arrow's full
/// validation) found the batch's text UTF-8 already (`Array::checked_with`).
#[allow(clippy::too_many_arguments)]
pub fn convert_batch_into<'a>(arrays: &[Option<Array<'a>>], count: usize, plan: &Plan, text: &[bool],
                              nullable: &[bool], utf8_known: bool, rows: &mut impl Rows)
                              -> Result<Columns<'a>, BatchError> {
    let column = |index: usize| -> Result<Checked<'a>, BatchError> {
        match arrays.get(index) {
            Some(Some(array)) if array.length == count => array.checked_with(index, utf8_known),
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
    let mut checked: Columns = plan.features.iter().map(|_| Column::with_capacity(count)).collect();
    let mut dictionary_parts: Vec<Option<DictionaryParts>> =
        features.iter().map(|array| DictionaryParts::for_array(array, count)).collect();
    let batch = Batch { features: &features, key_column, plan, text, nullable, count };
    if dictionary_parts.iter().any(Option::is_some) {
        batch.convert_rows::<true>(&mut dictionary_parts, &mut checked, rows)?;
    } else {
        batch.convert_rows::<false>(&mut dictionary_parts, &mut checked, rows)?;
    }
    Ok(checked)
}

/// A batch's checked columns and what `convert_batch_into` was told of it.
struct Batch<'b, 'a> {
    features: &'b [Checked<'a>],
    key_column: Option<Checked<'a>>,
    plan: &'b Plan,
    text: &'b [bool],
    nullable: &'b [bool],
    count: usize,
}

impl<'a> Batch<'_, 'a> {
    /// Converts every row, giving it to `rows` and its values to `checked`.
    /// `DICTIONARIES`: some feature has its `DictionaryParts` (compiled
    /// apart, so that the rows of a batch without any run as they did
    /// before there were any: a look per value costs them ~3%).
    fn convert_rows<const DICTIONARIES: bool>(&self, dictionary_parts: &mut [Option<DictionaryParts<'a>>],
                                              checked: &mut Columns<'a>, rows: &mut impl Rows)
                                              -> Result<(), BatchError> {
        let (plan, text, nullable) = (self.plan, self.text, self.nullable);
        // One row's entries and key, reused from row to row.
        let (mut entries, mut key) = (Vec::new(), Vec::new());
        // (the one feature whose value keys a row: only its value is kept)
        let key_position = plan.key.feature();
        for row in 0..self.count {
            entries.clear();
            let mut declined = false;
            let mut key_value = None;
            for (position, (feature, array)) in plan.features.iter().zip(self.features).enumerate() {
                let part_of = |field| field_part(feature, text[position], nullable[position], field);
                let part = match &mut dictionary_parts[position] {
                    Some(parts) if DICTIONARIES => parts.part(array, row, part_of)?,
                    _ => part_of(array.field(row)?),
                };
                declined |= part == Part::Declined;
                let stored = part.record(feature, &mut entries, &mut checked[position]);
                if key_position == Some(position) {
                    key_value = stored;
                }
            }
            let raw_key = match (plan.key, self.key_column) {
                (Key::Text(_), Some(array)) => Some(array.field(row)?),
                _ => None,
            };
            give_row(rows, plan, &entries, &mut key, key_value.as_ref(), declined,
                     |_, key| raw_key.is_some_and(|field| put_raw_key(key, field)));
        }
        Ok(())
    }
}

/// The part each value of a dictionary array's dictionary makes for one
/// feature, found at the first row that holds it: a feature's part depends
/// on its field alone, so a row then costs its index rather than its
/// value's check (a vocabulary's lookup, a text's length and null texts).
/// Kept only for a dictionary no longer than the batch, so that the table
/// costs no more than the rows it serves.
struct DictionaryParts<'a> {
    parts: Vec<Option<Part<'a>>>,
}

impl<'a> DictionaryParts<'a> {
    fn for_array(array: &Checked<'a>, count: usize) -> Option<Self> {
        let length = array.dictionary_length().filter(|&length| length <= count)?;
        Some(DictionaryParts { parts: vec![None; length] })
    }

    /// Row `row`'s part (`part_of` its field), as `field` would give it:
    /// a null row's part, or its value's, found once; a value's fault
    /// (text that is not UTF-8) is found at the first row that holds it,
    /// as `field` finds it there.
    fn part(&mut self, array: &Checked<'a>, row: usize, part_of: impl FnOnce(Field<'a>) -> Part<'a>)
            -> Result<Part<'a>, BatchError> {
        let Some(index) = array.dictionary_index(row)? else { return Ok(part_of(Field::Null)) };
        if let Some(part) = self.parts[index] {
            return Ok(part);
        }
        let part = part_of(array.field(row)?);
        self.parts[index] = Some(part);
        Ok(part)
    }
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

/// One array's description from Python: (type name, offset, length,
/// validity | None, values, offsets | None).
type ArrayBuffers<'py> = (String, usize, usize, Option<Bound<'py, PyAny>>, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// One column's description from Python: its array's, or for a dictionary
/// array (its indices' description, its dictionary's).
#[derive(FromPyObject)]
pub(crate) enum ColumnBuffers<'py> {
    Plain(ArrayBuffers<'py>),
    Dictionary(ArrayBuffers<'py>, ArrayBuffers<'py>),
}

/// An array's buffers, held (as `PyBuffer`s) while the kernel reads them.
type HeldArray = (Layout, usize, usize, Option<ByteBuffer>, ByteBuffer, Option<ByteBuffer>);

/// A column's held array, and its dictionary's for a dictionary array.
type HeldColumn = (HeldArray, Option<HeldArray>);

/// An array's buffers held, None for a type the kernel lacks.
fn held_array(described: &ArrayBuffers<'_>) -> PyResult<Option<HeldArray>> {
    let (kind, offset, length, validity, values, offsets) = described;
    let Some(layout) = Layout::from_name(kind) else { return Ok(None) };
    Ok(Some((layout, *offset, *length, validity.as_ref().map(ByteBuffer::of).transpose()?,
             ByteBuffer::of(values)?, offsets.as_ref().map(ByteBuffer::of).transpose()?)))
}

/// Each described column's buffers held, None for a type the kernel lacks.
fn held_columns(columns: &[Option<ColumnBuffers<'_>>]) -> PyResult<Vec<Option<HeldColumn>>> {
    let mut held = Vec::with_capacity(columns.len());
    for described in columns {
        held.push(match described {
            Some(ColumnBuffers::Plain(array)) => held_array(array)?.map(|array| (array, None)),
            Some(ColumnBuffers::Dictionary(indices, dictionary)) => match (held_array(indices)?, held_array(dictionary)?) {
                (Some(indices), Some(dictionary)) => Some((indices, Some(dictionary))),
                _ => None,
            },
            None => None,
        });
    }
    Ok(held)
}

/// A held array as an `Array` over its bytes (not yet checked).
fn array_of<'a>(py: Python<'_>, held: &'a HeldArray, dictionary: Option<&'a Array<'a>>) -> PyResult<Array<'a>> {
    let (layout, offset, length, validity, values, offsets) = held;
    Ok(Array {
        layout: *layout,
        offset: *offset,
        length: *length,
        validity: validity.as_ref().map(|buffer| buffer.bytes(py)).transpose()?,
        values: values.bytes(py)?,
        offsets: offsets.as_ref().map(|buffer| buffer.bytes(py)).transpose()?,
        dictionary,
    })
}

/// The held columns' dictionaries as `Array`s (None for a column without).
fn dictionaries_of<'a>(py: Python<'_>, held: &'a [Option<HeldColumn>]) -> PyResult<Vec<Option<Array<'a>>>> {
    held.iter().map(|column| match column {
        Some((_, Some(dictionary))) => array_of(py, dictionary, None).map(Some),
        _ => Ok(None),
    }).collect()
}

/// The held columns as `Array`s over their bytes (not yet checked), each
/// dictionary array pointing at its dictionary in `dictionaries`
/// (`dictionaries_of` the same columns).
fn arrays_of<'a>(py: Python<'_>, held: &'a [Option<HeldColumn>], dictionaries: &'a [Option<Array<'a>>])
                 -> PyResult<Vec<Option<Array<'a>>>> {
    held.iter().zip(dictionaries).map(|(column, dictionary)| match column {
        Some((array, _)) => array_of(py, array, dictionary.as_ref()).map(Some),
        None => Ok(None),
    }).collect()
}

/// `convert_arrow_batch(columns, count, plan, utf8_known=False) -> (framed, offsets, keys, checked, digests, declined) | None`:
/// a record batch of `count` rows, each column given as `ColumnBuffers`
/// (a dictionary array's values read through its indices) (or
/// None), converted by `plan` (a `CsvPlan` whose width is the batch's
/// column count; a "text" rule's `as_str` marks a string feature, else a
/// bytes one) as `convert_csv_run` answers. None when the kernel does not
/// take the batch (a column it lacks, buffers that do not hold what they
/// say, text that is not UTF-8): the Python path takes it. `utf8_known`:
/// the reader found the batch's text UTF-8 (`arrow_text_valid`, or Arrow's
/// full validation), which is then not scanned again.
#[pyfunction]
#[pyo3(signature = (columns, count, plan, utf8_known=false))]
pub(crate) fn convert_arrow_batch(py: Python<'_>, columns: Vec<Option<ColumnBuffers<'_>>>, count: usize,
                           plan: &crate::CsvPlan, utf8_known: bool) -> PyResult<Option<crate::ConvertedObjects>> {
    let held = held_columns(&columns)?;
    let dictionaries = dictionaries_of(py, &held)?;
    let arrays = arrays_of(py, &held, &dictionaries)?;
    // (no capacity: `count` is not yet checked against the buffers, and the
    // lists grow as the rows come; validated: a string feature's values are
    // text `Checked::field` found UTF-8)
    crate::py_rows::converted_batch(py, crate::py_rows::FramedRows::new(py, 0), plan, |rows| {
        convert_batch_into(&arrays, count, &plan.plan, &plan.as_str, &plan.nullable, utf8_known, rows)
    })
}

/// Whether every column is of a layout the kernel reads, its buffers hold
/// what its offset and length say, and every non-null text value is UTF-8:
/// what `RecordBatch.validate(full=True)` finds of a batch the Parquet
/// reader made (which checks its offsets, not its text). False sends the
/// caller to that validation.
pub fn text_valid(arrays: &[Option<Array<'_>>]) -> bool {
    arrays.iter().enumerate().all(|(column, array)| {
        let Some(array) = array else { return false };
        match array.checked(column) {
            // (Arrow's validation checks a dictionary's every value,
            // whether a row points at it or not: so does `utf8`)
            Ok(checked) => !matches!(checked.value_layout(), Layout::Utf8(_)) || checked.utf8()
                || (array.dictionary.is_none() && (0..array.length).all(|row| checked.field(row).is_ok())),
            Err(_) => false,
        }
    })
}

/// `arrow_text_valid(columns) -> bool`: `text_valid` of a record batch's
/// columns given as `convert_arrow_batch` takes them.
#[pyfunction]
pub(crate) fn arrow_text_valid(py: Python<'_>, columns: Vec<Option<ColumnBuffers<'_>>>) -> PyResult<bool> {
    let held = held_columns(&columns)?;
    let dictionaries = dictionaries_of(py, &held)?;
    let arrays = arrays_of(py, &held, &dictionaries)?;
    crate::guarded(std::panic::AssertUnwindSafe(|| text_valid(&arrays)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow_array::tests::{ints, offsets};
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

    #[test]
    fn a_batch_converts_like_the_csv_kernel() {
        let (a, b) = (ints(&[1, -7]), [1.5f64, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect::<Vec<_>>());
        let (text, text_offsets) = (b"xyzlong!".to_vec(), offsets(&[0, 3, 8]));
        let arrays = [
            Some(Array { layout: Layout::Int(8), offset: 0, length: 2, validity: None, values: &a, offsets: None, dictionary: None }),
            Some(Array { layout: Layout::Float64, offset: 0, length: 2, validity: None, values: &b, offsets: None, dictionary: None }),
            Some(Array { layout: Layout::Utf8(4), offset: 0, length: 2, validity: None, values: &text, offsets: Some(&text_offsets), dictionary: None }),
        ];
        let converted = convert_batch(&arrays, 2, &plan(Key::Feature(0)), &[false, false, true], &[false; 3]).unwrap();
        let csv = table::convert_run(b"1,1.5,xyz\n", 1, &Plan { width: 3, ..plan(Key::Feature(0)) }).unwrap();
        assert_eq!(converted.example(0), csv.example(0));
        assert_eq!(converted.key(0), csv.key(0));
        // -7 is below the bound, "long!" over the limit: declined.
        assert_eq!(converted.example(1), None);
        for declined in [0, 2] {
            assert_eq!(converted.checked[declined].states, vec![crate::column::PRESENT, crate::column::UNCHECKED]);
        }
        assert_eq!(converted.checked[1].complete(), Some(&[Value::Float(1.5), Value::Float(2.0)][..]));
    }

    #[test]
    fn text_that_is_not_utf8_is_not_valid_unless_null() {
        let (text, text_offsets) = (b"ok\xff".to_vec(), offsets(&[0, 2, 3]));
        let array = |validity| Some(Array { layout: Layout::Utf8(4), offset: 0, length: 2, validity, values: &text, offsets: Some(&text_offsets), dictionary: None });
        assert!(!text_valid(&[array(None)]));
        assert!(text_valid(&[array(Some(&[0b01]))]));
        let binary = Some(Array { layout: Layout::Binary(4), ..array(None).unwrap() });
        assert!(text_valid(&[binary]));
        assert!(!text_valid(&[None]));
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
                layout: *layout, offset: *offset, length: *length, validity: validity.as_deref(), values, offsets: offsets.as_deref(), dictionary: None,
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
        fn a_dictionary_column_converts_as_its_decoded_values(
                words in prop::collection::vec(prop::collection::vec(prop::sample::select(b"ab\xc3\xa9\xff1".to_vec()), 0..6), 1..5),
                picks in prop::collection::vec(prop::option::of(0usize..8), 0..12),
                start in 0usize..12, width in prop::sample::select(vec![1usize, 2, 4, 8]),
                indices_offset in 0usize..3, length in 0usize..14) {
            // A text dictionary (its values any bytes) and its indices (some
            // past it, some null), sliced, against the same text decoded
            // into a plain array; hostile slices and lengths are refused.
            let mut data = Vec::new();
            let mut ends = vec![0i32];
            for word in &words {
                data.extend_from_slice(word);
                ends.push(data.len() as i32);
            }
            let dictionary_offsets = offsets(&ends);
            let dictionary = Array { layout: Layout::Utf8(4), offset: 0, length: words.len(), validity: None, values: &data, offsets: Some(&dictionary_offsets), dictionary: None };
            let mut indices = Vec::new();
            let mut validity = vec![0u8; picks.len().div_ceil(8)];
            for (row, pick) in picks.iter().enumerate() {
                let index = pick.unwrap_or(0) as i64;
                indices.extend_from_slice(&index.to_ne_bytes()[if cfg!(target_endian = "little") { 0 } else { 8 - width }..][..width]);
                if pick.is_some() {
                    validity[row / 8] |= 1 << (row % 8);
                }
            }
            let start = start.min(picks.len());
            let count = (picks.len() - start).min(length);
            let offset = start + indices_offset;
            let dictionary_array = Array { layout: Layout::Int(width), offset, length: count, validity: Some(&validity), values: &indices, offsets: None, dictionary: Some(&dictionary) };
            // The same rows decoded (when every index lies in the dictionary).
            let past = offset + count > picks.len();
            let rows: Option<Vec<Option<&Vec<u8>>>> = (offset..offset + count).filter(|_| !past).map(|row| match picks.get(row) {
                Some(Some(pick)) => words.get(*pick).map(Some),
                Some(None) => Some(None),
                None => None,
            }).collect();
            let numbers = ints(&vec![1; 16]);
            let plain_numbers = Array { layout: Layout::Int(8), offset: 0, length: count, validity: None, values: &numbers, offsets: None, dictionary: None };
            let floats = vec![0u8; 8 * 16];
            let plain_floats = Array { layout: Layout::Float64, values: &floats, ..plain_numbers };
            let plan = Plan { width: 3, ..plan(Key::Text(2)) };
            let converted = convert_batch(&[Some(plain_numbers), Some(plain_floats), Some(dictionary_array)], count, &plan, &[false, false, true], &[false, false, true]);
            match rows.filter(|_| !past) {
                None => prop_assert!(converted.is_err()),
                Some(rows) => {
                    let mut decoded_data = Vec::new();
                    let mut decoded_ends = vec![0i32];
                    let mut decoded_validity = vec![0u8; count.div_ceil(8)];
                    for (row, word) in rows.iter().enumerate() {
                        if let Some(word) = word {
                            decoded_data.extend_from_slice(word);
                            decoded_validity[row / 8] |= 1 << (row % 8);
                        }
                        decoded_ends.push(decoded_data.len() as i32);
                    }
                    let decoded_offsets = offsets(&decoded_ends);
                    let decoded = Array { layout: Layout::Utf8(4), offset: 0, length: count, validity: Some(&decoded_validity), values: &decoded_data, offsets: Some(&decoded_offsets), dictionary: None };
                    let expected = convert_batch(&[Some(plain_numbers), Some(plain_floats), Some(decoded)], count, &plan, &[false, false, true], &[false, false, true]);
                    match (converted, expected) {
                        (Ok(converted), Ok(expected)) => {
                            prop_assert_eq!(&converted.examples, &expected.examples);
                            prop_assert_eq!(&converted.keys, &expected.keys);
                            for row in 0..count {
                                prop_assert_eq!(converted.example(row), expected.example(row));
                            }
                        }
                        (converted, expected) => prop_assert_eq!(converted.err(), expected.err()),
                    }
                    let (a, b) = (Some(dictionary_array), Some(decoded));
                    // Arrow checks a dictionary's every value, pointed at or not.
                    let every_word = words.iter().all(|word| std::str::from_utf8(word).is_ok());
                    prop_assert_eq!(text_valid(&[a]), every_word);
                    prop_assert!(!every_word || text_valid(&[b]));
                }
            }
        }

        #[test]
        fn text_is_valid_only_where_every_value_reads(
                columns in prop::collection::vec(prop::option::of(hostile_array()), 0..4)) {
            let arrays: Vec<Option<Array>> = columns.iter().map(|column| column.as_ref().map(|(layout, offset, length, validity, values, offsets)| Array {
                layout: *layout, offset: *offset, length: *length, validity: validity.as_deref(), values, offsets: offsets.as_deref(), dictionary: None,
            })).collect();
            let reads = arrays.iter().enumerate().all(|(column, array)| array.is_some_and(|array| {
                array.checked(column).is_ok_and(|checked| (0..array.length).all(|row| match checked.field(row) {
                    Ok(Field::Text(data)) => std::str::from_utf8(data).is_ok(),
                    other => other.is_ok(),
                }))
            }));
            prop_assert_eq!(text_valid(&arrays), reads);
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
                Some(Array { layout: Layout::Int(8), offset: start, length: count, validity: Some(&validity), values: &values, offsets: None, dictionary: None }),
                Some(Array { layout: Layout::Float64, offset: 0, length: count, validity: None, values: &vec![0u8; 8 * count], offsets: None, dictionary: None }),
                Some(Array { layout: Layout::Utf8(8), offset: start, length: count, validity: None, values: &data, offsets: Some(&offsets), dictionary: None }),
            ];
            let plan = Plan { width: 3, ..plan(Key::Text(2)) };
            match convert_batch(&arrays, count, &plan, &[false, false, true], &[nullable, false, false]) {
                Ok(converted) => {
                    // Text found UTF-8 already, not scanned again: the same rows.
                    let mut known = Converted::default();
                    known.checked = convert_batch_into(&arrays, count, &plan, &[false, false, true],
                                                       &[nullable, false, false], true, &mut known).unwrap();
                    for row in 0..count {
                        prop_assert_eq!(known.example(row), converted.example(row));
                        prop_assert_eq!(known.key(row), converted.key(row));
                    }
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
    }
}
