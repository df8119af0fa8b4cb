//! The radix sort of the statistics kernels (`stats`, `numeric_stats`):
//! a batch's keys, most of whose top bits they share.

/// Sorts keys below 2**bits in place: least significant digit first, 11
/// bits a pass, a pass skipped when every key has the same digit there
/// (a batch's values mostly share their top bits).
pub fn radix_sort(keys: &mut Vec<u64>, bits: u32) {
    const DIGIT: u32 = 11;
    const BUCKETS: usize = 1 << DIGIT;
    let passes = bits.div_ceil(DIGIT) as usize;
    let mut histograms = vec![[0usize; BUCKETS]; passes];
    for key in keys.iter() {
        for (pass, histogram) in histograms.iter_mut().enumerate() {
            histogram[((key >> (pass as u32 * DIGIT)) as usize) & (BUCKETS - 1)] += 1;
        }
    }
    let mut other = vec![0u64; keys.len()];
    for (pass, histogram) in histograms.iter().enumerate() {
        if histogram.iter().any(|count| *count == keys.len()) {
            continue;
        }
        let mut starts = [0usize; BUCKETS];
        let mut total = 0;
        for (start, count) in starts.iter_mut().zip(histogram) {
            *start = total;
            total += count;
        }
        for key in keys.iter() {
            let digit = ((key >> (pass as u32 * DIGIT)) as usize) & (BUCKETS - 1);
            other[starts[digit]] = *key;
            starts[digit] += 1;
        }
        std::mem::swap(keys, &mut other);
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
    }
}
