//! ISO 8601 text -> an int64 count of a unit since the Unix epoch, as
//! `schemas/timestamps.py` (`timestamp_converter`, `format: iso8601`)
//! reads it, for the one shape whose answer is certain:
//!
//! `YYYY-MM-DD`, optionally followed by `T` or a space, `hh:mm` or
//! `hh:mm:ss` (a fraction of the second, `.` or `,` then any number of
//! digits, after the seconds only), and then an offset: `Z`, `z` or
//! `+hh:mm` / `-hh:mm` (only after a time).
//!
//! Text without an offset is taken only when the feature's zone is UTC
//! (`naive_utc`); the other zones (daylight saving, ambiguous and
//! skipped times) stay Python's. Anything else (whitespace, week dates,
//! basic formats, `24:00`, a leap second, an impossible date, a count
//! beyond int64, ...) is None: the row is declined and Python converts it
//! or writes its dead letter with its own message. Arithmetic is exact
//! (i128 nanoseconds, floor division: rounding towards the past), as
//! Python's integer arithmetic is.

use std::collections::HashSet;

/// Longer text is left to Python (its fraction's digits past the ninth
/// only round down, but no plain timestamp is this long).
const MAX_TEXT: usize = 96;
const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// A timestamp feature's rule: `per` nanoseconds in its unit (> 0), text
/// without an offset read as UTC when `naive_utc`, and the allowed
/// counts (`values`) when given.
#[derive(Debug, Clone)]
pub struct TimestampRule {
    pub per: i64,
    pub naive_utc: bool,
    pub allowed: Option<HashSet<i64>>,
}

impl TimestampRule {
    /// The count `text` stores, or None when Python must decide.
    pub fn check(&self, text: &[u8]) -> Option<i64> {
        let count = count_of(text, self.per, self.naive_utc)?;
        self.allowed.as_ref().is_none_or(|set| set.contains(&count)).then_some(count)
    }
}

/// A reader of fixed-width ASCII fields.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn number(&mut self, width: usize) -> Option<i64> {
        let digits = self.text.get(self.at..self.at + width)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.at += width;
        Some(digits.iter().fold(0, |value, digit| value * 10 + i64::from(digit - b'0')))
    }

    /// Consumes `byte` when it is next.
    fn take(&mut self, byte: u8) -> bool {
        let found = self.text.get(self.at) == Some(&byte);
        self.at += usize::from(found);
        found
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn done(&self) -> bool {
        self.at == self.text.len()
    }
}

fn leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`), exact for every year datetime holds.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = (month + 9) % 12; // March is 0
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The whole nanoseconds of a fraction's digits (those past the ninth
/// dropped: rounding down, as Python does).
fn fraction_nanos(digits: &[u8]) -> i128 {
    let kept = &digits[..digits.len().min(9)];
    let value = kept.iter().fold(0i128, |value, digit| value * 10 + i128::from(digit - b'0'));
    value * 10i128.pow(9 - kept.len() as u32)
}

/// The count of `per`-nanosecond units from the epoch to the instant
/// `text` names (see the module's comment), or None.
pub fn count_of(text: &[u8], per: i64, naive_utc: bool) -> Option<i64> {
    if text.len() > MAX_TEXT || per <= 0 {
        return None;
    }
    let mut cursor = Cursor { text, at: 0 };
    let year = cursor.number(4)?;
    cursor.take(b'-').then_some(())?;
    let month = cursor.number(2)?;
    cursor.take(b'-').then_some(())?;
    let day = cursor.number(2)?;
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let mut seconds = i128::from(days_from_civil(year, month, day)) * 86_400;
    let mut nanos = 0;
    let mut offset = None;
    if !cursor.done() {
        if !(cursor.take(b'T') || cursor.take(b' ')) {
            return None;
        }
        let hour = cursor.number(2)?;
        cursor.take(b':').then_some(())?;
        let minute = cursor.number(2)?;
        let mut second = 0;
        if cursor.take(b':') {
            second = cursor.number(2)?;
            if cursor.take(b'.') || cursor.take(b',') {
                let start = cursor.at;
                while cursor.peek().is_some_and(|byte| byte.is_ascii_digit()) {
                    cursor.at += 1;
                }
                if cursor.at == start {
                    return None;
                }
                nanos = fraction_nanos(&text[start..cursor.at]);
            }
        }
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        seconds += i128::from(hour * 3600 + minute * 60 + second);
        offset = match cursor.peek() {
            None => None,
            Some(b'Z' | b'z') => {
                cursor.at += 1;
                Some(0)
            }
            Some(sign @ (b'+' | b'-')) => {
                cursor.at += 1;
                let hours = cursor.number(2)?;
                cursor.take(b':').then_some(())?;
                let minutes = cursor.number(2)?;
                if hours > 23 || minutes > 59 {
                    return None;
                }
                let size = hours * 3600 + minutes * 60;
                Some(if sign == b'-' { -size } else { size })
            }
            Some(_) => return None,
        };
    }
    if !cursor.done() || (offset.is_none() && !naive_utc) {
        return None;
    }
    // The instant in UTC: the wall time less its offset.
    let total = (seconds - i128::from(offset.unwrap_or(0))) * NANOS_PER_SECOND + nanos;
    i64::try_from(total.div_euclid(i128::from(per))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn known_instants() {
        assert_eq!(count_of(b"1970-01-01", S, true), Some(0));
        assert_eq!(count_of(b"1970-01-01", S, false), None);
        assert_eq!(count_of(b"1970-01-01T00:00:00Z", S, false), Some(0));
        assert_eq!(count_of(b"2024-03-01T12:30:00.5+02:00", 1_000_000, false), Some(1_709_289_000_500));
        assert_eq!(count_of(b"1969-12-31T23:59:59.999999999Z", 1, false), Some(-1));
        assert_eq!(count_of(b"1969-12-31T23:59:59.999999999Z", 1000, false), Some(-1));
        assert_eq!(count_of(b"1969-12-31T23:59:59.999999999Z", S, false), Some(-1));
        assert_eq!(count_of(b"2000-02-29", 86_400 * S, true), Some(11_016));
        assert_eq!(count_of(b"2262-04-11T23:47:16.854775807Z", 1, false), Some(i64::MAX));
        assert_eq!(count_of(b"2262-04-11T23:47:16.854775808Z", 1, false), None);
        assert_eq!(count_of(b"0001-01-01T00:00Z", S, false), Some(-62_135_596_800));
    }

    #[test]
    fn declines_what_python_must_decide() {
        for text in [&b"2023-02-29"[..], b"2024-02-30", b"0000-01-01", b"2024-13-01", b"2024-1-01",
                     b" 2024-01-01", b"2024-01-01 ", b"2024-01-01Z", b"2024-01-01T24:00", b"2024-01-01T12:00:60",
                     b"2024-01-01T12:30.5", b"2024-01-01T12", b"20240101", b"2024-W01-1", b"2024-01-01T12:00:00.",
                     b"2024-01-01T12:00+0100", b"2024-01-01T12:00+24:00", b"2024-01-01t12:00Z", b""] {
            assert_eq!(count_of(text, S, true), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    proptest! {
        #[test]
        fn any_bytes_give_an_answer_without_panic(text in prop::collection::vec(any::<u8>(), 0..120),
                                                  per in any::<i64>(), naive in any::<bool>()) {
            let _ = count_of(&text, per, naive);
        }

        #[test]
        fn near_timestamps_give_an_answer_without_panic(text in "[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]{0,14})?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?)?",
                                                        per in 1i64..=86_400_000_000_000) {
            if let Some(count) = count_of(text.as_bytes(), per, true) {
                // The count's own unit start is never after the instant.
                prop_assert!(count_of(text.as_bytes(), 1, true).is_none_or(|nanos| count.checked_mul(per).is_none_or(|start| start <= nanos)));
            }
        }
    }
}
