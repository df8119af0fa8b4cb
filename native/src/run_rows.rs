//! The rows a run is written from, as Python hands them to `run` and
//! `run_order`: a list of Examples (bytes objects), or a spill's batches
//! already framed (`transforms/writer/framed_runs.py`,
//! `FramedBatches.native`): a tuple ``(buffers, offsets)``, `buffers` a
//! list of bytes objects each holding framed TFRecord records back to
//! back, `offsets` every buffer's record offsets (from 0 to the buffer's
//! length) one buffer after the other, packed little-endian int64. Framed
//! rows are copied as they are (no framing, no CRC computed again) and
//! read as Examples between their header and their CRC.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::walk::{FOOTER_SIZE, HEADER_SIZE};
use crate::{with_bytes, PREFETCH_AHEAD};

/// The framing's bytes around an Example: header and CRC.
pub const FRAMING: usize = HEADER_SIZE + FOOTER_SIZE;

/// The Example a framed record holds (the record is `FRAMING` bytes at least).
pub fn unframed(record: &[u8]) -> &[u8] {
    &record[HEADER_SIZE..record.len() - FOOTER_SIZE]
}

/// Every framed record of `buffers`, cut at `offsets` (each buffer's, from
/// 0 to its length, one buffer after the other); an error when the
/// offsets do not cut every buffer whole into records of `FRAMING` bytes
/// at least, or are left over.
pub fn framed_records<'a>(buffers: &[&'a [u8]], offsets: &[i64]) -> Result<Vec<&'a [u8]>, String> {
    let mut records = Vec::with_capacity(offsets.len().saturating_sub(buffers.len()));
    let mut at = 0;
    for (number, buffer) in buffers.iter().enumerate() {
        if offsets.get(at) != Some(&0) {
            return Err(format!("buffer {number}'s offsets do not start at 0"));
        }
        at += 1;
        let mut start = 0usize;
        while start < buffer.len() {
            let Some(&end) = offsets.get(at) else {
                return Err(format!("buffer {number}'s offsets end before its {} bytes", buffer.len()));
            };
            if end < 0 || end as u64 > buffer.len() as u64 || (end as usize) < start + FRAMING {
                return Err(format!("buffer {number}: offset {end} after {start} ends no record of its {} bytes", buffer.len()));
            }
            records.push(&buffer[start..end as usize]);
            start = end as usize;
            at += 1;
        }
    }
    if at != offsets.len() {
        return Err(format!("{} offsets past the buffers' records", offsets.len() - at));
    }
    Ok(records)
}

/// A run's rows in order: Examples, framed as they are written, or
/// records framed already (`run_rows`), copied as they are.
#[derive(Clone, Copy)]
pub struct Records<'a> {
    pub slices: &'a [&'a [u8]],
    pub framed: bool,
}

impl<'a> Records<'a> {
    pub fn len(&self) -> usize {
        self.slices.len()
    }

    /// The row's Example.
    pub fn example(&self, row: usize) -> &'a [u8] {
        if self.framed { unframed(self.slices[row]) } else { self.slices[row] }
    }

    /// The row's size framed.
    pub fn size(&self, row: usize) -> usize {
        self.slices[row].len() + if self.framed { 0 } else { FRAMING }
    }
}

/// ``records[i] for i in order`` as byte slices, with the objects that
/// own them (strong references: `fileobj.write` runs Python, which might
/// change the list), or None when one is not bytes; an index outside
/// `records` is an IndexError. Each object is read once, asked for rows
/// ahead (`prefetch`): a sorted order jumps all over the heap.
#[allow(clippy::type_complexity)]
pub(crate) fn gathered_slices<'py, 'a>(records: &Bound<'py, PyList>, order: &[usize])
                            -> PyResult<Option<(Vec<Bound<'py, PyBytes>>, Vec<&'a [u8]>)>> {
    let (mut items, mut slices) = (Vec::with_capacity(order.len()), Vec::with_capacity(order.len()));
    for (at, index) in order.iter().enumerate() {
        if let Some(ahead) = order.get(at + PREFETCH_AHEAD) {
            if *ahead < records.len() {
                // SAFETY: `ahead` is inside the list (checked just above),
                // whose items the GIL keeps alive; only the address is read.
                crate::prefetch(unsafe { pyo3::ffi::PyList_GET_ITEM(records.as_ptr(), *ahead as isize) } as *const u8);
            }
        }
        // get_item checks the index against the list as it is now.
        let Ok(item) = records.get_item(*index)?.downcast_into::<PyBytes>() else { return Ok(None) };
        let bytes = item.as_bytes();
        // SAFETY: a bytes object never changes or moves its contents, and
        // `items` keeps every one alive for as long as the caller keeps the
        // pair (the slices are dropped with it, never returned further).
        slices.push(unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) });
        items.push(item);
    }
    Ok(Some((items, slices)))
}

/// ``records[i] for i in order`` as byte slices borrowed from the list,
/// without a reference taken to each (a reference is a write to each
/// object's header, and dropping it another pass over the heap), or None
/// when one is not bytes; an index outside `records` is an IndexError.
/// The caller must run no Python code while it holds the slices: the list
/// then keeps every object alive and unchanged (bytes never change).
///
/// Where the order takes a good part of the list, every item's slice is
/// read first in list order, which is about the order the objects lie in
/// memory, and the order then picks from that table: the objects are
/// visited at random once (to copy their bytes), not twice.
pub(crate) fn borrowed_slices<'a>(records: &'a Bound<'_, PyList>, order: &[usize]) -> PyResult<Option<Vec<&'a [u8]>>> {
    let count = records.len();
    if let Some(row) = order.iter().find(|row| **row >= count) {
        return Err(pyo3::exceptions::PyIndexError::new_err(format!("row {row} outside {count} rows")));
    }
    // SAFETY (both closures): every index is inside the list (checked
    // above), whose items the GIL keeps alive; only addresses are read.
    let item = |row: usize| unsafe { pyo3::ffi::PyList_GET_ITEM(records.as_ptr(), row as isize) };
    let ahead = |row: usize| crate::prefetch(item(row) as *const u8);
    let slice = |row: usize| -> Option<&'a [u8]> {
        let item = item(row);
        // SAFETY: `item` is a live object; PyBytes_Check reads its type.
        if unsafe { pyo3::ffi::PyBytes_Check(item) } == 0 {
            return None;
        }
        // SAFETY: `item` is a bytes object (checked): its buffer is its
        // size long, never changes or moves, and lives as long as the list
        // holds it, which the caller's contract (no Python code run while
        // the slices live) keeps for the slices' lifetime.
        Some(unsafe {
            std::slice::from_raw_parts(pyo3::ffi::PyBytes_AsString(item) as *const u8, pyo3::ffi::PyBytes_Size(item) as usize)
        })
    };
    if order.len() * 4 < count {
        let mut slices = Vec::with_capacity(order.len());
        for (at, row) in order.iter().enumerate() {
            if let Some(next) = order.get(at + PREFETCH_AHEAD) {
                ahead(*next);
            }
            let Some(found) = slice(*row) else { return Ok(None) };
            slices.push(found);
        }
        return Ok(Some(slices));
    }
    let mut table = Vec::with_capacity(count);
    for row in 0..count {
        if row + PREFETCH_AHEAD < count {
            ahead(row + PREFETCH_AHEAD);
        }
        table.push(slice(row));
    }
    Ok(order.iter().map(|row| table[*row]).collect())
}

/// A run's rows from Python: a list of Examples, or framed records (the
/// buffers held, every record a slice of one).
pub struct RunRows<'py, 'a> {
    listed: Option<Bound<'py, PyList>>,
    _buffers: Vec<Bound<'py, PyBytes>>,
    records: Vec<&'a [u8]>,
}

impl<'py, 'a> RunRows<'py, 'a> {
    /// The rows of a list of bytes or of a ``(buffers, offsets)`` tuple;
    /// anything else, or offsets that do not cut the buffers into
    /// records, is a ValueError.
    pub fn new(py: Python<'py>, rows: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(list) = rows.downcast::<PyList>() {
            return Ok(RunRows { listed: Some(list.clone()), _buffers: Vec::new(), records: Vec::new() });
        }
        let bad = || PyValueError::new_err("rows must be a list of bytes or a (buffers, offsets) tuple");
        let tuple = rows.downcast::<PyTuple>().map_err(|_| bad())?;
        if tuple.len() != 2 {
            return Err(bad());
        }
        let listed = tuple.get_item(0)?;
        let listed = listed.downcast::<PyList>().map_err(|_| bad())?;
        let mut buffers = Vec::with_capacity(listed.len());
        for buffer in listed.iter() {
            buffers.push(buffer.downcast_into::<PyBytes>().map_err(|_| bad())?);
        }
        let offsets = with_bytes(py, &PyBuffer::<u8>::get(&tuple.get_item(1)?)?,
                                 |bytes| crate::packed::signed_words(bytes, "packed offsets'"))?
            .map_err(PyValueError::new_err)?;
        // SAFETY: a bytes object never changes or moves its contents, and
        // `_buffers` keeps every one alive as long as the slices (never
        // handed out past the `RunRows`'s own lifetime by its callers).
        let slices: Vec<&'a [u8]> = buffers.iter()
            .map(|buffer| unsafe { std::slice::from_raw_parts(buffer.as_bytes().as_ptr(), buffer.as_bytes().len()) })
            .collect();
        let records = framed_records(&slices, &offsets).map_err(PyValueError::new_err)?;
        Ok(RunRows { listed: None, _buffers: buffers, records })
    }

    pub fn len(&self) -> usize {
        self.listed.as_ref().map_or(self.records.len(), |list| list.len())
    }

    /// The list of Examples, when the rows are one.
    pub fn listed(&self) -> Option<&Bound<'py, PyList>> {
        self.listed.as_ref()
    }

    /// ``rows[i] for i in order``, with the bytes objects that own them
    /// (listed rows: each item; framed: none, the buffers being held):
    /// framed records when framed, else Examples; None when a listed row
    /// is not bytes; an index outside the rows is an IndexError.
    #[allow(clippy::type_complexity)]
    pub fn gathered(&self, order: &[usize]) -> PyResult<Option<(Vec<Bound<'py, PyBytes>>, Vec<&'a [u8]>)>> {
        if let Some(list) = &self.listed {
            return gathered_slices(list, order);
        }
        let mut slices = Vec::with_capacity(order.len());
        for row in order {
            let Some(record) = self.records.get(*row) else {
                return Err(PyIndexError::new_err(format!("row {row} outside {} rows", self.records.len())));
            };
            slices.push(*record);
        }
        Ok(Some((Vec::new(), slices)))
    }

    /// `gathered`, as Examples (framed records read between their framing).
    #[allow(clippy::type_complexity)]
    pub fn examples(&self, order: &[usize]) -> PyResult<Option<(Vec<Bound<'py, PyBytes>>, Vec<&'a [u8]>)>> {
        let framed = self.is_framed();
        Ok(self.gathered(order)?.map(|(held, slices)| {
            (held, if framed { slices.into_iter().map(unframed).collect() } else { slices })
        }))
    }

    pub fn is_framed(&self) -> bool {
        self.listed.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offsets_cut_every_buffer_whole() {
        let first = [7u8; 40];
        let empty: [u8; 0] = [];
        let buffers: Vec<&[u8]> = vec![&first, &empty, &first[..16]];
        let records = framed_records(&buffers, &[0, 16, 40, 0, 0, 16]).unwrap();
        assert_eq!(records.iter().map(|record| record.len()).collect::<Vec<_>>(), vec![16, 24, 16]);
        assert!(unframed(records[1]).len() == 8);
        assert!(framed_records(&buffers, &[0, 16, 40, 0, 0, 16, 0]).is_err()); // left over
        assert!(framed_records(&buffers, &[0, 16, 40, 0]).is_err()); // ends early
        assert!(framed_records(&buffers, &[0, 10, 40, 0, 0, 16]).is_err()); // too short
        assert!(framed_records(&buffers, &[0, 16, 41, 0, 0, 16]).is_err()); // past the end
        assert!(framed_records(&buffers, &[1, 16, 40, 0, 0, 16]).is_err()); // not from 0
    }

    proptest! {
        #[test]
        fn any_offsets_are_cut_or_refused_never_followed(
            lengths in proptest::collection::vec(0usize..80, 0..5),
            offsets in proptest::collection::vec(-5i64..90, 0..20)) {
            let data = vec![1u8; 80];
            let buffers: Vec<&[u8]> = lengths.iter().map(|length| &data[..*length]).collect();
            if let Ok(records) = framed_records(&buffers, &offsets) {
                prop_assert!(records.iter().all(|record| record.len() >= FRAMING));
                prop_assert_eq!(records.iter().map(|record| record.len()).sum::<usize>(), lengths.iter().sum::<usize>());
                prop_assert_eq!(records.len() + buffers.len(), offsets.len());
            }
        }

        #[test]
        fn well_made_offsets_give_every_record(
            batches in proptest::collection::vec(proptest::collection::vec(0usize..30, 0..6), 0..5)) {
            let framed: Vec<Vec<u8>> = batches.iter().map(|sizes| {
                sizes.iter().enumerate().flat_map(|(row, size)| vec![row as u8; size + FRAMING]).collect()
            }).collect();
            let mut offsets = Vec::new();
            for sizes in &batches {
                offsets.push(0i64);
                let mut end = 0;
                for size in sizes {
                    end += (size + FRAMING) as i64;
                    offsets.push(end);
                }
            }
            let buffers: Vec<&[u8]> = framed.iter().map(|buffer| buffer.as_slice()).collect();
            let records = framed_records(&buffers, &offsets).unwrap();
            let expected: Vec<usize> = batches.iter().flatten().map(|size| size + FRAMING).collect();
            prop_assert_eq!(records.iter().map(|record| record.len()).collect::<Vec<_>>(), expected);
        }
    }
}
