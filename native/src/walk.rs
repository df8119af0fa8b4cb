//! The record walk: where each intact TFRecord of a buffer starts and ends,
//! both CRCs checked, or the first fault. Mirrors `complete_records` in
//! `transforms/tfrecord/damage.py` (the reference), which keeps the error
//! messages: this module only says which fault, where.

use std::mem::MaybeUninit;

/// Bytes before a record's data: u64 length, u32 masked CRC of the length.
pub const HEADER_SIZE: usize = 12;
/// Bytes after it: u32 masked CRC of the data.
pub const FOOTER_SIZE: usize = 4;
/// The longest record accepted (a serialized protobuf's 2 GiB cap), as
/// `framing.MAX_RECORD_BYTES`.
pub const MAX_RECORD_BYTES: u64 = (1 << 31) - 1;
/// Records whose data CRCs a walk or a framing computes together
/// (`masked_crc32c_each`: a record a lane).
pub const CRC_BATCH: usize = 16;

// The CRC functions live in `crc`; framing and walks are where they are used.
pub use crate::crc::{crc32c, crc32c_append, masked_crc32c, masked_crc32c_each, masked_length_crc};

/// What stopped a walk before the end of the complete records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The header's CRC does not match its length field.
    BadLengthCrc,
    /// The length field is above `MAX_RECORD_BYTES` (the length given).
    TooLong(u64),
    /// The data's CRC does not match the footer.
    BadDataCrc,
}

/// The intact complete records at the head of a buffer, and the fault (with
/// the byte offset of the faulty record's header and the number of intact
/// records before it) that stopped the walk, if any.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Walk {
    pub starts: Vec<usize>,
    pub ends: Vec<usize>,
    pub fault: Option<(Fault, usize)>,
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes);
    u32::from_le_bytes(word)
}

/// Walks `buffer` from its start record by record. A record whose body is
/// not all in the buffer yet ends the walk without a fault (the reader
/// reads on); every length is checked against the buffer before it is
/// used, so a crafted length field can neither read out of bounds nor
/// size an allocation.
pub fn walk_records(buffer: &[u8]) -> Walk {
    let mut walk = Walk::default();
    let fault = walk_each(buffer, |start, end| {
        walk.starts.push(start);
        walk.ends.push(end);
    });
    walk.fault = fault;
    walk
}

/// What `walk_records` finds, without where each record lies: how many
/// intact complete records, where the last of them ends (0: none), and the
/// fault. A reader that only counts records (the read-back of a shard)
/// needs no position per record.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub records: usize,
    pub end: usize,
    pub fault: Option<(Fault, usize)>,
}

/// `walk_records` counting instead of listing: the same walk, the same
/// checks, the same fault.
pub fn count_records(buffer: &[u8]) -> Count {
    let mut count = Count::default();
    let fault = walk_each(buffer, |_, end| {
        count.records += 1;
        count.end = end;
    });
    count.fault = fault;
    count
}

/// The walk of `walk_records`: calls `intact(start, end)` for each intact
/// complete record in order; returns the fault that stopped it, if any.
/// The headers of up to `CRC_BATCH` records are walked first, then their
/// data CRCs computed together and checked in order: the first record at
/// fault is the one a record-by-record walk stops at (a data fault comes
/// before any fault of the headers after it).
fn walk_each(buffer: &[u8], mut intact: impl FnMut(usize, usize)) -> Option<(Fault, usize)> {
    let mut cursor = 0usize;
    loop {
        let (mut starts, mut ends) = ([0usize; CRC_BATCH], [0usize; CRC_BATCH]);
        let mut count = 0;
        let mut stop = None;
        while count < CRC_BATCH {
            match record_end(buffer, cursor) {
                Ok(end) => {
                    (starts[count], ends[count]) = (cursor, end);
                    count += 1;
                    cursor = end;
                }
                Err(fault) => {
                    stop = Some(fault);
                    break;
                }
            }
        }
        let mut data: [&[u8]; CRC_BATCH] = [&[]; CRC_BATCH];
        for (record, (start, end)) in data.iter_mut().zip(starts.iter().zip(&ends)).take(count) {
            *record = &buffer[start + HEADER_SIZE..end - FOOTER_SIZE];
        }
        let mut crcs = [0u32; CRC_BATCH];
        masked_crc32c_each(&data[..count], &mut crcs[..count]);
        for ((start, end), crc) in starts.iter().zip(&ends).zip(&crcs).take(count) {
            if le_u32(&buffer[end - FOOTER_SIZE..*end]) != *crc {
                return Some((Fault::BadDataCrc, *start));
            }
            intact(*start, *end);
        }
        if let Some(fault) = stop {
            return fault;
        }
    }
}

/// Where the record whose header is at `cursor` (at most the buffer's
/// length) ends, its header checked; else what stops the walk there: the
/// header's fault, or None when the record is not all in the buffer yet.
/// Every length is checked against the buffer before it is used.
fn record_end(buffer: &[u8], cursor: usize) -> Result<usize, Option<(Fault, usize)>> {
    if buffer.len() - cursor < HEADER_SIZE {
        return Err(None);
    }
    let header = &buffer[cursor..cursor + HEADER_SIZE];
    let length_bytes: &[u8; 8] = header[..8].try_into().expect("8 bytes");
    let length = u64::from_le_bytes(*length_bytes);
    if le_u32(&header[8..]) != masked_length_crc(length_bytes) {
        return Err(Some((Fault::BadLengthCrc, cursor)));
    }
    if length > MAX_RECORD_BYTES {
        return Err(Some((Fault::TooLong(length), cursor)));
    }
    // length <= 2**31 - 1, so this cannot overflow a 64-bit usize.
    let record_bytes = HEADER_SIZE + length as usize + FOOTER_SIZE;
    if buffer.len() - cursor < record_bytes {
        return Err(None);
    }
    Ok(cursor + record_bytes)
}

/// Appends `record` framed as a TFRecord to `out` (`framing.frame_records`).
pub fn frame_into(out: &mut Vec<u8>, record: &[u8]) {
    let start = out.len();
    out.resize(start + HEADER_SIZE + record.len() + FOOTER_SIZE, 0);
    frame_at(&mut out[start..], record);
}

/// Writes `record` framed as a TFRecord at the start of `out`, which must
/// hold at least its framed size; returns that size.
pub fn frame_at(out: &mut [u8], record: &[u8]) -> usize {
    // SAFETY: MaybeUninit<u8> has u8's layout, and `frame_uninit` writes
    // only initialized bytes into it, so `out` stays initialized.
    frame_uninit(unsafe { &mut *(out as *mut [u8] as *mut [MaybeUninit<u8>]) }, record)
}

/// `frame_at` into memory not yet written (a new bytes object's,
/// `py_bytes::written_bytes`): every byte of the framed size is written.
pub fn frame_uninit(out: &mut [MaybeUninit<u8>], record: &[u8]) -> usize {
    frame_uninit_with_crc(out, record, masked_crc32c(record))
}

/// `frame_uninit` of each of `records`, back to back from the start of
/// `out` (which must hold them all framed); returns the size written.
/// The data CRCs are computed `CRC_BATCH` records at a time
/// (`masked_crc32c_each`), the next batch's records asked for while the
/// CRCs run (`prefetch`: a list's objects lie all over the heap).
pub fn frame_all_uninit(out: &mut [MaybeUninit<u8>], records: &[&[u8]]) -> usize {
    let mut at = 0;
    let mut crcs = [0u32; CRC_BATCH];
    for (number, batch) in records.chunks(CRC_BATCH).enumerate() {
        for ahead in records.iter().skip((number + 1) * CRC_BATCH).take(CRC_BATCH) {
            crate::prefetch(ahead.as_ptr());
        }
        masked_crc32c_each(batch, &mut crcs[..batch.len()]);
        for (record, crc) in batch.iter().zip(crcs) {
            at += frame_uninit_with_crc(&mut out[at..], record, crc);
        }
    }
    at
}

/// `frame_uninit` with the record's masked data CRC given.
fn frame_uninit_with_crc(out: &mut [MaybeUninit<u8>], record: &[u8], masked_crc: u32) -> usize {
    let length = (record.len() as u64).to_le_bytes();
    let end = HEADER_SIZE + record.len();
    out[..8].write_copy_of_slice(&length);
    out[8..HEADER_SIZE].write_copy_of_slice(&masked_length_crc(&length).to_le_bytes());
    out[HEADER_SIZE..end].write_copy_of_slice(record);
    out[end..end + FOOTER_SIZE].write_copy_of_slice(&masked_crc.to_le_bytes());
    end + FOOTER_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for record in records {
            frame_into(&mut out, record);
        }
        out
    }

    #[test]
    fn a_length_above_the_cap_is_a_fault_not_an_allocation() {
        let length = (u64::MAX).to_le_bytes();
        let mut buffer = length.to_vec();
        buffer.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
        let walk = walk_records(&buffer);
        assert_eq!(walk.fault, Some((Fault::TooLong(u64::MAX), 0)));
    }

    /// The walk record by record, each record's data CRC as its header
    /// is read: what the batched walk must find.
    fn walk_one_by_one(buffer: &[u8]) -> (Vec<usize>, Option<(Fault, usize)>) {
        let mut ends = Vec::new();
        let mut cursor = 0;
        loop {
            match record_end(buffer, cursor) {
                Err(fault) => return (ends, fault),
                Ok(end) => {
                    let data = &buffer[cursor + HEADER_SIZE..end - FOOTER_SIZE];
                    if le_u32(&buffer[end - FOOTER_SIZE..end]) != masked_crc32c(data) {
                        return (ends, Some((Fault::BadDataCrc, cursor)));
                    }
                    ends.push(end);
                    cursor = end;
                }
            }
        }
    }

    proptest! {
        #[test]
        fn records_framed_together_are_each_framed(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..400), 0..40)) {
            let expected = framed(&records);
            let slices: Vec<&[u8]> = records.iter().map(|record| &record[..]).collect();
            let mut out = vec![MaybeUninit::<u8>::uninit(); expected.len()];
            let written = frame_all_uninit(&mut out, &slices);
            prop_assert_eq!(written, expected.len());
            // SAFETY: all `written` bytes were written (checked above: all of them).
            let out: Vec<u8> = out.iter().map(|byte| unsafe { byte.assume_init() }).collect();
            prop_assert_eq!(out, expected);
        }

        #[test]
        fn intact_records_walk_to_their_end(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..64), 0..16)) {
            let buffer = framed(&records);
            let walk = walk_records(&buffer);
            prop_assert_eq!(walk.fault, None);
            prop_assert_eq!(walk.starts.len(), records.len());
            for ((start, end), record) in walk.starts.iter().zip(&walk.ends).zip(&records) {
                prop_assert_eq!(&buffer[start + HEADER_SIZE..end - FOOTER_SIZE], &record[..]);
            }
        }

        #[test]
        fn a_count_is_the_walk_without_its_lists(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..300), 0..60),
                flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
                cut in any::<prop::sample::Index>()) {
            // Intact, damaged (a header, a body, a CRC) and cut streams of
            // more records than a batch: the walk stops where a walk
            // record by record does, and the count agrees with it.
            let mut buffer = framed(&records);
            for (at, bit) in flips {
                if !buffer.is_empty() {
                    let position = at.index(buffer.len());
                    buffer[position] ^= 1 << bit;
                }
            }
            let buffer = &buffer[..cut.index(buffer.len() + 1)];
            let walk = walk_records(buffer);
            let (ends, fault) = walk_one_by_one(buffer);
            prop_assert_eq!(&walk.ends, &ends);
            prop_assert_eq!(walk.fault, fault);
            let count = count_records(buffer);
            prop_assert_eq!(count.records, walk.starts.len());
            prop_assert_eq!(count.end, walk.ends.last().copied().unwrap_or(0));
            prop_assert_eq!(count.fault, walk.fault);
        }

        #[test]
        fn any_bytes_walk_without_panic(buffer in prop::collection::vec(any::<u8>(), 0..256),
                                        cut in 0usize..256) {
            let walk = walk_records(&buffer[..cut.min(buffer.len())]);
            for (start, end) in walk.starts.iter().zip(&walk.ends) {
                prop_assert!(start < end && *end <= buffer.len());
            }
        }

        #[test]
        fn a_flipped_byte_is_found_in_its_record(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..32), 1..8), at in any::<prop::sample::Index>(),
                bit in 0u8..8) {
            let mut buffer = framed(&records);
            let position = at.index(buffer.len());
            buffer[position] ^= 1 << bit;
            let walk = walk_records(&buffer);
            let intact = walk.ends.last().copied().unwrap_or(0);
            prop_assert!(intact <= position);
            prop_assert!(walk.fault.is_some() || walk.ends.len() < records.len());
        }
    }
}
