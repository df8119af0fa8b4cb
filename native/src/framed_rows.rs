//! A table kernel's Examples framed as TFRecord records into one buffer,
//! in row order, as `transforms/framed_examples.py`'s `FramedExamples`
//! holds them; a declined row spans no bytes. `py_rows::FramedRows` keeps
//! one of these for the Python side.

use crate::{walk, wire};

/// Framed Examples back to back: row `i` spans
/// `framed[offsets[i]..offsets[i + 1]]`, empty for a declined row.
pub struct FramedBuffer {
    pub framed: Vec<u8>,
    /// One more than the rows, from 0 to `framed.len()`.
    pub offsets: Vec<i64>,
}

impl FramedBuffer {
    /// For about `count` rows (a capacity only).
    pub fn new(count: usize) -> Self {
        let mut offsets = Vec::with_capacity(count + 1);
        offsets.push(0);
        FramedBuffer { framed: Vec::new(), offsets }
    }

    /// How many rows, taken or declined.
    pub fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Appends the Example of map `entries` (`wire::put_example`), framed:
    /// it is written in place after room for its header, which is filled
    /// in once its length is known (no copy of the Example).
    pub fn push_example(&mut self, entries: &[u8]) {
        let start = self.framed.len();
        // (the record: header, Example tag, length varint, entries, footer)
        let needed = walk::HEADER_SIZE + 1 + 10 + entries.len() + walk::FOOTER_SIZE;
        if self.framed.capacity() - start < needed {
            // Room for the rows still to come at this one's size and half
            // again: one allocation for most batches, where growing by
            // doubling copies the buffer made so far at each step; at most
            // 64 MB ahead, beyond which the copies matter little.
            let rows_left = self.offsets.capacity().saturating_sub(self.offsets.len()).max(1);
            let ahead = rows_left.saturating_mul(needed + needed / 2).min(64 << 20);
            self.framed.reserve(ahead.max(needed));
        }
        self.framed.resize(start + walk::HEADER_SIZE, 0);
        wire::put_example(&mut self.framed, entries);
        let length = ((self.framed.len() - start - walk::HEADER_SIZE) as u64).to_le_bytes();
        self.framed[start..start + 8].copy_from_slice(&length);
        self.framed[start + 8..start + walk::HEADER_SIZE]
            .copy_from_slice(&walk::masked_length_crc(&length).to_le_bytes());
        let crc = walk::masked_crc32c(&self.framed[start + walk::HEADER_SIZE..]);
        self.framed.extend_from_slice(&crc.to_le_bytes());
        self.offsets.push(self.framed.len() as i64);
    }

    /// Appends a declined row: an empty span.
    pub fn push_declined(&mut self) {
        self.offsets.push(self.framed.len() as i64);
    }

    /// Row `row`'s Example (its record's data), None when it was declined.
    pub fn example(&self, row: usize) -> Option<&[u8]> {
        let (start, end) = (self.offsets[row] as usize, self.offsets[row + 1] as usize);
        (end > start).then(|| &self.framed[start + walk::HEADER_SIZE..end - walk::FOOTER_SIZE])
    }

    /// The offsets as little-endian int64 bytes (numpy reads them in one call).
    pub fn packed_offsets(&self) -> Vec<u8> {
        crate::packed::packed_i64(&self.offsets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_buffer_is_the_taken_examples_framed_in_row_order(rows in prop::collection::vec(
                prop::option::of(prop::collection::vec(any::<u8>(), 0..300)), 0..24)) {
            let mut buffer = FramedBuffer::new(rows.len());
            let mut expected = Vec::new();
            let mut examples = Vec::new();
            for entries in &rows {
                match entries {
                    Some(entries) => {
                        buffer.push_example(entries);
                        let mut example = Vec::new();
                        wire::put_example(&mut example, entries);
                        walk::frame_into(&mut expected, &example);
                        examples.push(Some(example));
                    }
                    None => {
                        buffer.push_declined();
                        examples.push(None);
                    }
                }
            }
            prop_assert_eq!(&buffer.framed, &expected);
            prop_assert_eq!(buffer.rows(), rows.len());
            prop_assert_eq!(*buffer.offsets.last().unwrap() as usize, buffer.framed.len());
            for (row, example) in examples.iter().enumerate() {
                prop_assert_eq!(buffer.example(row), example.as_deref());
            }
            let walked = walk::walk_records(&buffer.framed);
            prop_assert_eq!(walked.fault, None);
            prop_assert_eq!(walked.starts.len(), examples.iter().flatten().count());
            let packed = buffer.packed_offsets();
            prop_assert_eq!(packed.len(), 8 * (rows.len() + 1));
        }
    }
}
