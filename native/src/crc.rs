//! CRC32C as TFRecord files use it (masked, `framing.masked_crc32c`): of
//! one buffer (`crc32c`, three lanes within it), or of many short records
//! (`masked_crc32c_each`, each as whole words), by SSE4.2's `crc32`
//! instruction where the CPU has it, else by the crc32c crate (which also
//! serves as the reference in the tests).

const MASK_DELTA: u32 = 0xA282_EAD8;

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

#[inline(always)]
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}


/// Records of at least this many bytes fill `crc32c_sse42`'s own lanes
/// and run through it in `crc32c_each`.
const SHORT_BELOW: usize = 3 * LANE;
/// Records shorter than this have no two words for `Words`: they run
/// through `crc32c_sse42` in `crc32c_each`.
const WORDS_FROM: usize = 16;

/// The masked CRC32C of each of `records` (`masked_crc32c` of each), into
/// `crcs`, which must be as many (a panic else).
pub fn masked_crc32c_each(records: &[&[u8]], crcs: &mut [u32]) {
    crc32c_each(records, crcs);
    for crc in crcs {
        *crc = mask(*crc);
    }
}

/// The CRC32C of each of `records` (`crc32c` of each), into `crcs`, which
/// must be as many (a panic else): for many short records (a batch's
/// Examples, of a few hundred bytes), one test of the CPU for them all and
/// a loop with no branch to mispredict where a record ends
/// (`crc32c_words`).
pub fn crc32c_each(records: &[&[u8]], crcs: &mut [u32]) {
    assert_eq!(records.len(), crcs.len(), "one CRC a record");
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2, checked just above.
            return unsafe { crc32c_each_sse42(records, crcs) };
        }
    }
    for (record, crc) in records.iter().zip(crcs) {
        *crc = crc32c(record);
    }
}

/// `crc32c_each` by SSE4.2's `crc32`: a short record by `crc32c_words`,
/// one after the other. (Not several records interleaved in lanes: one
/// record's CRC does not wait for the one before, so the core runs the
/// next record's words while this one's finish, as long as no branch
/// between them mispredicts; measured on 1M records of 128-212 bytes,
/// three records in lanes took 21 ms, their loops' ends mispredicted as
/// often, and these one after the other 14 ms, where `crc32c` of each
/// took 18-22 ms.)
///
/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_each_sse42(records: &[&[u8]], crcs: &mut [u32]) {
    for (record, crc) in records.iter().zip(crcs) {
        *crc = if (WORDS_FROM..SHORT_BELOW).contains(&record.len()) {
            crc32c_words(record)
        } else {
            crc32c_sse42(0, record)
        };
    }
}

/// A record as `crc32c_words` runs it: as whole words, `pad` zero bytes
/// before it (a CRC register of 0 stays 0 over zero bytes), and the CRC's
/// initial register of all ones XORed into its first four bytes (the
/// `crc32` instruction XORs the register into a word's low bytes): the
/// register starts at 0, and no record ends in a tail of bytes run one at
/// a time (a loop whose end mispredicts at every record). `head` is the
/// first two words (the pad, the record's first bytes, the ones), `body`
/// the rest, a whole number of words.
struct Words<'a> {
    head: [u64; 2],
    body: &'a [u8],
}

impl<'a> Words<'a> {
    /// The words of `record`, which must have `WORDS_FROM` bytes at least.
    #[inline(always)]
    fn new(record: &'a [u8]) -> Self {
        let pad = (8 - record.len() % 8) % 8;
        let first: [u8; 16] = record[..16].try_into().expect("16 bytes");
        // (the bytes shifted out at the top are the body's first)
        let head = (u128::from_le_bytes(first) ^ u128::from(u32::MAX)) << (8 * pad);
        Words { head: [head as u64, (head >> 64) as u64], body: &record[16 - pad..] }
    }
}

/// The CRC32C of `record` (`WORDS_FROM` bytes at least) by its `Words`.
///
/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
unsafe fn crc32c_words(record: &[u8]) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    let words = Words::new(record);
    let mut crc = _mm_crc32_u64(_mm_crc32_u64(0, words.head[0]), words.head[1]);
    for word in words.body.chunks_exact(8) {
        crc = _mm_crc32_u64(crc, le_u64(word));
    }
    !(crc as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// Each record's CRC by `crc32c_each` and by the crate, from records
    /// cut out of one buffer at `sizes`, `skip` bytes in (unaligned starts).
    fn each_against_the_crate(buffer: &[u8], sizes: &[usize], skip: usize) -> Result<(), TestCaseError> {
        let mut records = Vec::new();
        let mut at = skip.min(buffer.len());
        for &size in sizes {
            let end = (at + size).min(buffer.len());
            records.push(&buffer[at..end]);
            at = end;
        }
        let mut crcs = vec![0u32; records.len()];
        crc32c_each(&records, &mut crcs);
        let mut masked = vec![0u32; records.len()];
        masked_crc32c_each(&records, &mut masked);
        for ((record, crc), masked) in records.iter().zip(&crcs).zip(&masked) {
            prop_assert_eq!(*crc, crc32c::crc32c(record), "{} bytes", record.len());
            prop_assert_eq!(*masked, mask(crc32c::crc32c(record)));
        }
        Ok(())
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
        fn the_length_crc_is_the_crc_of_its_eight_bytes(length in any::<[u8; 8]>()) {
            prop_assert_eq!(masked_length_crc(&length), masked_crc32c(&length));
            prop_assert_eq!(masked_length_crc(&length),
                            mask(crc32c::crc32c(&length)));
        }

        #[test]
        fn each_record_crc_matches_the_crate(buffer in prop::collection::vec(any::<u8>(), 0..24_000),
                                             sizes in prop::collection::vec(
                                                 prop_oneof![0usize..16, 0usize..400, 0usize..7_000], 0..40),
                                             skip in 0usize..8) {
            // Short, word-tail, Example-sized and larger-than-a-block
            // records, any count (not a multiple of the lanes), any start.
            each_against_the_crate(&buffer, &sizes, skip)?;
        }

        #[test]
        fn example_sized_records_match_the_crate(buffer in prop::collection::vec(any::<u8>(), 4_000..8_000),
                                                    sizes in prop::collection::vec(150usize..200, 0..31),
                                                    skip in 0usize..8) {
            // A batch of a table's Examples: every pad (0 to 7 bytes) and
            // a head whose ones spill into its second word.
            each_against_the_crate(&buffer, &sizes, skip)?;
        }
    }

    #[test]
    #[should_panic(expected = "one CRC a record")]
    fn crcs_for_fewer_records_are_refused() {
        crc32c_each(&[b"abc"], &mut []);
    }
}
