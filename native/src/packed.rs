//! Buffers of little-endian 8-byte words, as numpy and Arrow hold int64
//! arrays (offsets, row numbers, sizes, histogram keys): read from the
//! buffer Python hands over, checked for a whole number of words, and
//! written back for it.

/// An error when the length of `bytes` is not a multiple of 8, naming the
/// buffer (`what`, possessive: "packed rows'"), for readers of its words
/// in place.
pub fn whole_words(bytes: &[u8], what: &str) -> Result<(), String> {
    if bytes.len() % 8 != 0 {
        return Err(format!("{what} length is not a multiple of 8 (a whole number of int64s)"));
    }
    Ok(())
}

/// The whole words of `bytes`, read in place one at a time (a trailing
/// part word is not read: check the length first, `whole_words`).
pub fn iter_words(bytes: &[u8]) -> impl Iterator<Item = u64> + Clone + '_ {
    bytes.chunks_exact(8).map(|chunk| u64::from_le_bytes(chunk.try_into().expect("8 bytes")))
}

/// Word `index` of `bytes`, read in place; None past its whole words.
pub fn word_at(bytes: &[u8], index: usize) -> Option<u64> {
    let start = index.checked_mul(8)?;
    let word = bytes.get(start..start.checked_add(8)?)?;
    Some(u64::from_le_bytes(word.try_into().expect("8 bytes")))
}

/// The words of `bytes`; an error when its length is not a multiple of 8
/// (`whole_words`).
pub fn words(bytes: &[u8], what: &str) -> Result<Vec<u64>, String> {
    whole_words(bytes, what)?;
    Ok(iter_words(bytes).collect())
}

/// `words` read as int64 (two's complement, as numpy's "<i8").
pub fn signed_words(bytes: &[u8], what: &str) -> Result<Vec<i64>, String> {
    Ok(words(bytes, what)?.into_iter().map(|word| word as i64).collect())
}

/// `values` as little-endian int64 bytes (the reference the words are
/// read back against; the kernels write theirs in place, `py_bytes::packed_i64s`).
#[cfg(test)]
fn packed_i64(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|value| value.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn words_read_back_what_was_packed(values in prop::collection::vec(any::<i64>(), 0..40)) {
            prop_assert_eq!(signed_words(&packed_i64(&values), "values'").unwrap(), values);
        }

        #[test]
        fn words_read_in_place_are_the_words(bytes in prop::collection::vec(any::<u8>(), 0..40), index in 0usize..8) {
            let whole = &bytes[..bytes.len() - bytes.len() % 8];
            let all = words(whole, "bytes'").unwrap();
            prop_assert_eq!(iter_words(&bytes).collect::<Vec<_>>(), all.clone());
            prop_assert_eq!(word_at(&bytes, index), all.get(index).copied());
        }

        #[test]
        fn a_length_not_a_multiple_of_8_is_refused(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let read = words(&bytes, "packed rows'");
            prop_assert_eq!(read.is_ok(), bytes.len() % 8 == 0);
            if let Err(message) = read {
                prop_assert_eq!(message, "packed rows' length is not a multiple of 8 (a whole number of int64s)");
            }
        }
    }
}
