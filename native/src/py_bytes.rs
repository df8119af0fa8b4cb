//! A bytes object written as a `Vec<u8>` is, for a buffer whose size is
//! known only once it is written (a table kernel's framed Examples,
//! `py_rows::FramedRows`): grown as needed and cut to what was written
//! when done, so that Python gets the object the bytes were written into
//! rather than a copy of them.

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::framed_rows::Store;

/// A bytes object of `capacity` bytes, the first `len` of them written.
/// Made and used only while the GIL is held (`py`). The object is this
/// struct's alone until `finish` hands it over: CPython resizes a bytes
/// object in place only while nothing else refers to it.
pub(crate) struct GrowingBytes<'py> {
    py: Python<'py>,
    /// None until the first bytes are reserved (an empty one is CPython's
    /// shared b"", which cannot be resized).
    object: Option<NonNull<ffi::PyObject>>,
    /// The object's bytes (moved by each resize).
    data: *mut u8,
    len: usize,
    capacity: usize,
}

impl<'py> GrowingBytes<'py> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        GrowingBytes { py, object: None, data: std::ptr::null_mut(), len: 0, capacity: 0 }
    }

    /// Makes the object `capacity` bytes long (at least `len`), keeping
    /// the bytes written. A panic where memory runs out (as a Vec's
    /// growth fails), which the extension's functions turn into an error.
    fn resize(&mut self, capacity: usize) {
        debug_assert!(capacity >= self.len && capacity > 0);
        let size = ffi::Py_ssize_t::try_from(capacity).expect("a bytes object's size fits isize");
        let object = match self.object.take() {
            // SAFETY: the GIL is held (`py`); a null data pointer makes an
            // object of `size` bytes, not yet written.
            None => unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), size) },
            Some(object) => {
                let mut object = object.as_ptr();
                // SAFETY: the GIL is held, and `object` is a bytes object
                // only this struct refers to (made here, never handed out):
                // CPython reallocates it, or frees it and sets it null.
                if unsafe { ffi::_PyBytes_Resize(&mut object, size) } != 0 {
                    object = std::ptr::null_mut();
                }
                object
            }
        };
        let Some(object) = NonNull::new(object) else {
            let error = PyErr::fetch(self.py);
            panic!("no memory for a framed buffer of {capacity} bytes: {error}");
        };
        self.object = Some(object);
        // SAFETY: `object` is a bytes object (made or resized above).
        self.data = unsafe { ffi::PyBytes_AsString(object.as_ptr()) }.cast();
        self.capacity = capacity;
    }

    /// The bytes object of exactly the bytes written.
    pub(crate) fn finish(mut self) -> Bound<'py, PyBytes> {
        if self.object.is_none() {
            return PyBytes::new(self.py, b"");
        }
        if self.len < self.capacity {
            // (cut in place: a smaller reallocation copies nothing)
            self.resize(self.len.max(1));
        }
        let object = self.object.take().expect("made above").as_ptr();
        // SAFETY: `object` is an owned reference to a bytes object, now
        // handed over (this struct no longer refers to it).
        let bytes = unsafe { Bound::from_owned_ptr(self.py, object).downcast_into_unchecked::<PyBytes>() };
        if self.len == 0 {
            // (the one byte kept above: CPython has one object for b"")
            return PyBytes::new(self.py, b"");
        }
        bytes
    }
}

impl Store for GrowingBytes<'_> {
    fn written(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `data` holds `capacity` >= `len` bytes, the first `len`
        // of them written (by `append`, which zeroes before it writes).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }

    fn written_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as `written`'s; `&mut self` makes this the one view of them.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }

    fn spare(&self) -> usize {
        self.capacity - self.len
    }

    fn reserve(&mut self, additional: usize) {
        if self.spare() >= additional {
            return;
        }
        // As `Vec::reserve`: at least twice the room, so that rows pushed
        // one at a time are copied a bounded number of times.
        let needed = self.len.checked_add(additional).expect("a buffer's size fits usize");
        self.resize(needed.max(self.capacity.saturating_mul(2)).max(1));
    }

    fn append(&mut self, size: usize, write: impl FnOnce(&mut [u8])) {
        self.reserve(size);
        // SAFETY: `reserve` made room for `size` bytes past `len` in
        // `data`; they are zeroed before the slice is made over them.
        let room = unsafe {
            let start = self.data.add(self.len);
            std::ptr::write_bytes(start, 0, size);
            std::slice::from_raw_parts_mut(start, size)
        };
        write(room);
        self.len += size;
    }
}

/// A bytes object of `len` bytes written by `write`, which gets them
/// not yet written (no pass zeroing them first: for a batch of images
/// that pass is as long as the copy) and returns how many it wrote from
/// the start; any it left are zeroed, so Python never sees memory no one
/// wrote. A panic in `write` is an error, and the object is dropped.
pub(crate) fn written_bytes<'py>(py: Python<'py>, len: usize,
                                 write: impl FnOnce(&mut [MaybeUninit<u8>]) -> usize)
                                 -> PyResult<Bound<'py, PyBytes>> {
    let size = ffi::Py_ssize_t::try_from(len)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("a bytes object's size fits isize"))?;
    // SAFETY: the GIL is held (`py`); a null data pointer makes an object
    // of `size` bytes, not yet written (null with an error set when there
    // is no memory, which `from_owned_ptr_or_err` raises).
    let object = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyBytes_FromStringAndSize(std::ptr::null(), size))? };
    if len == 0 {
        return Ok(unsafe { object.downcast_into_unchecked::<PyBytes>() });
    }
    // SAFETY: `object` is a bytes object of `len` bytes (made above) that
    // nothing else refers to yet; MaybeUninit makes no claim on them.
    let room = unsafe {
        std::slice::from_raw_parts_mut(ffi::PyBytes_AsString(object.as_ptr()).cast::<MaybeUninit<u8>>(), len)
    };
    let written = crate::guarded(std::panic::AssertUnwindSafe(|| write(&mut *room)))?;
    for byte in &mut room[written.min(len)..] {
        byte.write(0);
    }
    // SAFETY: made above as a bytes object.
    Ok(unsafe { object.downcast_into_unchecked::<PyBytes>() })
}

/// A bytes object of `count` 8-byte words from `words` (as numpy reads
/// "<i8" or "<f8": `to_le_bytes` of each) back to back, written in place:
/// no Vec first that the object then copies. Words past `count` are not
/// taken; a shortfall is zeroed (`written_bytes`).
pub(crate) fn packed_words<'py>(py: Python<'py>, count: usize, words: impl Iterator<Item = [u8; 8]>)
                                -> PyResult<Bound<'py, PyBytes>> {
    let len = count.checked_mul(8)
        .ok_or_else(|| pyo3::exceptions::PyOverflowError::new_err("a bytes object's size fits usize"))?;
    written_bytes(py, len, |room| {
        let mut written = 0;
        for (slot, word) in room.chunks_exact_mut(8).zip(words) {
            slot.write_copy_of_slice(&word);
            written += 8;
        }
        written
    })
}

/// `values` as little-endian int64 bytes (numpy reads them in one call),
/// written in place (`packed_words`).
pub(crate) fn packed_i64s<'py>(py: Python<'py>, values: &[i64]) -> PyResult<Bound<'py, PyBytes>> {
    packed_words(py, values.len(), values.iter().map(|value| value.to_le_bytes()))
}

impl Drop for GrowingBytes<'_> {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            // SAFETY: the GIL is held (`py`), and this struct owns the reference.
            unsafe { ffi::Py_DECREF(object.as_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_object_holds_what_a_vec_would(pieces in prop::collection::vec(
                (prop::collection::vec(any::<u8>(), 0..300), 0usize..1000), 0..20)) {
            pyo3::prepare_freethreaded_python();
            Python::with_gil(|py| {
                let (mut growing, mut plain) = (GrowingBytes::new(py), Vec::new());
                for (piece, reserve) in &pieces {
                    growing.reserve(*reserve);
                    prop_assert!(growing.spare() >= *reserve);
                    growing.append(piece.len(), |room| room.copy_from_slice(piece));
                    Store::append(&mut plain, piece.len(), |room: &mut [u8]| room.copy_from_slice(piece));
                    prop_assert_eq!(growing.written(), &plain[..]);
                    // Written over in place, as a framed buffer's CRCs are.
                    if let (Some(first), Some(last)) = (growing.written_mut().first_mut(), plain.first_mut()) {
                        (*first, *last) = (first.wrapping_add(1), last.wrapping_add(1));
                    }
                    prop_assert_eq!(growing.written(), &plain[..]);
                }
                let bytes = growing.finish();
                prop_assert_eq!(bytes.as_bytes(), &plain[..]);
                Ok(())
            })?;
        }
    }

    proptest! {
        #[test]
        fn written_bytes_holds_what_was_written_and_zeros_after(
                data in prop::collection::vec(any::<u8>(), 0..300), extra in 0usize..40) {
            pyo3::prepare_freethreaded_python();
            Python::with_gil(|py| {
                let bytes = written_bytes(py, data.len() + extra, |room| {
                    room[..data.len()].write_copy_of_slice(&data);
                    data.len()
                }).expect("made");
                let mut expected = data.clone();
                expected.resize(data.len() + extra, 0);
                prop_assert_eq!(bytes.as_bytes(), &expected[..]);
                Ok(())
            })?;
        }
    }

    proptest! {
        #[test]
        fn packed_words_are_the_values_little_endian(values in prop::collection::vec(any::<i64>(), 0..40),
                                                      short in 0usize..3) {
            pyo3::prepare_freethreaded_python();
            Python::with_gil(|py| {
                let expected: Vec<u8> = values.iter().flat_map(|value| value.to_le_bytes()).collect();
                let packed = packed_i64s(py, &values).expect("made");
                prop_assert_eq!(packed.as_bytes(), &expected[..]);
                // (fewer words than counted: the rest zeros)
                let taken = values.len().saturating_sub(short);
                let bytes = packed_words(py, values.len(), values[..taken].iter().map(|value| value.to_le_bytes()))
                    .expect("made");
                let mut padded = expected[..taken * 8].to_vec();
                padded.resize(values.len() * 8, 0);
                prop_assert_eq!(bytes.as_bytes(), &padded[..]);
                Ok(())
            })?;
        }
    }

    #[test]
    fn a_panic_while_writing_is_an_error() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            let made = written_bytes(py, 8, |_| panic!("no"));
            assert!(made.is_err());
        });
    }

    #[test]
    fn a_buffer_dropped_unfinished_is_freed() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            let mut growing = GrowingBytes::new(py);
            growing.append(3, |room| room.copy_from_slice(b"abc"));
            drop(growing);
            assert_eq!(GrowingBytes::new(py).finish().as_bytes(), b"");
        });
    }
}
