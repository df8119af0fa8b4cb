//! An Arrow array as the table kernel reads it: its plain buffers
//! (validity bitmap, values, offsets, as pyarrow's `Array.buffers()` gives
//! them, with the array's offset and length) checked against what its
//! offset and length say, once, before any row; then each row's value as
//! the Python path sees it (`to_pydict`: `Field`). Buffers that do not hold
//! what they say are refused whole (`BatchError`), never read out of
//! bounds. A dictionary array is its indices (an integer array) with its
//! dictionary (an array of any other layout): every index is checked to
//! lie in the dictionary, and a row's value is the dictionary's value at
//! its index (`to_pydict` gives the same). `arrow.rs` converts a record
//! batch of such arrays.

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
    /// A dictionary array's values (`self` holding its integer indices).
    pub dictionary: Option<&'a Array<'a>>,
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
    /// A dictionary index outside its dictionary (or a dictionary of
    /// dictionaries, or indices that are not integers).
    BadIndex { column: usize, row: usize },
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
pub(crate) struct Checked<'a> {
    array: Array<'a>,
    column: usize,
    /// Every value of a text array (a dictionary's: of its dictionary) is
    /// UTF-8 (`whole_utf8`): `field` need not check each again.
    utf8: bool,
}

/// `length` bits or items past `offset`, as a count of items, without overflow.
fn end_of(offset: usize, length: usize) -> Option<usize> {
    offset.checked_add(length)
}

impl<'a> Array<'a> {
    /// The array, once every buffer holds what its offset and length say
    /// (and offsets, where there are some, rise within the data).
    pub(crate) fn checked(self, column: usize) -> Result<Checked<'a>, BatchError> {
        self.checked_with(column, false)
    }

    /// As `checked`, `utf8_known`: its text (a dictionary's, whole) was
    /// found UTF-8 already (`arrow::text_valid`, or Arrow's full
    /// validation): not scanned again. (Its offsets are checked all the
    /// same; text that is not UTF-8 after all is copied as bytes, never read
    /// as characters, and never out of its buffer.)
    pub(crate) fn checked_with(self, column: usize, utf8_known: bool) -> Result<Checked<'a>, BatchError> {
        if let Some(dictionary) = self.dictionary {
            return self.checked_indices(dictionary, column, utf8_known);
        }
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
        let text = matches!(self.layout, Layout::Utf8(_));
        let utf8 = (utf8_known && text) || self.whole_utf8();
        Ok(Checked { array: self.without_all_set_validity(), column, utf8 })
    }

    /// A dictionary array checked: its dictionary (itself no dictionary
    /// array) as any array, its indices as an integer array each of whose
    /// non-null values lies in the dictionary, so that `field` may read
    /// the dictionary at any of them.
    fn checked_indices(self, dictionary: &'a Array<'a>, column: usize, utf8_known: bool)
                       -> Result<Checked<'a>, BatchError> {
        if dictionary.dictionary.is_some() || !matches!(self.layout, Layout::Int(_) | Layout::UInt(_)) {
            return Err(BatchError::BadIndex { column, row: 0 });
        }
        let values = dictionary.checked_with(column, utf8_known)?;
        Array { dictionary: None, ..self }.checked(column)?;
        let checked = Checked { array: self.without_all_set_validity(), column, utf8: values.utf8 };
        for row in 0..self.length {
            checked.dictionary_index(row)?;
        }
        Ok(checked)
    }

    /// The array without its validity bitmap where every row is valid (its
    /// bitmap checked to hold them): a column with no null, which Parquet's
    /// reader gives a bitmap of set bits, then costs its rows no bit each.
    fn without_all_set_validity(self) -> Self {
        match self.validity {
            Some(bits) if all_set(bits, self.offset, self.length) => Array { validity: None, ..self },
            _ => self,
        }
    }

    /// Whether the array is text whose every value is UTF-8 (its offsets
    /// checked), known at once: the text they span together is, and each
    /// value starts at a character's start. (One pass over the bytes,
    /// where a check per value costs a call and a setup per value; false
    /// sends `field` back to checking each, which finds the row at fault.)
    fn whole_utf8(&self) -> bool {
        let (Layout::Utf8(size), Some(offsets)) = (self.layout, self.offsets) else { return false };
        let bound = |index| offset_at(offsets, size, index).unwrap_or(0);
        let (first, last) = (bound(self.offset), bound(self.offset + self.length));
        let Some(Ok(text)) = self.values.get(first..last).map(std::str::from_utf8) else { return false };
        (1..self.length).all(|row| text.is_char_boundary(bound(self.offset + row) - first))
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

/// Whether bits `offset` .. `offset + length` of `bits` (which holds
/// them) are all set: the whole bytes among them compared a byte at a time.
fn all_set(bits: &[u8], offset: usize, length: usize) -> bool {
    let end = offset + length;
    let (first_whole, end_whole) = (offset.div_ceil(8), end / 8);
    if first_whole >= end_whole {
        return (offset..end).all(|index| bit(bits, index));
    }
    (offset..first_whole * 8).all(|index| bit(bits, index))
        && bits[first_whole..end_whole].iter().all(|&byte| byte == 0xFF)
        && (end_whole * 8..end).all(|index| bit(bits, index))
}

/// Item `index` of a checked buffer of `width`-byte integers as an index:
/// None where it is negative (`signed`) or beyond usize.
fn unsigned_index(values: &[u8], width: usize, index: usize, signed: bool) -> Option<usize> {
    let bytes = item(values, width, index);
    let value: i128 = match (width, signed) {
        (1, true) => i8::from_ne_bytes(bytes.try_into().ok()?).into(),
        (2, true) => i16::from_ne_bytes(bytes.try_into().ok()?).into(),
        (4, true) => i32::from_ne_bytes(bytes.try_into().ok()?).into(),
        (8, true) => i64::from_ne_bytes(bytes.try_into().ok()?).into(),
        (1, false) => u8::from_ne_bytes(bytes.try_into().ok()?).into(),
        (2, false) => u16::from_ne_bytes(bytes.try_into().ok()?).into(),
        (4, false) => u32::from_ne_bytes(bytes.try_into().ok()?).into(),
        (8, false) => u64::from_ne_bytes(bytes.try_into().ok()?).into(),
        _ => return None,
    };
    usize::try_from(value).ok()
}

/// The `width` bytes of item `index` of a checked fixed-width buffer.
fn item(values: &[u8], width: usize, index: usize) -> &[u8] {
    &values[index * width..(index + 1) * width]
}

impl<'a> Checked<'a> {
    /// Every value is known UTF-8 text at once (`Array::whole_utf8`).
    pub(crate) fn utf8(&self) -> bool {
        self.utf8
    }

    /// The layout of the values: a dictionary's values', else the array's.
    pub(crate) fn value_layout(&self) -> Layout {
        self.array.dictionary.map_or(self.array.layout, |dictionary| dictionary.layout)
    }

    /// How many values a dictionary array's dictionary holds; None for
    /// an array without one.
    pub(crate) fn dictionary_length(&self) -> Option<usize> {
        self.array.dictionary.map(|dictionary| dictionary.length)
    }

    /// Row `row` of a dictionary array as the index of its value in the
    /// dictionary (checked to lie in it: `Array::checked_indices`), None
    /// for a null row; the same error as `field` where the row has no
    /// index in the dictionary (or the array no dictionary).
    pub(crate) fn dictionary_index(&self, row: usize) -> Result<Option<usize>, BatchError> {
        let array = &self.array;
        let at = array.offset + row;
        if array.validity.is_some_and(|bits| !bit(bits, at)) {
            return Ok(None);
        }
        let length = self.dictionary_length().unwrap_or(0);
        // (read as its own width: `field`'s widening to an i64 costs a
        // row more than the lookup it serves)
        let index = match array.layout {
            Layout::Int(width) | Layout::UInt(width) => unsigned_index(array.values, width, at, array.layout == Layout::Int(width)),
            _ => None,
        };
        match index {
            Some(index) if index < length => Ok(Some(index)),
            _ => Err(BatchError::BadIndex { column: self.column, row }),
        }
    }

    /// Row `row`'s value (row < length, which the caller checked).
    #[inline(always)]
    pub(crate) fn field(&self, row: usize) -> Result<Field<'a>, BatchError> {
        let array = &self.array;
        let index = array.offset + row;
        if array.validity.is_some_and(|bits| !bit(bits, index)) {
            return Ok(Field::Null);
        }
        if let Some(dictionary) = array.dictionary {
            return self.dictionary_field(dictionary, row);
        }
        let values = array.values;
        Ok(match array.layout {
            // (the common width read as it is: the widening below costs a
            // row's field more than the rest of its read)
            Layout::Int(8) => Field::Int(i64::from_ne_bytes(item(values, 8, index).try_into().unwrap_or_default())),
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
                } else if self.utf8 || std::str::from_utf8(data).is_ok() {
                    Field::Text(data)
                } else {
                    return Err(BatchError::NotUtf8 { column: self.column, row });
                }
            }
        })
    }
}

impl<'a> Checked<'a> {
    /// A dictionary array's row `row`: its dictionary's value at its index
    /// (checked to lie in the dictionary: `Array::checked_indices`), a text
    /// value's fault reported at `row`.
    fn dictionary_field(&self, dictionary: &'a Array<'a>, row: usize) -> Result<Field<'a>, BatchError> {
        let (column, at_row) = (self.column, |error| match error {
            BatchError::NotUtf8 { column, .. } => BatchError::NotUtf8 { column, row },
            other => other,
        });
        let values = Checked { array: *dictionary, column, utf8: self.utf8 };
        match self.dictionary_index(row)? {
            None => Ok(Field::Null),
            Some(index) => values.field(index).map_err(at_row),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn ints(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|value| value.to_ne_bytes()).collect()
    }

    pub(crate) fn offsets(values: &[i32]) -> Vec<u8> {
        values.iter().flat_map(|value| value.to_ne_bytes()).collect()
    }

    #[test]
    fn narrow_integers_are_sign_extended_and_slices_offset() {
        let values = [0x80u8, 0x7F, 0xFF];
        let array = Array { layout: Layout::Int(1), offset: 1, length: 2, validity: Some(&[0b101]), values: &values, offsets: None, dictionary: None };
        let checked = array.checked(0).unwrap();
        assert_eq!(checked.field(0), Ok(Field::Null));
        assert_eq!(checked.field(1), Ok(Field::Int(-1)));
        let huge = u64::MAX.to_ne_bytes();
        let array = Array { layout: Layout::UInt(8), offset: 0, length: 1, validity: None, values: &huge, offsets: None, dictionary: None };
        assert_eq!(array.checked(0).unwrap().field(0), Ok(Field::Huge));
    }

    #[test]
    fn inconsistent_buffers_are_refused() {
        let values = ints(&[1, 2]);
        let array = Array { layout: Layout::Int(8), offset: 1, length: 2, validity: None, values: &values, offsets: None, dictionary: None };
        assert_eq!(array.checked(0).err(), Some(BatchError::ShortBuffer { column: 0 }));
        let bad = offsets(&[0, 5, 2]);
        let array = Array { layout: Layout::Binary(4), offset: 0, length: 2, validity: None, values: b"abcde", offsets: Some(&bad), dictionary: None };
        assert_eq!(array.checked(0).err(), Some(BatchError::BadOffsets { column: 0, row: 1 }));
        let negative = offsets(&[-1, 0]);
        let array = Array { layout: Layout::Binary(4), offset: 0, length: 1, validity: None, values: b"", offsets: Some(&negative), dictionary: None };
        assert_eq!(array.checked(0).err(), Some(BatchError::BadOffsets { column: 0, row: 0 }));
        let array = Array { layout: Layout::Int(8), offset: usize::MAX, length: 2, validity: None, values: &values, offsets: None, dictionary: None };
        assert!(array.checked(0).is_err());
    }

    #[test]
    fn text_is_utf8_value_by_value_though_checked_whole() {
        // "é" whole, but cut inside the character: neither value is UTF-8.
        let cut = offsets(&[0, 1, 2]);
        let array = Array { layout: Layout::Utf8(4), offset: 0, length: 2, validity: None, values: "é".as_bytes(), offsets: Some(&cut), dictionary: None };
        let checked = array.checked(0).unwrap();
        assert!(!checked.utf8);
        assert_eq!(checked.field(0), Err(BatchError::NotUtf8 { column: 0, row: 0 }));
        // Cut between characters (past a sliced-off head), each value is.
        let whole = offsets(&[0, 1, 3, 5]);
        let values = b"\xff\xc3\xa9\xc3\xa9";
        let array = Array { layout: Layout::Utf8(4), offset: 1, length: 2, validity: None, values, offsets: Some(&whole), dictionary: None };
        let checked = array.checked(3).unwrap();
        assert!(checked.utf8);
        assert_eq!(checked.field(1), Ok(Field::Text("é".as_bytes())));
    }

    proptest! {
        #[test]
        fn all_set_is_every_bit_set(bits in prop::collection::vec(
                                        prop::sample::select(vec![0xFFu8, 0xFE, 0x7F, 0xEF, 0x00]), 0..6),
                                    offset in 0usize..48, length in 0usize..48) {
            let length = length.min((bits.len() * 8).saturating_sub(offset));
            let offset = offset.min(bits.len() * 8);
            prop_assert_eq!(all_set(&bits, offset, length), (offset..offset + length).all(|index| bit(&bits, index)));
        }

        #[test]
        fn an_array_reads_alike_without_a_bitmap_of_set_bits(values in prop::collection::vec(any::<i64>(), 0..40),
                                                              offset in 0usize..8, unset in prop::option::of(0usize..40)) {
            let data = ints(&values);
            let offset = offset.min(values.len());
            let length = values.len() - offset;
            let mut validity = vec![0xFFu8; 6];
            if let Some(index) = unset.filter(|index| *index < values.len()) {
                validity[index / 8] &= !(1 << (index % 8));
            }
            let array = Array { layout: Layout::Int(8), offset, length, validity: Some(&validity), values: &data, offsets: None, dictionary: None };
            let checked = array.checked(0).unwrap();
            // The bitmap is dropped only where it sets every row's bit.
            prop_assert_eq!(checked.array.validity.is_none(), all_set(&validity, offset, length));
            for row in 0..length {
                let expected = if bit(&validity, offset + row) { Field::Int(values[offset + row]) } else { Field::Null };
                prop_assert_eq!(checked.field(row), Ok(expected));
            }
        }

        #[test]
        fn a_dictionary_index_is_its_integer_field(bytes in prop::collection::vec(any::<u8>(), 8..40),
                                                   width in prop::sample::select(vec![1usize, 2, 4, 8]),
                                                   signed: bool, length in 0usize..300, valid: bool) {
            // Read at the index's own width, as `field` reads the integer
            // (widened to an i64) and `checked_indices` once checked it.
            let dictionary = Array { layout: Layout::Int(8), offset: 0, length, validity: None, values: &[], offsets: None, dictionary: None };
            let layout = if signed { Layout::Int(width) } else { Layout::UInt(width) };
            let rows = bytes.len() / width;
            let validity = [if valid { 0xFF } else { 0x55 }; 5];
            let indices = Array { layout, offset: 0, length: rows, validity: Some(&validity), values: &bytes, offsets: None, dictionary: Some(&dictionary) };
            let checked = Checked { array: indices, column: 2, utf8: false };
            let plain = Checked { array: Array { dictionary: None, ..indices }, column: 2, utf8: false };
            for row in 0..rows {
                let expected = match plain.field(row) {
                    Ok(Field::Null) => Ok(None),
                    Ok(Field::Int(index)) if usize::try_from(index).is_ok_and(|index| index < length) => Ok(Some(index as usize)),
                    _ => Err(BatchError::BadIndex { column: 2, row }),
                };
                prop_assert_eq!(checked.dictionary_index(row), expected);
            }
        }
    }

    #[test]
    fn a_dictionary_array_reads_its_values_through_its_indices() {
        // Dictionary ["ok", null, "\xff"], sliced from 1: rows point at 2, 0, null, 1.
        let (text, text_offsets) = (b"ok\xff".to_vec(), offsets(&[0, 2, 2, 3]));
        let dictionary = Array { layout: Layout::Utf8(4), offset: 0, length: 3, validity: Some(&[0b101]), values: &text, offsets: Some(&text_offsets), dictionary: None };
        let indices = [9i8 as u8, 2, 0, 7, 1];
        let array = Array { layout: Layout::Int(1), offset: 1, length: 4, validity: Some(&[0b10111]), values: &indices, offsets: None, dictionary: Some(&dictionary) };
        let checked = array.checked(5).unwrap();
        assert!(!checked.utf8());
        assert_eq!(checked.value_layout(), Layout::Utf8(4));
        assert_eq!(checked.field(0), Err(BatchError::NotUtf8 { column: 5, row: 0 }));
        assert_eq!(checked.field(1), Ok(Field::Text(b"ok")));
        assert_eq!(checked.field(2), Ok(Field::Null));
        assert_eq!(checked.field(3), Ok(Field::Null));
        // An index past the dictionary (9 unsliced, or -1) refuses the array.
        let whole = Array { offset: 0, ..array };
        assert_eq!(whole.checked(5).err(), Some(BatchError::BadIndex { column: 5, row: 0 }));
        let negative = [0xFFu8];
        let array = Array { offset: 0, length: 1, validity: None, values: &negative, ..array };
        assert_eq!(array.checked(5).err(), Some(BatchError::BadIndex { column: 5, row: 0 }));
        // Indices that are not integers, or a dictionary of dictionaries.
        let nested = Array { layout: Layout::Int(1), offset: 0, length: 1, validity: None, values: &[0], offsets: None, dictionary: Some(&dictionary) };
        for array in [Array { layout: Layout::Float32, values: &[0; 4], ..array }, Array { dictionary: Some(&nested), values: &[0], ..array }] {
            assert!(matches!(array.checked(5), Err(BatchError::BadIndex { .. })));
        }
    }

    proptest! {
        #[test]
        fn every_int_reads_back_from_any_width(value in any::<i64>(), width in prop::sample::select(vec![1usize, 2, 4, 8])) {
            let bytes = value.to_ne_bytes();
            let narrow = if cfg!(target_endian = "little") { &bytes[..width] } else { &bytes[8 - width..] };
            let expected = match width { 1 => i64::from(value as i8), 2 => i64::from(value as i16), 4 => i64::from(value as i32), _ => value };
            let array = Array { layout: Layout::Int(width), offset: 0, length: 1, validity: None, values: narrow, offsets: None, dictionary: None };
            prop_assert_eq!(array.checked(0).unwrap().field(0), Ok(Field::Int(expected)));
        }
    }
}
