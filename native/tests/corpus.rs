//! The committed corpus of hostile inputs (`corpus/`), and every prefix of
//! each, through the record walk and the table kernel: no panic, no answer
//! outside the input. `cargo test` runs it; proptest in the modules
//! generates more of the same kinds.

use std::collections::HashSet;
use std::fs;
use std::path::Path;

use recordforge_native::rules::{Feature, Key, Plan, Rule};
use recordforge_native::table;
use recordforge_native::{index, walk};

fn corpus(folder: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(folder);
    let mut files: Vec<_> = fs::read_dir(&dir).expect("corpus folder").map(|entry| entry.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {dir:?}");
    files.into_iter().map(|path| (path.display().to_string(), fs::read(&path).unwrap())).collect()
}

#[test]
fn every_walk_input_and_prefix_stays_inside_the_buffer() {
    for (name, data) in corpus("walk") {
        for cut in 0..=data.len() {
            let buffer = &data[..cut];
            let found = walk::walk_records(buffer);
            for (start, end) in found.starts.iter().zip(&found.ends) {
                assert!(start < end && *end <= buffer.len(), "{name} cut at {cut}");
            }
            if let Some((_, offset)) = found.fault {
                assert!(offset <= buffer.len(), "{name} cut at {cut}");
            }
        }
    }
}

#[test]
fn every_walk_input_and_prefix_indexes_inside_the_buffer() {
    for (name, data) in corpus("walk") {
        for cut in 0..=data.len() {
            let buffer = &data[..cut];
            let found = index::index_lines(buffer, 0, 0);
            // Each line is at most 42 bytes; a fault names a header wholly in the buffer.
            assert!(found.lines.len() <= 42 * found.records, "{name} cut at {cut}");
            if let Some((_, offset)) = found.fault {
                assert!(offset + walk::HEADER_SIZE <= buffer.len(), "{name} cut at {cut}");
            }
            // The intact records the walk finds are indexed, at the same offsets.
            let walked = walk::walk_records(buffer);
            let lines: Vec<String> = walked.starts.iter().zip(&walked.ends)
                .map(|(start, end)| format!("{start} {}\n", end - start)).collect();
            assert!(found.lines.starts_with(lines.concat().as_bytes()), "{name} cut at {cut}");
        }
    }
}

fn plan(key: Key) -> Plan {
    Plan {
        width: 3,
        features: vec![
            Feature { name: b"a".to_vec(), column: 0, rule: Rule::Int { lo: i64::MIN, hi: i64::MAX, allowed: None }, nulls: None },
            Feature { name: b"b".to_vec(), column: 1, rule: Rule::Float { lo: -3.0e38, hi: 3.0e38, allowed: Some(vec![2.5, -0.0]) }, nulls: None },
            Feature { name: b"c".to_vec(), column: 2, rule: Rule::Text { limit: 8, allowed: Some(HashSet::from([b"abc".to_vec()])) }, nulls: None },
        ],
        key,
    }
}

#[test]
fn every_csv_input_and_prefix_converts_or_is_refused() {
    for (name, data) in corpus("csv") {
        for cut in 0..=data.len() {
            let run = &data[..cut];
            for key in [Key::None, Key::Feature(0), Key::Text(2)] {
                for count in 0..6 {
                    if let Ok(converted) = table::convert_run(run, count, &plan(key)) {
                        assert_eq!(converted.examples.len(), count, "{name} cut at {cut}");
                        for row in 0..count {
                            // A taken row has a key when the plan keys rows; a declined one has none.
                            let keyed = !matches!(key, Key::None) && converted.example(row).is_some();
                            assert_eq!(converted.key(row).is_some(), keyed, "{name} cut at {cut}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_csv_input_and_prefix_is_counted_as_convert_run_reads_it() {
    for (name, data) in corpus("csv") {
        for cut in 0..=data.len() {
            let run = &data[..cut];
            // Widths from none to far beyond any line: no allocation follows them.
            for width in [0, 1, 3, 7, usize::MAX] {
                let counted = table::count_run(run, width);
                if width == 3 {
                    if let Ok(rows) = counted {
                        assert!(table::convert_run(run, rows, &plan(Key::None)).is_ok(), "{name} cut at {cut}");
                    }
                }
                if let Ok(rows) = counted {
                    assert!(rows <= run.len(), "{name} cut at {cut}");
                }
            }
        }
    }
}

#[test]
fn every_example_input_and_prefix_reads_inside_the_buffer_or_is_left_to_protobuf() {
    use recordforge_native::example_values::{canonical_features, Values};
    for (name, data) in corpus("example") {
        for cut in 0..=data.len() {
            let record = &data[..cut];
            let Some(features) = canonical_features(record) else { continue };
            let inside = |slice: &[u8]| {
                let (start, end) = (slice.as_ptr() as usize, slice.as_ptr() as usize + slice.len());
                start >= record.as_ptr() as usize && end <= record.as_ptr() as usize + record.len()
            };
            for pair in features.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{name} cut at {cut}: names not sorted or twice");
            }
            for (feature, values) in &features {
                assert!(inside(feature.as_bytes()), "{name} cut at {cut}");
                match values {
                    Values::Bytes { list, count } => {
                        assert!(inside(list) && values.items().all(inside), "{name} cut at {cut}");
                        assert_eq!(values.items().count(), *count, "{name} cut at {cut}");
                    }
                    Values::Floats(packed) => assert!(inside(packed) && packed.len() % 4 == 0, "{name} cut at {cut}"),
                    Values::Ints { packed, count } => {
                        assert!(inside(packed), "{name} cut at {cut}");
                        assert_eq!(values.ints().count(), *count, "{name} cut at {cut}");
                    }
                    Values::Unset => {}
                }
            }
        }
    }
}

#[test]
fn every_framed_input_and_prefix_converts_inside_the_buffer_or_is_refused() {
    use recordforge_native::example_table::{convert_examples_into, payloads};
    use recordforge_native::table::Converted;
    let feature = Feature { name: b"a".to_vec(), column: 0, rule: Rule::Int { lo: i64::MIN, hi: i64::MAX, allowed: None }, nulls: None };
    let plan = Plan { width: 1, features: vec![feature], key: Key::Feature(0) };
    // The record streams, and each Example of the corpus framed as one record.
    let mut inputs = corpus("walk");
    for (name, data) in corpus("example") {
        let mut framed = (data.len() as u64).to_le_bytes().to_vec();
        framed.extend_from_slice(&[0; 4]);
        framed.extend_from_slice(&data);
        framed.extend_from_slice(&[0; 4]);
        inputs.push((name, framed));
    }
    for (name, data) in inputs {
        for cut in 0..=data.len() {
            let run = &data[..cut];
            for count in 0..4 {
                if let Some(found) = payloads(run, count) {
                    assert_eq!(found.len(), count, "{name} cut at {cut}");
                }
                let mut converted = Converted::default();
                if convert_examples_into(run, count, &plan, &[b"a".to_vec()], &[false], &[true], &mut converted).is_ok() {
                    assert_eq!(converted.examples.len(), count, "{name} cut at {cut}");
                }
            }
        }
    }
}
