//! The order of a bucket's rows read from sorted runs (`sorting._Ordered`):
//! each run's slice already lies in ``(key, example)`` order, so the
//! bucket's order is a k-way merge of them, about log2(k) comparisons a
//! row, rather than a sort of every row again. The Python reference is
//! the sort (`row_order.sorted_positions` / `sorted_order`); the merge
//! gives the same positions, ties (rows equal in key and example) in
//! slice order, then row order, as that stable sort does.

use std::panic::AssertUnwindSafe;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::framed_keys::{check_offsets, column_parts};
use crate::guarded;
use crate::packed::{iter_words, whole_words};
use crate::radix::radix_sort_by_high;
use crate::run_order::head;
use crate::run_rows::gathered_slices;
use crate::walk::{FOOTER_SIZE, HEADER_SIZE};

/// A slice's keys: listed, or a key column read in place (`buffer` cut at
/// `offsets`, little-endian int64s, one more than the rows, checked by
/// `slice_from`).
pub enum SliceKeys<'a> {
    Listed(&'a [&'a [u8]]),
    Column { buffer: &'a [u8], offsets: &'a [u8] },
}

impl<'a> SliceKeys<'a> {
    fn len(&self) -> usize {
        match self {
            SliceKeys::Listed(keys) => keys.len(),
            SliceKeys::Column { offsets, .. } => (offsets.len() / 8).saturating_sub(1),
        }
    }

    fn key(&self, row: usize) -> &'a [u8] {
        match self {
            SliceKeys::Listed(keys) => keys[row],
            SliceKeys::Column { buffer, offsets } => &buffer[word(offsets, row)..word(offsets, row + 1)],
        }
    }
}

/// Word `index` of little-endian int64s already checked (`slice_from`:
/// in bounds, not negative).
fn word(words: &[u8], index: usize) -> usize {
    let at = 8 * index;
    i64::from_le_bytes(words[at..at + 8].try_into().expect("8 bytes")) as usize
}

/// One sorted slice, read in place: its keys, its framed records back to
/// back and their sizes (little-endian int64s, checked by `slice_from`).
pub struct SortedSlice<'a> {
    keys: SliceKeys<'a>,
    records: &'a [u8],
    sizes: &'a [u8],
}

/// A slice from its keys and its framed records back to back, cut by
/// `record_sizes` (packed little-endian int64): the sizes must be whole
/// words, each at least the framing's 16 bytes, adding up to the records'
/// length, one a key; a key column's offsets must cut its buffer.
pub fn slice_from<'a>(keys: SliceKeys<'a>, records: &'a [u8], record_sizes: &'a [u8])
                      -> Result<SortedSlice<'a>, String> {
    whole_words(record_sizes, "packed sizes'")?;
    let mut total = 0usize;
    for size in iter_words(record_sizes).map(|size| size as i64) {
        let framed = usize::try_from(size).map_err(|_| format!("size {size} is negative"))?;
        if framed < HEADER_SIZE + FOOTER_SIZE {
            return Err(format!("a framed record of {size} bytes"));
        }
        total = total.checked_add(framed).filter(|total| *total <= records.len())
            .ok_or_else(|| format!("the record sizes run past the {} bytes", records.len()))?;
    }
    if total != records.len() {
        return Err(format!("the record sizes cover {total} of {} bytes", records.len()));
    }
    if let SliceKeys::Column { buffer, offsets } = &keys {
        whole_words(offsets, "key offsets'")?;
        check_offsets(buffer.len(), iter_words(offsets).map(|offset| offset as i64))?;
    }
    let rows = record_sizes.len() / 8;
    if keys.len() != rows {
        return Err(format!("{} keys for {rows} records", keys.len()));
    }
    Ok(SortedSlice { keys, records, sizes: record_sizes })
}

/// A slice's next row in the merge: its number among every slice's rows,
/// its key and its example (its framed record, header and footer cut off).
struct Cursor<'s, 'a> {
    slice: &'s SortedSlice<'a>,
    row: usize,
    number: usize,
    start: usize,
    key: &'a [u8],
    example: &'a [u8],
}

impl<'s, 'a> Cursor<'s, 'a> {
    /// At the slice's first row, numbered `number`; None for an empty slice.
    fn first(slice: &'s SortedSlice<'a>, number: usize) -> Option<Self> {
        let mut cursor = Cursor { slice, row: 0, number, start: 0, key: &[], example: &[] };
        (slice.keys.len() > 0).then(|| {
            cursor.read();
            cursor
        })
    }

    fn read(&mut self) {
        let end = self.start + word(self.slice.sizes, self.row);
        self.key = self.slice.keys.key(self.row);
        self.example = &self.slice.records[self.start + HEADER_SIZE..end - FOOTER_SIZE];
    }

    /// On to the slice's next row; false past its last.
    fn advance(&mut self) -> bool {
        self.start += word(self.slice.sizes, self.row);
        self.row += 1;
        self.number += 1;
        if self.row == self.slice.keys.len() {
            return false;
        }
        self.read();
        true
    }
}

/// The rows of `slices` (numbered in slice order: slice 0's rows first) in
/// ``(key, example)`` order, rows equal in both in the order of their
/// numbers, written into `order` as little-endian int64s (8 bytes a row);
/// false when a slice is not in order (the caller sorts instead) or
/// `order` is not 8 bytes a row (the caller sizes it so). Keys whose
/// heads all differ are ordered by those (`order_by_heads`), any others
/// by the heap.
pub fn merged_order(slices: &[SortedSlice], order: &mut [u8]) -> bool {
    let mut cursors = Vec::with_capacity(slices.len());
    let mut rows = 0;
    for slice in slices {
        cursors.extend(Cursor::first(slice, rows));
        rows += slice.keys.len();
    }
    if order.len() != rows * 8 {
        return false;
    }
    if let Some(numbers) = order_by_heads(slices, rows) {
        for (word, number) in order.chunks_exact_mut(8).zip(numbers) {
            word.copy_from_slice(&(number as i64).to_le_bytes());
        }
        return true;
    }
    // A binary heap of the cursors, as (the key's first 8 bytes as an
    // integer, cursor): integers decide where those bytes differ (digests:
    // nearly always), whole keys and examples elsewhere; a tie goes to the
    // lower cursor (slice), whose rows are numbered first.
    let mut heap: Vec<Entry> = cursors.iter().enumerate().map(|(at, cursor)| (head(cursor.key), at)).collect();
    for at in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, at, &cursors);
    }
    let mut written = order.chunks_exact_mut(8);
    while let Some(&(_, at)) = heap.first() {
        let cursor = &mut cursors[at];
        let Some(word) = written.next() else { return false };
        word.copy_from_slice(&(cursor.number as i64).to_le_bytes());
        let before = (cursor.key, cursor.example);
        if cursor.advance() {
            if (cursor.key, cursor.example) < before {
                return false;
            }
            heap[0].0 = head(cursor.key);
        } else {
            let last = heap.pop().expect("the heap is not empty");
            if heap.is_empty() {
                break;
            }
            heap[0] = last;
        }
        sift_down(&mut heap, 0, &cursors);
    }
    true
}

/// The rows' numbers ordered by their keys' `head`s, when no two rows
/// share a head and each slice's heads rise: then that is their
/// ``(key, example)`` order (keys whose first 8 bytes, zero-padded, differ
/// order as those bytes), with no example compared. Else None, for the
/// heap's merge, which breaks ties and finds a slice out of order.
///
/// Key-ordered tables' keys (ids, names) mostly differ in their first 8
/// bytes: sorting the heads as integers took about a third of the heap's
/// time, whose comparisons each branch on cursors all over the slices.
/// A bucket's heads share their top bits, so a radix sort of them passes
/// over the rows two or three times where the stable sort's merges of
/// the slices' runs took about log2(slices) passes: the 20 buckets of a
/// 3.8M-row key-ordered build took 0.084 CPU-s against 0.117 here.
fn order_by_heads(slices: &[SortedSlice], rows: usize) -> Option<impl Iterator<Item = usize>> {
    let mut packed: Vec<u128> = Vec::with_capacity(rows);
    for slice in slices {
        let mut previous: Option<u64> = None;
        for row in 0..slice.keys.len() {
            let head = head(slice.keys.key(row));
            if previous.is_some_and(|previous| previous >= head) {
                return None;
            }
            previous = Some(head);
            packed.push((head as u128) << 64 | packed.len() as u128);
        }
    }
    radix_sort_by_high(&mut packed); // rows numbered in order: `packed.sort()`
    if packed.windows(2).any(|pair| pair[0] >> 64 == pair[1] >> 64) {
        return None;
    }
    Some(packed.into_iter().map(|item| item as u64 as usize))
}

/// A cursor in the merge's heap: (its key's `head`, its index).
type Entry = (u64, usize);

fn less(a: &Entry, b: &Entry, cursors: &[Cursor]) -> bool {
    a.0.cmp(&b.0)
        .then_with(|| {
            let (a, b) = (&cursors[a.1], &cursors[b.1]);
            a.key.cmp(b.key).then_with(|| a.example.cmp(b.example))
        })
        .then(a.1.cmp(&b.1))
        .is_lt()
}

fn sift_down(heap: &mut [Entry], mut at: usize, cursors: &[Cursor]) {
    loop {
        let left = 2 * at + 1;
        if left >= heap.len() {
            return;
        }
        let right = left + 1;
        let child = if right < heap.len() && less(&heap[right], &heap[left], cursors) { right } else { left };
        if !less(&heap[child], &heap[at], cursors) {
            return;
        }
        heap.swap(at, child);
        at = child;
    }
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
/// reader holds them: read in place, no bytes object a key), the framed
/// records back to back and their sizes (packed little-endian int64); the
/// positions packed as little-endian int64. None when a slice is not in
/// order or a listed key is not bytes (the caller sorts); records that do
/// not agree with their sizes, or a key column that does not cut its
/// buffer into a key a record, are a ValueError.
#[pyfunction(name = "merged_order")]
pub fn py_merged_order<'py>(py: Python<'py>, slices: &Bound<'py, PyList>)
                            -> PyResult<Option<Bound<'py, PyBytes>>> {
    // Each slice's keys' owner (the bytes objects of a list, kept while
    // their slices are read, or a key column's two buffers), records and
    // record sizes.
    let mut given = Vec::with_capacity(slices.len());
    for item in slices.iter() {
        let item = item.downcast::<PyTuple>()?;
        let keys = item.get_item(0)?;
        let owner = match keys.downcast::<PyList>() {
            Ok(list) => {
                let every: Vec<usize> = (0..list.len()).collect();
                let Some((items, found)) = gathered_slices(list, &every)? else { return Ok(None) };
                KeyOwner::Listed { _held: items, keys: found }
            }
            Err(_) => {
                let (buffer, offsets) = column_parts(&keys)?;
                KeyOwner::Column { buffer, offsets }
            }
        };
        given.push((owner, item.get_item(1)?.extract::<PyBuffer<u8>>()?,
                    item.get_item(2)?.extract::<PyBuffer<u8>>()?));
    }
    let mut sorted = Vec::with_capacity(given.len());
    let mut rows = 0usize;
    for (owner, records, record_sizes) in &given {
        let keys = match owner {
            KeyOwner::Listed { keys, .. } => SliceKeys::Listed(keys),
            KeyOwner::Column { buffer, offsets } => {
                SliceKeys::Column { buffer: buffer.as_bytes(), offsets: held_bytes(py, offsets)? }
            }
        };
        let slice = slice_from(keys, held_bytes(py, records)?, held_bytes(py, record_sizes)?)
            .map_err(PyValueError::new_err)?;
        rows += slice.keys.len();
        sorted.push(slice);
    }
    let mut in_order = false;
    let order = PyBytes::new_with(py, rows * 8, |order| {
        in_order = guarded(AssertUnwindSafe(|| merged_order(&sorted, order)))?;
        Ok(())
    })?;
    Ok(in_order.then_some(order))
}

/// What a slice's keys are borrowed from.
enum KeyOwner<'py, 'a> {
    /// A list's bytes objects (held while their slices are read), and the slices.
    Listed { _held: Vec<Bound<'py, PyBytes>>, keys: Vec<&'a [u8]> },
    /// A key column: its buffer and its offsets.
    Column { buffer: Bound<'py, PyBytes>, offsets: PyBuffer<u8> },
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

    fn packed(values: impl IntoIterator<Item = usize>) -> Vec<u8> {
        values.into_iter().flat_map(|value| (value as i64).to_le_bytes()).collect()
    }

    /// The buffers of a slice of (key, example) rows: its keys (a key column
    /// when `column`, else listed), records and record sizes.
    struct Owned {
        listed: Vec<Vec<u8>>,
        column: Option<(Vec<u8>, Vec<u8>)>,
        records: Vec<u8>,
        sizes: Vec<u8>,
    }

    impl Owned {
        fn of(rows: &[(Vec<u8>, Vec<u8>)], column: bool) -> Self {
            let listed: Vec<Vec<u8>> = rows.iter().map(|(key, _)| key.clone()).collect();
            let column = column.then(|| {
                let mut ends = vec![0];
                ends.extend(listed.iter().scan(0, |end, key| { *end += key.len(); Some(*end) }));
                (listed.concat(), packed(ends))
            });
            let records: Vec<Vec<u8>> = rows.iter().map(|(_, example)| framed(example)).collect();
            Owned { listed, column, sizes: packed(records.iter().map(Vec::len)), records: records.concat() }
        }
    }

    /// `merged_order` of `rows`, their keys listed or (`columns`) in key columns.
    fn merged(rows: &[Vec<(Vec<u8>, Vec<u8>)>], columns: &[bool]) -> Option<Vec<usize>> {
        let owned: Vec<Owned> = rows.iter().enumerate()
            .map(|(at, slice)| Owned::of(slice, columns.get(at) == Some(&true))).collect();
        let listed: Vec<Vec<&[u8]>> = owned.iter().map(|slice| slice.listed.iter().map(Vec::as_slice).collect()).collect();
        let slices: Vec<SortedSlice> = owned.iter().zip(&listed).map(|(slice, keys)| {
            let keys = match &slice.column {
                Some((buffer, offsets)) => SliceKeys::Column { buffer, offsets },
                None => SliceKeys::Listed(keys),
            };
            slice_from(keys, &slice.records, &slice.sizes).expect("a well-formed slice")
        }).collect();
        let mut order = vec![0u8; 8 * rows.iter().map(Vec::len).sum::<usize>()];
        merged_order(&slices, &mut order)
            .then(|| order.chunks_exact(8).map(|word| i64::from_le_bytes(word.try_into().unwrap()) as usize).collect())
    }

    fn rows_of(pairs: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs.iter().map(|(key, example)| (key.to_vec(), example.to_vec())).collect()
    }

    #[test]
    fn ties_go_to_the_lower_slice_then_row() {
        let row: (&[u8], &[u8]) = (b"k", b"e");
        let rows = vec![rows_of(&[row, row]), rows_of(&[(b"a", b"z"), row])];
        for columns in [[false, false], [true, false], [true, true]] {
            assert_eq!(merged(&rows, &columns), Some(vec![2, 0, 1, 3]));
        }
    }

    #[test]
    fn keys_that_are_prefixes_of_others_come_first() {
        // Equal first 8 bytes (zero-padded): the whole keys decide.
        let rows = vec![rows_of(&[(b"abcdefgh\0", b""), (b"abcdefgh\0\0", b"")]),
                        rows_of(&[(b"abcdefgh", b"z"), (b"abcdefgh\0", b"")]), rows_of(&[(b"abc", b"")])];
        assert_eq!(merged(&rows, &[true, false, true]), Some(vec![4, 2, 0, 3, 1]));
    }

    #[test]
    fn empty_slices_and_one_slice_merge_as_they_are() {
        let one = rows_of(&[(b"a", b"1"), (b"a", b"2"), (b"b", b"")]);
        assert_eq!(merged(&[vec![], one.clone(), vec![]], &[true, true, false]), Some(vec![0, 1, 2]));
        assert_eq!(merged(&[one], &[false]), Some(vec![0, 1, 2]));
        assert_eq!(merged(&[vec![], vec![]], &[true]), Some(vec![]));
        assert_eq!(merged(&[], &[]), Some(vec![]));
    }

    #[test]
    fn a_slice_out_of_order_gives_none() {
        let rows = vec![rows_of(&[(b"b", b""), (b"a", b"")])];
        assert_eq!(merged(&rows, &[false]), None);
        assert_eq!(merged(&[rows_of(&[(b"a", b"2"), (b"a", b"1")])], &[true]), None);
    }

    #[test]
    fn an_order_of_the_wrong_size_is_not_written() {
        let owned = Owned::of(&rows_of(&[(b"a", b"")]), false);
        let keys: Vec<&[u8]> = vec![b"a"];
        let slice = slice_from(SliceKeys::Listed(&keys), &owned.records, &owned.sizes).unwrap();
        assert!(!merged_order(&[slice], &mut [0u8; 16]));
    }

    #[test]
    fn buffers_that_disagree_are_refused() {
        let key: &[u8] = b"k";
        let (one, two) = ([key], [key, key]);
        assert!(slice_from(SliceKeys::Listed(&two), &[0; 16], &packed([16])).is_err());
        assert!(slice_from(SliceKeys::Listed(&one), &[0; 16], &packed([15])).is_err());
        assert!(slice_from(SliceKeys::Listed(&one), &[0; 17], &packed([16])).is_err());
        assert!(slice_from(SliceKeys::Listed(&one), &[0; 15], &packed([16])).is_err());
        assert!(slice_from(SliceKeys::Listed(&one), &[0; 16], &(-1i64).to_le_bytes()).is_err());
        assert!(slice_from(SliceKeys::Listed(&one), &[0; 16], &packed([16])[..7]).is_err());
        assert!(slice_from(SliceKeys::Listed(&one), &[0; 16], &packed([16])).is_ok());
        let column = |offsets: &[usize]| SliceKeys::Column { buffer: b"kl", offsets: Box::leak(packed(offsets.to_vec()).into_boxed_slice()) };
        assert!(slice_from(column(&[0, 2]), &[0; 16], &packed([16])).is_ok());
        assert!(slice_from(column(&[0, 3]), &[0; 16], &packed([16])).is_err());
        assert!(slice_from(column(&[0, 1, 2]), &[0; 16], &packed([16])).is_err());
        assert!(slice_from(column(&[1, 2]), &[0; 16], &packed([16])).is_err());
        assert!(slice_from(column(&[]), &[], &[]).is_err());
    }

    proptest! {
        #[test]
        fn the_merge_is_the_stable_sort(
            slices in proptest::collection::vec(proptest::collection::vec(
                (proptest::collection::vec(0u8..3, 0..10), proptest::collection::vec(0u8..3, 0..3)), 0..20), 0..6),
            columns in proptest::collection::vec(any::<bool>(), 6)) {
            // Keys up to 10 bytes of a small alphabet: ties in the first 8 bytes, prefixes, NULs.
            let rows: Vec<Vec<(Vec<u8>, Vec<u8>)>> = slices.into_iter().map(|mut slice| { slice.sort(); slice }).collect();
            let all: Vec<(Vec<u8>, Vec<u8>)> = rows.iter().flatten().cloned().collect();
            let mut expected: Vec<usize> = (0..all.len()).collect();
            expected.sort_by(|a, b| all[*a].cmp(&all[*b]));  // stable: ties by position
            prop_assert_eq!(merged(&rows, &columns), Some(expected));
        }

        #[test]
        fn keys_with_distinct_heads_merge_as_the_stable_sort(
            slices in proptest::collection::vec(proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12), proptest::collection::vec(0u8..3, 0..3)), 0..20), 0..6),
            columns in proptest::collection::vec(any::<bool>(), 6), shuffled in any::<bool>()) {
            // Keys of any bytes: their heads mostly differ (`order_by_heads`
            // decides); a slice left unsorted must still give None.
            let rows: Vec<Vec<(Vec<u8>, Vec<u8>)>> = slices.into_iter().map(|mut slice| {
                slice.sort();
                if shuffled { slice.reverse(); }
                slice
            }).collect();
            let all: Vec<(Vec<u8>, Vec<u8>)> = rows.iter().flatten().cloned().collect();
            let mut expected: Vec<usize> = (0..all.len()).collect();
            expected.sort_by(|a, b| all[*a].cmp(&all[*b]));
            let in_order = rows.iter().all(|slice| slice.windows(2).all(|pair| pair[0] <= pair[1]));
            prop_assert_eq!(merged(&rows, &columns), in_order.then_some(expected));
        }

        #[test]
        fn hostile_sizes_are_refused_not_followed(
            keys in 0usize..6, records in proptest::collection::vec(any::<u8>(), 0..80),
            record_sizes in proptest::collection::vec(-20i64..40, 0..6),
            offsets in proptest::collection::vec(-3i64..10, 0..8), column in any::<bool>()) {
            let key: &[u8] = b"k";
            let listed = vec![key; keys];
            let sizes: Vec<u8> = record_sizes.iter().flat_map(|size| size.to_le_bytes()).collect();
            let offsets: Vec<u8> = offsets.iter().flat_map(|offset| offset.to_le_bytes()).collect();
            let keys = if column { SliceKeys::Column { buffer: b"keys", offsets: &offsets } } else { SliceKeys::Listed(&listed) };
            if let Ok(slice) = slice_from(keys, &records, &sizes) {
                prop_assert_eq!(slice.keys.len(), record_sizes.len());
                let mut order = vec![0u8; 8 * record_sizes.len()];
                prop_assert!(merged_order(&[slice], &mut order) || record_sizes.len() > 1);
            }
        }
    }
}
