//! How the table kernels apply a feature's declared null texts
//! (`null_values`, `rules::Nulls`), and what one feature makes of its
//! field in a row (`Part`), shared by the CSV, Arrow and JSONL kernels.
//!
//! The rule is `schemas/checks.py`'s `_missing_rule`: text that is one of
//! the listed texts, or blank text (Python's `not text.strip()`) for a
//! number feature listing `""`, is missing; the feature's default then
//! stands in (`Absent::Default`), an optional feature is left out
//! (`Absent::Omit`), and a required one is a `missing_value` dead letter,
//! which Python writes (`Absent::Decline`).

use crate::column::{Column, OMITTED, UNCHECKED};
use crate::rules::{self, Absent, Feature, Value};

/// One feature's part of a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Part<'a> {
    /// The field's checked value.
    Stored(Value<'a>),
    /// A missing value's default.
    Defaulted(Value<'a>),
    /// A missing value left out.
    Omitted,
    /// The Python row path takes the row.
    Declined,
}

/// Python's `not text.strip()` where the kernel knows it: Some(true) for
/// ASCII whitespace only (or nothing), Some(false) for text with another
/// ASCII byte, None for text of whitespace and non-ASCII bytes (other
/// scripts' spaces: Python decides).
fn blank(text: &[u8]) -> Option<bool> {
    // str.isspace's ASCII members: \t \n \x0b \x0c \r, \x1c-\x1f and space.
    let space = |byte: &u8| matches!(byte, b'\t'..=b'\r' | 0x1c..=0x1f | b' ');
    if text.iter().any(|byte| byte.is_ascii() && !space(byte)) {
        Some(false)
    } else if text.is_ascii() {
        Some(true)
    } else {
        None
    }
}

impl Feature {
    /// What the feature makes of a field: `text` is its text when the
    /// field is text (a Python str), which the null texts are matched
    /// against; `check` gives its checked value otherwise (None: declined).
    #[inline(always)]
    pub(crate) fn part<'a>(&self, text: Option<&'a [u8]>, check: impl FnOnce() -> Option<Value<'a>>) -> Part<'a> {
        if let (Some(nulls), Some(text)) = (&self.nulls, text) {
            let missing = if nulls.texts.contains(text) {
                Some(true)
            } else if nulls.blank {
                blank(text)
            } else {
                Some(false)
            };
            match (missing, nulls.absent) {
                (None, _) | (Some(true), Absent::Decline) => return Part::Declined,
                (Some(true), Absent::Omit) => return Part::Omitted,
                (Some(true), Absent::Default(value)) => return Part::Defaulted(value),
                (Some(false), _) => {}
            }
        }
        check().map_or(Part::Declined, Part::Stored)
    }
}

impl<'a> Part<'a> {
    /// Writes the part's entry into a row's `entries` and its value into
    /// the feature's checked `column`: a value left out as OMITTED, one
    /// declined as UNCHECKED (the Python row path converts it; the
    /// statistics convert that value alone); gives the value a key may
    /// take (a stored one only: a default never keys a row).
    #[inline(always)]
    pub(crate) fn record(self, feature: &Feature, entries: &mut Vec<u8>,
                         column: &mut Column<'a>) -> Option<Value<'a>> {
        match self {
            Part::Stored(value) | Part::Defaulted(value) => {
                rules::put_entry(entries, feature, &value);
                column.push(value);
            }
            Part::Omitted => column.push_none(&feature.rule, OMITTED),
            Part::Declined => column.push_none(&feature.rule, UNCHECKED),
        }
        match self {
            Part::Stored(value) => Some(value),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blank_is_python_strip_where_certain() {
        assert_eq!(blank(b""), Some(true));
        assert_eq!(blank(b" \t\x1f\x0b"), Some(true));
        assert_eq!(blank(b" 1 "), Some(false));
        assert_eq!(blank("\u{a0}".as_bytes()), None);
        assert_eq!(blank("\u{a0}x".as_bytes()), Some(false));
    }

    proptest! {
        #[test]
        fn blank_agrees_with_unicode_whitespace(text in "[ \t\r\n\u{b}\u{c}\u{1c}-\u{1f}a\u{a0}\u{3000}]{0,6}") {
            // Rust's char::is_whitespace misses \x1c-\x1f, which str.isspace takes.
            let python_space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
            let expected = text.chars().all(python_space);
            if let Some(found) = blank(text.as_bytes()) {
                prop_assert_eq!(found, expected);
            }
        }
    }
}
