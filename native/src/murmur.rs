//! MurmurHash3_x64_128, the hash DataSketches gives every theta sketch
//! update: of a text's UTF-8 bytes (`text_stats`, `stats::text_theta`),
//! and its finishing mix, which `stats::theta_hash` takes for one word.

/// MurmurHash3_x64_128 of `data` with `seed`: the hash DataSketches
/// gives every theta sketch update (the bytes of a text's UTF-8).
pub fn murmur3_x64_128(data: &[u8], seed: u64) -> (u64, u64) {
    murmur3_from((seed, seed), data, data.len())
}

/// The last `count` (1 to 8) bytes of `bytes` as a little-endian word:
/// one 8-byte load where `bytes` holds 8, else byte by byte.
#[inline(always)]
fn tail_word(bytes: &[u8], count: usize) -> u64 {
    if let Some(last) = bytes.len().checked_sub(8).map(|start| &bytes[start..]) {
        return u64::from_le_bytes(last.try_into().expect("8 bytes")) >> (8 * (8 - count));
    }
    bytes[bytes.len() - count..].iter().rev().fold(0u64, |word, byte| word << 8 | u64::from(*byte))
}

const MURMUR_C1: u64 = 0x87C3_7B91_1142_53D5;
const MURMUR_C2: u64 = 0x4CF5_AD43_2745_937F;

/// The state after one 16-byte block.
#[inline(always)]
fn murmur3_block((mut h1, mut h2): (u64, u64), block: &[u8]) -> (u64, u64) {
    let k1 = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
    let k2 = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
    h1 ^= k1.wrapping_mul(MURMUR_C1).rotate_left(31).wrapping_mul(MURMUR_C2);
    h1 = h1.rotate_left(27).wrapping_add(h2).wrapping_mul(5).wrapping_add(0x52DC_E729);
    h2 ^= k2.wrapping_mul(MURMUR_C2).rotate_left(33).wrapping_mul(MURMUR_C1);
    h2 = h2.rotate_left(31).wrapping_add(h1).wrapping_mul(5).wrapping_add(0x3849_5AB5);
    (h1, h2)
}

/// The hash of a text of `len` bytes from the state after its first
/// blocks and `rest`, the bytes after them.
#[inline(always)]
fn murmur3_from(mut state: (u64, u64), rest: &[u8], len: usize) -> (u64, u64) {
    let mut blocks = rest.chunks_exact(16);
    for block in &mut blocks {
        state = murmur3_block(state, block);
    }
    let (mut h1, mut h2) = state;
    let tail = blocks.remainder();
    if tail.len() > 8 {
        h2 ^= tail_word(rest, tail.len() - 8).wrapping_mul(MURMUR_C2).rotate_left(33).wrapping_mul(MURMUR_C1);
    }
    if !tail.is_empty() {
        let low = tail.len().min(8);
        let word = tail_word(&rest[..rest.len() - tail.len() + low], low);
        h1 ^= word.wrapping_mul(MURMUR_C1).rotate_left(31).wrapping_mul(MURMUR_C2);
    }
    murmur3_finish((h1, h2), len)
}

/// The hash from the state after every byte of a text of `len` bytes.
#[inline(always)]
fn murmur3_finish((mut h1, mut h2): (u64, u64), len: usize) -> (u64, u64) {
    h1 ^= len as u64;
    h2 ^= len as u64;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    (h1, h2.wrapping_add(h1))
}

/// MurmurHash3's 64-bit finishing mix.
pub fn fmix64(mut k: u64) -> u64 {
    k = (k ^ (k >> 33)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    k = (k ^ (k >> 33)).wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    k ^ (k >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// MurmurHash3_x64_128 as its reference code reads the tail: byte by byte.
    fn murmur3_bytewise(data: &[u8], seed: u64) -> (u64, u64) {
        let blocks = data.len() / 16 * 16;
        let (mut h1, mut h2) = data[..blocks].chunks_exact(16)
            .fold((seed, seed), |state, block| murmur3_block(state, block));
        let tail = &data[blocks..];
        let word = |bytes: &[u8]| bytes.iter().rev().fold(0u64, |word, byte| word << 8 | u64::from(*byte));
        if tail.len() > 8 {
            h2 ^= word(&tail[8..]).wrapping_mul(MURMUR_C2).rotate_left(33).wrapping_mul(MURMUR_C1);
        }
        if !tail.is_empty() {
            h1 ^= word(&tail[..tail.len().min(8)]).wrapping_mul(MURMUR_C1).rotate_left(31).wrapping_mul(MURMUR_C2);
        }
        murmur3_finish((h1, h2), data.len())
    }

    #[test]
    fn murmur3_matches_the_published_vectors() {
        // MurmurHash3_x64_128 of "hello" and "The quick brown fox jumps over the lazy dog", seed 0
        assert_eq!(murmur3_x64_128(b"hello", 0), (0xcbd8_a7b3_41bd_9b02, 0x5b1e_906a_48ae_1d19));
        assert_eq!(murmur3_x64_128(b"The quick brown fox jumps over the lazy dog", 0),
                   (0xe34b_bc7b_bc07_1b6c, 0x7a43_3ca9_c49a_9347));
    }

    proptest! {
        #[test]
        fn murmur3_tail_words_match_the_bytewise_tail(data in prop::collection::vec(any::<u8>(), 0..80),
                                                      seed in any::<u64>()) {
            prop_assert_eq!(murmur3_x64_128(&data, seed), murmur3_bytewise(&data, seed));
        }
    }
}
