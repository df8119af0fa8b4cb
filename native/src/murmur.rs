//! DataSketches' hash of a theta sketch update: MurmurHash3_x64_128 with
//! its default seed, the first half shifted right by one, as
//! `schemas/stats/distinct.py` (`theta_hashes`) computes it for numbers.
//! For text, the hash of its UTF-8 bytes: `add_texts` gives a sketch only
//! the texts whose hash is below its theta (the others cannot change it).

/// DataSketches' DEFAULT_SEED.
pub const THETA_SEED: u64 = 9001;

const C1: u64 = 0x87C3_7B91_1142_53D5;
const C2: u64 = 0x4CF5_AD43_2745_937F;

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    k ^= k >> 33;
    k = k.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    k ^ (k >> 33)
}

fn mix_k1(k1: u64) -> u64 {
    k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2)
}

fn mix_k2(k2: u64) -> u64 {
    k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1)
}

/// The little-endian word of up to 8 bytes (the tail's zero-padded).
fn word(bytes: &[u8]) -> u64 {
    let mut padded = [0u8; 8];
    padded[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(padded)
}

/// MurmurHash3_x64_128 of `data` (Austin Appleby's reference, as
/// DataSketches' MurmurHash3.h has it): (h1, h2).
pub fn murmur3_x64_128(data: &[u8], seed: u64) -> (u64, u64) {
    let (mut h1, mut h2) = (seed, seed);
    let blocks = data.chunks_exact(16);
    let tail = blocks.remainder();
    for block in blocks {
        let (k1, k2) = (word(&block[..8]), word(&block[8..]));
        h1 ^= mix_k1(k1);
        h1 = h1.rotate_left(27).wrapping_add(h2).wrapping_mul(5).wrapping_add(0x52DC_E729);
        h2 ^= mix_k2(k2);
        h2 = h2.rotate_left(31).wrapping_add(h1).wrapping_mul(5).wrapping_add(0x3849_5AB5);
    }
    if tail.len() > 8 {
        h2 ^= mix_k2(word(&tail[8..]));
    }
    if !tail.is_empty() {
        h1 ^= mix_k1(word(&tail[..tail.len().min(8)]));
    }
    let length = data.len() as u64;
    h1 ^= length;
    h2 ^= length;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

/// The 63-bit hash a theta sketch compares with its theta for `data`.
pub fn theta_hash(data: &[u8]) -> u64 {
    murmur3_x64_128(data, THETA_SEED).0 >> 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hashes_are_the_sketches_own() {
        // distinct.theta_hashes(np.array([1])) in Python, and the hashes a
        // datasketches update_theta_sketch keeps for these texts.
        assert_eq!(theta_hash(&1i64.to_le_bytes()), 0x05A1_86BD_CB7D_F915);
        assert_eq!(theta_hash(b"hello"), 0x10DB_BDEA_541A_E0D5);
        assert_eq!(theta_hash("héllo wörld, a longer text of 37 bytes".as_bytes()), 0x5768_1FB2_1EFB_AB66);
    }

    proptest! {
        #[test]
        fn any_bytes_hash_without_panic(data in prop::collection::vec(any::<u8>(), 0..100)) {
            prop_assert!(theta_hash(&data) < 1 << 63);
        }
    }
}
