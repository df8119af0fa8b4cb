//! `check_run` (a block of marks at a time, `csv_marks`) against the
//! byte-at-a-time walk it replaced: the same fields, rows and refusals
//! (the same first refusal, where a run has several) on hostile runs.

use super::*;
use proptest::prelude::*;

/// The check as it was: every byte of the run tested in turn.
fn check_run_bytewise(run: &[u8], width: usize) -> Result<RunFields, RunError> {
    check_run_bytewise_with(run, width, b',')
}

fn check_run_bytewise_with(run: &[u8], width: usize, delimiter: u8) -> Result<RunFields, RunError> {
    if std::str::from_utf8(run).is_err() {
        return Err(RunError::NotUtf8);
    }
    if run.ends_with(b"\r") {
        return Err(RunError::LoneCarriageReturn);
    }
    if run.len() >= u32::MAX as usize || width == 0 {
        return Err(RunError::TooLong);
    }
    let body = run.strip_suffix(b"\n").unwrap_or(run);
    let mut fields = RunFields { rows: 0, width, ends: Vec::new() };
    let mut line_start = 0;
    for (at, byte) in body.iter().enumerate() {
        match *byte {
            _ if *byte == delimiter => fields.ends.push(at as u32),
            b'\r' if run.get(at + 1) != Some(&b'\n') => return Err(RunError::LoneCarriageReturn),
            b'\n' => {
                fields.end_line(body, line_start, at)?;
                line_start = at + 1;
            }
            _ => {}
        }
    }
    if !body.is_empty() {
        fields.end_line(body, line_start, body.len())?;
    } else if !run.is_empty() {
        return Err(RunError::BlankLine { line: 0 });
    }
    Ok(fields)
}

/// Pieces of hostile runs: separators, quotes, CR in and out of CRLF,
/// non-ASCII and invalid UTF-8 (a lead byte cut from its continuation
/// by a block's end too), empty fields, and fields of every length up to
/// past a block, so that marks fall at every offset modulo 8, 32 and 64.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![
            &b","[..], b"\n", b"\r\n", b"\r", b"\"", b",,", b"\n\n", b"\xc3\xa9", b"\xe2\x82\xac",
            b"\xff", b"\xc3", b"\x80", b"\xf0\x9f\x98\x80", b" ", b"\t",
        ]).prop_map(|piece| piece.to_vec()),
        3 => (0usize..80).prop_map(|length| (0..length).map(|at| b"0123456789abcdef"[at % 16]).collect()),
    ]
}

/// Rows of `width` fields of `length`-byte text each: runs the check
/// accepts, the fields at every offset as `length` varies.
fn plain_run(rows: usize, width: usize, length: usize, crlf: bool) -> Vec<u8> {
    let field = vec![b'x'; length];
    let mut run = Vec::new();
    for _ in 0..rows {
        run.extend_from_slice(&vec![&field[..]; width].join(&b','));
        run.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
    }
    run
}

proptest! {
    #[test]
    fn block_check_is_the_bytewise_check(pieces in prop::collection::vec(piece(), 0..40),
                                         width in 1usize..5) {
        let run = pieces.concat();
        prop_assert_eq!(check_run(&run, width), check_run_bytewise(&run, width));
    }

    #[test]
    fn block_check_is_the_bytewise_check_on_plain_runs(rows in 1usize..20, width in 1usize..6,
                                                       length in 1usize..70, crlf: bool,
                                                       (flip, into) in (any::<prop::sample::Index>(),
                                                           prop::sample::select(b",\n\r\"\xff\xc3a".to_vec()))) {
        let mut run = plain_run(rows, width, length, crlf);
        let checked = check_run(&run, width);
        prop_assert_eq!(checked.clone(), check_run_bytewise(&run, width));
        prop_assert_eq!(checked.map(|fields| fields.rows), Ok(rows));
        // One byte anywhere made a separator, a quote, a CR or bad UTF-8.
        let at = flip.index(run.len());
        run[at] = into;
        prop_assert_eq!(check_run(&run, width), check_run_bytewise(&run, width));
    }
}

proptest! {
    #[test]
    fn block_check_is_the_bytewise_check_for_any_delimiter(pieces in prop::collection::vec(piece(), 0..40),
                                                           width in 1usize..5,
                                                           delimiter in prop::sample::select(b"\t;| \",a".to_vec())) {
        let run = pieces.concat();
        prop_assert_eq!(check_run_with(&run, width, delimiter), check_run_bytewise_with(&run, width, delimiter));
    }
}

#[test]
fn a_delimiter_no_plain_run_can_have_is_refused() {
    for delimiter in [b'\n', b'\r', 0xc3] {
        assert_eq!(check_run_with(b"a\n", 1, delimiter), Err(RunError::Delimiter));
    }
    assert_eq!(check_run_with(b"a\tb\n", 2, b'\t').map(|fields| fields.rows), Ok(1));
}

#[test]
fn a_run_of_one_lf_is_a_blank_line_both_ways() {
    assert_eq!(check_run(b"\n", 1), Err(RunError::BlankLine { line: 0 }));
    assert_eq!(check_run_bytewise(b"\n", 1), Err(RunError::BlankLine { line: 0 }));
}
