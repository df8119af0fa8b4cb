//! The table kernel for a TFRecord source: a run of framed records, each
//! a serialized Example (`transforms/readers/tfrecords.py` hands the
//! records whose CRCs it checked, back to back as the file holds them) ->
//! each row's serialized Example and key and the checked values per
//! feature, as `arrow::convert_batch` gives them for a record batch.
//!
//! A row's values are its Example's features (name -> list), which the
//! Python row path checks like any other row: a list is never a missing
//! value (no null text applies), and a scalar feature takes a list's only
//! item by the rules of that item's Python value (`values.element_converter`).
//! The kernel reads a record with `example_values::canonical_features` and
//! takes, per feature, exactly the one-item lists whose item the Arrow
//! kernel's rules cover for the same Python value (`arrow::check`): an
//! int64 item (an int), a float item (the float32's double), a bytes item
//! as bytes for a bytes feature and, when it is UTF-8, as the text Python
//! decodes it to for every other feature (`_to_text_bytes`, `_int_from_text`,
//! labels, timestamps). A feature absent from the Example is a null (left
//! out where optional without a default). Anything else declines its row
//! (a record protobuf must read, an empty or longer list, an unset list,
//! an int for a float feature ...), which Python converts or writes as a
//! dead letter, exactly as without the extension.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::arrow;
use crate::arrow_array::Field;
use crate::column::Column;
use crate::example_values::{canonical_features_into, Values};
use crate::json::RunError;
use crate::nulls::Part;
use crate::rules::{Key, Plan, Rule};
use crate::table::{give_row, Columns, Rows};

/// A TFRecord frame's header (length, its masked CRC) and footer (the data's).
const HEADER: usize = 12;
const FOOTER: usize = 4;

/// The payloads of the `count` framed records that make up `run`, or None
/// when its framing does not hold exactly `count` records (no length is
/// trusted past the run's end). The CRCs are the reader's to check.
pub fn payloads(run: &[u8], count: usize) -> Option<Vec<&[u8]>> {
    // (a capacity only as large as the run could hold)
    let mut found = Vec::with_capacity(count.min(run.len() / (HEADER + FOOTER)));
    let mut at = 0usize;
    for _ in 0..count {
        let length = run.get(at..at + 8)?;
        let length = usize::try_from(u64::from_le_bytes(length.try_into().ok()?)).ok()?;
        let start = at.checked_add(HEADER)?;
        let end = start.checked_add(length)?;
        let next = end.checked_add(FOOTER)?;
        if next > run.len() {
            return None;
        }
        found.push(&run[start..end]);
        at = next;
    }
    (at == run.len()).then_some(found)
}

/// The one item of a feature's list as the field the Arrow kernel's rules
/// take for its Python value, or None (the row is declined). `text`: a
/// string feature; `rule`: the feature's.
fn item_field<'a>(values: Values<'a>, rule: &Rule, text: bool) -> Option<Field<'a>> {
    match values {
        Values::Ints { count: 1, .. } => values.ints().next().map(Field::Int),
        Values::Floats(packed) if packed.len() == 4 => {
            let four = [packed[0], packed[1], packed[2], packed[3]];
            Some(Field::Float(f64::from(f32::from_le_bytes(four))))
        }
        Values::Bytes { count: 1, .. } => {
            let item = values.items().next()?;
            if matches!(rule, Rule::Text { .. }) && !text {
                return Some(Field::Binary(item));
            }
            // (Python decodes the bytes first: text that is not UTF-8 is its dead letter)
            std::str::from_utf8(item).ok().map(|_| Field::Text(item))
        }
        _ => None,
    }
}

/// Converts a run of `count` framed Examples by `plan`, whose column `i`
/// is the feature named `names[i]`; `text` and `nullable` per feature as
/// `arrow::convert_batch` takes them. Gives each row to `rows` and the
/// checked columns back.
pub fn convert_examples_into<'a>(run: &'a [u8], count: usize, plan: &Plan, names: &[Vec<u8>], text: &[bool],
                                 nullable: &[bool], rows: &mut impl Rows) -> Result<Columns<'a>, RunError> {
    let told = text.len() == plan.features.len() && nullable.len() == plan.features.len();
    if names.len() != plan.width || !told || matches!(plan.key, Key::Text(_)) {
        return Err(RunError::Columns);
    }
    let records = payloads(run, count).ok_or(RunError::RowCount { expected: count, found: 0 })?;
    let mut checked: Columns = plan.features.iter().map(|_| Column::with_capacity(count)).collect();
    // One row's entries and key, reused from row to row.
    let (mut entries, mut key) = (Vec::new(), Vec::new());
    let key_position = plan.key.feature();
    // One record's features, reused from record to record.
    let mut found = Vec::new();
    for record in records {
        entries.clear();
        let features = canonical_features_into(record, &mut found).then_some(&found);
        let mut declined = features.is_none();
        let mut key_value = None;
        for (position, feature) in plan.features.iter().enumerate() {
            let part = match &features {
                // (a record protobuf must read: no value of it is the kernel's)
                None => Part::Declined,
                Some(features) => {
                    let name = names[feature.column].as_slice();
                    match features.binary_search_by(|(found, _)| found.as_bytes().cmp(name)) {
                        Err(_) if nullable[position] => Part::Omitted,
                        Err(_) => Part::Declined,
                        Ok(at) => item_field(features[at].1, &feature.rule, text[position])
                            .and_then(|field| arrow::check(&feature.rule, text[position], field))
                            .map_or(Part::Declined, Part::Stored),
                    }
                }
            };
            declined |= part == Part::Declined;
            let stored = part.record(feature, &mut entries, &mut checked[position]);
            if key_position == Some(position) {
                key_value = stored;
            }
        }
        // (never keyed by a column's raw value: refused above)
        give_row(rows, plan, &entries, &mut key, key_value.as_ref(), declined, |_, _| false);
    }
    Ok(checked)
}

/// `example_run_check(run, count) -> list[int] | None`: the indices of the
/// records of a run of `count` framed records that the kernel leaves to
/// protobuf (not in the canonical encoding: maybe not an Example at all),
/// for the reader to read at once; None when the framing does not hold
/// `count` records.
#[pyfunction]
pub(crate) fn example_run_check(py: Python<'_>, run: PyBuffer<u8>, count: usize) -> PyResult<Option<Vec<usize>>> {
    crate::with_bytes(py, &run, |bytes| {
        crate::guarded(|| {
            let mut found = Vec::new();
            payloads(bytes, count).map(|records| {
                records.iter().enumerate()
                    .filter(|(_, record)| !canonical_features_into(record, &mut found))
                    .map(|(index, _)| index)
                    .collect()
            })
        })
    })?
}

/// `convert_example_run(run, count, plan, names) -> (framed, offsets, keys, checked, digests, declined) | None`:
/// a run of `count` framed Examples converted by `plan` (a `CsvPlan`
/// whose column `i` is the feature named `names[i]`; not keyed by a
/// column's raw text) as `convert_csv_run` answers; None when the run's
/// framing does not hold `count` records (the Python path takes the batch).
#[pyfunction]
pub(crate) fn convert_example_run(py: Python<'_>, run: PyBuffer<u8>, count: usize, plan: &crate::CsvPlan,
                                  names: Vec<Vec<u8>>) -> PyResult<Option<crate::ConvertedObjects>> {
    crate::with_bytes(py, &run, |bytes| {
        // (a capacity only: `convert_examples_into` checks `count` against
        // the run; a string feature's checked text is UTF-8: `item_field`
        // checked it)
        let rows = crate::py_rows::FramedRows::new(py, count.min(bytes.len() / (HEADER + FOOTER) + 1));
        crate::py_rows::converted_batch(py, rows, plan, |rows| {
            convert_examples_into(bytes, count, &plan.plan, &names, &plan.as_str, &plan.nullable, rows)
        })
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Converted;

    fn framed(records: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for record in records {
            out.extend_from_slice(&(record.len() as u64).to_le_bytes());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(record);
            out.extend_from_slice(&[0; 4]);
        }
        out
    }

    #[test]
    fn payloads_hold_exactly_the_count() {
        let run = framed(&[b"ab", b"", b"xyz"]);
        assert_eq!(payloads(&run, 3), Some(vec![&b"ab"[..], b"", b"xyz"]));
        assert_eq!(payloads(&run, 2), None);
        assert_eq!(payloads(&run, 4), None);
        assert_eq!(payloads(&run[..run.len() - 1], 3), None);
        let mut huge = run.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(payloads(&huge, 3), None);
        assert_eq!(payloads(b"", 0), Some(vec![]));
    }

    #[test]
    fn every_prefix_of_a_run_is_refused_or_read_inside_it() {
        let run = framed(&[b"\x0a\x00", b"", b"\x0a\x02\x0a\x00"]);
        for end in 0..run.len() {
            for count in 0..4 {
                if let Some(found) = payloads(&run[..end], count) {
                    assert_eq!(found.len(), count);
                }
            }
        }
    }

    fn int_plan() -> Plan {
        let feature = crate::rules::Feature {
            name: b"n".to_vec(),
            column: 0,
            rule: Rule::Int { lo: 0, hi: 10, allowed: None },
            nulls: None,
        };
        Plan { width: 1, features: vec![feature], key: Key::Feature(0) }
    }

    /// An Example of one int64 feature "n" holding `ints`.
    fn int_example(ints: &[u8]) -> Vec<u8> {
        let mut list = vec![0x0a, ints.len() as u8];
        list.extend_from_slice(ints);
        let mut feature = vec![0x1a, list.len() as u8];
        feature.extend(list);
        let mut entry = vec![0x0a, 1, b'n', 0x12, feature.len() as u8];
        entry.extend(feature);
        let mut features = vec![0x0a, entry.len() as u8];
        features.extend(entry);
        let mut example = vec![0x0a, features.len() as u8];
        example.extend(features);
        example
    }

    #[test]
    fn one_item_lists_are_taken_and_the_rest_declined() {
        let (good, big, two, odd) = (int_example(&[7]), int_example(&[11]), int_example(&[1, 2]), b"\x08\x01".to_vec());
        let run = framed(&[&good, &big, &two, &odd, b""]);
        let mut converted = Converted::default();
        let names = vec![b"n".to_vec()];
        let checked = convert_examples_into(&run, 5, &int_plan(), &names, &[false], &[false], &mut converted).unwrap();
        let taken: Vec<bool> = converted.examples.iter().map(Option::is_some).collect();
        // 11 is out of range, two items are wrong_length, the fourth is no
        // canonical Example, the empty one lacks the required "n".
        assert_eq!(taken, [true, false, false, false, false]);
        assert_eq!(checked.len(), 1);
        assert!(!converted.key_bytes.is_empty());
    }

    proptest::proptest! {
        /// Any bytes, any count: an error, or every row given once.
        #[test]
        fn any_run_converts_or_is_refused(run in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
                                           count in 0usize..20) {
            let mut converted = Converted::default();
            let names = vec![b"n".to_vec()];
            if convert_examples_into(&run, count, &int_plan(), &names, &[false], &[true], &mut converted).is_ok() {
                proptest::prop_assert_eq!(converted.examples.len(), count);
            }
        }
    }

    #[test]
    fn a_missing_optional_feature_is_left_out() {
        let run = framed(&[b""]);
        let mut converted = Converted::default();
        let names = vec![b"n".to_vec()];
        let mut plan = int_plan();
        plan.key = Key::None;
        convert_examples_into(&run, 1, &plan, &names, &[false], &[true], &mut converted).unwrap();
        assert!(converted.examples[0].is_some());
    }
}
