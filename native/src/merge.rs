//! The order of a bucket's rows read from sorted runs (`sorting._Ordered`):
//! each run's slice already lies in ``(key, example)`` order, so the
//! bucket's order is a k-way merge of them, about log2(k) comparisons a
//! row, rather than a sort of every row again. The Python reference is
//! the sort (`row_order.sorted_positions` / `sorted_order`); the merge
//! gives the same positions, ties (rows equal in key and example) in
//! slice order, then row order, as that stable sort does.

use std::cmp::Ordering;
use std::panic::AssertUnwindSafe;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::run_order::head;
use crate::walk::{FOOTER_SIZE, HEADER_SIZE};
use crate::guarded;
use crate::framed_keys::KeyColumn;
use crate::run_rows::gathered_slices;

/// One sorted slice: each row's key and framed record.
pub struct SortedSlice<'a> {
    pub keys: Vec<&'a [u8]>,
    pub records: Vec<&'a [u8]>,
}

/// The example of a framed record (its header and footer cut off).
fn example(record: &[u8]) -> &[u8] {
    &record[HEADER_SIZE..record.len() - FOOTER_SIZE]
}

fn row_cmp(slice: &SortedSlice, row: usize, other: &SortedSlice, other_row: usize) -> Ordering {
    slice.keys[row].cmp(other.keys[other_row])
        .then_with(|| example(slice.records[row]).cmp(example(other.records[other_row])))
}

/// The rows of `slices` (numbered in slice order: slice 0's rows first) in
/// ``(key, example)`` order, rows equal in both in the order of their
/// numbers; None when a slice is not in order (the caller sorts instead).
/// Records must be at least the framing's 16 bytes (`slice_from` checks).
pub fn merged_order(slices: &[SortedSlice]) -> Option<Vec<usize>> {
    let mut bases = Vec::with_capacity(slices.len());
    let mut total = 0;
    for slice in slices {
        bases.push(total);
        total += slice.keys.len();
    }
    // A binary heap of each slice's next row, as (the key's first 8 bytes
    // as an integer, slice, row): integers decide where those bytes differ
    // (digests: nearly always), whole keys and examples elsewhere; a tie
    // goes to the lower slice, whose rows are numbered first.
    let entry = |slice: usize, row: usize| (head(slices[slice].keys[row]), slice, row);
    let less = |a: &Entry, b: &Entry| {
        a.0.cmp(&b.0).then_with(|| row_cmp(&slices[a.1], a.2, &slices[b.1], b.2)).then(a.1.cmp(&b.1))
            == Ordering::Less
    };
    let mut heap: Vec<Entry> =
        (0..slices.len()).filter(|slice| !slices[*slice].keys.is_empty()).map(|slice| entry(slice, 0)).collect();
    for at in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, at, &less);
    }
    let mut order = Vec::with_capacity(total);
    while let Some(&top) = heap.first() {
        let (_, slice, row) = top;
        order.push(bases[slice] + row);
        if row + 1 < slices[slice].keys.len() {
            let next = entry(slice, row + 1);
            if less(&next, &top) {
                return None;
            }
            heap[0] = next;
        } else {
            let last = heap.pop().expect("the heap is not empty");
            if heap.is_empty() {
                break;
            }
            heap[0] = last;
        }
        sift_down(&mut heap, 0, &less);
    }
    Some(order)
}

/// A slice's next row in the merge: (its key's `head`, slice, row).
type Entry = (u64, usize, usize);

fn sift_down(heap: &mut [Entry], mut at: usize, less: &impl Fn(&Entry, &Entry) -> bool) {
    loop {
        let left = 2 * at + 1;
        if left >= heap.len() {
            return;
        }
        let right = left + 1;
        let child = if right < heap.len() && less(&heap[right], &heap[left]) { right } else { left };
        if !less(&heap[child], &heap[at]) {
            return;
        }
        heap.swap(at, child);
        at = child;
    }
}

/// Little-endian int64 values (a numpy array's buffer); a length not a
/// multiple of 8, or a negative value, is an error.
fn packed_sizes(bytes: &[u8]) -> Result<Vec<usize>, String> {
    crate::packed::signed_words(bytes, "packed sizes'")?
        .into_iter()
        .map(|value| usize::try_from(value).map_err(|_| format!("size {value} is negative")))
        .collect()
}

/// Cuts `blob` into consecutive pieces of `sizes` bytes, which must add up
/// to its length.
fn pieces<'a>(blob: &'a [u8], sizes: &[usize]) -> Result<Vec<&'a [u8]>, String> {
    let mut cut = Vec::with_capacity(sizes.len());
    let mut start = 0usize;
    for size in sizes {
        let end = start.checked_add(*size).filter(|end| *end <= blob.len())
            .ok_or_else(|| format!("the record sizes run past the {} bytes", blob.len()))?;
        cut.push(&blob[start..end]);
        start = end;
    }
    if start != blob.len() {
        return Err(format!("the record sizes cover {start} of {} bytes", blob.len()));
    }
    Ok(cut)
}

/// A slice from its keys and its framed records back to back, cut by
/// `record_sizes`.
pub fn slice_from<'a>(keys: Vec<&'a [u8]>, records: &'a [u8], record_sizes: &[usize])
                      -> Result<SortedSlice<'a>, String> {
    if let Some(size) = record_sizes.iter().find(|size| **size < HEADER_SIZE + FOOTER_SIZE) {
        return Err(format!("a framed record of {size} bytes"));
    }
    if keys.len() != record_sizes.len() {
        return Err(format!("{} keys for {} records", keys.len(), record_sizes.len()));
    }
    Ok(SortedSlice { keys, records: pieces(records, record_sizes)? })
}

/// The bytes of a contiguous buffer, for as long as `buffer` lives (as
/// `with_bytes`, for several buffers at once).
fn held_bytes<'b>(py: Python<'_>, buffer: &'b PyBuffer<u8>) -> PyResult<&'b [u8]> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("the buffer must be contiguous"));
    }
    let _ = py;
    // SAFETY: as in `with_bytes`: PyBuffer holds the exporter's buffer for
    // as long as `buffer` lives, `len_bytes()` contiguous initialised
    // bytes, and the GIL (held throughout: `py`) keeps other Python
    // threads from writing it.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) })
}

/// `merged_order(slices) -> order | None`: `merged_order` of slices given
/// as ``(keys, records, record_sizes)``: the keys a list of bytes or a key
/// column ``(buffer, offsets)`` (`framed_keys::KeyColumn`, as a run file's
/// reader holds them: no bytes object a key), the framed records back to
/// back and their sizes (packed little-endian int64); the positions packed
/// as little-endian int64. None when a slice is not in order or a listed
/// key is not bytes (the caller sorts); records that do not agree with
/// their sizes, or a key column that does not cut its buffer into a key a
/// record, are a ValueError.
#[pyfunction(name = "merged_order")]
pub fn py_merged_order<'py>(py: Python<'py>, slices: &Bound<'py, PyList>)
                            -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut given = Vec::with_capacity(slices.len());
    for item in slices.iter() {
        let item = item.downcast::<PyTuple>()?;
        given.push((item.get_item(0)?, item.get_item(1)?.extract::<PyBuffer<u8>>()?,
                    item.get_item(2)?.extract::<PyBuffer<u8>>()?));
    }
    // Each slice's record sizes, and its keys' owners: the bytes objects
    // of a list (kept while their slices are read) or a key column.
    let mut owners = Vec::with_capacity(given.len());
    for (keys, _, record_sizes) in &given {
        let record_sizes = packed_sizes(held_bytes(py, record_sizes)?).map_err(PyValueError::new_err)?;
        let owner = match keys.downcast::<PyList>() {
            Ok(list) => {
                let every: Vec<usize> = (0..list.len()).collect();
                let Some((items, found)) = gathered_slices(list, &every)? else { return Ok(None) };
                KeyOwner::Listed { _held: items, keys: found }
            }
            Err(_) => KeyOwner::Column(KeyColumn::new(py, keys, record_sizes.len())?),
        };
        owners.push((owner, record_sizes));
    }
    let mut sorted = Vec::with_capacity(owners.len());
    for ((owner, record_sizes), (_, records, _)) in owners.iter().zip(&given) {
        let keys = match owner {
            KeyOwner::Listed { keys, .. } => keys.clone(),
            KeyOwner::Column(column) => column.slices()?,
        };
        sorted.push(slice_from(keys, held_bytes(py, records)?, record_sizes).map_err(PyValueError::new_err)?);
    }
    let Some(order) = guarded(AssertUnwindSafe(|| merged_order(&sorted)))? else { return Ok(None) };
    let mut packed = Vec::with_capacity(order.len() * 8);
    for position in &order {
        packed.extend_from_slice(&(*position as i64).to_le_bytes());
    }
    Ok(Some(PyBytes::new(py, &packed)))
}

/// What a slice's keys are borrowed from.
enum KeyOwner<'py, 'a> {
    /// A list's bytes objects (held while their slices are read), and the slices.
    Listed { _held: Vec<Bound<'py, PyBytes>>, keys: Vec<&'a [u8]> },
    /// A key column.
    Column(KeyColumn<'py>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(example: &[u8]) -> Vec<u8> {
        let mut record = vec![0u8; HEADER_SIZE];
        record.extend_from_slice(example);
        record.extend_from_slice(&[0u8; FOOTER_SIZE]);
        record
    }

    /// Slices of (key, example) rows, as `merged_order` takes them.
    fn slices_of(rows: &[Vec<(Vec<u8>, Vec<u8>)>]) -> Vec<SortedSlice<'static>> {
        rows.iter().map(|slice| {
            let keys: Vec<&'static [u8]> = slice.iter().map(|(key, _)| &*Box::leak(key.clone().into_boxed_slice())).collect();
            let records: Vec<&'static [u8]> = slice.iter().map(|(_, example)| &*Box::leak(framed(example).into_boxed_slice())).collect();
            SortedSlice { keys, records }
        }).collect()
    }

    #[test]
    fn ties_go_to_the_lower_slice_then_row() {
        let row = (b"k".to_vec(), b"e".to_vec());
        let rows = vec![vec![row.clone(), row.clone()], vec![(b"a".to_vec(), b"z".to_vec()), row.clone()]];
        assert_eq!(merged_order(&slices_of(&rows)), Some(vec![2, 0, 1, 3]));
    }

    #[test]
    fn a_slice_out_of_order_gives_none() {
        let rows = vec![vec![(b"b".to_vec(), vec![]), (b"a".to_vec(), vec![])]];
        assert_eq!(merged_order(&slices_of(&rows)), None);
    }

    #[test]
    fn buffers_that_disagree_are_refused() {
        let key: &[u8] = b"k";
        assert!(slice_from(vec![key, key], &[0; 16], &[16]).is_err());
        assert!(slice_from(vec![key], &[0; 16], &[15]).is_err());
        assert!(slice_from(vec![key], &[0; 17], &[16]).is_err());
        assert!(slice_from(vec![key], &[0; 15], &[16]).is_err());
        assert!(slice_from(vec![key], &[0; 16], &[16]).is_ok());
        assert!(packed_sizes(&(-1i64).to_le_bytes()).is_err());
    }

    proptest! {
        #[test]
        fn the_merge_is_the_stable_sort(
            slices in proptest::collection::vec(proptest::collection::vec(
                (proptest::collection::vec(0u8..3, 0..3), proptest::collection::vec(0u8..3, 0..3)), 0..20), 0..6)) {
            let rows: Vec<Vec<(Vec<u8>, Vec<u8>)>> = slices.into_iter().map(|mut slice| { slice.sort(); slice }).collect();
            let all: Vec<(Vec<u8>, Vec<u8>)> = rows.iter().flatten().cloned().collect();
            let mut expected: Vec<usize> = (0..all.len()).collect();
            expected.sort_by(|a, b| all[*a].cmp(&all[*b]));  // stable: ties by position
            prop_assert_eq!(merged_order(&slices_of(&rows)), Some(expected));
        }

        #[test]
        fn hostile_sizes_are_refused_not_followed(
            keys in 0usize..6, records in proptest::collection::vec(any::<u8>(), 0..80),
            record_sizes in proptest::collection::vec(0usize..40, 0..6)) {
            let key: &[u8] = b"k";
            if let Ok(slice) = slice_from(vec![key; keys], &records, &record_sizes) {
                prop_assert_eq!(slice.keys.len(), record_sizes.len());
                prop_assert!(merged_order(&[slice]).is_some() || record_sizes.len() > 1);
            }
        }
    }
}
