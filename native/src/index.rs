//! Index lines of a TFRecord stream as it is written: for each record, in
//! order, ``"<offset> <framed length>\n"``. Mirrors the header walk of
//! `RecordIndexer.write` in `transforms/tfrecord/index.py` (the reference,
//! which keeps the error messages): only the headers are read, the length
//! CRC and the 2 GiB cap checked; the data is neither read nor checked.

use crate::walk::{masked_length_crc, Fault, FOOTER_SIZE, HEADER_SIZE, MAX_RECORD_BYTES};

/// What a walk of the headers found: the index lines of the records whose
/// header lies wholly in the buffer, where the next header starts (relative
/// to the buffer's start; past its end when a record's body runs on into
/// later writes), how many records were indexed, and the fault that stopped
/// the walk (with its header's position), if any.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Lines {
    pub lines: Vec<u8>,
    pub next: usize,
    pub records: usize,
    pub fault: Option<(Fault, usize)>,
}

/// The decimal digits of 0..=99, two bytes each.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566\
676869707172737475767778798081828384858687888990919293949596979899";

/// Appends `value` in decimal, two digits per division: a line per record
/// is most of an index walk's work, and a digit per division cost about
/// as much as reading the header.
fn push_decimal(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + value as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

/// Walks the headers of `buffer` from `from` (a header's position), `offset`
/// being the stream offset of `buffer[0]`. A header cut by the buffer's end
/// ends the walk without a fault (the caller holds its bytes for the next
/// write). No allocation is sized by a length field: the lines grow with
/// the records walked, each at most 42 bytes for at least 16 of the buffer.
pub fn index_lines(buffer: &[u8], from: usize, offset: u64) -> Lines {
    let mut found = Lines { next: from, ..Lines::default() };
    let mut cursor = from;
    // `cursor <= buffer.len()` is checked before the subtraction.
    while cursor <= buffer.len() && buffer.len() - cursor >= HEADER_SIZE {
        let header = &buffer[cursor..cursor + HEADER_SIZE];
        let length_bytes: &[u8; 8] = header[..8].try_into().expect("8 bytes");
        let length = u64::from_le_bytes(*length_bytes);
        let crc = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        if crc != masked_length_crc(length_bytes) {
            found.fault = Some((Fault::BadLengthCrc, cursor));
            break;
        }
        if length > MAX_RECORD_BYTES {
            found.fault = Some((Fault::TooLong(length), cursor));
            break;
        }
        // length <= 2**31 - 1: neither sum overflows a 64-bit usize or u64.
        let framed = HEADER_SIZE + length as usize + FOOTER_SIZE;
        push_decimal(&mut found.lines, offset + cursor as u64);
        found.lines.push(b' ');
        push_decimal(&mut found.lines, framed as u64);
        found.lines.push(b'\n');
        found.records += 1;
        cursor += framed;
    }
    found.next = cursor;
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::{frame_into, masked_crc32c};
    use proptest::prelude::*;

    /// The reference's lines, from the records' own sizes.
    fn expected(records: &[Vec<u8>], offset: u64) -> Vec<u8> {
        let mut lines = String::new();
        let mut at = offset;
        for record in records {
            let framed = (record.len() + HEADER_SIZE + FOOTER_SIZE) as u64;
            lines.push_str(&format!("{at} {framed}\n"));
            at += framed;
        }
        lines.into_bytes()
    }

    proptest! {
        #[test]
        fn framed_records_give_their_lines(records in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..300), 0..20), offset in any::<u32>()) {
            let mut buffer = Vec::new();
            for record in &records {
                frame_into(&mut buffer, record);
            }
            let found = index_lines(&buffer, 0, offset as u64);
            prop_assert_eq!(found.fault, None);
            prop_assert_eq!(found.records, records.len());
            prop_assert_eq!(found.next, buffer.len());
            prop_assert_eq!(found.lines, expected(&records, offset as u64));
        }

        #[test]
        fn hostile_bytes_never_panic_and_stay_inside(buffer in proptest::collection::vec(
            any::<u8>(), 0..200), from in 0usize..250, offset in any::<u64>()) {
            let offset = offset >> 2; // a stream offset, far from u64's end
            let found = index_lines(&buffer, from, offset);
            prop_assert!(found.lines.len() <= 42 * found.records);
            if let Some((_, at)) = found.fault {
                prop_assert!(at + HEADER_SIZE <= buffer.len());
            }
        }
    }

    proptest! {
        #[test]
        fn decimals_are_rusts_own(value in any::<u64>()) {
            let mut out = Vec::new();
            push_decimal(&mut out, value);
            prop_assert_eq!(out, value.to_string().into_bytes());
        }
    }

    #[test]
    fn decimals_at_every_length_edge() {
        for value in [0u64, 9, 10, 99, 100, 101, 999, 1000, 10_000_000_000, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, value);
            assert_eq!(out, value.to_string().into_bytes());
        }
    }

    #[test]
    fn a_cut_header_ends_the_walk_and_a_body_may_run_on() {
        let mut buffer = Vec::new();
        frame_into(&mut buffer, &[7u8; 100]);
        let found = index_lines(&buffer[..20], 0, 5);
        assert_eq!((found.lines, found.next, found.records), (b"5 116\n".to_vec(), 116, 1));
        let found = index_lines(&buffer[..11], 0, 0);
        assert_eq!((found.lines.len(), found.next, found.records), (0, 0, 0));
    }

    #[test]
    fn faults_name_the_header() {
        let mut buffer = Vec::new();
        frame_into(&mut buffer, b"abc");
        let mut bad = buffer.clone();
        bad[8] ^= 1;
        buffer.extend_from_slice(&bad);
        let found = index_lines(&buffer, 0, 0);
        assert_eq!((found.records, found.fault), (1, Some((Fault::BadLengthCrc, 19))));
        let mut long = ((MAX_RECORD_BYTES + 1).to_le_bytes()).to_vec();
        let crc = masked_crc32c(&long);
        long.extend_from_slice(&crc.to_le_bytes());
        let found = index_lines(&long, 0, 0);
        assert_eq!(found.fault, Some((Fault::TooLong(MAX_RECORD_BYTES + 1), 0)));
    }
}
