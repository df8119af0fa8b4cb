//! Row digests: keyed BLAKE2b with a 16-byte digest, as Python's
//! `hashlib.blake2b(row, key=salt, digest_size=16)` (`transforms/splits.py`).

use blake2::digest::consts::U16;
use blake2::digest::{Digest, FixedOutput, KeyInit, Update};
use blake2::{Blake2b, Blake2bMac};

/// Bytes of one digest.
pub const DIGEST_SIZE: usize = 16;
/// BLAKE2b's longest key.
pub const MAX_SALT: usize = 64;

/// The digests of `rows`, one after another; an error for a salt longer
/// than BLAKE2b takes (the Python side hashes long names down first).
pub fn hash_rows<'a>(salt: &[u8], rows: impl Iterator<Item = &'a [u8]>) -> Result<Vec<u8>, String> {
    if salt.len() > MAX_SALT {
        return Err(format!("a salt of {} bytes is longer than BLAKE2b's {MAX_SALT}", salt.len()));
    }
    let mut out = Vec::new();
    if salt.is_empty() {
        // hashlib's key=b"" is plain BLAKE2b; the MAC type would still
        // hash a (zero-length) key block.
        for row in rows {
            out.extend_from_slice(&Blake2b::<U16>::digest(row));
        }
        return Ok(out);
    }
    let keyed = Blake2bMac::<U16>::new_from_slice(salt).map_err(|error| error.to_string())?;
    for row in rows {
        let mut hasher = keyed.clone();
        hasher.update(row);
        out.extend_from_slice(&hasher.finalize_fixed());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
