//! The table kernel for JSONL: a run of lines, each one JSON object
//! (`json_scan` reads them) ->
//! each row's serialized Example and key and the checked values per
//! feature, as `arrow::convert_batch` gives them for a record batch.
//!
//! Bytes equal the Python path's by construction: the kernel models a
//! strict subset of JSON and leaves everything else to Python. The reader
//! (`transforms/readers/jsonl.py`) asks `segments` which lines are blank,
//! which are one JSON object the kernel reads exactly as Python's `json`
//! does (valid UTF-8, strict grammar, no NaN/Infinity, numbers of at most
//! 64 characters, nesting at most 32 deep), and which Python must read
//! (its dead letters included). The convert call maps each top-level
//! member to the value Python's parser makes of it (a string is its text,
//! escapes decoded as `json` does; an integer literal within int64 an
//! int, a finite float literal a float: Python's `float()` and Rust's
//! parser both round correctly), then applies the Arrow kernel's rules
//! for those Python values (`arrow::check`). A row holding anything else
//! where a feature or the key reads it (a lone surrogate, an escaped key,
//! an integer beyond int64, a list, an object, a bool) is declined, and
//! the Python row path converts it or writes its dead letter, exactly as
//! without the extension. A nested `from:` path is dug as
//! `row_encoder.dig` does (`dig`). Both walk a run's lines in place: each
//! line is scanned where it stands, and its scan finds its end
//! (`json_scan::scan_run_line`).

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::arrow;
use crate::arrow_array::Field;
use crate::json_scan::{count_lf, scan_line, scan_run_line, Json};
use crate::column::Column;
use crate::nulls::Part;
use crate::rules::Plan;
use crate::table::{give_row, Columns, Converted, Rows};

/// What a line is to the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// Only spaces, tabs and CRs (Python's `strip()` leaves nothing): not a row.
    Blank = 0,
    /// One JSON object the kernel reads exactly as Python does.
    Object = 1,
    /// Anything else: Python reads it (a row or a read dead letter).
    Other = 2,
}

/// Consecutive lines of one kind: bytes `start..end` of the run (without
/// the last line's LF), lines `first..first + lines`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub kind: Line,
    pub start: usize,
    pub end: usize,
    pub first: usize,
    pub lines: usize,
}

/// The run without the LF that ends its last line, and how many lines it
/// holds: the body's LFs part them; an empty run holds none (as
/// `ranges.block_lines` gives a block's lines).
fn body_and_count(run: &[u8]) -> (&[u8], usize) {
    let body = run.strip_suffix(b"\n").unwrap_or(run);
    let count = if run.is_empty() { 0 } else { count_lf(body) + 1 };
    (body, count)
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|byte| matches!(byte, b' ' | b'\t' | b'\r'))
}

/// The kind of the line of `body` that starts at `start`, and its end (its
/// LF, or the body's end), found in the one scan; `utf8`: the whole body
/// is valid UTF-8 (else the line is checked).
fn classify_at(body: &[u8], start: usize, utf8: bool) -> (Line, usize) {
    let (whole, end) = scan_run_line(body, start, |_, _, _| {});
    let line = &body[start..end];
    let kind = if is_blank(line) {
        Line::Blank
    } else if whole && (utf8 || std::str::from_utf8(line).is_ok()) {
        Line::Object
    } else {
        Line::Other
    };
    (kind, end)
}

/// The run's lines grouped into segments of one kind, in order.
pub fn segments(run: &[u8]) -> Vec<Segment> {
    let utf8 = std::str::from_utf8(run).is_ok();
    let body = run.strip_suffix(b"\n").unwrap_or(run);
    let mut found: Vec<Segment> = Vec::new();
    // (the body's LFs part its lines, as `body_and_count` counts them)
    let (mut start, mut index) = (0, 0);
    while !run.is_empty() && start <= body.len() {
        let (kind, end) = classify_at(body, start, utf8);
        match found.last_mut() {
            Some(last) if last.kind == kind => {
                last.end = end;
                last.lines += 1;
            }
            _ => found.push(Segment { kind, start, end, first: index, lines: 1 }),
        }
        (start, index) = (end + 1, index + 1);
    }
    found
}

/// The distinct top-level keys of a run of object lines, in the order
/// first seen; None when a line is not one (`Line::Object`) or a key is
/// escaped (Python would decode it).
pub fn keys(run: &[u8]) -> Option<Vec<&str>> {
    let text = std::str::from_utf8(run).ok()?;
    let (body, count) = body_and_count(text.as_bytes());
    let mut found: Vec<&str> = Vec::new();
    let mut plain = true;
    let mut start = 0;
    for _ in 0..count {
        let (whole, end) = scan_run_line(body, start, |key, escaped, _| {
            plain &= !escaped;
            // (a key is cut at ASCII quotes from valid UTF-8: it is UTF-8)
            if let Ok(key) = std::str::from_utf8(key) {
                if !found.contains(&key) {
                    found.push(key);
                }
            }
        });
        if !whole || !plain {
            return None;
        }
        start = end + 1;
    }
    Some(found)
}

/// The value Python's parser makes of a member, as the Arrow kernel's
/// rules take it; None for one the kernel does not model. An escaped
/// string is decoded into `arena` (`Slot::Decoded`), or None where Python
/// would make a lone surrogate of it.
fn slot_of<'a>(value: Json<'a>, arena: &mut Vec<u8>) -> Slot<'a> {
    // (number literals are ASCII: `from_utf8` cannot fail)
    let literal = |raw| std::str::from_utf8(raw).ok();
    Slot::Known(match value {
        Json::Text { raw, escaped: false } => Some(Field::Text(raw)),
        Json::Text { raw, escaped: true } => {
            let start = arena.len();
            if decode_string(raw, arena) {
                return Slot::Decoded(start, arena.len());
            }
            arena.truncate(start);
            None
        }
        Json::Int(raw) => literal(raw).and_then(|text| text.parse::<i64>().ok()).map(Field::Int),
        // Python keeps a literal beyond a double as a Decimal: left to it.
        Json::Float(raw) => literal(raw).and_then(|text| text.parse::<f64>().ok())
            .filter(|number| number.is_finite()).map(Field::Float),
        Json::Bool => Some(Field::Bool),
        Json::Null => Some(Field::Null),
        Json::Object(_) | Json::Array => None,
    })
}

/// The value at `rest` inside `value` (a top-level member's), as Python's
/// `row_encoder.dig` finds it: null where a key is absent or a value on
/// the way is not an object; a repeated key keeps its last value.
/// `escaped`: set when a key on the way is escaped (it may be one of
/// `rest` once decoded: Python decides).
fn dig<'a>(value: Json<'a>, rest: &[Vec<u8>], arena: &mut Vec<u8>, escaped: &mut bool) -> Slot<'a> {
    let Some((key, deeper)) = rest.split_first() else {
        return slot_of(value, arena);
    };
    let Json::Object(raw) = value else {
        return Slot::Known(Some(Field::Null));
    };
    let mut found = None;
    scan_line(raw, |name, name_escaped, inner| {
        *escaped |= name_escaped;
        if name == key.as_slice() {
            found = Some(inner);
        }
    });
    match found {
        Some(inner) => dig(inner, deeper, arena, escaped),
        None => Slot::Known(Some(Field::Null)),
    }
}

/// A member's value while a run is scanned: known, or decoded text at
/// `arena[start..end]` (the arena grows until every line is scanned).
#[derive(Debug, Clone, Copy)]
enum Slot<'a> {
    Known(Option<Field<'a>>),
    Decoded(usize, usize),
}

fn hex4(digits: Option<&[u8]>) -> Option<u32> {
    u32::from_str_radix(std::str::from_utf8(digits?).ok()?, 16).ok()
}

/// Appends the text of a string's escaped content (`json_scan` checked
/// its escapes) as Python's `json` decodes it: a surrogate pair is one
/// character; false for a lone surrogate (Python keeps it, and the checks
/// make it `invalid_utf8`: that row is Python's).
fn decode_string(raw: &[u8], out: &mut Vec<u8>) -> bool {
    let mut at = 0;
    while at < raw.len() {
        let byte = raw[at];
        if byte != b'\\' {
            out.push(byte);
            at += 1;
            continue;
        }
        let simple = match raw.get(at + 1) {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0C,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                let Some(mut code) = hex4(raw.get(at + 2..at + 6)) else { return false };
                at += 6;
                if (0xD800..0xDC00).contains(&code) {
                    let low = (raw.get(at..at + 2) == Some(b"\\u")).then(|| hex4(raw.get(at + 2..at + 6))).flatten();
                    match low {
                        Some(low) if (0xDC00..0xE000).contains(&low) => {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            at += 6;
                        }
                        _ => return false,
                    }
                }
                let Some(character) = char::from_u32(code) else { return false };
                let mut buffer = [0; 4];
                out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                continue;
            }
            _ => return false,
        };
        out.push(simple);
        at += 2;
    }
    true
}

/// Why a run is handed back whole (it is not what the reader promises).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    NotUtf8,
    RowCount { expected: usize, found: usize },
    Columns,
}

/// Converts a run of `count` lines (LF between them) by `plan`, whose
/// column `i` is the value at the keys `names[i]` (a top-level key, or a
/// nested path; a missing key reads as null, as `dig` finds it); `text` and `nullable` per feature as `arrow::convert_batch`
/// takes them. A line that is not one object the kernel models is a
/// declined row (the reader gives such lines that Python reads as rows).
pub fn convert_lines<'a>(run: &'a [u8], count: usize, plan: &Plan, names: &[Vec<Vec<u8>>], text: &[bool],
                         nullable: &[bool], arena: &'a mut Vec<u8>) -> Result<Converted<'a>, RunError> {
    let mut converted = Converted::default();
    converted.checked = convert_lines_into(run, count, plan, names, text, nullable, arena, &mut converted)?;
    Ok(converted)
}

/// As `convert_lines`, each row given to `rows` as it is converted; gives
/// the checked columns.
#[allow(clippy::too_many_arguments)]
pub fn convert_lines_into<'a>(run: &'a [u8], count: usize, plan: &Plan, names: &[Vec<Vec<u8>>], text: &[bool],
                              nullable: &[bool], arena: &'a mut Vec<u8>, rows: &mut impl Rows)
                              -> Result<Columns<'a>, RunError> {
    let told = text.len() == plan.features.len() && nullable.len() == plan.features.len();
    if names.is_empty() || names.len() != plan.width || !told || names.iter().any(Vec::is_empty) {
        return Err(RunError::Columns);
    }
    if std::str::from_utf8(run).is_err() {
        return Err(RunError::NotUtf8);
    }
    let (body, found) = body_and_count(run);
    if found != count {
        return Err(RunError::RowCount { expected: count, found });
    }
    // First every line's values (decoded text into the arena), then the
    // rows, once the arena no longer grows.
    let mut slots: Vec<Slot> = Vec::with_capacity(count.saturating_mul(plan.width));
    let mut declined_lines: Vec<bool> = Vec::with_capacity(count);
    let mut start = 0;
    for _ in 0..count {
        let first = slots.len();
        slots.resize(first + plan.width, Slot::Known(Some(Field::Null)));
        // An escaped key may name a column once decoded: Python decides.
        let mut declined = false;
        let (whole, end) = scan_run_line(body, start, |key, escaped, value| {
            declined |= escaped;
            // Duplicate keys keep the last value, as Python's dict does.
            for (column, path) in names.iter().enumerate() {
                if path[0] == key {
                    slots[first + column] = dig(value, &path[1..], arena, &mut declined);
                }
            }
        });
        start = end + 1;
        if !whole || declined {
            // A line Python read as a row (one the kernel does not model,
            // or the file's first), or one with an escaped key: Python
            // converts it from its own values, and no value the kernel
            // found in it may stand in a checked column.
            slots[first..].fill(Slot::Known(None));
            declined = true;
        }
        declined_lines.push(declined);
    }
    let arena: &'a [u8] = arena;
    let mut checked: Columns = plan.features.iter().map(|_| Column::with_capacity(count)).collect();
    // One row's entries and key, reused from row to row.
    let (mut entries, mut key) = (Vec::new(), Vec::new());
    // (the one feature whose value keys a row: only its value is kept)
    let key_position = plan.key.feature();
    let mut fields: Vec<Option<Field<'a>>> = Vec::with_capacity(plan.width);
    for (line_slots, declined) in slots.chunks(plan.width).zip(declined_lines) {
        let mut declined = declined;
        fields.clear();
        fields.extend(line_slots.iter().map(|slot| match *slot {
            Slot::Known(field) => field,
            Slot::Decoded(start, end) => Some(Field::Text(&arena[start..end])),
        }));
        entries.clear();
        let mut key_value = None;
        for (position, feature) in plan.features.iter().enumerate() {
            // (None: a value the kernel does not model, which declines the row)
            let part = fields[feature.column].map_or(Part::Declined, |field| {
                arrow::field_part(feature, text[position], nullable[position], field)
            });
            declined |= part == Part::Declined;
            let stored = part.record(feature, &mut entries, &mut checked[position]);
            if key_position == Some(position) {
                key_value = stored;
            }
        }
        give_row(rows, plan, &entries, &mut key, key_value.as_ref(), declined,
                 |column, key| fields[column].is_some_and(|field| arrow::put_raw_key(key, field)));
    }
    Ok(checked)
}

/// `jsonl_segments(run) -> [(kind, start, end, first line, lines)]`: the
/// run's lines grouped by kind (0 blank, 1 object the kernel reads, 2 for
/// Python), as `segments` finds them.
#[pyfunction]
pub(crate) fn jsonl_segments(py: Python<'_>, run: PyBuffer<u8>) -> PyResult<Vec<(u8, usize, usize, usize, usize)>> {
    crate::with_bytes(py, &run, |bytes| {
        let found = crate::guarded(|| segments(bytes))?;
        Ok(found.into_iter().map(|s| (s.kind as u8, s.start, s.end, s.first, s.lines)).collect())
    })?
}

/// `jsonl_keys(run) -> list[str] | None`: `keys` of a run of object lines.
#[pyfunction]
pub(crate) fn jsonl_keys(py: Python<'_>, run: PyBuffer<u8>) -> PyResult<Option<Vec<String>>> {
    crate::with_bytes(py, &run, |bytes| {
        crate::guarded(|| keys(bytes).map(|found| found.into_iter().map(str::to_owned).collect()))
    })?
}

/// `convert_jsonl_run(run, count, plan, names) -> (framed, offsets, keys, checked, digests, declined) | None`:
/// a run of `count` JSONL lines converted by `plan` (a `CsvPlan` whose
/// columns are the values at the keys `names`, each a list: a top-level
/// key or a nested path; a "text" rule's `as_str` marks
/// a string feature) as `convert_csv_run` answers; None when the run is
/// not `count` lines of UTF-8 (the Python path takes the batch).
#[pyfunction]
pub(crate) fn convert_jsonl_run(py: Python<'_>, run: PyBuffer<u8>, count: usize, plan: &crate::CsvPlan,
                                names: Vec<Vec<Vec<u8>>>) -> PyResult<Option<crate::ConvertedObjects>> {
    crate::with_bytes(py, &run, |bytes| {
        let mut arena = Vec::new();
        // (a capacity only: `convert_lines_into` checks `count` against the
        // run; validated: the run is valid UTF-8, strings are cut at ASCII
        // quotes, and decoded text is made of whole characters)
        let rows = crate::py_rows::FramedRows::new(py, count.min(bytes.len() + 1));
        crate::py_rows::converted_batch(py, rows, plan, |rows| {
            convert_lines_into(bytes, count, &plan.plan, &names, &plan.as_str, &plan.nullable, &mut arena, rows)
        })
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Feature, Key, Rule};
    use proptest::prelude::*;

    /// A run's lines, each without its LF, split from the run: the run's
    /// last LF ends a line and starts none (as `ranges.block_lines`).
    fn lines(run: &[u8]) -> impl Iterator<Item = &[u8]> {
        let body = run.strip_suffix(b"\n").unwrap_or(run);
        let empty = run.is_empty();
        body.split(|byte| *byte == b'\n').filter(move |_| !empty)
    }

    /// A line's kind found from the line alone (split from its run first):
    /// what `classify_at` finds in the run.
    fn classify(line: &[u8], utf8: bool) -> Line {
        if is_blank(line) {
            Line::Blank
        } else if (utf8 || std::str::from_utf8(line).is_ok()) && scan_line(line, |_, _, _| {}) {
            Line::Object
        } else {
            Line::Other
        }
    }

    #[test]
    fn deep_nesting_is_left_to_python() {
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(40), "]".repeat(40));
        assert_eq!(classify(deep.as_bytes(), true), Line::Other);
        assert_eq!(segments(deep.as_bytes())[0].kind, Line::Other);
    }

    #[test]
    fn segments_group_lines_by_kind() {
        let run = b"{\"a\": 1}\n{\"a\": 2}\n \r\n{bad\n{\"a\": 3}\n";
        let kinds: Vec<_> = segments(run).iter().map(|s| (s.kind, s.first, s.lines)).collect();
        assert_eq!(kinds, vec![(Line::Object, 0, 2), (Line::Blank, 2, 1), (Line::Other, 3, 1), (Line::Object, 4, 1)]);
        assert_eq!(&run[segments(run)[0].start..segments(run)[0].end], b"{\"a\": 1}\n{\"a\": 2}");
    }

    fn plan() -> Plan {
        Plan {
            width: 2,
            features: vec![
                Feature { name: b"n".to_vec(), column: 0, rule: Rule::Int { lo: i64::MIN, hi: i64::MAX, allowed: None }, nulls: None },
                Feature { name: b"s".to_vec(), column: 1, rule: Rule::Text { limit: u64::MAX, allowed: None }, nulls: None },
            ],
            key: Key::Feature(0),
        }
    }

    #[test]
    fn declines_what_it_does_not_model() {
        let names = vec![vec![b"n".to_vec()], vec![b"s".to_vec()]];
        let run = b"{\"n\": 1, \"s\": \"a\"}\n{\"n\": 1.0, \"s\": \"a\"}\n{\"n\": 2, \"s\": \"\\n\"}\n{\"n\": 3, \"s\": \"b\", \"s\": \"c\"}\n{\"n\": 99999999999999999999, \"s\": \"a\"}\n{\"n\": 4, \"s\": \"d\", \"x\": NaN}";
        let mut arena = Vec::new();
        let converted = convert_lines(run, 6, &plan(), &names, &[false, true], &[false, false], &mut arena).unwrap();
        let taken: Vec<bool> = (0..6).map(|row| converted.example(row).is_some()).collect();
        assert_eq!(taken, vec![true, false, true, true, false, false]);
        assert!(converted.example(2).unwrap().ends_with(b"\n"));
        // (a line it cannot read leaves every column unchecked)
        assert!(converted.checked.iter().all(|column| column.states[5] == crate::column::UNCHECKED));
        assert!(converted.example(3).unwrap().ends_with(b"c"));
    }

    #[test]
    fn nested_paths_dig_as_python_does() {
        let names = vec![vec![b"a".to_vec(), b"n".to_vec()], vec![b"s".to_vec()]];
        let run = b"{\"a\": {\"n\": 1}, \"s\": \"x\"}\n{\"a\": {\"m\": 1, \"n\": 2, \"n\": 3}, \"s\": \"x\"}\n{\"a\": [1], \"s\": \"x\"}\n{\"a\": {\"n\": 1}, \"a\": 5, \"s\": \"x\"}\n{\"a\": {\"\\u006e\": 1}, \"s\": \"x\"}";
        let mut arena = Vec::new();
        let unkeyed = Plan { key: Key::None, ..plan() };
        let converted = convert_lines(run, 5, &unkeyed, &names, &[false, true], &[true, false], &mut arena).unwrap();
        let taken: Vec<bool> = (0..5).map(|row| converted.example(row).is_some()).collect();
        // (nullable: a path that finds nothing leaves the feature out)
        assert_eq!(taken, vec![true, true, true, true, false], "an escaped key on the way is Python's");
        let (one, three) = (converted.example(0).unwrap(), converted.example(1).unwrap());
        assert_ne!(one, three);
        assert_eq!(converted.example(2).unwrap(), converted.example(3).unwrap());
    }

    #[test]
    fn escapes_decode_as_python_does() {
        let decoded = |raw: &[u8]| {
            let mut out = Vec::new();
            decode_string(raw, &mut out).then_some(out)
        };
        assert_eq!(decoded(br#"a\"b\\c\/d\b\f\n\r\t"#).unwrap(), b"a\"b\\c/d\x08\x0c\n\r\t");
        assert_eq!(decoded(br"\u00e9\u20AC\ud83d\ude00\u0000").unwrap(), "é€😀\0".as_bytes());
        // A lone surrogate (or a high one before anything but a low one) is Python's.
        for lone in [&br"\ud800"[..], br"\udc00", br"\ud800x", br"\ud800\u0041", br"\ud800\ud800"] {
            assert_eq!(decoded(lone), None);
        }
    }

    /// `run`'s walk checked against reading each line alone: the kinds,
    /// the segments' bytes, the keys, and each object line's conversion.
    fn walk_agrees(run: &[u8]) -> Result<(), TestCaseError> {
        let found = segments(run);
        // The one pass over the run finds what reading each line alone finds.
        let utf8 = std::str::from_utf8(run).is_ok();
        let alone: Vec<Line> = lines(run).map(|line| classify(line, utf8)).collect();
        let kinds: Vec<Line> = found.iter().flat_map(|segment| std::iter::repeat(segment.kind).take(segment.lines)).collect();
        prop_assert_eq!(kinds, alone);
        let mut starts = 0;
        for segment in &found {
            let lines: Vec<&[u8]> = lines(run).skip(segment.first).take(segment.lines).collect();
            prop_assert_eq!(&run[segment.start..segment.end], &lines.join(&b'\n')[..]);
            starts += segment.lines;
        }
        prop_assert_eq!(starts, lines(run).count());
        // (the keys found walking the run are those found line by line)
        let mut alone: Option<Vec<&str>> = std::str::from_utf8(run).ok().map(|_| Vec::new());
        for line in lines(run) {
            let mut plain = true;
            let whole = scan_line(line, |key, escaped, _| {
                plain &= !escaped;
                if let (Some(found), Ok(key)) = (alone.as_mut(), std::str::from_utf8(key)) {
                    if !found.contains(&key) {
                        found.push(key);
                    }
                }
            });
            if !whole || !plain {
                alone = None;
            }
        }
        prop_assert_eq!(keys(run), alone);
        let names = vec![vec![b"n".to_vec()], vec![b"s".to_vec()]];
        for segment in found.iter().filter(|segment| segment.kind == Line::Object) {
            let part = &run[segment.start..segment.end];
            let mut arena = Vec::new();
            let whole = convert_lines(part, segment.lines, &plan(), &names, &[false, true], &[true, true], &mut arena).unwrap();
            // Each line converts in its run as it does alone.
            for (row, line) in lines(part).enumerate() {
                let mut arena = Vec::new();
                let alone = convert_lines(line, 1, &plan(), &names, &[false, true], &[true, true], &mut arena).unwrap();
                prop_assert_eq!(whole.example(row), alone.example(0));
            }
        }
        Ok(())
    }

    /// Lines drawn whole: objects the kernel reads (long texts, escapes,
    /// numbers), and ones that end inside a value or hold more.
    const PIECES: [&[u8]; 12] = [br#"{"n": 1, "s": "abcdefghijklmnopqrstu"}"#, br#"{"s": "a\"bcdefgh\u00e9ijklm", "n": -2.5e3}"#,
        br#" {"n": 12} "#, br#"{"s": "abcdefghijk"#, br#"{"n": 1"#, br#"{"n": 1} x"#, b"", b" \t\r",
        b"{\"s\": \"abc\xc3\xa9defghi\x7fjk\"}", b"{\"s\": \"abcdefghij\x1fk\"}", b"{\"s\": \"\xff\"}", br#"{"n": {"n": 1}}"#];

    proptest! {
        #[test]
        fn any_bytes_are_scanned_without_panic(run in prop::collection::vec(
                prop::sample::select(b"{}[]\":,.-+eE0129 \t\r\n\\unlltrufas\xff\xc3\xa9".to_vec()), 0..160)) {
            walk_agrees(&run)?;
            let names = vec![vec![b"n".to_vec()], vec![b"s".to_vec()]];
            let _ = convert_lines(&run, 3, &plan(), &names, &[false, true], &[false, false], &mut Vec::new());
        }

        #[test]
        fn runs_of_whole_lines_walk_as_lines_alone(picks in prop::collection::vec(0..PIECES.len(), 0..12),
                                                   last_lf in any::<bool>()) {
            let mut run = picks.iter().map(|&pick| PIECES[pick]).collect::<Vec<_>>().join(&b'\n');
            if last_lf {
                run.push(b'\n');
            }
            walk_agrees(&run)?;
        }

    }
}
