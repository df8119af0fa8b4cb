//! The table kernel for JSONL: a run of lines, each one JSON object ->
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
//! member to the value Python's parser makes of it (a string without
//! escapes is its bytes, an integer literal within int64 an int, a finite
//! float literal a float: Python's `float()` and Rust's parser both round
//! correctly), then applies the Arrow kernel's rules for those Python
//! values (`arrow::check`). A row holding anything else where a feature
//! or the key reads it (an escaped string or key, an integer beyond int64,
//! a list, an object, a bool) is declined, and the Python row path
//! converts it or writes its dead letter, exactly as without the extension.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::arrow::{self, Field};
use crate::table::{self, Converted, Key, Plan, Value};

/// Containers nested deeper than this are left to Python (which refuses
/// past 64): it also bounds the scanner's recursion.
const MAX_DEPTH: usize = 32;
/// Number literals longer than this are left to Python (whose `int()`
/// refuses huge ones, and whose checks report the rest).
const MAX_NUMBER: usize = 64;

/// A member's value as the kernel models it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Json<'a> {
    /// A string: its bytes between the quotes; `escaped`: it holds a
    /// backslash escape, which the kernel does not decode.
    Text { raw: &'a [u8], escaped: bool },
    /// An integer literal; a literal with a fraction or exponent.
    Int(&'a [u8]),
    Float(&'a [u8]),
    Bool,
    Null,
    /// An array or an object.
    Nested,
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON's whitespace (Python's `json` takes these four only).
    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += found as usize;
        found
    }

    fn word(&mut self, word: &[u8], value: Json<'a>) -> Option<Json<'a>> {
        self.bytes[self.at..].starts_with(word).then(|| {
            self.at += word.len();
            value
        })
    }

    /// A string, as Python's `json` reads it in its strict mode: no control
    /// character inside, escapes only of `"\/bfnrt` and `\uXXXX`.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'"' => {
                    let raw = &self.bytes[start..self.at];
                    self.at += 1;
                    return Some((raw, escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.bytes.get(self.at + 1..self.at + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1F => return None,
                _ => self.at += 1,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    /// Whether the byte after the next one is a digit (a fraction or an
    /// exponent is taken only then, as Python's number pattern does).
    fn digit_at(&self, ahead: usize) -> bool {
        matches!(self.bytes.get(self.at + ahead), Some(b'0'..=b'9'))
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, Python's pattern.
    fn number(&mut self) -> Option<Json<'a>> {
        let start = self.at;
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let mut integer = true;
        if self.peek() == Some(b'.') && self.digit_at(1) {
            self.at += 1;
            self.digits();
            integer = false;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let sign = matches!(self.bytes.get(self.at + 1), Some(b'+' | b'-')) as usize;
            if self.digit_at(1 + sign) {
                self.at += 1 + sign;
                self.digits();
                integer = false;
            }
        }
        let literal = &self.bytes[start..self.at];
        if literal.len() > MAX_NUMBER {
            return None;
        }
        Some(if integer { Json::Int(literal) } else { Json::Float(literal) })
    }

    fn value(&mut self, depth: usize) -> Option<Json<'a>> {
        match self.peek()? {
            b'"' => self.string().map(|(raw, escaped)| Json::Text { raw, escaped }),
            b'{' => self.object(depth + 1, |_, _, _| {}).map(|_| Json::Nested),
            b'[' => self.array(depth + 1).map(|_| Json::Nested),
            b't' => self.word(b"true", Json::Bool),
            b'f' => self.word(b"false", Json::Bool),
            b'n' => self.word(b"null", Json::Null),
            _ => self.number(),
        }
    }

    fn object(&mut self, depth: usize, mut member: impl FnMut(&'a [u8], bool, Json<'a>)) -> Option<()> {
        if depth > MAX_DEPTH || !self.eat(b'{') {
            return None;
        }
        self.skip_space();
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.skip_space();
            let (key, escaped) = self.string()?;
            self.skip_space();
            if !self.eat(b':') {
                return None;
            }
            self.skip_space();
            let value = self.value(depth)?;
            member(key, escaped, value);
            self.skip_space();
            if !self.eat(b',') {
                return self.eat(b'}').then_some(());
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH || !self.eat(b'[') {
            return None;
        }
        self.skip_space();
        if self.eat(b']') {
            return Some(());
        }
        loop {
            self.skip_space();
            self.value(depth)?;
            self.skip_space();
            if !self.eat(b',') {
                return self.eat(b']').then_some(());
            }
        }
    }
}

/// Scans one line that holds one JSON object (JSON whitespace around it),
/// calling `member(key, key escaped, value)` for each top-level member in
/// order; false when the line is anything else, or more than the kernel
/// models. The caller checks UTF-8 (bytes past ASCII pass only inside strings).
pub fn scan_line<'a>(line: &'a [u8], member: impl FnMut(&'a [u8], bool, Json<'a>)) -> bool {
    let mut scanner = Scanner { bytes: line, at: 0 };
    scanner.skip_space();
    if scanner.object(1, member).is_none() {
        return false;
    }
    scanner.skip_space();
    scanner.at == line.len()
}

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

/// The lines of a run, each without its LF; the run's last LF ends a line
/// and starts none (as `ranges.block_lines`).
fn lines(run: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = run.strip_suffix(b"\n").unwrap_or(run);
    let empty = run.is_empty();
    body.split(|byte| *byte == b'\n').filter(move |_| !empty)
}

pub fn classify(line: &[u8], utf8: bool) -> Line {
    if line.iter().all(|byte| matches!(byte, b' ' | b'\t' | b'\r')) {
        Line::Blank
    } else if (utf8 || std::str::from_utf8(line).is_ok()) && scan_line(line, |_, _, _| {}) {
        Line::Object
    } else {
        Line::Other
    }
}

/// The run's lines grouped into segments of one kind, in order.
pub fn segments(run: &[u8]) -> Vec<Segment> {
    let utf8 = std::str::from_utf8(run).is_ok();
    let mut found: Vec<Segment> = Vec::new();
    let mut start = 0;
    for (index, line) in lines(run).enumerate() {
        let kind = classify(line, utf8);
        let end = start + line.len();
        match found.last_mut() {
            Some(last) if last.kind == kind => {
                last.end = end;
                last.lines += 1;
            }
            _ => found.push(Segment { kind, start, end, first: index, lines: 1 }),
        }
        start = end + 1;
    }
    found
}

/// The distinct top-level keys of a run of object lines, in the order
/// first seen; None when a line is not one (`Line::Object`) or a key is
/// escaped (Python would decode it).
pub fn keys(run: &[u8]) -> Option<Vec<&str>> {
    let text = std::str::from_utf8(run).ok()?;
    let mut found: Vec<&str> = Vec::new();
    let mut plain = true;
    for line in lines(text.as_bytes()) {
        let whole = scan_line(line, |key, escaped, _| {
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
    }
    Some(found)
}

/// The value Python's parser makes of a member, as the Arrow kernel's
/// rules take it; None for one the kernel does not model.
fn field_of(value: Json) -> Option<Field> {
    // (number literals are ASCII: `from_utf8` cannot fail)
    let literal = |raw| std::str::from_utf8(raw).ok();
    match value {
        Json::Text { raw, escaped: false } => Some(Field::Text(raw)),
        Json::Int(raw) => literal(raw)?.parse::<i64>().ok().map(Field::Int),
        Json::Float(raw) => {
            // Python keeps a literal beyond a double as a Decimal: left to it.
            let number = literal(raw)?.parse::<f64>().ok()?;
            number.is_finite().then_some(Field::Float(number))
        }
        Json::Bool => Some(Field::Bool),
        Json::Null => Some(Field::Null),
        Json::Text { escaped: true, .. } | Json::Nested => None,
    }
}

/// Why a run is handed back whole (it is not what the reader promises).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    NotUtf8,
    RowCount { expected: usize, found: usize },
    Columns,
}

/// Converts a run of `count` lines (LF between them) by `plan`, whose
/// column `i` is the top-level key `names[i]` (a missing key reads as
/// null); `text` and `nullable` per feature as `arrow::convert_batch`
/// takes them. A line that is not one object the kernel models is a
/// declined row (the reader gives such lines that Python reads as rows).
pub fn convert_lines<'a>(run: &'a [u8], count: usize, plan: &Plan, names: &[Vec<u8>], text: &[bool],
                         nullable: &[bool]) -> Result<Converted<'a>, RunError> {
    let told = text.len() == plan.features.len() && nullable.len() == plan.features.len();
    if names.len() != plan.width || !told {
        return Err(RunError::Columns);
    }
    if std::str::from_utf8(run).is_err() {
        return Err(RunError::NotUtf8);
    }
    let found = lines(run).count();
    if found != count {
        return Err(RunError::RowCount { expected: count, found });
    }
    let mut converted = Converted {
        example_bytes: Vec::with_capacity(run.len()),
        examples: Vec::with_capacity(count),
        key_bytes: Vec::new(),
        keys: Vec::with_capacity(count),
        checked: plan.features.iter().map(|_| Some(Vec::with_capacity(count))).collect(),
    };
    let mut entries = Vec::new();
    let mut fields: Vec<Option<Field>> = Vec::with_capacity(plan.width);
    let mut values: Vec<Option<Value>> = Vec::with_capacity(plan.features.len());
    for line in lines(run) {
        fields.clear();
        fields.resize(plan.width, Some(Field::Null));
        // An escaped key may name a column once decoded: Python decides.
        let mut declined = false;
        let whole = scan_line(line, |key, escaped, value| {
            declined |= escaped;
            // Duplicate keys keep the last value, as Python's dict does.
            if let Some(column) = names.iter().position(|name| name.as_slice() == key) {
                fields[column] = field_of(value);
            }
        });
        if !whole {
            // A line Python read as a row (one the kernel does not model,
            // or the file's first): Python converts it, from its own values.
            fields.fill(None);
            declined = true;
        }
        entries.clear();
        values.clear();
        for (position, feature) in plan.features.iter().enumerate() {
            let field = fields[feature.column];
            let value = field.and_then(|field| arrow::check(&feature.rule, text[position], field));
            // A column holding an absent value is not checked whole (as
            // the Python column path, whose statistics convert its values).
            match (value, &mut converted.checked[position]) {
                (Some(found), Some(column)) => column.push(found),
                (None, column) => *column = None,
                _ => {}
            }
            if let Some(found) = &value {
                table::put_entry(&mut entries, feature, found);
            }
            declined |= value.is_none() && !(field == Some(Field::Null) && nullable[position]);
            values.push(value);
        }
        let key_start = converted.key_bytes.len();
        let keyed = match plan.key {
            Key::None => true,
            Key::Feature(position) => match &values[position] {
                Some(value) => {
                    table::put_value_key(&mut converted.key_bytes, value);
                    true
                }
                None => false,
            },
            Key::Text(column) => fields[column].is_some_and(|field| arrow::put_raw_key(&mut converted.key_bytes, field)),
        };
        converted.push_row(&entries, keyed && !declined, key_start, !matches!(plan.key, Key::None));
    }
    Ok(converted)
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

/// `convert_jsonl_run(run, count, plan, names) -> (examples, keys, checked, digests) | None`:
/// a run of `count` JSONL lines converted by `plan` (a `CsvPlan` whose
/// columns are the top-level keys `names`; a "text" rule's `as_str` marks
/// a string feature) as `convert_csv_run` answers; None when the run is
/// not `count` lines of UTF-8 (the Python path takes the batch).
#[pyfunction]
pub(crate) fn convert_jsonl_run(py: Python<'_>, run: PyBuffer<u8>, count: usize, plan: &crate::CsvPlan,
                                names: Vec<Vec<u8>>) -> PyResult<Option<crate::ConvertedObjects>> {
    crate::with_bytes(py, &run, |bytes| {
        let Ok(converted) = crate::guarded(|| convert_lines(bytes, count, &plan.plan, &names, &plan.as_str, &plan.nullable))? else {
            return Ok(None);
        };
        // (validated: the run is valid UTF-8 and strings are cut at ASCII quotes)
        Ok(Some(crate::converted_objects(py, &converted, plan, count, true)?))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Feature, Rule};
    use proptest::prelude::*;

    fn members(line: &[u8]) -> Option<Vec<(Vec<u8>, Json<'_>)>> {
        let mut found = Vec::new();
        scan_line(line, |key, _, value| found.push((key.to_vec(), value))).then_some(found)
    }

    #[test]
    fn strict_json_only() {
        assert!(members(br#" {"a": 1, "b": [1, {"c": null}], "d": "x\u00e9"} "#).is_some());
        for bad in [&b"{\"a\": NaN}"[..], b"{\"a\": 01}", b"{\"a\": 1.}", b"{\"a\": -}", b"{\"a\": 1,}",
                    b"{\"a\": \"\t\"}", b"{\"a\": \"\\x\"}", b"[1]", b"{} x", b"{\"a\" 1}", b"{'a': 1}",
                    b"{\"a\": Infinity}", b"{\"a\": tru}", b"{\"a\": \"\\u12\"}"] {
            assert!(members(bad).is_none(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn numbers_are_told_apart_and_long_ones_left() {
        let found = members(b"{\"i\": -0, \"f\": 1e5, \"g\": 2.5E-3}").unwrap();
        assert_eq!(found[0].1, Json::Int(b"-0"));
        assert_eq!(found[1].1, Json::Float(b"1e5"));
        assert_eq!(found[2].1, Json::Float(b"2.5E-3"));
        let long = format!("{{\"i\": {}}}", "9".repeat(65));
        assert!(members(long.as_bytes()).is_none());
    }

    #[test]
    fn deep_nesting_is_left_to_python() {
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(40), "]".repeat(40));
        assert_eq!(classify(deep.as_bytes(), true), Line::Other);
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
                Feature { name: b"n".to_vec(), column: 0, rule: Rule::Int { lo: i64::MIN, hi: i64::MAX, allowed: None } },
                Feature { name: b"s".to_vec(), column: 1, rule: Rule::Text { limit: u64::MAX, allowed: None } },
            ],
            key: Key::Feature(0),
        }
    }

    #[test]
    fn declines_what_it_does_not_model() {
        let names = vec![b"n".to_vec(), b"s".to_vec()];
        let run = b"{\"n\": 1, \"s\": \"a\"}\n{\"n\": 1.0, \"s\": \"a\"}\n{\"n\": 2, \"s\": \"\\n\"}\n{\"n\": 3, \"s\": \"b\", \"s\": \"c\"}\n{\"n\": 99999999999999999999, \"s\": \"a\"}\n{\"n\": 4, \"s\": \"d\", \"x\": NaN}";
        let converted = convert_lines(run, 6, &plan(), &names, &[false, true], &[false, false]).unwrap();
        let taken: Vec<bool> = (0..6).map(|row| converted.example(row).is_some()).collect();
        assert_eq!(taken, vec![true, false, false, true, false, false]);
        // (a line it cannot read leaves every column unchecked)
        assert!(converted.checked.iter().all(Option::is_none));
        assert!(converted.example(3).unwrap().ends_with(b"c"));
    }

    proptest! {
        #[test]
        fn any_bytes_are_scanned_without_panic(run in prop::collection::vec(
                prop::sample::select(b"{}[]\":,.-+eE0129 \t\r\n\\unlltrufas\xff\xc3\xa9".to_vec()), 0..160)) {
            let found = segments(&run);
            let lines: usize = found.iter().map(|segment| segment.lines).sum();
            prop_assert_eq!(lines, super::lines(&run).count());
            let _ = keys(&run);
            let names = vec![b"n".to_vec(), b"s".to_vec()];
            for segment in found.iter().filter(|segment| segment.kind == Line::Object) {
                let part = &run[segment.start..segment.end];
                prop_assert!(convert_lines(part, segment.lines, &plan(), &names, &[false, true], &[true, true]).is_ok());
            }
            let _ = convert_lines(&run, 3, &plan(), &names, &[false, true], &[false, false]);
        }

        #[test]
        fn generated_objects_read_back(values in prop::collection::vec((any::<i64>(), "[a-z]{0,6}", any::<bool>()), 1..6)) {
            let mut line = String::from("{");
            for (index, (number, text, flag)) in values.iter().enumerate() {
                if index > 0 { line.push_str(", "); }
                line.push_str(&format!("\"n{index}\": {number}, \"s{index}\": \"{text}\", \"b{index}\": {flag}"));
            }
            line.push('}');
            let found = members(line.as_bytes()).unwrap();
            for (index, (number, text, _)) in values.iter().enumerate() {
                let number_text = number.to_string();
                prop_assert_eq!(found[3 * index].1, Json::Int(number_text.as_bytes()));
                prop_assert_eq!(found[3 * index + 1].1, Json::Text { raw: text.as_bytes(), escaped: false });
                prop_assert_eq!(found[3 * index + 2].1, Json::Bool);
            }
        }
    }
}
