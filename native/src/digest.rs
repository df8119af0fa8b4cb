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
            return Ok(RowHasher { keyed: None });
        }
        let mac = Blake2bMac::<U16>::new_from_slice(salt).map_err(|error| error.to_string())?;
        let mut after_key = Blake2bVarCore::new_with_params(&[], &[], salt.len(), DIGEST_SIZE);
        let mut key_block = Block::<Blake2bVarCore>::default();
        key_block[..salt.len()].copy_from_slice(salt);
        after_key.update_blocks(&[key_block]);
        Ok(RowHasher { keyed: Some(Keyed { after_key, mac }) })
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

/// The digests of `rows`, one after another; an error for a salt longer
/// than BLAKE2b takes.
pub fn hash_rows<'a>(salt: &[u8], rows: impl Iterator<Item = &'a [u8]>) -> Result<Vec<u8>, String> {
    let hasher = RowHasher::new(salt)?;
    let mut out = Vec::new();
    for row in rows {
        hasher.digest_into(row, &mut out);
    }
    Ok(out)
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
