//! The JSON grammar the JSONL kernel (`json`) reads: one line holding one
//! JSON object, scanned as Python's `json` module reads it in its strict
//! mode, for the subset the kernel models (see `scan_line`); anything
//! else, or more, is refused, and Python reads that line.

/// Containers nested deeper than this are left to Python (which refuses
/// past 64): it also bounds the scanner's recursion.
pub const MAX_DEPTH: usize = 32;
/// Number literals longer than this are left to Python (whose `int()`
/// refuses huge ones, and whose checks report the rest).
pub const MAX_NUMBER: usize = 64;

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
    /// An object: its bytes, braces included (`scan_line` reads them).
    Object(&'a [u8]),
    Array,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` below `limit` (at most 0x80) set;
/// a borrow may mark bytes above the lowest such byte, never below it, so
/// the lowest mark is a true one.
fn below(word: u64, limit: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGHS
}

/// The marks of the bytes of `word` equal to `byte` (as `below`).
fn equal(word: u64, byte: u8) -> u64 {
    below(word ^ (ONES * u64::from(byte)), 1)
}

/// The index of the first byte of `bytes` from `from` on that `wanted`
/// takes, or the length: 8 bytes at a time by `marks` (which marks, as
/// `below` does, the bytes `wanted` takes), the last few one by one.
fn first_wanted(bytes: &[u8], from: usize, marks: impl Fn(u64) -> u64, wanted: impl Fn(u8) -> bool) -> usize {
    let mut at = from.min(bytes.len());
    while let Some(chunk) = bytes.get(at..at + 8) {
        let found = marks(u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])));
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + bytes[at..].iter().position(|&byte| wanted(byte)).unwrap_or(bytes.len() - at)
}

/// Where the plain bytes of a string from `from` on end: at the first
/// byte its scan must look at (a quote, a backslash, a control character).
/// A text's plain bytes, most of a line, are passed over 8 at a time.
fn plain_end(bytes: &[u8], from: usize) -> usize {
    first_wanted(bytes, from, |word| equal(word, b'"') | equal(word, b'\\') | below(word, 0x20),
                 |byte| matches!(byte, b'"' | b'\\' | 0..=0x1F))
}

/// How many LFs `bytes` holds (8 bytes at a time: a byte's mark here is
/// exact, no borrow crosses bytes).
pub fn count_lf(bytes: &[u8]) -> usize {
    const LOW7: u64 = !HIGHS;
    let chunks = bytes.chunks_exact(8);
    let tail = chunks.remainder().iter().filter(|&&byte| byte == b'\n').count();
    chunks.map(|chunk| {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) ^ (ONES * u64::from(b'\n'));
        (!(((word & LOW7) + LOW7) | word | LOW7)).count_ones() as usize
    }).sum::<usize>() + tail
}

/// The index of the first LF in `bytes` from `from` on, or the length.
pub fn line_end(bytes: &[u8], from: usize) -> usize {
    first_wanted(bytes, from, |word| equal(word, b'\n'), |byte| byte == b'\n')
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON's whitespace (Python's `json` takes four), but the LF: the
    /// scanner reads one line, which holds none, and so stops at the LF
    /// that ends it when it reads a line in its run (`scan_run_line`).
    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
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
            self.at = plain_end(self.bytes, self.at);
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
            b'{' => {
                let start = self.at;
                self.object(depth + 1, |_, _, _| {})?;
                Some(Json::Object(&self.bytes[start..self.at]))
            }
            b'[' => self.array(depth + 1).map(|_| Json::Array),
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

/// Scans the line of `run` that starts at `start` (up to the next LF or
/// the run's end) as `scan_line` scans it alone, in the one pass that also
/// finds where it ends: gives whether it is one object, and its end (the
/// index of its LF, or the run's length).
pub fn scan_run_line<'a>(run: &'a [u8], start: usize, member: impl FnMut(&'a [u8], bool, Json<'a>)) -> (bool, usize) {
    let mut scanner = Scanner { bytes: run, at: start };
    scanner.skip_space();
    // (no rule takes an LF: a scan stops at or before the line's end)
    let whole = scanner.object(1, member).is_some() && {
        scanner.skip_space();
        matches!(scanner.peek(), None | Some(b'\n'))
    };
    let end = if whole { scanner.at } else { line_end(run, scanner.at) };
    (whole, end)
}

#[cfg(test)]
mod tests {
    use super::*;
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

    proptest! {
        #[test]
        fn eight_at_a_time_finds_what_one_by_one_finds(bytes in prop::collection::vec(
                prop::sample::select(b"a\"\\\n\x1f \x20\x7f\x80\xc3\xa9\x01\x00!#]".to_vec()), 0..40), from in 0usize..45) {
            let first = |wanted: &dyn Fn(u8) -> bool| from.min(bytes.len())
                + bytes[from.min(bytes.len())..].iter().position(|&byte| wanted(byte)).unwrap_or(bytes.len().saturating_sub(from));
            prop_assert_eq!(plain_end(&bytes, from), first(&|byte| matches!(byte, b'"' | b'\\' | 0..=0x1F)));
            prop_assert_eq!(line_end(&bytes, from), first(&|byte| byte == b'\n'));
            prop_assert_eq!(count_lf(&bytes), bytes.iter().filter(|&&byte| byte == b'\n').count());
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
