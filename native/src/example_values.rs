//! A serialized tf.train.Example read into its values: what
//! `schemas/example.py` `decode_example` gives through protobuf, for an
//! Example in the canonical encoding every deterministic serializer writes
//! (TensorFlow's, protobuf's, recordforge's). Canonical here is the form
//! `schemas/example_scan.py` reads: names in any order (serializers sort
//! them differently: C++ by bytes, upb with a longer name before its
//! prefix), none twice. The features come out in name order, the order
//! the Python path sorts protobuf's map into.
//!
//! Anything else gives None, bytes protobuf refuses and valid Examples
//! alike (features merged from two fields, a name twice, unpacked or split
//! numbers, unknown fields, a varint whose tenth byte carries bits past
//! the 64th): the caller then parses with protobuf,
//! which decides by its own rules. So this reader never has to agree with
//! protobuf on anything but canonical bytes, where the answer is plain.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList};

/// One feature's values, as slices of the record (checked when read, and
/// walked again only when asked for: reading a record allocates nothing
/// per feature).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Values<'a> {
    /// A Feature with no list set: protobuf gives ("bytes", []).
    Unset,
    /// A BytesList's body: `count` length-delimited items (`items`).
    Bytes { list: &'a [u8], count: usize },
    /// Packed little-endian float32s (a multiple of 4 bytes).
    Floats(&'a [u8]),
    /// An Int64List's packed run: `count` varints (`ints`).
    Ints { packed: &'a [u8], count: usize },
}

/// (name, values) per feature, in increasing name (byte) order.
pub type Features<'a> = Vec<(&'a str, Values<'a>)>;

/// A varint at `data[*at..]`: at most ten bytes, the tenth carrying no
/// bits past the 64th (protobuf drops those; such a record is left to it).
fn varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for index in 0..10 {
        let byte = *data.get(*at)?;
        *at += 1;
        if index == 9 && byte > 1 {
            return None;
        }
        value |= u64::from(byte & 0x7F) << (7 * index);
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// The payload of a length-delimited field with the one-byte tag `tag`
/// at `data[*at..]`, which must lie inside `data`.
fn field<'a>(data: &'a [u8], at: &mut usize, tag: u8) -> Option<&'a [u8]> {
    if *data.get(*at)? != tag {
        return None;
    }
    *at += 1;
    let length = usize::try_from(varint(data, at)?).ok()?;
    let end = at.checked_add(length).filter(|end| *end <= data.len())?;
    let payload = &data[*at..end];
    *at = end;
    Some(payload)
}

/// A message that is one length-delimited field with `tag` and nothing
/// else (an empty message: an empty payload).
fn only_field(data: &[u8], tag: u8) -> Option<&[u8]> {
    if data.is_empty() {
        return Some(data);
    }
    let mut at = 0;
    let payload = field(data, &mut at, tag)?;
    (at == data.len()).then_some(payload)
}

const BYTES_LIST: u8 = 0x0a;
const FLOAT_LIST: u8 = 0x12;
const INT64_LIST: u8 = 0x1a;
/// Field 1, length-delimited: Example.features, Features' map entries,
/// an entry's key, a list's values.
const FIELD_1: u8 = 0x0a;
/// Field 2, length-delimited: an entry's value.
const FIELD_2: u8 = 0x12;

fn values(feature: &[u8]) -> Option<Values<'_>> {
    if feature.is_empty() {
        return Some(Values::Unset);
    }
    let mut at = 0;
    let kind = feature[0];
    let list = match kind {
        BYTES_LIST | FLOAT_LIST | INT64_LIST => field(feature, &mut at, kind)?,
        _ => return None,
    };
    if at != feature.len() {
        return None; // a second list: protobuf keeps the last
    }
    match kind {
        BYTES_LIST => {
            let (mut count, mut at) = (0, 0);
            while at < list.len() {
                field(list, &mut at, FIELD_1)?;
                count += 1;
            }
            Some(Values::Bytes { list, count })
        }
        FLOAT_LIST => {
            let packed = only_field(list, FIELD_1)?;
            (packed.len() % 4 == 0).then_some(Values::Floats(packed))
        }
        _ => {
            let packed = only_field(list, FIELD_1)?;
            let (mut count, mut at) = (0, 0);
            while at < packed.len() {
                varint(packed, &mut at)?;
                count += 1;
            }
            Some(Values::Ints { packed, count })
        }
    }
}

impl<'a> Values<'a> {
    /// A bytes list's items (none for the other kinds).
    pub fn items(self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let list = match self {
            Values::Bytes { list, .. } => list,
            _ => &[],
        };
        let mut at = 0;
        // (checked by `values`: every item is whole)
        std::iter::from_fn(move || (at < list.len()).then(|| field(list, &mut at, FIELD_1)).flatten())
    }

    /// An int64 list's values (none for the other kinds).
    pub fn ints(self) -> impl Iterator<Item = i64> + 'a {
        let packed = match self {
            Values::Ints { packed, .. } => packed,
            _ => &[],
        };
        let mut at = 0;
        // (checked by `values`: every varint is whole and fits)
        std::iter::from_fn(move || (at < packed.len()).then(|| varint(packed, &mut at)).flatten().map(|value| value as i64))
    }
}

/// The features of a canonical serialized Example, or None (see the module).
pub fn canonical_features(record: &[u8]) -> Option<Features<'_>> {
    let mut features = Vec::new();
    canonical_features_into(record, &mut features).then_some(features)
}

/// `canonical_features` into `features` (cleared first; a caller reading
/// many records reuses it): false where the record is left to protobuf.
pub fn canonical_features_into<'a>(record: &'a [u8], features: &mut Features<'a>) -> bool {
    features.clear();
    read_features(record, features).is_some()
}

fn read_features<'a>(record: &'a [u8], features: &mut Features<'a>) -> Option<()> {
    let entries = only_field(record, FIELD_1)?;
    let mut at = 0;
    while at < entries.len() {
        let entry = field(entries, &mut at, FIELD_1)?;
        let mut inside = 0;
        let key = field(entry, &mut inside, FIELD_1)?;
        let value = field(entry, &mut inside, FIELD_2)?;
        if inside != entry.len() {
            return None;
        }
        let name = std::str::from_utf8(key).ok()?;
        features.push((name, values(value)?));
    }
    if !features.windows(2).all(|pair| pair[0].0 < pair[1].0) {
        features.sort_unstable_by(|a, b| a.0.cmp(b.0));
        if features.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return None; // a name twice: protobuf keeps the last
        }
    }
    Some(())
}

impl Values<'_> {
    /// The kind protobuf's oneof names, None where no list is set.
    fn kind(&self) -> Option<&'static str> {
        match self {
            Values::Unset => None,
            Values::Bytes { .. } => Some("bytes"),
            Values::Floats(_) => Some("float"),
            Values::Ints { .. } => Some("int64"),
        }
    }

    /// The values as a Python list: bytes, floats (of the float32 stored),
    /// ints.
    fn to_list<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        match self {
            Values::Unset => Ok(PyList::empty(py)),
            Values::Bytes { .. } => PyList::new(py, self.items().map(|item| PyBytes::new(py, item)).collect::<Vec<_>>()),
            Values::Floats(packed) => PyList::new(
                py,
                packed.chunks_exact(4).map(|four| {
                    PyFloat::new(py, f64::from(f32::from_le_bytes([four[0], four[1], four[2], four[3]])))
                }),
            ),
            Values::Ints { .. } => PyList::new(py, self.ints().collect::<Vec<_>>()),
        }
    }
}

/// `job` of the features `canonical_features` reads from `record` (bytes,
/// or any contiguous buffer), None where it leaves the record to protobuf.
fn with_features<'py, T>(py: Python<'py>, record: &Bound<'py, PyAny>,
                         job: impl Fn(Features) -> PyResult<T>) -> PyResult<Option<T>> {
    let read = |data: &[u8]| -> PyResult<Option<T>> {
        match crate::guarded(|| canonical_features(data))? {
            Some(features) => job(features).map(Some),
            None => Ok(None),
        }
    };
    if let Ok(bytes) = record.downcast::<PyBytes>() {
        return read(bytes.as_bytes());
    }
    let buffer = PyBuffer::<u8>::get(record)?;
    crate::with_bytes(py, &buffer, read)?
}

/// `canonical_features` as the Python path's dict: name -> list of values
/// (bytes, float of the float32 stored, int), in name order; None where
/// the record is left to protobuf. `record`: bytes or any contiguous
/// buffer.
#[pyfunction]
pub fn example_values<'py>(py: Python<'py>, record: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    with_features(py, record, |features| {
        let dict = PyDict::new(py);
        for (name, values) in features {
            dict.set_item(name, values.to_list(py)?)?;
        }
        Ok(dict)
    })
}

/// As `example_values`, each feature's values with the kind of list that
/// holds them: name -> (kind, list), the kind None for a Feature with no
/// list set (where `decode_example` says "bytes"); for the loaders, which
/// tell an unset feature from an empty list.
#[pyfunction]
pub fn example_features<'py>(py: Python<'py>, record: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    with_features(py, record, |features| {
        let dict = PyDict::new(py);
        for (name, values) in features {
            dict.set_item(name, (values.kind(), values.to_list(py)?))?;
        }
        Ok(dict)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(name: &[u8], feature: &[u8]) -> Vec<u8> {
        let mut inner = vec![FIELD_1, name.len() as u8];
        inner.extend_from_slice(name);
        inner.extend_from_slice(&[FIELD_2, feature.len() as u8]);
        inner.extend_from_slice(feature);
        let mut out = vec![FIELD_1, inner.len() as u8];
        out.extend(inner);
        out
    }

    fn example(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut out = vec![FIELD_1, body.len() as u8];
        out.extend(body);
        out
    }

    #[test]
    fn reads_each_kind_in_name_order() {
        let ints = [INT64_LIST, 4, FIELD_1, 2, 0x96, 0x01];
        let floats = [FLOAT_LIST, 6, FIELD_1, 4, 0, 0, 0xc0, 0x3f];
        let bytes = [BYTES_LIST, 5, FIELD_1, 3, b'a', b'b', b'c'];
        let record = example(&[entry(b"a", &ints), entry(b"b", &floats), entry(b"c", &bytes), entry(b"d", &[])]);
        let features = canonical_features(&record).unwrap();
        assert_eq!(features[0].0, "a");
        assert_eq!(features[0].1.ints().collect::<Vec<_>>(), [150]);
        assert_eq!(features[1], ("b", Values::Floats(&[0, 0, 0xc0, 0x3f])));
        assert_eq!(features[2].1.items().collect::<Vec<_>>(), [b"abc".as_slice()]);
        assert_eq!(features[2].1, Values::Bytes { list: &bytes[2..], count: 1 });
        assert_eq!(features[3], ("d", Values::Unset));
        assert_eq!(canonical_features(&[]), Some(vec![]));
        assert_eq!(canonical_features(&[FIELD_1, 0]), Some(vec![]));
    }

    #[test]
    fn sorts_names_written_in_another_order() {
        let one = [INT64_LIST, 3, FIELD_1, 1, 1];
        let record = example(&[entry(b"ab", &one), entry(b"a", &one), entry(b"", &one)]);
        let names: Vec<&str> = canonical_features(&record).unwrap().into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["", "a", "ab"]);
    }

    #[test]
    fn leaves_what_is_not_canonical_to_protobuf() {
        let one = [INT64_LIST, 3, FIELD_1, 1, 1];
        // a name twice, in order or not
        assert_eq!(canonical_features(&example(&[entry(b"a", &one), entry(b"a", &one)])), None);
        assert_eq!(canonical_features(&example(&[entry(b"a", &one), entry(b"b", &one), entry(b"a", &one)])), None);
        // unpacked int (wire type 0), two packed runs, two lists in a Feature
        assert_eq!(canonical_features(&example(&[entry(b"a", &[INT64_LIST, 2, 0x08, 1])])), None);
        assert_eq!(canonical_features(&example(&[entry(b"a", &[INT64_LIST, 6, FIELD_1, 1, 1, FIELD_1, 1, 2])])), None);
        assert_eq!(canonical_features(&example(&[entry(b"a", &[one, one].concat())])), None);
        // features twice, a name that is not UTF-8, floats cut short
        assert_eq!(canonical_features(&[FIELD_1, 0, FIELD_1, 0]), None);
        assert_eq!(canonical_features(&example(&[entry(&[0xff], &one)])), None);
        assert_eq!(canonical_features(&example(&[entry(b"a", &[FLOAT_LIST, 5, FIELD_1, 3, 0, 0, 0])])), None);
        // a tenth varint byte past the 64th bit, an eleventh byte
        for tail in [&[0x02][..], &[0xff, 0x00][..]] {
            let mut packed = vec![0xff; 9];
            packed.extend_from_slice(tail);
            let mut list = vec![FIELD_1, packed.len() as u8];
            list.extend(packed);
            let mut feature = vec![INT64_LIST, list.len() as u8];
            feature.extend(list);
            assert_eq!(canonical_features(&example(&[entry(b"a", &feature)])), None);
        }
    }

    proptest! {
        #[test]
        fn any_bytes_give_an_answer_inside_them(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(features) = canonical_features(&data) {
                for (name, values) in features {
                    prop_assert!(name.len() <= data.len());
                    prop_assert!(values.items().map(|item| item.len()).sum::<usize>() <= data.len());
                    let count = match values {
                        Values::Bytes { count, .. } => { prop_assert_eq!(values.items().count(), count); count }
                        Values::Ints { count, .. } => { prop_assert_eq!(values.ints().count(), count); count }
                        _ => 0,
                    };
                    prop_assert!(count <= data.len());
                }
            }
        }
    }
}
