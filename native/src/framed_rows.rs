//! A table kernel's Examples framed as TFRecord records into one buffer,
//! in row order, as `transforms/framed_examples.py`'s `FramedExamples`
//! holds them; a declined row spans no bytes. `py_rows::FramedRows` keeps
//! one of these for the Python side, written straight into the bytes
//! object Python gets (`py_bytes::GrowingBytes`).

use crate::{walk, wire};

/// Where a framed buffer's bytes are written: a `Vec<u8>`, or the bytes
/// object Python gets (`py_bytes::GrowingBytes`).
pub trait Store {
    /// The bytes written so far.
    fn written(&self) -> &[u8];
    /// The bytes written so far, to write over.
    fn written_mut(&mut self) -> &mut [u8];
    /// How many more bytes fit without growing.
    fn spare(&self) -> usize;
    /// Grows the room to at least `additional` bytes past the written ones.
    fn reserve(&mut self, additional: usize);
    /// Writes `size` bytes after the written ones (`write` gets them zeroed).
    fn append(&mut self, size: usize, write: impl FnOnce(&mut [u8]));
}

impl Store for Vec<u8> {
    fn written(&self) -> &[u8] {
        self
    }

    fn written_mut(&mut self) -> &mut [u8] {
        self
    }

    fn spare(&self) -> usize {
        self.capacity() - self.len()
    }

    fn reserve(&mut self, additional: usize) {
        Vec::reserve(self, additional);
    }

    fn append(&mut self, size: usize, write: impl FnOnce(&mut [u8])) {
        let start = self.len();
        self.resize(start + size, 0);
        write(&mut self[start..]);
    }
}

/// Framed Examples back to back: row `i` spans
/// `framed[offsets[i]..offsets[i + 1]]`, empty for a declined row.
/// The data CRCs are written `CRC_BATCH` records at a time
/// (`write_crcs`): the buffer is whole once `into_store` hands it over.
pub struct FramedBuffer<S: Store = Vec<u8>> {
    framed: S,
    /// One more than the rows, from 0 to `framed`'s length.
    pub offsets: Vec<i64>,
    /// The first row whose record's data CRC is not written yet.
    crcs_from: usize,
    /// How many records from that row on (taken rows) wait for it.
    crcs_waiting: usize,
}

impl FramedBuffer {
    /// For about `count` rows (a capacity only), in a `Vec`.
    pub fn new(count: usize) -> Self {
        FramedBuffer::in_store(Vec::new(), count)
    }
}

impl<S: Store> FramedBuffer<S> {
    /// For about `count` rows (a capacity only), written into `framed`.
    pub fn in_store(framed: S, count: usize) -> Self {
        let mut offsets = Vec::with_capacity(count + 1);
        offsets.push(0);
        FramedBuffer { framed, offsets, crcs_from: 0, crcs_waiting: 0 }
    }

    /// How many rows, taken or declined.
    pub fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Appends the Example of map `entries` (`wire::put_example`), framed,
    /// written once in its place (no copy of the Example); its data CRC
    /// follows with its batch's (`write_crcs`).
    pub fn push_example(&mut self, entries: &[u8]) {
        let example_size = wire::example_size(entries.len());
        let needed = walk::HEADER_SIZE + example_size + walk::FOOTER_SIZE;
        if self.framed.spare() < needed {
            // Room for the rows still to come at this one's size and an
            // eighth again: for most batches one allocation, cut to size
            // when done (a realloc that copies nothing), where growing by
            // doubling copies the buffer made so far at each step; at most
            // 64 MB ahead, beyond which the copies matter little. (Not
            // more: an allocation much larger than the buffers freed
            // before it is mapped afresh, and its pages faulted in, each time.)
            let rows_left = self.offsets.capacity().saturating_sub(self.offsets.len()).max(1);
            let ahead = rows_left.saturating_mul(needed + needed / 8).min(64 << 20);
            self.framed.reserve(ahead.max(needed));
        }
        self.framed.append(needed, |record| {
            let (header, rest) = record.split_at_mut(walk::HEADER_SIZE);
            // (the footer, zeroed, waits for `write_crcs`)
            wire::example_at(&mut rest[..example_size], entries);
            let length = (example_size as u64).to_le_bytes();
            header[..8].copy_from_slice(&length);
            header[8..].copy_from_slice(&walk::masked_length_crc(&length).to_le_bytes());
        });
        self.offsets.push(self.framed.written().len() as i64);
        self.crcs_waiting += 1;
        if self.crcs_waiting == walk::CRC_BATCH {
            self.write_crcs();
        }
    }

    /// Writes the data CRC of every record that waits for it, computed
    /// together (`walk::masked_crc32c_each`: an Example of a few hundred
    /// bytes alone keeps the CPU's CRC unit a third busy) while the
    /// records are still in the cache.
    fn write_crcs(&mut self) {
        let mut spans = [(0usize, 0usize); walk::CRC_BATCH];
        let taken = (self.crcs_from..self.rows())
            .map(|row| (self.offsets[row] as usize, self.offsets[row + 1] as usize))
            .filter(|(start, end)| end > start);
        let mut count = 0;
        for (span, taken) in spans.iter_mut().zip(taken) {
            *span = taken;
            count += 1;
        }
        let written = self.framed.written();
        let mut examples: [&[u8]; walk::CRC_BATCH] = [&[]; walk::CRC_BATCH];
        for (example, (start, end)) in examples.iter_mut().zip(&spans).take(count) {
            *example = &written[start + walk::HEADER_SIZE..end - walk::FOOTER_SIZE];
        }
        let mut crcs = [0u32; walk::CRC_BATCH];
        walk::masked_crc32c_each(&examples[..count], &mut crcs[..count]);
        let written = self.framed.written_mut();
        for ((_, end), crc) in spans.iter().zip(crcs).take(count) {
            written[end - walk::FOOTER_SIZE..*end].copy_from_slice(&crc.to_le_bytes());
        }
        (self.crcs_from, self.crcs_waiting) = (self.rows(), 0);
    }

    /// The framed records, every data CRC written.
    pub fn into_store(mut self) -> S {
        self.write_crcs();
        self.framed
    }

    /// Appends a declined row: an empty span.
    pub fn push_declined(&mut self) {
        self.offsets.push(self.framed.written().len() as i64);
    }

    /// Row `row`'s Example (its record's data), None when it was declined.
    pub fn example(&self, row: usize) -> Option<&[u8]> {
        let (start, end) = (self.offsets[row] as usize, self.offsets[row + 1] as usize);
        (end > start).then(|| &self.framed.written()[start + walk::HEADER_SIZE..end - walk::FOOTER_SIZE])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_buffer_is_the_taken_examples_framed_in_row_order(rows in prop::collection::vec(
                prop::option::of(prop::collection::vec(any::<u8>(), 0..300)), 0..60)) {
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
            prop_assert_eq!(buffer.rows(), rows.len());
            prop_assert_eq!(*buffer.offsets.last().unwrap() as usize, buffer.framed.written().len());
            for (row, example) in examples.iter().enumerate() {
                prop_assert_eq!(buffer.example(row), example.as_deref());
            }
            // Every data CRC written, those of a batch cut short too.
            let framed = buffer.into_store();
            prop_assert_eq!(&framed, &expected);
            let walked = walk::walk_records(&framed);
            prop_assert_eq!(walked.fault, None);
            prop_assert_eq!(walked.starts.len(), examples.iter().flatten().count());
        }
    }
}
