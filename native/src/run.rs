//! Sorted run files (`transforms/writer/run_format.py`): the whole file
//! `RunWriter` writes of rows in a given order (records, sizes, keys, key
//! sizes, the sparse index and the footer), handed out a block at a time;
//! the order itself is found in `run_order`.

use std::panic::AssertUnwindSafe;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::run_rows::{borrowed_slices, gathered_slices, Records, RunRows};
use crate::run_sink::DescriptorSink;
use crate::sink::{FillSink, Sink};
use crate::walk::{FOOTER_SIZE, HEADER_SIZE};
use crate::{guarded, with_bytes, PREFETCH_AHEAD};

// The sorts live in `run_order`; registered with the module under `run`.
pub use crate::run_order::{py_fixed_key_order, py_head_order, py_sorted_rows};

/// The footer's last 8 bytes (`run_format._MAGIC`).
pub const MAGIC: &[u8; 8] = b"RFRUN002";
/// `run_format._INDEX_ENTRY`: row, record offset, key offset, prefix length.
const INDEX_ENTRY: usize = 8 + 8 + 8 + 4;

/// A run's order keys, indexed by row like the examples.
pub enum Keys<'a> {
    /// `width` bytes a row, back to back (key_width > 0).
    Fixed { blob: &'a [u8], width: usize },
    /// Any length, with a key sizes section (KEY_VARIABLE).
    Variable(&'a [&'a [u8]]),
    /// The key is the example: no key sections (KEY_IS_EXAMPLE).
    Example,
}

impl Keys<'_> {
    fn key<'b>(&'b self, records: &Records<'b>, row: usize) -> &'b [u8] {
        match self {
            Keys::Fixed { blob, width } => &blob[row * width..(row + 1) * width],
            Keys::Variable(keys) => keys[row],
            Keys::Example => records.example(row),
        }
    }

    /// The footer's key width: the width, -1 (variable) or 0 (the example).
    fn width_code(&self) -> i64 {
        match self {
            Keys::Fixed { width, .. } => *width as i64,
            Keys::Variable(_) => -1,
            Keys::Example => 0,
        }
    }

    /// Whether the keys fit `rows` rows (a fixed blob of exactly rows * width).
    fn fit(&self, rows: usize) -> bool {
        match self {
            Keys::Fixed { blob, width } => *width > 0 && blob.len() % width == 0 && blob.len() / width == rows,
            Keys::Variable(keys) => keys.len() == rows,
            Keys::Example => true,
        }
    }
}

/// Why a run cannot be written by the kernel (the Python writer then does it).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// An order entry outside the rows, keys that do not fit the rows, or
    /// a zero index spacing: a caller's mistake.
    Bad(String),
    /// A framed record or key too large for the run's uint32 size sections.
    TooLarge,
}

/// Checks rows and keys before a byte is written.
pub fn check(records: &Records, keys: &Keys, index_every: u64) -> Result<(), Refused> {
    if index_every == 0 {
        return Err(Refused::Bad("index_every must be at least 1".into()));
    }
    if !keys.fit(records.len()) {
        return Err(Refused::Bad(format!("the keys do not fit {} rows", records.len())));
    }
    // An example as key is shorter than its record, and fixed keys are
    // all `width` long: only variable keys are looked at one by one.
    let limit = u32::MAX as usize;
    if matches!(keys, Keys::Fixed { width, .. } if *width > limit) {
        return Err(Refused::TooLarge);
    }
    for row in 0..records.len() {
        if records.size(row) > limit || matches!(keys, Keys::Variable(all) if all[row].len() > limit) {
            return Err(Refused::TooLarge);
        }
    }
    Ok(())
}

/// Writes the run file of `records` in their order (keys alike) through
/// `sink`, `block` bytes or so at a time (`RunWriter` with `run_steps`;
/// the bytes do not depend on the blocks); returns the number of rows.
/// `check` must have passed.
pub fn write_run<E>(records: &Records, keys: &Keys, prefix_len: usize, index_every: u64,
                    block: usize, sink: &mut dyn Sink<E>) -> Result<u64, E> {
    let block = block.max(1);
    let count = records.len();
    let framed = |row: usize| records.size(row);
    let index = index_entries(records, keys, prefix_len, index_every);
    for rows in blocks(count, block, framed) {
        if records.framed {
            // Records framed already are written as they are (where they
            // lie, when the sink can: `run_sink`).
            sink.put_pieces(&records.slices[rows])?;
            continue;
        }
        let length = rows.clone().map(framed).sum();
        sink.put(length, &mut |out| {
            // Examples are framed a batch of CRCs at a time (`frame_all_uninit`),
            // not one record's CRC after the other.
            // SAFETY: MaybeUninit<u8> has u8's layout, and `frame_all_uninit`
            // writes only initialized bytes, every byte of the rows' framed size.
            let out = unsafe { &mut *(out as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
            crate::walk::frame_all_uninit(out, &records.slices[rows.clone()]);
        })?;
    }
    let sizes_offset = (0..count).map(|row| framed(row) as u64).sum::<u64>();
    section(count, block, sink, |_| 4, |row, out| out.copy_from_slice(&(framed(row) as u32).to_le_bytes()))?;
    let keys_offset = sizes_offset + 4 * count as u64;
    let mut key_sizes_offset = keys_offset;
    match keys {
        Keys::Fixed { blob, width } => {
            // The keys section is the blob itself, a block of whole keys at a time.
            for chunk in blob.chunks((block / width).max(1) * width) {
                sink.put(chunk.len(), &mut |out| out.copy_from_slice(chunk))?;
            }
            key_sizes_offset += blob.len() as u64;
        }
        Keys::Variable(all) => {
            let size = |row: usize| all[row].len();
            section(count, block, sink, size, |row, out| out.copy_from_slice(all[row]))?;
            key_sizes_offset += all.iter().map(|key| key.len() as u64).sum::<u64>();
        }
        Keys::Example => {}
    }
    let mut index_offset = key_sizes_offset;
    if let Keys::Variable(all) = keys {
        section(count, block, sink, |_| 4, |row, out| out.copy_from_slice(&(all[row].len() as u32).to_le_bytes()))?;
        index_offset += 4 * count as u64;
    }
    let (mut tail, entries) = index;
    for word in [sizes_offset, keys_offset, key_sizes_offset, index_offset, entries, count as u64] {
        tail.extend_from_slice(&word.to_le_bytes());
    }
    tail.extend_from_slice(&keys.width_code().to_le_bytes());
    tail.extend_from_slice(MAGIC);
    sink.put(tail.len(), &mut |out| out.copy_from_slice(&tail))?;
    Ok(count as u64)
}

/// The index section and its number of entries: an entry at the first
/// row whose record starts at or past `index_every` bytes after the last
/// entry's (the first row has one), as `RunWriter.add_framed` finds them.
fn index_entries(records: &Records, keys: &Keys, prefix_len: usize, index_every: u64) -> (Vec<u8>, u64) {
    let mut index = Vec::new();
    let (mut entries, mut offset, mut key_offset, mut next_index) = (0u64, 0u64, 0u64, 0u64);
    for row in 0..records.len() {
        if offset >= next_index {
            let key = keys.key(records, row);
            let prefix = &key[..key.len().min(prefix_len)];
            index.reserve(INDEX_ENTRY + prefix.len());
            index.extend_from_slice(&(row as u64).to_le_bytes());
            index.extend_from_slice(&offset.to_le_bytes());
            // Only variable-width keys have offsets (`RunWriter` writes 0 else).
            let at = if matches!(keys, Keys::Variable(_)) { key_offset } else { 0 };
            index.extend_from_slice(&at.to_le_bytes());
            index.extend_from_slice(&(prefix.len() as u32).to_le_bytes());
            index.extend_from_slice(prefix);
            entries += 1;
            next_index = offset + index_every;
        }
        offset += records.size(row) as u64;
        if let Keys::Variable(all) = keys {
            key_offset += all[row].len() as u64;
        }
    }
    (index, entries)
}

/// Rows `0..count` cut into ranges of about `block` bytes (`size` a row), one row at least each.
fn blocks(count: usize, block: usize, size: impl Fn(usize) -> usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= count {
            return None;
        }
        let (mut end, mut bytes) = (start, 0);
        while end < count && (end == start || bytes + size(end) <= block) {
            bytes += size(end);
            end += 1;
        }
        let rows = start..end;
        start = end;
        Some(rows)
    })
}

/// One column section: `put(row, out)` writes each row's `size(row)` bytes, in order.
fn section<E>(count: usize, block: usize, sink: &mut dyn Sink<E>, size: impl Fn(usize) -> usize + Copy,
              put: impl Fn(usize, &mut [u8])) -> Result<(), E> {
    for rows in blocks(count, block, size) {
        let length = rows.clone().map(size).sum();
        sink.put(length, &mut |out| {
            let mut at = 0;
            for row in rows.clone() {
                put(row, &mut out[at..at + size(row)]);
                at += size(row);
            }
        })?;
    }
    Ok(())
}

/// Row numbers packed as little-endian int64 (a numpy array's buffer);
/// a negative one, or a length not a multiple of 8, is a ValueError.
pub(crate) fn packed_rows(bytes: &[u8]) -> PyResult<Vec<usize>> {
    let rows = crate::packed::signed_words(bytes, "packed rows'").map_err(PyValueError::new_err)?;
    if let Some(row) = rows.iter().find(|row| **row < 0) {
        return Err(PyValueError::new_err(format!("row {row} is negative")));
    }
    Ok(rows.into_iter().map(|row| row as usize).collect())
}

/// `framed_sizes(records) -> sizes | None`: each record's TFRecord-framed
/// size (its length and the framing's 16 bytes) as little-endian int64,
/// for `prepare.prepare_batch`; None when one is not bytes (the Python path
/// then says which).
#[pyfunction(name = "framed_sizes")]
pub fn py_framed_sizes<'py>(py: Python<'py>, records: &Bound<'py, PyList>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut sizes = Vec::with_capacity(records.len() * 8);
    for record in records.iter() {
        let Ok(record) = record.downcast::<PyBytes>() else { return Ok(None) };
        sizes.extend_from_slice(&((record.as_bytes().len() + HEADER_SIZE + FOOTER_SIZE) as i64).to_le_bytes());
    }
    Ok(Some(PyBytes::new(py, &sizes)))
}

/// `key_nones(keys) -> count | None`: how many of a batch's keys (a list)
/// are None, all others being bytes (exactly: `prepare._check_keys`'s
/// rule), for `prepare.prepare_batch`; None when one is neither (the
/// Python check then names its row). One pass over objects the batch has
/// just made, in place of a count and a type check in Python.
#[pyfunction(name = "key_nones")]
pub fn py_key_nones(keys: &Bound<'_, PyList>) -> Option<usize> {
    let mut nones = 0;
    for key in keys.iter() {
        if key.is_none() {
            nones += 1;
        // SAFETY: `key` is a live object (held by the iterator's reference).
        } else if unsafe { pyo3::ffi::PyBytes_CheckExact(key.as_ptr()) } == 0 {
            return None;
        }
    }
    Some(nones)
}

/// Where `py_write_run` puts a run's bytes: a Python file object's
/// `write` (after the CRC32C given), or straight into a file descriptor
/// (`run_sink`).
enum Target<'a, 'py> {
    Python(&'a Bound<'py, PyAny>, Option<u32>),
    #[cfg(unix)]
    Descriptor(DescriptorSink),
}

impl Target<'_, '_> {
    /// Writes the run through the target, keeping the size of what it
    /// writes and, when asked, its CRC32C; returns ``(rows, size, crc)``.
    fn write(&mut self, py: Python<'_>, records: &Records, keys: &Keys, prefix_len: usize, index_every: u64,
             block: usize) -> PyResult<(u64, u64, Option<u32>)> {
        match self {
            Target::Python(fileobj, crc) => {
                let mut size = 0u64;
                let mut sink = FillSink(|length: usize, fill: &mut dyn FnMut(&mut [u8])| -> PyResult<()> {
                    let data = PyBytes::new_with(py, length, |out| {
                        fill(out);
                        if let Some(crc) = crc.as_mut() {
                            *crc = crate::walk::crc32c_append(*crc, out);
                        }
                        Ok(())
                    })?;
                    size += length as u64;
                    fileobj.call_method1("write", (data,))?;
                    Ok(())
                });
                let rows = guarded(AssertUnwindSafe(|| write_run(records, keys, prefix_len, index_every, block, &mut sink)))??;
                Ok((rows, size, *crc))
            }
            #[cfg(unix)]
            Target::Descriptor(descriptor) => {
                let rows = guarded(AssertUnwindSafe(|| write_run(records, keys, prefix_len, index_every, block, descriptor)))?
                    .map_err(PyErr::from)?;
                descriptor.finish();
                Ok((rows, descriptor.size, descriptor.crc))
            }
        }
    }
}

/// `write_run(fileobj, examples, order, keys, key_width, prefix_len,
/// index_every, block, fd=None, crc=None, drop_behind=0) -> (rows, size,
/// crc) | None`: writes
/// the run file of ``examples[i] for i in order`` (packed int64;
/// examples: a list of bytes, or framed records, `run_rows`), as
/// `run_format.RunWriter` does, to `fileobj` (its `write`, about `block`
/// bytes a call) or, given `fd`, straight to that file descriptor at its
/// offset (`fileobj` is then not used: the caller flushes it before and
/// moves it past the run after); returns the rows, the bytes written and
/// their CRC32C continued from `crc` (the piece writer's check of a run;
/// None, not computed, when `crc` is None).
/// With `fd`, a `drop_behind` > 0 hands the bytes written to the disk and
/// drops them from the page cache that many bytes at a time
/// (`page_cache.WriteBehind`'s advice, `run_sink`).
/// keys: None (key_width 0: the example is the key), a list of bytes or
/// a key column ``(buffer, offsets)`` (`framed_keys::KeyColumn`) (key_width
/// -1), or a buffer of key_width bytes a row. None, before
/// anything is written, when an example or key is not bytes or is too
/// large for the format's uint32 sizes (the Python writer takes the run);
/// an order outside the rows is an IndexError, keys that do not fit,
/// framed records' offsets that do not cut their buffers or a negative fd
/// a ValueError, and the write's own errors (OSError) pass
/// through.
#[pyfunction(name = "write_run")]
#[pyo3(signature = (fileobj, examples, order, keys, key_width, prefix_len, index_every, block, fd=None, crc=None,
                    drop_behind=0))]
#[allow(clippy::too_many_arguments)]
pub fn py_write_run(py: Python<'_>, fileobj: &Bound<'_, PyAny>, examples: &Bound<'_, PyAny>, order: PyBuffer<u8>,
                    keys: &Bound<'_, PyAny>, key_width: i64, prefix_len: usize, index_every: u64, block: usize,
                    fd: Option<i32>, crc: Option<u32>, drop_behind: u64) -> PyResult<Option<(u64, u64, Option<u32>)>> {
    let order = with_bytes(py, &order, packed_rows)??;
    let rows = RunRows::new(py, examples)?;
    let count = rows.len();
    let mut target = match fd {
        None => Target::Python(fileobj, crc),
        #[cfg(unix)]
        // SAFETY: the caller's file object owns the descriptor and keeps it
        // open through this call; the sink never closes it.
        Some(fd) if fd >= 0 => Target::Descriptor(unsafe { DescriptorSink::new(fd, crc, drop_behind) }),
        Some(fd) => return Err(PyValueError::new_err(format!("no file descriptor {fd} to write to"))),
    };
    // The keys first: getting a buffer may run an exporter's code, which
    // must be done before any example is borrowed (below).
    let (key_items, column);
    let (fixed, variable);
    let keys = match key_width {
        0 if keys.is_none() => Keys::Example,
        -1 if !keys.is_instance_of::<PyList>() => {
            column = crate::framed_keys::KeyColumn::new(py, keys, count)?;
            variable = column.gathered(&order)?;
            Keys::Variable(&variable)
        }
        -1 => {
            let Ok(list) = keys.downcast::<PyList>() else { return Ok(None) };
            if list.len() != count {
                return Err(PyValueError::new_err(format!("{} keys for {count} rows", list.len())));
            }
            let Some((found, slices)) = gathered_slices(list, &order)? else { return Ok(None) };
            (key_items, variable) = (found, slices);
            let _ = &key_items;
            Keys::Variable(&variable)
        }
        width if width > 0 => {
            let width = width as usize;
            // Gathered into a copy, so no view of a writable buffer is kept
            // across `fileobj.write`.
            fixed = with_bytes(py, &PyBuffer::<u8>::get(keys)?, |blob| {
                if blob.len() != width * count {
                    return Err(PyValueError::new_err(format!(
                        "{} key bytes are not {count} keys of {width} bytes", blob.len())));
                }
                let mut ordered = Vec::with_capacity(order.len() * width);
                for (at, row) in order.iter().enumerate() {
                    // The order jumps all over the keys: each asked for rows ahead.
                    if let Some(ahead) = order.get(at + PREFETCH_AHEAD).and_then(|ahead| ahead.checked_mul(width)) {
                        if let Some(key) = blob.get(ahead..) {
                            crate::prefetch(key.as_ptr());
                        }
                    }
                    if *row >= count {
                        return Err(pyo3::exceptions::PyIndexError::new_err(format!("row {row} outside {count} rows")));
                    }
                    ordered.extend_from_slice(&blob[row * width..(row + 1) * width]);
                }
                Ok(ordered)
            })??;
            Keys::Fixed { blob: &fixed, width }
        }
        _ => return Err(PyValueError::new_err(format!("key width {key_width} with keys of type {}", keys.get_type().name()?))),
    };
    // Writing to a descriptor runs no Python code from here on, so the
    // examples can be borrowed from the list; a Python `write` could
    // change the list, so then each object is held (framed records'
    // buffers are held by `rows`).
    let held;
    let slices = match rows.listed() {
        Some(list) if !matches!(target, Target::Python(..)) => {
            let Some(slices) = borrowed_slices(list, &order)? else { return Ok(None) };
            slices
        }
        _ => {
            let Some((items, slices)) = rows.gathered(&order)? else { return Ok(None) };
            held = items;
            let _ = &held;
            slices
        }
    };
    let records = Records { slices: &slices, framed: rows.is_framed() };
    match check(&records, &keys, index_every) {
        Err(Refused::TooLarge) => return Ok(None),
        Err(Refused::Bad(why)) => return Err(PyValueError::new_err(why)),
        Ok(()) => {}
    }
    target.write(py, &records, &keys, prefix_len, index_every, block).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_rows::FRAMING;
    use crate::walk::frame_at;
    use proptest::prelude::*;

    /// The run file as one buffer, and the lengths of the writes.
    fn whole(examples: &[&[u8]], keys: &Keys, block: usize) -> (Vec<u8>, Vec<usize>) {
        written(&Records { slices: examples, framed: false }, keys, block)
    }

    fn written(records: &Records, keys: &Keys, block: usize) -> (Vec<u8>, Vec<usize>) {
        let (mut out, mut writes) = (Vec::new(), Vec::new());
        let mut sink = FillSink(|length: usize, fill: &mut dyn FnMut(&mut [u8])| -> Result<(), ()> {
            let mut buffer = vec![0u8; length];
            fill(&mut buffer);
            out.extend_from_slice(&buffer);
            writes.push(length);
            Ok(())
        });
        write_run(records, keys, 4, 64, block, &mut sink).unwrap();
        (out, writes)
    }

    #[test]
    fn an_empty_run_is_its_footer() {
        let (out, _) = whole(&[], &Keys::Example, 100);
        let mut expected = vec![0u8; 48];
        expected.extend_from_slice(&0i64.to_le_bytes());
        expected.extend_from_slice(MAGIC);
        assert_eq!(out, expected);
    }

    #[test]
    fn bad_rows_and_keys_are_refused() {
        let examples: Vec<&[u8]> = vec![b"a", b"b"];
        let examples = Records { slices: &examples, framed: false };
        assert!(matches!(check(&examples, &Keys::Example, 0), Err(Refused::Bad(_))));
        let keys: Vec<&[u8]> = vec![b"k"];
        assert!(matches!(check(&examples, &Keys::Variable(&keys), 64), Err(Refused::Bad(_))));
        assert!(matches!(check(&examples, &Keys::Fixed { blob: &[0; 3], width: 2 }, 64), Err(Refused::Bad(_))));
        assert_eq!(check(&examples, &Keys::Example, 64), Ok(()));
    }

    proptest! {
        #[test]
        fn the_blocks_never_change_the_bytes(
            examples in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..90), 0..40),
            block in 1usize..400, kind in 0usize..3, width in 1usize..40) {
            let slices: Vec<&[u8]> = examples.iter().map(|example| example.as_slice()).collect();
            let blob: Vec<u8> = (0..slices.len() * width).map(|at| (at * 7) as u8).collect();
            let keys = match kind {
                0 => Keys::Example,
                1 => Keys::Variable(&slices),
                _ => Keys::Fixed { blob: &blob, width },
            };
            let (small, writes) = whole(&slices, &keys, block);
            let (large, _) = whole(&slices, &keys, 1 << 20);
            prop_assert_eq!(&small, &large);
            prop_assert_eq!(writes.iter().sum::<usize>(), small.len());
            // The footer's numbers: the records' size (the sizes section's offset), rows.
            let footer = &small[small.len() - 64..];
            let framed: usize = slices.iter().map(|example| example.len() + 16).sum();
            prop_assert_eq!(u64::from_le_bytes(footer[..8].try_into().unwrap()), framed as u64);
            prop_assert_eq!(u64::from_le_bytes(footer[40..48].try_into().unwrap()), slices.len() as u64);
        }

        #[test]
        fn framed_records_write_the_run_their_examples_write(
            examples in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..90), 0..40),
            block in 1usize..400, width in 0usize..3) {
            let framed: Vec<Vec<u8>> = examples.iter().map(|example| {
                let mut record = vec![0u8; example.len() + FRAMING];
                frame_at(&mut record, example);
                record
            }).collect();
            let slices: Vec<&[u8]> = examples.iter().map(|example| example.as_slice()).collect();
            let records: Vec<&[u8]> = framed.iter().map(|record| record.as_slice()).collect();
            let blob: Vec<u8> = examples.iter().flat_map(|example| { let mut key = example.clone(); key.resize(2, 7); key }).collect();
            let keys = match width {
                0 => Keys::Example,
                1 => Keys::Variable(&slices),
                _ => Keys::Fixed { blob: &blob, width: 2 },
            };
            let (listed, _) = written(&Records { slices: &slices, framed: false }, &keys, block);
            let (copied, _) = written(&Records { slices: &records, framed: true }, &keys, block);
            prop_assert_eq!(listed, copied);
        }

    }
}
