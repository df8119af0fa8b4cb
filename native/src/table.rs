//! The table kernel for the default CSV dialect: a plain run of CSV lines
//! (as `transforms/readers/csv.py` cuts them: no quotes, CR only in CRLF,
//! one field per column, valid UTF-8) -> each row's serialized Example and
//! key, the checked values per feature, and the rows it declines.
//!
//! It mirrors the Python fast path (`schemas/fast_paths.py`, `columns.py`)
//! and nothing more: a row is taken only when every value is one the fast
//! path stores as it stands; any other row (a missing value, whitespace, a
//! number out of range or in another syntax, NaN, inf, ...) is declined and
//! the Python path converts it or writes its dead letter, exactly as it does
//! without the extension.

use crate::csv_marks;
use crate::digest::{RowHasher, DIGEST_SIZE};
use crate::column::Column;
use crate::nulls::Part;
use crate::rules::{check, put_text_key, put_value_key, Key, Plan, Value};
use crate::wire;

/// The kernel's answer for a run. Examples and keys are written one after
/// another into one buffer each (one allocation per run, not per row).
#[derive(Debug, Default)]
pub struct Converted<'a> {
    pub example_bytes: Vec<u8>,
    /// Per row: where its Example lies in `example_bytes`, or None for a
    /// declined row.
    pub examples: Vec<Option<std::ops::Range<usize>>>,
    pub key_bytes: Vec<u8>,
    /// Per row: where its key lies in `key_bytes` (None for a declined
    /// row, or every row without a key).
    pub keys: Vec<Option<std::ops::Range<usize>>>,
    /// Per feature: its checked value in every row, and which rows hold none.
    pub checked: Columns<'a>,
}

/// Where a kernel's rows go, one call per row in order: `Converted`
/// (every row's bytes in one buffer, for Rust callers and the tests), or
/// the extension's Python objects made as the rows come (`lib.rs`), with
/// no buffer of the whole batch between.
pub trait Rows {
    /// A row taken: its Example's map entries in key order, and its key
    /// (None when the plan has none).
    fn taken(&mut self, entries: &[u8], key: Option<&[u8]>);
    /// A row declined (the Python path converts it).
    fn declined(&mut self);
}

/// Ends a row a kernel converted: writes its key into `key` (the stored
/// value of the plan's key feature, `key_value`; or, keyed by a column's
/// raw value, what `raw_key(column, key)` writes, false where the row has
/// none) and gives the row to `rows`, or declines it (`declined`, or no
/// key). Every table kernel ends its rows here.
#[inline(always)]
pub(crate) fn give_row(rows: &mut impl Rows, plan: &Plan, entries: &[u8], key: &mut Vec<u8>,
                       key_value: Option<&Value>, declined: bool,
                       raw_key: impl FnOnce(usize, &mut Vec<u8>) -> bool) {
    key.clear();
    let keyed = match plan.key {
        Key::None => true,
        Key::Feature(_) => key_value.is_some_and(|value| {
            put_value_key(key, value);
            true
        }),
        Key::Text(column) => raw_key(column, key),
    };
    if keyed && !declined {
        rows.taken(entries, (!matches!(plan.key, Key::None)).then_some(&key[..]));
    } else {
        rows.declined();
    }
}

/// A batch's checked values per feature (`Column`).
pub type Columns<'a> = Vec<Column<'a>>;

impl Rows for Converted<'_> {
    fn taken(&mut self, entries: &[u8], key: Option<&[u8]>) {
        let start = self.example_bytes.len();
        wire::put_example(&mut self.example_bytes, entries);
        self.examples.push(Some(start..self.example_bytes.len()));
        self.keys.push(key.map(|key| {
            let start = self.key_bytes.len();
            self.key_bytes.extend_from_slice(key);
            start..self.key_bytes.len()
        }));
    }

    fn declined(&mut self) {
        self.examples.push(None);
        self.keys.push(None);
    }
}

impl Converted<'_> {
    pub fn example(&self, row: usize) -> Option<&[u8]> {
        self.examples[row].clone().map(|range| &self.example_bytes[range])
    }

    pub fn key(&self, row: usize) -> Option<&[u8]> {
        self.keys[row].clone().map(|range| &self.key_bytes[range])
    }

    /// Every row's digest (`digest::RowHasher`) back to back: of its key,
    /// or of its Example when it has none, as the split assignment and the
    /// shuffle hash a row (`transforms/splits.py`); 16 zero bytes for a
    /// declined row, which the Python path converts and hashes itself.
    pub fn digests(&self, hasher: &RowHasher) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.examples.len() * DIGEST_SIZE);
        let rows = (0..self.examples.len()).map(|row| self.example(row).map(|example| self.key(row).unwrap_or(example)));
        hasher.digest_rows(rows, &mut out);
        out
    }
}

/// Why a run is handed back whole (the reader's promises do not hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    NotUtf8,
    LoneCarriageReturn,
    RowCount { expected: usize, found: usize },
    FieldCount { line: usize },
    BlankLine { line: usize },
    /// Longer than the u32 offsets of `RunFields` hold (or no columns).
    TooLong,
    /// A delimiter no plain run can have (CR, LF, not ASCII).
    Delimiter,
}

/// A plain run's fields as `check_run` found them: the run is valid
/// UTF-8, a CR only in CRLF, no blank line, `width` fields on every line.
/// `ends[row * width + column]` is where that field ends (the byte offset
/// of the comma, CR or LF after it, or the run's end); a field starts one
/// byte after the previous one ends, and a line one byte after its LF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFields {
    pub rows: usize,
    pub width: usize,
    ends: Vec<u32>,
}

/// Checks a plain run of CSV lines of `width` fields each, as
/// `transforms/readers/csv.py` (`_plain_lines`) decides that a run is one
/// `ColumnBatch`, and keeps where its fields end, so that `convert_checked`
/// converts the run without parsing it again. One pass over the bytes.
pub fn check_run(run: &[u8], width: usize) -> Result<RunFields, RunError> {
    check_run_with(run, width, b',')
}

/// `check_run` with fields separated by `delimiter` (a CSV dialect's: an
/// ASCII byte other than CR and LF; any other is refused).
pub fn check_run_with(run: &[u8], width: usize, delimiter: u8) -> Result<RunFields, RunError> {
    if !delimiter.is_ascii() || delimiter == b'\n' || delimiter == b'\r' {
        return Err(RunError::Delimiter);
    }
    let (checked, ascii) = check_lines(run, width, delimiter);
    // Bad UTF-8 is the refusal named before any other; a run the line
    // check read through and found all ASCII is UTF-8 without a second
    // pass (the common case), any other is validated.
    if !ascii && std::str::from_utf8(run).is_err() {
        return Err(RunError::NotUtf8);
    }
    checked
}

/// `check_run` but for its UTF-8 test, and whether it found every byte of
/// the run ASCII (false where it stopped before the end).
fn check_lines(run: &[u8], width: usize, delimiter: u8) -> (Result<RunFields, RunError>, bool) {
    // A CR ends a line only before LF: a run ending in a bare CR (which
    // the reader never cuts) would otherwise lose it as a CRLF's.
    if run.ends_with(b"\r") {
        return (Err(RunError::LoneCarriageReturn), false);
    }
    // Offsets are u32 (half the memory of usize); the reader's runs are
    // a few MB, and a longer one is simply read by Python.
    if run.len() >= u32::MAX as usize || width == 0 {
        return (Err(RunError::TooLong), false);
    }
    let body = run.strip_suffix(b"\n").unwrap_or(run);
    // A first guess from the run's size (a field of 15 bytes or more,
    // as in most tables), grown as needed and trimmed at the end: the
    // ends live as long as the batch, beside the run.
    let mut fields = RunFields { rows: 0, width, ends: Vec::with_capacity(body.len() / 16 + 1) };
    let mut line_start = 0;
    // Only the commas, CRs and LFs are looked at, found a block at a time
    // (`csv_marks`): the bytes between them need no step of their own.
    let scanned = csv_marks::for_each_mark(body, delimiter, |at, byte| {
        match byte {
            _ if byte == delimiter => fields.ends.push(at as u32),
            // (the byte after a CR is read from the run: the body's last
            // CR is followed by the run's final LF)
            b'\r' if run.get(at + 1) != Some(&b'\n') => return Err(RunError::LoneCarriageReturn),
            b'\r' => {}
            _ => {  // b'\n', the only other mark
                fields.end_line(body, line_start, at)?;
                line_start = at + 1;
            }
        }
        Ok(())
    });
    // (the body is the run but for a final LF, which is ASCII)
    let ascii = match scanned {
        Ok(ascii) => ascii,
        Err(refused) => return (Err(refused), false),
    };
    if !body.is_empty() {
        if let Err(refused) = fields.end_line(body, line_start, body.len()) {
            return (Err(refused), ascii);
        }
    } else if !run.is_empty() {
        // The run is one LF: a blank line, as the reader says of it.
        return (Err(RunError::BlankLine { line: 0 }), ascii);
    }
    fields.ends.shrink_to_fit();
    (Ok(fields), ascii)
}

impl RunFields {
    /// Ends the line from `start` to its LF (or the body's end) at `at`.
    fn end_line(&mut self, body: &[u8], start: usize, at: usize) -> Result<(), RunError> {
        let end = if at > start && body[at - 1] == b'\r' { at - 1 } else { at };
        if end == start {
            return Err(RunError::BlankLine { line: self.rows });
        }
        self.ends.push(end as u32);
        self.rows += 1;
        if self.ends.len() != self.rows * self.width {
            return Err(RunError::FieldCount { line: self.rows - 1 });
        }
        Ok(())
    }

    /// Cuts row `row`'s fields from `run` (the run `check_run` checked)
    /// into `line` (cleared first), the row starting at `start`; gives
    /// where the next row starts (after this one's LF or CRLF).
    fn cut_row<'a>(&self, run: &'a [u8], row: usize, start: usize, line: &mut Vec<&'a [u8]>)
                   -> Result<usize, RunError> {
        let ends = &self.ends[row * self.width..(row + 1) * self.width];
        line.clear();
        let mut field_start = start;
        for end in ends {
            let end = *end as usize;
            // (fields from another run than `run` are refused, not read out of bounds)
            line.push(run.get(field_start..end).ok_or(RunError::FieldCount { line: row })?);
            field_start = end + 1;
        }
        let last = field_start - 1;
        Ok(field_start + usize::from(run.get(last) == Some(&b'\r')))
    }
}

/// The number of rows of a plain run of CSV lines with `width` fields
/// each (`check_run`).
pub fn count_run(run: &[u8], width: usize) -> Result<usize, RunError> {
    check_run(run, width).map(|fields| fields.rows)
}

/// Converts a plain run of `count` CSV lines by `plan`: checks it
/// (`check_run`) and converts it (`convert_checked`).
pub fn convert_run<'a>(run: &'a [u8], count: usize, plan: &Plan) -> Result<Converted<'a>, RunError> {
    convert_checked(run, &counted_fields(run, count, plan.width)?, plan)
}

/// The fields of a plain run of `count` CSV lines of `width` fields
/// (`check_run`), or why it is not one.
pub fn counted_fields(run: &[u8], count: usize, width: usize) -> Result<RunFields, RunError> {
    let fields = check_run(run, width)?;
    if fields.rows != count {
        return Err(RunError::RowCount { expected: count, found: fields.rows });
    }
    Ok(fields)
}

/// Converts the run `check_run` checked into `fields` by `plan`, without
/// parsing it again.
pub fn convert_checked<'a>(run: &'a [u8], fields: &RunFields, plan: &Plan) -> Result<Converted<'a>, RunError> {
    let mut converted = Converted {
        example_bytes: Vec::with_capacity(run.len() + run.len() / 2),
        examples: Vec::with_capacity(fields.rows),
        keys: Vec::with_capacity(fields.rows),
        ..Converted::default()
    };
    converted.checked = convert_checked_into(run, fields, plan, &mut converted)?;
    Ok(converted)
}

/// As `convert_checked`, each row given to `rows` as it is converted;
/// gives the checked columns.
pub fn convert_checked_into<'a>(run: &'a [u8], fields: &RunFields, plan: &Plan, rows: &mut impl Rows)
                                -> Result<Columns<'a>, RunError> {
    if fields.width != plan.width {
        return Err(RunError::FieldCount { line: 0 });
    }
    let mut checked: Columns = plan.features.iter().map(|_| Column::with_capacity(fields.rows)).collect();
    let mut line: Vec<&[u8]> = Vec::with_capacity(plan.width);
    // One row's entries and key, reused from row to row.
    let (mut entries, mut key) = (Vec::new(), Vec::new());
    // (the one feature whose value keys a row: only its value is kept)
    let key_position = plan.key.feature();
    let mut start = 0;
    for row in 0..fields.rows {
        start = fields.cut_row(run, row, start, &mut line)?;
        entries.clear();
        let mut declined = false;
        let mut key_value = None;
        for (position, feature) in plan.features.iter().enumerate() {
            let field = line[feature.column];
            let part = feature.part(Some(field), || check(&feature.rule, field));
            declined |= part == Part::Declined;
            let stored = part.record(feature, &mut entries, &mut checked[position]);
            if key_position == Some(position) {
                key_value = stored;
            }
        }
        give_row(rows, plan, &entries, &mut key, key_value.as_ref(), declined, |column, key| {
            let text = line[column];
            !text.is_empty() && {
                put_text_key(key, text);
                true
            }
        });
    }
    Ok(checked)
}

// The byte-at-a-time check `check_run` replaced, kept as its reference.
#[cfg(test)]
#[path = "table_check_tests.rs"]
mod check_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Feature, Rule};
    use proptest::prelude::*;

    fn plan() -> Plan {
        Plan {
            width: 3,
            features: vec![
                Feature { name: b"a".to_vec(), column: 0, rule: Rule::Int { lo: i64::MIN, hi: i64::MAX, allowed: None }, nulls: None },
                Feature { name: b"b".to_vec(), column: 1, rule: Rule::Float { lo: -3.0e38, hi: 3.0e38, allowed: None }, nulls: None },
                Feature { name: b"c".to_vec(), column: 2, rule: Rule::Text { limit: u64::MAX, allowed: None }, nulls: None },
            ],
            key: Key::Feature(0),
        }
    }

    #[test]
    fn a_bare_cr_at_the_end_is_refused() {
        assert_eq!(count_run(b"1,2,x\r\n", 3), Ok(1));
        assert_eq!(count_run(b"1,2,x\r", 3), Err(RunError::LoneCarriageReturn));
        assert_eq!(count_run(b"1,2,x\n\n", 3), Err(RunError::BlankLine { line: 1 }));
        assert_eq!(count_run(b"1,2,x\n1,2", 3), Err(RunError::FieldCount { line: 1 }));
        assert_eq!(count_run(b"", 3), Ok(0));
        assert!(convert_run(b"1,2,x\r", 1, &plan()).is_err());
    }

    #[test]
    fn digests_are_of_the_key_or_the_example_and_zero_for_a_declined_row() {
        let hasher = RowHasher::new(b"flights").unwrap();
        let digest = |row: &[u8]| crate::digest::hash_rows(b"flights", [row].into_iter()).unwrap();
        let run = b"1,2.5,x\nnope,1,y\n-3,0,z\n";
        let keyed = convert_run(run, 3, &plan()).unwrap();
        let mut unkeyed_plan = plan();
        unkeyed_plan.key = Key::None;
        let unkeyed = convert_run(run, 3, &unkeyed_plan).unwrap();
        for (converted, of_key) in [(&keyed, true), (&unkeyed, false)] {
            let digests = converted.digests(&hasher);
            assert_eq!(digests.len(), 3 * DIGEST_SIZE);
            for row in [0, 2] {
                let source = if of_key { converted.key(row) } else { converted.example(row) };
                assert_eq!(&digests[row * DIGEST_SIZE..][..DIGEST_SIZE], &digest(source.unwrap())[..]);
            }
            assert_eq!(&digests[DIGEST_SIZE..2 * DIGEST_SIZE], &[0u8; DIGEST_SIZE]);
        }
    }

    /// The fields of a plain run by the reader's rules, written the plain
    /// way (`_plain_lines`: decode, CRLF to LF, split lines and commas),
    /// as the reference `check_run` must match; None where it refuses.
    fn reference_fields(run: &[u8], width: usize) -> Option<Vec<Vec<Vec<u8>>>> {
        let text = std::str::from_utf8(run).ok()?.replace("\r\n", "\n");
        if text.contains('\r') {
            return None;
        }
        let mut lines: Vec<&str> = text.split('\n').collect();
        if lines.last() == Some(&"") {
            lines.pop();
        }
        let rows: Vec<Vec<Vec<u8>>> = lines.iter()
            .map(|line| line.split(',').map(|field| field.as_bytes().to_vec()).collect())
            .collect();
        let plain = lines.iter().all(|line| !line.is_empty()) && rows.iter().all(|row| row.len() == width);
        plain.then_some(rows)
    }

    fn checked_fields(run: &[u8], fields: &RunFields) -> Vec<Vec<Vec<u8>>> {
        let (mut line, mut start, mut rows) = (Vec::new(), 0, Vec::new());
        for row in 0..fields.rows {
            start = fields.cut_row(run, row, start, &mut line).unwrap();
            rows.push(line.iter().map(|field| field.to_vec()).collect());
        }
        rows
    }

    proptest! {
        #[test]
        fn check_run_finds_the_fields_the_reader_splits(run in prop::collection::vec(
                prop::sample::select(b"01,\r\n a\xff\xc3\xa9\xe2\x82\xac\"".to_vec()), 0..120),
                width in 1usize..4) {
            let found = check_run(&run, width).ok().map(|fields| checked_fields(&run, &fields));
            prop_assert_eq!(found, reference_fields(&run, width));
        }

        #[test]
        fn count_run_accepts_exactly_the_runs_convert_run_reads(run in prop::collection::vec(
                prop::sample::select(b"0123,.-\r\n a\xff".to_vec()), 0..120)) {
            let counted = count_run(&run, 3);
            if let Ok(rows) = counted {
                prop_assert!(convert_run(&run, rows, &plan()).is_ok());
            }
            for rows in 0..8 {
                if convert_run(&run, rows, &plan()).is_ok() {
                    prop_assert_eq!(counted.clone(), Ok(rows));
                }
            }
        }

        #[test]
        fn any_run_converts_or_is_refused_without_panic(run in prop::collection::vec(
                prop::sample::select(b"0123456789,.-+eE\r\n\"a \xff".to_vec()), 0..200),
                count in 0usize..20) {
            if let Ok(converted) = convert_run(&run, count, &plan()) {
                prop_assert_eq!(converted.examples.len(), count);
                prop_assert_eq!(converted.keys.len(), count);
                let hasher = RowHasher::new(b"salt").unwrap();
                prop_assert_eq!(converted.digests(&hasher).len(), count * DIGEST_SIZE);
            }
        }
    }
}
