//! Counting the newlines and double quotes of a byte range: what the
//! split-point scan (`readers/ranges.py` `_iter_boundaries`: a CSV record
//! boundary is a newline after an even number of quotes) and the line
//! reader's line numbers (`iter_line_blocks`) need, at memory speed; and
//! whether a block holds a CR outside a CRLF (`readers/csv.py`: such a
//! block is read record by record). Python's `bytes.count` tests a byte at
//! a time (~3 GB/s, a two-byte needle slower) and is called once per
//! needle; these make one pass, many bytes per step.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

/// Bytes compared per step: one vector register's worth or two, which the
/// compiler turns the lane loop below into.
const LANES: usize = 32;
/// Steps counted in one-byte lanes before they are added up: a lane gains
/// at most one per step, so 255 steps cannot overflow it.
const STEPS: usize = 255;

/// ``(newlines, quotes)``: how many ``\n`` and ``"`` bytes `bytes` holds.
pub fn newlines_and_quotes(bytes: &[u8]) -> (u64, u64) {
    let (mut newlines, mut quotes) = (0u64, 0u64);
    let mut chunks = bytes.chunks_exact(LANES * STEPS);
    for chunk in &mut chunks {
        let (mut lane_newlines, mut lane_quotes) = ([0u8; LANES], [0u8; LANES]);
        for step in chunk.chunks_exact(LANES) {
            for lane in 0..LANES {
                lane_newlines[lane] += (step[lane] == b'\n') as u8;
                lane_quotes[lane] += (step[lane] == b'"') as u8;
            }
        }
        newlines += lane_newlines.iter().map(|&count| count as u64).sum::<u64>();
        quotes += lane_quotes.iter().map(|&count| count as u64).sum::<u64>();
    }
    for &byte in chunks.remainder() {
        newlines += (byte == b'\n') as u64;
        quotes += (byte == b'"') as u64;
    }
    (newlines, quotes)
}

/// Bytes tested per early exit of `lone_carriage_return`: a block with
/// one stops being read soon after it.
const WINDOW: usize = 4096;

/// True when a CR in `bytes` is not the first byte of a CRLF (the last
/// byte a CR included): ``bytes.count(b"\r") != bytes.count(b"\r\n")``.
pub fn lone_carriage_return(bytes: &[u8]) -> bool {
    if bytes.last() == Some(&b'\r') {
        return true;
    }
    // Every byte but the last beside the one after it, a window at a
    // time, or-ed without a branch per byte.
    let heads = &bytes[..bytes.len().saturating_sub(1)];
    let nexts = bytes.get(1..).unwrap_or(&[]);
    heads.chunks(WINDOW).zip(nexts.chunks(WINDOW)).any(|(heads, nexts)| {
        heads.iter().zip(nexts).fold(0u8, |lone, (&byte, &next)| {
            lone | ((byte == b'\r') & (next != b'\n')) as u8
        }) != 0
    })
}

/// ``bytes[start:end]`` as Python slices it with non-negative bounds: each
/// bound clamped to the length, an end before the start giving nothing.
pub fn clamped(bytes: &[u8], start: usize, end: usize) -> &[u8] {
    let end = end.min(bytes.len());
    &bytes[start.min(end)..end]
}

/// `count_newlines_quotes(buffer, start, end) -> (newlines, quotes)`: the
/// ``\n`` and ``"`` bytes in ``buffer[start:end]`` (any contiguous buffer:
/// bytes, or the bytearray a scan reads into), as
/// ``(buffer.count(b"\n", start, end), buffer.count(b'"', start, end))``.
#[pyfunction(name = "count_newlines_quotes")]
pub fn py_count_newlines_quotes(py: Python<'_>, buffer: PyBuffer<u8>, start: usize, end: usize)
                                -> PyResult<(u64, u64)> {
    crate::with_bytes(py, &buffer, |bytes| {
        crate::guarded(|| newlines_and_quotes(clamped(bytes, start, end)))
    })?
}

/// `lone_carriage_return(buffer) -> bool`: whether a CR of `buffer` (any
/// contiguous buffer) is not followed by LF, as
/// ``buffer.count(b"\r") != buffer.count(b"\r\n")``.
#[pyfunction(name = "lone_carriage_return")]
pub fn py_lone_carriage_return(py: Python<'_>, buffer: PyBuffer<u8>) -> PyResult<bool> {
    crate::with_bytes(py, &buffer, |bytes| crate::guarded(|| lone_carriage_return(bytes)))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(bytes: &[u8]) -> (u64, u64) {
        (bytes.iter().filter(|&&byte| byte == b'\n').count() as u64,
         bytes.iter().filter(|&&byte| byte == b'"').count() as u64)
    }

    #[test]
    fn counts_across_chunk_edges() {
        // Every byte a newline or a quote: each lane's count reaches its
        // limit in every chunk, and the remainder is counted too.
        for size in [0, 1, LANES - 1, LANES, LANES * STEPS - 1, LANES * STEPS,
                     LANES * STEPS + 1, 3 * LANES * STEPS + 17] {
            let newlines = vec![b'\n'; size];
            assert_eq!(newlines_and_quotes(&newlines), (size as u64, 0));
            let quotes = vec![b'"'; size];
            assert_eq!(newlines_and_quotes(&quotes), (0, size as u64));
        }
    }

    #[test]
    fn clamps_as_python_slices() {
        let bytes = b"a\n\"b\n";
        assert_eq!(clamped(bytes, 0, 99), bytes);
        assert_eq!(clamped(bytes, 4, 2), b"");
        assert_eq!(clamped(bytes, 99, 100), b"");
        assert_eq!(clamped(bytes, 1, 3), b"\n\"");
    }

    fn lone_reference(bytes: &[u8]) -> bool {
        let crs = bytes.iter().filter(|&&byte| byte == b'\r').count();
        crs != bytes.windows(2).filter(|pair| pair == b"\r\n").count()
    }

    #[test]
    fn lone_carriage_returns_at_the_edges() {
        assert!(!lone_carriage_return(b""));
        assert!(lone_carriage_return(b"\r"));
        assert!(!lone_carriage_return(b"\r\n"));
        assert!(lone_carriage_return(b"a\r\n\r"));
        // A CR at the last byte of a window, its LF the next window's first.
        let mut crlf = vec![b'a'; WINDOW + 8];
        crlf[WINDOW - 1] = b'\r';
        crlf[WINDOW] = b'\n';
        assert!(!lone_carriage_return(&crlf));
        crlf[WINDOW] = b'x';
        assert!(lone_carriage_return(&crlf));
    }

    proptest! {
        #[test]
        fn lone_carriage_return_equals_the_counts(
            bytes in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'\r'), any::<u8>()], 0..10_000),
        ) {
            prop_assert_eq!(lone_carriage_return(&bytes), lone_reference(&bytes));
        }

        #[test]
        fn equals_a_byte_at_a_time(
            bytes in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'"'), Just(b'\r'), any::<u8>()], 0..40_000),
            start in 0usize..50_000, end in 0usize..50_000,
        ) {
            let slice = clamped(&bytes, start, end);
            prop_assert_eq!(newlines_and_quotes(slice), reference(slice));
        }
    }
}
