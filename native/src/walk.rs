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
const MASK_DELTA: u32 = 0xA282_EAD8;

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

/// The CRC32C of `data`, masked the way TFRecord files store it.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

fn mask(crc: u32) -> u32 {
    ((crc >> 15) | (crc << 17)).wrapping_add(MASK_DELTA)
}

/// `masked_crc32c` of a record's 8-byte length field, which every header
/// check computes once a record: one `crc32` instruction where the CPU has
/// SSE4.2 (the general function's lanes and tails cost more than the CRC
/// of 8 bytes itself).
pub fn masked_length_crc(length: &[u8; 8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2, checked just above.
            return mask(unsafe { crc32c_word(u64::from_le_bytes(*length)) });
        }
    }
    masked_crc32c(length)
}

/// The CRC32C of one little-endian 8-byte word.
///
/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_word(word: u64) -> u32 {
    !(std::arch::x86_64::_mm_crc32_u64(u64::from(u32::MAX), word) as u32)
}

/// The CRC32C of `data`: `crc32c_sse42` where the CPU has SSE4.2, else the
/// crc32c crate's (which also serves as the reference in the tests).
///
/// Why not the crate's everywhere: its hardware loop issues each 8-byte
/// `crc32` through a small `#[target_feature]` function, which cannot be
/// inlined into its caller (built without the feature), so every word is a
/// call: about 4 GB/s of the 13-16 the instruction gives in three lanes.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The CRC32C of what `crc` is the CRC32C of followed by `data` (a file's
/// CRC kept as it is written), as `crc32c`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2, checked just above.
            return unsafe { crc32c_sse42(crc, data) };
        }
    }
    crc32c::crc32c_append(crc, data)
}

/// Bytes per lane: the three lanes of a block are `LANE` bytes each.
const LANE: usize = 1024;
/// The reflected CRC32C polynomial.
const POLY: u32 = 0x82F6_3B78;

/// The byte-at-a-time table of the CRC32C register (reflected).
const fn byte_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

/// The register advanced over `LANE` zero bytes, as four byte-indexed
/// tables (the advance is linear over GF(2), so a register's advance is
/// the XOR of its bytes' advances): how a lane's CRC is moved past the
/// lanes after it before they are combined.
const fn shift_tables() -> [[u32; 256]; 4] {
    let table = byte_table();
    let mut basis = [0u32; 32]; // the advance of each single bit
    let mut bit = 0;
    while bit < 32 {
        let mut crc = 1u32 << bit;
        let mut step = 0;
        while step < LANE {
            crc = table[(crc & 0xff) as usize] ^ (crc >> 8);
            step += 1;
        }
        basis[bit] = crc;
        bit += 1;
    }
    let mut tables = [[0u32; 256]; 4];
    let mut part = 0;
    while part < 4 {
        let mut byte = 0;
        while byte < 256 {
            let mut value = 0u32;
            let mut bit = 0;
            while bit < 8 {
                if byte >> bit & 1 == 1 {
                    value ^= basis[part * 8 + bit];
                }
                bit += 1;
            }
            tables[part][byte] = value;
            byte += 1;
        }
        part += 1;
    }
    tables
}

static SHIFT: [[u32; 256]; 4] = shift_tables();

/// `crc` advanced over `LANE` zero bytes.
#[inline(always)]
fn shift_lane(crc: u64) -> u64 {
    let crc = crc as u32;
    u64::from(
        SHIFT[0][(crc & 0xff) as usize]
            ^ SHIFT[1][(crc >> 8 & 0xff) as usize]
            ^ SHIFT[2][(crc >> 16 & 0xff) as usize]
            ^ SHIFT[3][(crc >> 24) as usize],
    )
}

/// The CRC32C of `data` by SSE4.2's `crc32` instruction, three independent
/// lanes at a time (the instruction's latency is three cycles, its
/// throughput one), the lanes joined by `shift_lane`; what is left after
/// the last whole block runs in one lane.
///
/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(start: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut crc = u64::from(!start);
    let mut blocks = data.chunks_exact(3 * LANE);
    for block in &mut blocks {
        let (a, rest) = block.split_at(LANE);
        let (b, c) = rest.split_at(LANE);
        let (mut crc_b, mut crc_c) = (0u64, 0u64);
        for ((x, y), z) in a
            .chunks_exact(8)
            .zip(b.chunks_exact(8))
            .zip(c.chunks_exact(8))
        {
            crc = _mm_crc32_u64(crc, le_u64(x));
            crc_b = _mm_crc32_u64(crc_b, le_u64(y));
            crc_c = _mm_crc32_u64(crc_c, le_u64(z));
        }
        crc = shift_lane(crc) ^ crc_b;
        crc = shift_lane(crc) ^ crc_c;
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for word in &mut words {
        crc = _mm_crc32_u64(crc, le_u64(word));
    }
    let mut crc = crc as u32;
    for &byte in words.remainder() {
        crc = _mm_crc32_u8(crc, byte);
    }
    !crc
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes);
    u32::from_le_bytes(word)
}

#[inline(always)]
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
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
fn walk_each(buffer: &[u8], mut intact: impl FnMut(usize, usize)) -> Option<(Fault, usize)> {
    let mut cursor = 0usize;
    while buffer.len() - cursor >= HEADER_SIZE {
        let header = &buffer[cursor..cursor + HEADER_SIZE];
        let length_bytes: &[u8; 8] = header[..8].try_into().expect("8 bytes");
        let length = u64::from_le_bytes(*length_bytes);
        if le_u32(&header[8..]) != masked_length_crc(length_bytes) {
            return Some((Fault::BadLengthCrc, cursor));
        }
        if length > MAX_RECORD_BYTES {
            return Some((Fault::TooLong(length), cursor));
        }
        // length <= 2**31 - 1, so this cannot overflow a 64-bit usize.
        let record_bytes = HEADER_SIZE + length as usize + FOOTER_SIZE;
        if buffer.len() - cursor < record_bytes {
            return None;
        }
        let end = cursor + record_bytes;
        let data = &buffer[cursor + HEADER_SIZE..end - FOOTER_SIZE];
        if le_u32(&buffer[end - FOOTER_SIZE..end]) != masked_crc32c(data) {
            return Some((Fault::BadDataCrc, cursor));
        }
        intact(cursor, end);
        cursor = end;
    }
    None
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
    let length = (record.len() as u64).to_le_bytes();
    let end = HEADER_SIZE + record.len();
    out[..8].write_copy_of_slice(&length);
    out[8..HEADER_SIZE].write_copy_of_slice(&masked_crc32c(&length).to_le_bytes());
    out[HEADER_SIZE..end].write_copy_of_slice(record);
    out[end..end + FOOTER_SIZE].write_copy_of_slice(&masked_crc32c(record).to_le_bytes());
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
    fn the_lane_shift_is_crc_over_zero_bytes() {
        // Advancing a register over LANE zero bytes is what the byte-wise
        // CRC does to it: checked against the crate on raw registers.
        for register in [1u32, 0x8000_0000, 0xDEAD_BEEF, u32::MAX] {
            let zeros = vec![0u8; LANE];
            // crc32c_append(!r) runs the register from r and inverts at the end.
            let expected = !crc32c::crc32c_append(!register, &zeros);
            assert_eq!(
                shift_lane(u64::from(register)) as u32,
                expected,
                "{register:#010x}"
            );
        }
    }

    #[test]
    fn masked_crc_of_empty_matches_tensorflow() {
        // TensorFlow's masked CRC32C of b"" (crc32c(b"") == 0).
        assert_eq!(masked_crc32c(b""), 0xA282_EAD8);
    }

    #[test]
    fn a_length_above_the_cap_is_a_fault_not_an_allocation() {
        let length = (u64::MAX).to_le_bytes();
        let mut buffer = length.to_vec();
        buffer.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
        let walk = walk_records(&buffer);
        assert_eq!(walk.fault, Some((Fault::TooLong(u64::MAX), 0)));
    }

    proptest! {
        #[test]
        fn three_lane_crc_matches_the_crate(data in prop::collection::vec(any::<u8>(), 0..20_000),
                                            skip in 0usize..8) {
            // Every length across the block, word and byte tails, at every
            // alignment.
            let data = &data[skip.min(data.len())..];
            prop_assert_eq!(crc32c(data), crc32c::crc32c(data));
            // Continued from any register, as a file's CRC is kept.
            let start = crc32c::crc32c(&data[..skip.min(data.len())]);
            prop_assert_eq!(crc32c_append(start, data), crc32c::crc32c_append(start, data));
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
        fn the_length_crc_is_the_crc_of_its_eight_bytes(length in any::<[u8; 8]>()) {
            prop_assert_eq!(masked_length_crc(&length), masked_crc32c(&length));
            prop_assert_eq!(masked_length_crc(&length),
                            mask(crc32c::crc32c(&length)));
        }

        #[test]
        fn a_count_is_the_walk_without_its_lists(records in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..48), 0..10),
                flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..3),
                cut in any::<prop::sample::Index>()) {
            // Intact, damaged and cut streams: the count agrees with the walk.
            let mut buffer = framed(&records);
            for (at, bit) in flips {
                if !buffer.is_empty() {
                    let position = at.index(buffer.len());
                    buffer[position] ^= 1 << bit;
                }
            }
            let buffer = &buffer[..cut.index(buffer.len() + 1)];
            let walk = walk_records(buffer);
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
