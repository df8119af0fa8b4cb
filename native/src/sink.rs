//! Where a run's bytes go, a block at a time (`run::write_run`): a `Sink`
//! takes each block, either filled in a buffer it hands out (`put`) or as
//! pieces that lie elsewhere (`put_pieces`); `FillSink` is a sink of a
//! function, and `run_sink::DescriptorSink` one that writes straight to a
//! file descriptor.

use crate::PREFETCH_AHEAD;

/// Where a run's bytes go, a block at a time.
pub trait Sink<E> {
    /// Makes a buffer of `length` bytes, lets `fill` write it whole, and
    /// writes it out.
    fn put(&mut self, length: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), E>;

    /// Writes `pieces` back to back: copied into one buffer (`put`), unless
    /// the sink can write them where they lie (`run_sink`'s `writev`).
    fn put_pieces(&mut self, pieces: &[&[u8]]) -> Result<(), E> {
        let length = pieces.iter().map(|piece| piece.len()).sum();
        self.put(length, &mut |out| copy_pieces(out, pieces))
    }
}

/// A `Sink` of a function `(length, fill)`, as `Sink::put`.
pub struct FillSink<F>(pub F);

impl<E, F: FnMut(usize, &mut dyn FnMut(&mut [u8])) -> Result<(), E>> Sink<E> for FillSink<F> {
    fn put(&mut self, length: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), E> {
        (self.0)(length, fill)
    }
}

/// Copies `pieces` back to back into `out`, which holds exactly their bytes.
pub fn copy_pieces(out: &mut [u8], pieces: &[&[u8]]) {
    let mut at = 0;
    for (index, piece) in pieces.iter().enumerate() {
        if let Some(ahead) = pieces.get(index + PREFETCH_AHEAD) {
            crate::prefetch(ahead.as_ptr());
        }
        out[at..at + piece.len()].copy_from_slice(piece);
        at += piece.len();
    }
}
