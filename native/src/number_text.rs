//! The fast path's number syntax read from a field's bytes (`rules::check`):
//! `[+-]?[0-9]+` for int64 and the plain decimal syntax for floats, in one
//! pass each, giving exactly what the plain readers in the tests give (the
//! digits checked, then `i128` arithmetic; `plain_decimal`, then Rust's
//! correctly rounded `f64` parse).

// Longer numbers are left to Python: no int64 needs more than 19 digits
// past leading zeros, and no float32 needs more (float() still reads them).
const MAX_NUMBER_TEXT: usize = 64;

/// `[+-]?[0-9]+` inside int64, or None (outside it Python reports
/// int64_overflow).
pub(crate) fn parse_int(text: &[u8]) -> Option<i64> {
    if text.len() > MAX_NUMBER_TEXT {
        return None;
    }
    let (negative, digits) = match text.first()? {
        b'+' => (false, &text[1..]),
        b'-' => (true, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    // The magnitude in u64: anything that overflows it is outside int64.
    let mut magnitude: u64 = 0;
    for &byte in digits {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    if negative {
        // -2**63 is the one magnitude past i64::MAX a sign takes.
        (magnitude <= 1 << 63).then(|| (magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// The powers of ten a double holds exactly (10**22 < 2**53 * 2**22).
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The digits of `[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?` (the syntax without
/// whitespace, underscores or words like inf and nan that Python's
/// float() reads): whether negative, the first 19 significant digits as
/// an integer, the power of ten that scales it, and whether digits past
/// those 19 were left out. None when the text is not in the syntax.
struct Decimal {
    negative: bool,
    mantissa: u64,
    exponent: i64,
    truncated: bool,
}

fn decimal(text: &[u8]) -> Option<Decimal> {
    let mut at = 0;
    let negative = match text.first() {
        Some(b'-') => { at = 1; true }
        Some(b'+') => { at = 1; false }
        _ => false,
    };
    let mut number = Decimal { negative, mantissa: 0, exponent: 0, truncated: false };
    let mut significant = 0;
    let mut take = |digit: u8, number: &mut Decimal, scale: i64| {
        if significant < 19 {
            number.mantissa = number.mantissa * 10 + u64::from(digit);
            number.exponent += scale;
            // (leading zeros are not significant)
            significant += usize::from(number.mantissa != 0);
        } else {
            number.truncated |= digit != 0;
            number.exponent += scale + 1;
        }
    };
    let mut seen = 0;
    while let Some(digit) = text.get(at).map(|byte| byte.wrapping_sub(b'0')).filter(|digit| *digit <= 9) {
        take(digit, &mut number, 0);
        at += 1;
        seen += 1;
    }
    if text.get(at) == Some(&b'.') {
        at += 1;
        while let Some(digit) = text.get(at).map(|byte| byte.wrapping_sub(b'0')).filter(|digit| *digit <= 9) {
            take(digit, &mut number, -1);
            at += 1;
            seen += 1;
        }
    }
    if seen == 0 {
        return None;
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        at += 1;
        let exponent_negative = match text.get(at) {
            Some(b'-') => { at += 1; true }
            Some(b'+') => { at += 1; false }
            _ => false,
        };
        let first = at;
        let mut exponent: i64 = 0;
        while let Some(digit) = text.get(at).map(|byte| byte.wrapping_sub(b'0')).filter(|digit| *digit <= 9) {
            // (saturated: any exponent this large is only for the general parse)
            exponent = (exponent * 10 + i64::from(digit)).min(1 << 40);
            at += 1;
        }
        if at == first {
            return None;
        }
        number.exponent += if exponent_negative { -exponent } else { exponent };
    }
    (at == text.len()).then_some(number)
}

/// The double of a plain decimal text (`decimal`'s syntax), as Rust's
/// (and Python's) correctly rounded parse gives it, or None.
pub(crate) fn parse_float(text: &[u8]) -> Option<f64> {
    if text.len() > MAX_NUMBER_TEXT {
        return None;
    }
    let number = decimal(text)?;
    // Clinger's fast path: a mantissa and a power of ten that a double
    // holds exactly, one multiplication or division, which IEEE 754
    // rounds correctly: the correctly rounded value, the general parse's.
    if !number.truncated && number.mantissa <= 1 << 53 && number.exponent.abs() <= 22 {
        let power = EXACT_POWERS[number.exponent.unsigned_abs() as usize];
        let magnitude = number.mantissa as f64;
        let value = if number.exponent < 0 { magnitude / power } else { magnitude * power };
        return Some(if number.negative { -value } else { value });
    }
    // SAFETY: `decimal` took only ASCII bytes (digits, signs, '.', 'e',
    // 'E') up to the text's end, and ASCII is valid UTF-8.
    let text = unsafe { std::str::from_utf8_unchecked(text) };
    text.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The plain readers the one-pass ones replace: digits checked, then
    /// added up in i128.
    fn reference_int(text: &[u8]) -> Option<i64> {
        if text.is_empty() || text.len() > MAX_NUMBER_TEXT {
            return None;
        }
        let (negative, digits) = match text[0] {
            b'+' => (false, &text[1..]),
            b'-' => (true, &text[1..]),
            _ => (false, text),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut magnitude: i128 = 0;
        for digit in digits {
            magnitude = magnitude * 10 + i128::from(digit - b'0');
            if magnitude > 1 << 63 {
                return None;
            }
        }
        i64::try_from(if negative { -magnitude } else { magnitude }).ok()
    }

    /// `[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?`, checked a piece at a time.
    fn plain_decimal(text: &[u8]) -> bool {
        let mut at = 0;
        let digits = |from: usize| text[from..].iter().take_while(|b| b.is_ascii_digit()).count();
        if at < text.len() && (text[at] == b'+' || text[at] == b'-') {
            at += 1;
        }
        let whole = digits(at);
        at += whole;
        let mut fraction = 0;
        if at < text.len() && text[at] == b'.' {
            at += 1;
            fraction = digits(at);
            at += fraction;
        }
        if whole + fraction == 0 {
            return false;
        }
        if at < text.len() && (text[at] == b'e' || text[at] == b'E') {
            at += 1;
            if at < text.len() && (text[at] == b'+' || text[at] == b'-') {
                at += 1;
            }
            let exponent = digits(at);
            if exponent == 0 {
                return false;
            }
            at += exponent;
        }
        at == text.len()
    }

    fn reference_float(text: &[u8]) -> Option<f64> {
        if text.len() > MAX_NUMBER_TEXT || !plain_decimal(text) {
            return None;
        }
        std::str::from_utf8(text).ok()?.parse::<f64>().ok()
    }

    fn same_float(text: &[u8]) -> Result<(), TestCaseError> {
        let (found, expected) = (parse_float(text), reference_float(text));
        prop_assert_eq!(found.map(f64::to_bits), expected.map(f64::to_bits), "{:?}", String::from_utf8_lossy(text));
        Ok(())
    }

    #[test]
    fn int_syntax_is_the_strict_one() {
        assert_eq!(parse_int(b"-0042"), Some(-42));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int(b"-000000000000000000000009223372036854775808"), Some(i64::MIN));
        for declined in [&b"9223372036854775808"[..], b"-9223372036854775809", b"18446744073709551616",
                         b"1_000", b" 1", b"1 ", b"+", b"-", b"", b"0x1", b"1.0", b"true", b"+-1"] {
            assert_eq!(parse_int(declined), None, "{:?}", declined);
        }
    }

    #[test]
    fn float_syntax_declines_words_and_spaces() {
        for declined in [&b"nan"[..], b"inf", b"-Infinity", b" 1.5", b"1_0.5", b"1e", b".", b"e5", b"1.5f",
                         b"+", b"-.", b"1e+", b"1.5e-", b"..5", b"1.2.3", b""] {
            assert_eq!(parse_float(declined), None, "{:?}", declined);
        }
        assert_eq!(parse_float(b"1."), Some(1.0));
        assert_eq!(parse_float(b"-.5e-3"), Some(-0.0005));
    }

    #[test]
    fn floats_at_the_fast_paths_edges_match_the_general_parse() {
        for text in ["0", "-0", "-0.0e5", "9007199254740992", "9007199254740993", "9007199254740993e-3",
                     "1e22", "1e23", "1e-22", "1e-23", "123456789012345678901234567890", "1.7976931348623157e308",
                     "1.8e308", "4.9e-324", "2e-324", "0.000000000000000000000000000001", "1e99999999999999999999",
                     "1e-99999999999999999999", "0e99999999999999999999", "00000000000000000000000000001.5",
                     "9999999999999999999", "99999999999999999999.5", "0.1000000000000000055511151231257827"] {
            same_float(text.as_bytes()).unwrap();
        }
    }

    proptest! {
        #[test]
        fn ints_match_the_plain_reader(text in "[-+]?[0-9]{0,22}|[-+0-9a .]{0,6}") {
            prop_assert_eq!(parse_int(text.as_bytes()), reference_int(text.as_bytes()));
        }

        #[test]
        fn every_i64_reads_back(value in any::<i64>()) {
            prop_assert_eq!(parse_int(value.to_string().as_bytes()), Some(value));
        }

        #[test]
        fn floats_match_the_general_parse(text in "[-+]?[0-9]{0,20}(\\.[0-9]{0,20})?([eE][-+]?[0-9]{1,3})?") {
            same_float(text.as_bytes())?;
        }

        #[test]
        fn odd_texts_match_the_general_parse(text in "[-+0-9.eE_ a]{0,8}") {
            same_float(text.as_bytes())?;
        }

        #[test]
        fn every_double_written_reads_back(value in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
            for text in [format!("{value}"), format!("{value:e}"), format!("{value:.3}")] {
                same_float(text.as_bytes())?;
            }
        }
    }
}
