//! The radix sorts of the statistics kernels (`stats`, `numeric_stats`):
//! a batch's keys, most of whose top bits they share; and of a
//! key-ordered bucket's key heads (`merge`), which share theirs too.

const DIGIT: u32 = 11;
const BUCKETS: usize = 1 << DIGIT;

/// Sorts keys below 2**bits in place: least significant digit first, 11
/// bits a pass, a pass skipped when every key has the same digit there
/// (a batch's values mostly share their top bits).
pub fn radix_sort(keys: &mut Vec<u64>, bits: u32) {
    lsd_sort(keys, bits, |key, shift| (key >> shift) as usize & (BUCKETS - 1));
}

/// Sorts `items` by their high 64 bits, stably (items equal there keep
/// their order), as `radix_sort` does. A key-ordered bucket's key heads
/// (ids, names) share their top bits: the passes over those are skipped,
/// and the two or three left took less time than the stable sort's merges
/// of the bucket's sorted slices (`merge::order_by_heads`). A shuffled
/// bucket's digests share only a few: all six passes, no faster there.
pub fn radix_sort_by_high(items: &mut Vec<u128>) {
    lsd_sort(items, 64, |item, shift| (item >> (64 + shift)) as usize & (BUCKETS - 1));
}

/// The stable least-significant-digit sort of `items` by the `bits` low
/// bits of a key, `digit(item, shift)` the DIGIT bits of it from `shift`.
fn lsd_sort<T: Copy + Default>(items: &mut Vec<T>, bits: u32, digit: impl Fn(T, u32) -> usize) {
    let passes = bits.div_ceil(DIGIT) as usize;
    let mut histograms = vec![[0usize; BUCKETS]; passes];
    for item in items.iter() {
        for (pass, histogram) in histograms.iter_mut().enumerate() {
            histogram[digit(*item, pass as u32 * DIGIT)] += 1;
        }
    }
    let mut other = vec![T::default(); items.len()];
    for (pass, histogram) in histograms.iter().enumerate() {
        if histogram.iter().any(|count| *count == items.len()) {
            continue;
        }
        let mut starts = [0usize; BUCKETS];
        let mut total = 0;
        for (start, count) in starts.iter_mut().zip(histogram) {
            *start = total;
            total += count;
        }
        for item in items.iter() {
            let bucket = digit(*item, pass as u32 * DIGIT);
            other[starts[bucket]] = *item;
            starts[bucket] += 1;
        }
        std::mem::swap(items, &mut other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn radix_sort_sorts(mut keys in prop::collection::vec(any::<u64>(), 0..3000), narrow in any::<bool>()) {
            if narrow {
                keys.iter_mut().for_each(|key| *key &= 0xFFFF_FFFF);
            }
            let mut expected = keys.clone();
            expected.sort_unstable();
            radix_sort(&mut keys, if narrow { 32 } else { 64 });
            prop_assert_eq!(keys, expected);
        }

        #[test]
        fn radix_sort_by_high_is_the_stable_sort_of_the_high_words(
            highs in prop::collection::vec(any::<u64>(), 0..3000), low_bits in 1u32..64,
            lows in prop::collection::vec(any::<u64>(), 3000)) {
            // Few distinct low bits of the high word (the heads of one
            // bucket), and ties among them, with arbitrary low words.
            let mask = u64::MAX >> (64 - low_bits);
            let mut items: Vec<u128> = highs.iter().zip(&lows)
                .map(|(high, low)| ((high & mask) as u128) << 64 | *low as u128).collect();
            let mut expected = items.clone();
            expected.sort_by_key(|item| item >> 64);  // stable
            radix_sort_by_high(&mut items);
            prop_assert_eq!(items, expected);
        }
    }
}
