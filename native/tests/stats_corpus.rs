//! The committed corpus of hostile inputs (`corpus/`), every file and
//! prefix read as packed numbers and as texts, through the statistics
//! kernels: no panic, every value accounted for, sketches well formed
//! (the text partial's the same as `text_theta`'s), and each buffer
//! folded into the histogram of its first half (`numeric_update`).

use std::fs;
use std::path::Path;

use recordforge_native::{numeric_stats, stats, text_stats};

fn every_corpus_file() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut files = Vec::new();
    for folder in fs::read_dir(&root).expect("corpus folder") {
        let folder = folder.unwrap().path();
        if !folder.is_dir() {
            continue;
        }
        for file in fs::read_dir(&folder).expect("corpus files") {
            let path = file.unwrap().path();
            files.push((path.display().to_string(), fs::read(&path).unwrap()));
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no corpus in {root:?}");
    files
}

fn words(data: &[u8]) -> impl Iterator<Item = u64> + Clone + '_ {
    data.chunks_exact(8).map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap()))
}

#[test]
fn every_corpus_input_and_prefix_gives_whole_partials() {
    for (name, data) in every_corpus_file() {
        for cut in 0..=data.len().min(4096) {
            let buffer = &data[..cut];
            let count = (cut / 8) as u64;
            let ints = stats::int_partial(words(buffer).map(|word| word as i64));
            assert_eq!(ints.finite, count, "{name} cut at {cut}");
            assert_eq!(ints.counts.iter().sum::<u64>(), count, "{name} cut at {cut}");
            let floats = stats::float_partial(words(buffer).map(f64::from_bits));
            assert_eq!(floats.nan + floats.inf + floats.finite, count, "{name} cut at {cut}");
            assert_eq!(floats.counts.iter().sum::<u64>(), floats.finite, "{name} cut at {cut}");
            let half = stats::float_partial(words(&buffer[..cut / 2]).map(f64::from_bits));
            let held = (!half.keys.is_empty()).then(|| numeric_stats::merged_buckets(None, &half.keys, &half.counts));
            let theta = words(buffer).next().unwrap_or(u64::MAX) >> 1;
            let most = cut % 40;
            let done = numeric_stats::update(stats::float_runs(words(buffer).map(f64::from_bits)), held.as_ref(), theta, most);
            assert!(done.partial.hashes.iter().all(|hash| *hash < theta && *hash != 0), "{name} cut at {cut}");
            assert!(done.partial.hashes.len() <= most, "{name} cut at {cut}");
            assert!(done.partial.hashes.windows(2).all(|pair| pair[0] < pair[1]), "{name} cut at {cut}");
            if let Some(buckets) = &done.buckets {
                assert_eq!(buckets.counts.iter().sum::<u64>(), floats.finite + half.finite, "{name} cut at {cut}");
                assert!(buckets.keys.len() <= numeric_stats::HISTOGRAM_BUCKETS, "{name} cut at {cut}");
            }
            let sketch = stats::text_theta(buffer.split(|byte| *byte == b'\n'), 5);
            assert!(sketch.len() >= 8 && sketch.len() % 8 == 0, "{name} cut at {cut}");
            let lines: Vec<&[u8]> = buffer.split(|byte| *byte == b'\n').collect();
            let partial = text_stats::text_partial(&lines, 4, 5);
            assert!(partial.kept.iter().all(|(first, _)| *first < lines.len()), "{name} cut at {cut}");
            assert_eq!(partial.theta, sketch, "{name} cut at {cut}");
        }
    }
}
