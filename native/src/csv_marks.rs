//! Finding the bytes of a plain CSV run that `table::check_run` acts on
//! (`,`, `\n`, `\r`) a block of 64 bytes at a time: a bit mask per block,
//! then one step per marked byte, rather than a test and a branch per
//! byte (a field of ~15 bytes has one mark). The same pass notes whether
//! every byte was ASCII, so that a run found so needs no UTF-8 validation
//! of its own. On x86_64 the block is
//! compared by SSE2 (part of every x86_64 CPU, so no runtime detection);
//! elsewhere by a plain loop the compiler vectorizes where it can.

/// Bytes per mask: one bit per byte of a `u64`.
pub const BLOCK: usize = 64;

/// True for the bytes `check_run` acts on: the field separator
/// (`delimiter`: `,` in the default dialect), LF and CR.
#[inline(always)]
fn is_mark(byte: u8, delimiter: u8) -> bool {
    byte == delimiter || byte == b'\n' || byte == b'\r'
}

/// `(marks, high)`: bit `i` of `marks` set where `block[i]` is a mark,
/// of `high` where it is not ASCII. The portable way, and the reference
/// the vector way is tested against.
#[inline]
pub fn marks_portable(block: &[u8; BLOCK], delimiter: u8) -> (u64, u64) {
    block.iter().enumerate().fold((0u64, 0u64), |(marks, high), (at, &byte)| {
        (marks | (u64::from(is_mark(byte, delimiter)) << at), high | (u64::from(byte >> 7) << at))
    })
}

/// `(marks, high)`: bit `i` of `marks` set where `block[i]` is a mark,
/// of `high` where it is not ASCII.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn marks(block: &[u8; BLOCK], delimiter: u8) -> (u64, u64) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is in the x86_64 baseline; each unaligned 16-byte load
    // reads `block[16 * part..16 * part + 16]`, inside the 64-byte array.
    unsafe {
        let (comma, lf, cr) = (_mm_set1_epi8(delimiter as i8), _mm_set1_epi8(b'\n' as i8), _mm_set1_epi8(b'\r' as i8));
        let (mut mask, mut high) = (0u64, 0u64);
        for part in 0..BLOCK / 16 {
            let bytes = _mm_loadu_si128(block.as_ptr().add(16 * part) as *const __m128i);
            let hits = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(bytes, comma), _mm_cmpeq_epi8(bytes, lf)),
                _mm_cmpeq_epi8(bytes, cr),
            );
            mask |= u64::from(_mm_movemask_epi8(hits) as u16) << (16 * part);
            high |= u64::from(_mm_movemask_epi8(bytes) as u16) << (16 * part);
        }
        (mask, high)
    }
}

/// `(marks, high)`, as `marks_portable`.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn marks(block: &[u8; BLOCK], delimiter: u8) -> (u64, u64) {
    marks_portable(block, delimiter)
}

/// Calls `visit(at, byte)` for every mark of `bytes` (`delimiter`, LF,
/// CR), in order, and stops at the first error it gives; else gives
/// whether all of `bytes` is ASCII.
#[inline]
pub fn for_each_mark<E>(bytes: &[u8], delimiter: u8, mut visit: impl FnMut(usize, u8) -> Result<(), E>)
                        -> Result<bool, E> {
    let mut blocks = bytes.chunks_exact(BLOCK);
    let (mut base, mut high) = (0, 0u64);
    for block in &mut blocks {
        let block: &[u8; BLOCK] = block.try_into().expect("chunks_exact gives whole blocks");
        high |= visit_block(block, base, delimiter, &mut visit)?;
        base += BLOCK;
    }
    // The last part block, padded with zeros (not a mark).
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut block = [0u8; BLOCK];
        block[..tail.len()].copy_from_slice(tail);
        high |= visit_block(&block, base, delimiter, &mut visit)?;
    }
    Ok(high == 0)
}

/// Visits one block's marks; gives its non-ASCII bits.
#[inline(always)]
fn visit_block<E>(block: &[u8; BLOCK], base: usize, delimiter: u8,
                  visit: &mut impl FnMut(usize, u8) -> Result<(), E>) -> Result<u64, E> {
    let (mut mask, high) = marks(block, delimiter);
    while mask != 0 {
        let at = mask.trailing_zeros() as usize;
        visit(base + at, block[at])?;
        mask &= mask - 1;
    }
    Ok(high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn vector_marks_are_the_portable_ones(block in prop::collection::vec(
                prop_oneof![Just(b','), Just(b'\t'), Just(b'\n'), Just(b'\r'), Just(b'"'), any::<u8>()], BLOCK),
                delimiter in prop::sample::select(b",\t;| ".to_vec())) {
            let block: [u8; BLOCK] = block.try_into().unwrap();
            prop_assert_eq!(marks(&block, delimiter), marks_portable(&block, delimiter));
        }

        #[test]
        fn every_mark_is_visited_in_order(bytes in prop::collection::vec(
                prop_oneof![3 => prop_oneof![Just(b','), Just(b'\t'), Just(b'\n'), Just(b'\r'), Just(b'a')], 1 => any::<u8>()], 0..300),
                delimiter in prop::sample::select(b",\t;".to_vec())) {
            let mut seen = Vec::new();
            let ascii = for_each_mark(&bytes, delimiter, |at, byte| { seen.push((at, byte)); Ok::<(), ()>(()) }).unwrap();
            let expected: Vec<(usize, u8)> = bytes.iter().copied().enumerate()
                .filter(|&(_, byte)| is_mark(byte, delimiter)).collect();
            prop_assert_eq!(seen, expected);
            prop_assert_eq!(ascii, bytes.is_ascii());
        }
    }
}
