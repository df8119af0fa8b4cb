//! Row digests: keyed BLAKE2b with a 16-byte digest, as Python's
//! `hashlib.blake2b(row, key=salt, digest_size=16)` (`transforms/splits.py`).

use blake2::digest::consts::U16;
use blake2::digest::core_api::{Block, Buffer, UpdateCore, VariableOutputCore};
use blake2::digest::{Digest, FixedOutput, KeyInit, Output};
use blake2::{Blake2b, Blake2bMac, Blake2bVarCore};

/// Bytes of one digest.
pub const DIGEST_SIZE: usize = 16;
/// BLAKE2b's longest key.
pub const MAX_SALT: usize = 64;

/// Hashes rows under one salt. A keyed BLAKE2b hashes the key, padded to
/// a block, before the row; that block is the same for every row, so it
/// is compressed once here, and a row of up to a block (every key, most
/// examples) costs one compression instead of two.
#[derive(Clone)]
pub struct RowHasher {
    keyed: Option<Keyed>,
    /// BLAKE2b's state words after the key block (`lanes::after_key`),
    /// for `digest_rows`' eight rows at a time; None without a salt.
    words: Option<[u64; 8]>,
    /// Which of `lanes`' builds this processor runs (found once).
    build: lanes::Build,
}

#[derive(Clone)]
struct Keyed {
    /// The state after the key block, for rows that follow it.
    after_key: Blake2bVarCore,
    /// The MAC itself, for the empty row, whose last block is the key's.
    mac: Blake2bMac<U16>,
}

impl RowHasher {
    /// An error for a salt longer than BLAKE2b takes (the Python side
    /// hashes long names down first).
    pub fn new(salt: &[u8]) -> Result<RowHasher, String> {
        if salt.len() > MAX_SALT {
            return Err(format!("a salt of {} bytes is longer than BLAKE2b's {MAX_SALT}", salt.len()));
        }
        if salt.is_empty() {
            // hashlib's key=b"" is plain BLAKE2b; the MAC type would still
            // hash a (zero-length) key block.
            return Ok(RowHasher { keyed: None, words: None, build: lanes::Build::Portable });
        }
        let mac = Blake2bMac::<U16>::new_from_slice(salt).map_err(|error| error.to_string())?;
        let mut after_key = Blake2bVarCore::new_with_params(&[], &[], salt.len(), DIGEST_SIZE);
        let mut key_block = Block::<Blake2bVarCore>::default();
        key_block[..salt.len()].copy_from_slice(salt);
        after_key.update_blocks(&[key_block]);
        Ok(RowHasher { keyed: Some(Keyed { after_key, mac }), words: Some(lanes::after_key(salt)),
                       build: lanes::Build::detected() })
    }

    /// Appends the digest of `row` to `out`.
    pub fn digest_into(&self, row: &[u8], out: &mut Vec<u8>) {
        let Some(keyed) = &self.keyed else {
            out.extend_from_slice(&Blake2b::<U16>::digest(row));
            return;
        };
        if row.is_empty() {
            out.extend_from_slice(&keyed.mac.clone().finalize_fixed());
            return;
        }
        let mut core = keyed.after_key.clone();
        // A lazy buffer, as the MAC's: the row's last block (never empty
        // here) stays in it for the final compression.
        let mut buffer = Buffer::<Blake2bVarCore>::default();
        buffer.digest_blocks(row, |blocks| core.update_blocks(blocks));
        // The core's output is BLAKE2b's 64-byte state; the parameter
        // block says 16, and the digest is its first 16 bytes.
        let mut full = Output::<Blake2bVarCore>::default();
        core.finalize_variable_core(&mut buffer, &mut full);
        out.extend_from_slice(&full[..DIGEST_SIZE]);
    }
}

impl RowHasher {
    /// Appends the digest of each of `rows` (`digest_into`), or 16 zero
    /// bytes for a None. A keyed row of 1 to 128 bytes (every key, most
    /// Examples) is one compression after the key block: eight such rows
    /// are compressed together, one in each lane of `lanes::digests`
    /// (the digest costs most of a row's time in the convert call).
    pub fn digest_rows<'r>(&self, rows: impl Iterator<Item = Option<&'r [u8]>>, out: &mut Vec<u8>) {
        let Some(words) = &self.words else {
            rows.for_each(|row| self.digest_one(row, out));
            return;
        };
        // Up to eight rows waiting for a lane each, and where their digests go.
        let mut group: [(&[u8], usize); lanes::GROUP] = [(&[], 0); lanes::GROUP];
        let mut waiting = 0;
        for row in rows {
            match row {
                Some(data) if (1..=lanes::BLOCK).contains(&data.len()) => {
                    group[waiting] = (data, out.len());
                    out.extend_from_slice(&[0; DIGEST_SIZE]);
                    waiting += 1;
                    if waiting == lanes::GROUP {
                        lanes::digests(words, &group, out, self.build);
                        waiting = 0;
                    }
                }
                other => self.digest_one(other, out),
            }
        }
        for (data, at) in &group[..waiting] {
            let mut one = Vec::with_capacity(DIGEST_SIZE);
            self.digest_into(data, &mut one);
            out[*at..*at + DIGEST_SIZE].copy_from_slice(&one);
        }
    }

    fn digest_one(&self, row: Option<&[u8]>, out: &mut Vec<u8>) {
        match row {
            Some(data) => self.digest_into(data, out),
            None => out.extend_from_slice(&[0; DIGEST_SIZE]),
        }
    }
}

/// The digests of `rows`, one after another; an error for a salt longer
/// than BLAKE2b takes.
pub fn hash_rows<'a>(salt: &[u8], rows: impl Iterator<Item = &'a [u8]>) -> Result<Vec<u8>, String> {
    let hasher = RowHasher::new(salt)?;
    let mut out = Vec::new();
    hasher.digest_rows(rows.map(Some), &mut out);
    Ok(out)
}

/// BLAKE2b's compression (RFC 7693) of four messages at once, one per
/// lane: every state word is a [u64; 4], which the compiler turns into
/// one AVX2 register (two SSE2 ones without AVX2). Only what keyed row
/// digests need: the state after the key block, then one final block.
mod lanes {
    use super::DIGEST_SIZE;

    /// Lanes of a `Word`, and rows compressed together (two words' lanes).
    pub const LANES: usize = 4;
    pub const GROUP: usize = 8;
    pub const BLOCK: usize = 128;

    const IV: [u64; 8] = [
        0x6a09e667f3bcc908, 0xbb67ae8584caa73b, 0x3c6ef372fe94f82b, 0xa54ff53a5f1d36f1,
        0x510e527fade682d1, 0x9b05688c2b3e6c1f, 0x1f83d9abfb41bd6b, 0x5be0cd19137e2179,
    ];

    const SIGMA: [[usize; 16]; 12] = [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    ];

    type Word = [u64; LANES];

    /// The state after `salt`'s key block (1..=64 bytes, padded to a
    /// block), the parameter block saying a 16-byte digest: the same for
    /// every row under that salt.
    pub fn after_key(salt: &[u8]) -> [u64; 8] {
        let mut start = IV;
        start[0] ^= 0x0101_0000 ^ ((salt.len() as u64) << 8) ^ DIGEST_SIZE as u64;
        let mut block = [0u8; BLOCK];
        block[..salt.len()].copy_from_slice(salt);
        let state = compress(&start.map(|word| [word; LANES]), &message(&[block; LANES]),
                             [BLOCK as u64; LANES], false);
        state.map(|word| word[0])
    }

    /// The builds of the final compression, the fastest this processor
    /// runs found once (`detected`); every build gives the same digests.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Build {
        /// Plain Rust: two groups of four lanes.
        Portable,
        /// Four lanes in one AVX2 register, twice.
        Avx2,
        /// All eight lanes in one AVX-512 register, rotated by `vprorq`.
        Avx512,
    }

    impl Build {
        pub fn detected() -> Build {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    return Build::Avx512;
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    return Build::Avx2;
                }
            }
            Build::Portable
        }
    }

    /// Writes the digest of each of `group`'s rows (1..=BLOCK bytes, under
    /// the salt whose `after_key` is `words`) at its offset in `out`;
    /// `build` must be one this processor runs (`Build::detected`, or a
    /// slower one).
    pub fn digests(words: &[u64; 8], group: &[(&[u8], usize); GROUP], out: &mut [u8], build: Build) {
        let mut blocks = [[0u8; BLOCK]; GROUP];
        let mut counts = [0u64; GROUP];
        for (lane, (row, _)) in group.iter().enumerate() {
            blocks[lane][..row.len()].copy_from_slice(row);
            // (the bytes hashed so far: the key block, then the row)
            counts[lane] = (BLOCK + row.len()) as u64;
        }
        let mut put = |lane: usize, first: u64, second: u64| {
            let at = group[lane].1;
            out[at..at + 8].copy_from_slice(&first.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&second.to_le_bytes());
        };
        #[cfg(target_arch = "x86_64")]
        if build == Build::Avx512 {
            let m: [[u64; GROUP]; 16] = message(&blocks);
            // SAFETY: `Build::Avx512` is only `detected` where this
            // processor has AVX-512F.
            let state = unsafe { compress_avx512(words, &m, counts) };
            (0..GROUP).for_each(|lane| put(lane, state[0][lane], state[1][lane]));
            return;
        }
        let start = words.map(|word| [word; LANES]);
        for half in 0..GROUP / LANES {
            let lanes = half * LANES..(half + 1) * LANES;
            let m: [Word; 16] = message(blocks[lanes.clone()].try_into().expect("four blocks"));
            let counts: Word = counts[lanes.clone()].try_into().expect("four counts");
            let state = final_compress(&start, &m, counts, build == Build::Avx2);
            lanes.for_each(|lane| put(lane, state[0][lane % LANES], state[1][lane % LANES]));
        }
    }

    fn final_compress(start: &[Word; 8], m: &[Word; 16], counts: Word, avx2: bool) -> [Word; 8] {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `avx2` is a `Build` of this processor's: it has AVX2.
            return unsafe { compress_avx2(start, m, counts) };
        }
        let _ = avx2;
        compress(start, m, counts, true)
    }

    /// `compress(start, m, counts, true)` of eight lanes, each state word
    /// in one AVX-512 register, every rotation one `vprorq`: where the
    /// processor runs a 512-bit operation as two halves, the two halves
    /// still overlap, where the AVX2 build waits on each step's result.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn compress_avx512(start: &[u64; 8], m: &[[u64; GROUP]; 16], counts: [u64; GROUP])
                              -> [[u64; GROUP]; 8] {
        use std::arch::x86_64::*;
        // SAFETY (every load and store): eight u64 are 64 bytes, and the
        // unaligned forms take any address.
        let load = |words: &[u64; GROUP]| _mm512_loadu_si512(words.as_ptr() as *const __m512i);
        let m: [__m512i; 16] = std::array::from_fn(|i| load(&m[i]));
        let mut v: [__m512i; 16] = std::array::from_fn(|i| {
            _mm512_set1_epi64(if i < 8 { start[i] } else { IV[i - 8] } as i64)
        });
        v[12] = _mm512_xor_si512(v[12], load(&counts));
        v[14] = _mm512_xor_si512(v[14], _mm512_set1_epi64(-1));
        let mix = |v: &mut [__m512i; 16], (a, b, c, d): (usize, usize, usize, usize), x: __m512i, y: __m512i| {
            v[a] = _mm512_add_epi64(_mm512_add_epi64(v[a], v[b]), x);
            v[d] = _mm512_ror_epi64::<32>(_mm512_xor_si512(v[d], v[a]));
            v[c] = _mm512_add_epi64(v[c], v[d]);
            v[b] = _mm512_ror_epi64::<24>(_mm512_xor_si512(v[b], v[c]));
            v[a] = _mm512_add_epi64(_mm512_add_epi64(v[a], v[b]), y);
            v[d] = _mm512_ror_epi64::<16>(_mm512_xor_si512(v[d], v[a]));
            v[c] = _mm512_add_epi64(v[c], v[d]);
            v[b] = _mm512_ror_epi64::<63>(_mm512_xor_si512(v[b], v[c]));
        };
        rounds(&mut v, &m, mix);
        // Only the first two words are read (the digest's 16 bytes).
        std::array::from_fn(|i| {
            let mut words = [0u64; GROUP];
            if i < 2 {
                let mixed = _mm512_xor_si512(_mm512_set1_epi64(start[i] as i64),
                                             _mm512_xor_si512(v[i], v[i + 8]));
                _mm512_storeu_si512(words.as_mut_ptr() as *mut __m512i, mixed);
            }
            words
        })
    }

    /// `compress(start, m, counts, true)` with each state word in one
    /// AVX2 register (the compiler does not find this itself).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn compress_avx2(start: &[Word; 8], m: &[Word; 16], counts: Word) -> [Word; 8] {
        use std::arch::x86_64::*;
        // SAFETY (every load and store): a Word is 32 bytes, and the
        // unaligned forms take any address.
        let load = |word: &Word| _mm256_loadu_si256(word.as_ptr() as *const __m256i);
        let m: [__m256i; 16] = std::array::from_fn(|i| load(&m[i]));
        let mut v: [__m256i; 16] = std::array::from_fn(|i| {
            if i < 8 { load(&start[i]) } else { _mm256_set1_epi64x(IV[i - 8] as i64) }
        });
        v[12] = _mm256_xor_si256(v[12], load(&counts));
        v[14] = _mm256_xor_si256(v[14], _mm256_set1_epi64x(-1));
        // Rotations by 24 and 16 bits move whole bytes: one shuffle each.
        let by24 = _mm256_setr_epi8(3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10,
                                    3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10);
        let by16 = _mm256_setr_epi8(2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9,
                                    2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9);
        let mix = |v: &mut [__m256i; 16], (a, b, c, d): (usize, usize, usize, usize), x: __m256i, y: __m256i| {
            v[a] = _mm256_add_epi64(_mm256_add_epi64(v[a], v[b]), x);
            v[d] = _mm256_shuffle_epi32(_mm256_xor_si256(v[d], v[a]), 0b10_11_00_01);
            v[c] = _mm256_add_epi64(v[c], v[d]);
            v[b] = _mm256_shuffle_epi8(_mm256_xor_si256(v[b], v[c]), by24);
            v[a] = _mm256_add_epi64(_mm256_add_epi64(v[a], v[b]), y);
            v[d] = _mm256_shuffle_epi8(_mm256_xor_si256(v[d], v[a]), by16);
            v[c] = _mm256_add_epi64(v[c], v[d]);
            let t = _mm256_xor_si256(v[b], v[c]);
            v[b] = _mm256_xor_si256(_mm256_srli_epi64(t, 63), _mm256_add_epi64(t, t));
        };
        rounds(&mut v, &m, mix);
        std::array::from_fn(|i| {
            let mut word = [0u64; LANES];
            let mixed = _mm256_xor_si256(load(&start[i]), _mm256_xor_si256(v[i], v[i + 8]));
            _mm256_storeu_si256(word.as_mut_ptr() as *mut __m256i, mixed);
            word
        })
    }

    /// BLAKE2b's twelve rounds over the working words `v`: each mixes
    /// the columns, then the diagonals, with the message words in the
    /// round's order (one schedule for every build; `mix` is the build's G).
    #[inline(always)]
    fn rounds<V: Copy>(v: &mut [V; 16], m: &[V; 16], mix: impl Fn(&mut [V; 16], (usize, usize, usize, usize), V, V)) {
        for sigma in &SIGMA {
            mix(v, (0, 4, 8, 12), m[sigma[0]], m[sigma[1]]);
            mix(v, (1, 5, 9, 13), m[sigma[2]], m[sigma[3]]);
            mix(v, (2, 6, 10, 14), m[sigma[4]], m[sigma[5]]);
            mix(v, (3, 7, 11, 15), m[sigma[6]], m[sigma[7]]);
            mix(v, (0, 5, 10, 15), m[sigma[8]], m[sigma[9]]);
            mix(v, (1, 6, 11, 12), m[sigma[10]], m[sigma[11]]);
            mix(v, (2, 7, 8, 13), m[sigma[12]], m[sigma[13]]);
            mix(v, (3, 4, 9, 14), m[sigma[14]], m[sigma[15]]);
        }
    }

    /// The 16 message words of each lane's block, little-endian.
    fn message<const N: usize>(blocks: &[[u8; BLOCK]; N]) -> [[u64; N]; 16] {
        std::array::from_fn(|word| std::array::from_fn(|lane| {
            u64::from_le_bytes(blocks[lane][word * 8..word * 8 + 8].try_into().unwrap())
        }))
    }

    #[inline(always)]
    fn add(a: Word, b: Word) -> Word {
        std::array::from_fn(|lane| a[lane].wrapping_add(b[lane]))
    }

    #[inline(always)]
    fn xor_rotate(a: Word, b: Word, by: u32) -> Word {
        std::array::from_fn(|lane| (a[lane] ^ b[lane]).rotate_right(by))
    }

    #[inline(always)]
    fn mix(v: &mut [Word; 16], (a, b, c, d): (usize, usize, usize, usize), x: Word, y: Word) {
        v[a] = add(add(v[a], v[b]), x);
        v[d] = xor_rotate(v[d], v[a], 32);
        v[c] = add(v[c], v[d]);
        v[b] = xor_rotate(v[b], v[c], 24);
        v[a] = add(add(v[a], v[b]), y);
        v[d] = xor_rotate(v[d], v[a], 16);
        v[c] = add(v[c], v[d]);
        v[b] = xor_rotate(v[b], v[c], 63);
    }

    /// The state after compressing each lane's block, `counts` bytes
    /// hashed by its end (all under 2**64), the last block if `last`.
    #[inline(always)]
    fn compress(h: &[Word; 8], m: &[Word; 16], counts: Word, last: bool) -> [Word; 8] {
        let mut v: [Word; 16] = std::array::from_fn(|i| if i < 8 { h[i] } else { [IV[i - 8]; LANES] });
        v[12] = std::array::from_fn(|lane| v[12][lane] ^ counts[lane]);
        if last {
            v[14] = v[14].map(|word| !word);
        }
        rounds(&mut v, m, mix);
        std::array::from_fn(|i| std::array::from_fn(|lane| h[i][lane] ^ v[i][lane] ^ v[i + 8][lane]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blake2::digest::Update;
    use proptest::prelude::*;

    #[test]
    fn digests_match_hashlib() {
        // hashlib.blake2b(b"row", key=b"flights", digest_size=16).hexdigest()
        // and hashlib.blake2b(b"", key=b"", digest_size=16).hexdigest()
        let keyed = hash_rows(b"flights", [&b"row"[..]].into_iter()).unwrap();
        let plain = hash_rows(b"", [&b""[..]].into_iter()).unwrap();
        assert_eq!(hex(&keyed), KEYED);
        assert_eq!(hex(&plain), PLAIN);
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    const KEYED: &str = "330d42c14f9f8f3b1257ec063daeefa6";
    const PLAIN: &str = "cae66941d9efbd404e4d88758ea67670";

    /// The MAC as the blake2 crate computes it, block by block from the key.
    fn reference(salt: &[u8], row: &[u8]) -> Vec<u8> {
        if salt.is_empty() {
            return Blake2b::<U16>::digest(row).to_vec();
        }
        let mut mac = Blake2bMac::<U16>::new_from_slice(salt).unwrap();
        mac.update(row);
        mac.finalize_fixed().to_vec()
    }

    proptest! {
        #[test]
        fn the_precomputed_key_block_gives_the_macs_digest(
                salt in prop::collection::vec(any::<u8>(), 0..=MAX_SALT),
                // Lengths around the block size: 0, 1..127, 128, 129, 256, 257.
                row in prop::collection::vec(any::<u8>(), 0..300)) {
            let hasher = RowHasher::new(&salt).unwrap();
            let mut out = Vec::new();
            hasher.digest_into(&row, &mut out);
            prop_assert_eq!(out, reference(&salt, &row));
        }
    }

    proptest! {
        #[test]
        fn rows_hashed_eight_at_a_time_match_the_mac(
                salt in prop::collection::vec(any::<u8>(), 0..=MAX_SALT),
                // Rows of every length around the block, and declined ones.
                rows in prop::collection::vec(prop::option::weighted(0.9,
                    prop::collection::vec(any::<u8>(), 0..260)), 0..26)) {
            let hasher = RowHasher::new(&salt).unwrap();
            let mut out = Vec::new();
            hasher.digest_rows(rows.iter().map(Option::as_deref), &mut out);
            let expected: Vec<u8> = rows.iter()
                .flat_map(|row| row.as_ref().map_or(vec![0; DIGEST_SIZE], |row| reference(&salt, row)))
                .collect();
            prop_assert_eq!(out, expected);
        }
    }

    /// The builds of the lanes this processor runs: the portable one
    /// always, and those up to `Build::detected`.
    fn runnable_builds() -> Vec<lanes::Build> {
        use lanes::Build::*;
        match lanes::Build::detected() {
            Portable => vec![Portable],
            Avx2 => vec![Portable, Avx2],
            Avx512 => vec![Portable, Avx2, Avx512],
        }
    }

    proptest! {
        #[test]
        fn every_build_of_the_lanes_agrees_with_the_mac(
                salt in prop::collection::vec(any::<u8>(), 1..=MAX_SALT),
                rows in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..=lanes::BLOCK),
                                              lanes::GROUP)) {
            let hasher = RowHasher::new(&salt).unwrap();
            let expected: Vec<u8> = rows.iter().flat_map(|row| reference(&salt, row)).collect();
            for build in runnable_builds() {
                let mut out = vec![0; lanes::GROUP * DIGEST_SIZE];
                // (the digests written in reverse order: each goes to its own offset)
                let group = std::array::from_fn(|lane| {
                    (&rows[lane][..], (lanes::GROUP - 1 - lane) * DIGEST_SIZE)
                });
                lanes::digests(hasher.words.as_ref().unwrap(), &group, &mut out, build);
                let reversed: Vec<u8> = out.chunks(DIGEST_SIZE).rev().flatten().copied().collect();
                prop_assert_eq!(&reversed, &expected, "{:?}", build);
            }
        }
    }

    #[test]
    fn every_build_of_the_lanes_agrees_at_the_block_edges() {
        let hasher = RowHasher::new(b"flights").unwrap();
        let rows: Vec<Vec<u8>> = [1, 5, 127, 128, 64, 2, 100, 128].iter()
            .map(|length| vec![3u8; *length]).collect();
        let expected: Vec<u8> = rows.iter().flat_map(|row| reference(b"flights", row)).collect();
        for build in runnable_builds() {
            let mut out = vec![0; lanes::GROUP * DIGEST_SIZE];
            let group = std::array::from_fn(|lane| (&rows[lane][..], lane * DIGEST_SIZE));
            lanes::digests(hasher.words.as_ref().unwrap(), &group, &mut out, build);
            assert_eq!(out, expected, "{build:?}");
        }
    }

    #[test]
    fn rows_of_whole_blocks_match_the_mac() {
        for length in [0, 127, 128, 129, 255, 256, 257, 384] {
            let row = vec![7u8; length];
            let mut out = Vec::new();
            RowHasher::new(b"salt").unwrap().digest_into(&row, &mut out);
            assert_eq!(out, reference(b"salt", &row), "{length}");
        }
    }

    #[test]
    fn a_long_salt_is_refused() {
        assert!(RowHasher::new(&[0u8; MAX_SALT + 1]).is_err());
    }
}
