//! A bytes object written as a `Vec<u8>` is, for a buffer whose size is
//! known only once it is written (a table kernel's framed Examples,
//! `py_rows::FramedRows`): grown as needed and cut to what was written
//! when done, so that Python gets the object the bytes were written into
//! rather than a copy of them.

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
                }
                let bytes = growing.finish();
                prop_assert_eq!(bytes.as_bytes(), &plain[..]);
                Ok(())
            })?;
        }
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
