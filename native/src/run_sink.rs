//! Where `run::py_write_run` puts a run written to a local file: straight
//! into its file descriptor (no bytes object per block, no Python call),
//! one buffer reused for every block (large framed records, images, are
//! written from where they lie by `writev`), keeping the CRC32C and size of what
//! it writes, and, asked to, handing the written bytes to the disk a
//! window at a time and dropping each window from the page cache once the
//! disk has it, as `transforms/page_cache.py`'s `WriteBehind` does with
//! what Python writes.
//!
//! A run is read back once, soon, by the shard step (a cached one by later
//! builds too, from the disk). Written through the cache it grows the
//! cache by its whole size, in pages the system has not used for a while,
//! and copying into those cost several times copying into pages just
//! dropped (on a virtual machine the host must back them first): on a
//! 3.8M-row build the run writes' `write` calls cost about 2.6 times a
//! byte what the shard writer's did, whose pages are dropped behind.

use std::fs::File;
use std::io::{ErrorKind, IoSlice, Seek, Write};
use std::mem::ManuallyDrop;
use std::ops::Range;

use crate::sink::{copy_pieces, Sink};
use crate::walk::crc32c_append;

/// A run's bytes written to a file descriptor, their size and, when asked
/// (a build cache's piece, which records it), their CRC32C continued from
/// the one given: a spill run is read back by this build only, through the
/// records' own CRCs and the run's checks, so it is not computed for one.
pub struct DescriptorSink {
    file: ManuallyDrop<File>,
    buffer: Vec<u8>,
    behind: Option<Behind>,
    pub crc: Option<u32>,
    pub size: u64,
}

impl DescriptorSink {
    /// A sink writing at `fd`'s offset, keeping the CRC32C from `crc`
    /// (None: none kept); `drop_behind` > 0: the window of the page cache
    /// advice (0: none).
    ///
    /// # Safety
    /// `fd` must stay open, owned by the caller, while the sink lives: the
    /// sink only writes to it and never closes it (a descriptor that is not
    /// open fails the first write, EBADF).
    pub unsafe fn new(fd: i32, crc: Option<u32>, drop_behind: u64) -> Self {
        use std::os::fd::FromRawFd;
        let file = ManuallyDrop::new(File::from_raw_fd(fd));
        let behind = Behind::new(&file, fd, drop_behind);
        DescriptorSink { file, buffer: Vec::new(), behind, crc, size: 0 }
    }

    /// Writes the pieces of one `put_pieces` where they lie, by `writev`
    /// (at most `IOV_MAX` pieces a call), taking short writes and
    /// interruptions as `write_all` does.
    fn write_pieces(&mut self, pieces: &[&[u8]]) -> std::io::Result<()> {
        for group in pieces.chunks(IOV_MAX) {
            let mut slices: Vec<IoSlice> = group.iter().map(|piece| IoSlice::new(piece)).collect();
            let mut left = &mut slices[..];
            IoSlice::advance_slices(&mut left, 0); // past empty pieces
            while !left.is_empty() {
                match self.file.write_vectored(left) {
                    Ok(0) => return Err(ErrorKind::WriteZero.into()),
                    Ok(written) => IoSlice::advance_slices(&mut left, written),
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(())
    }

    /// Counts `length` bytes written, giving the page cache advice due.
    fn wrote(&mut self, length: usize) {
        self.size += length as u64;
        if let Some(behind) = &mut self.behind {
            if let Some(ranges) = behind.wrote(length as u64) {
                advise(behind.fd, ranges);
            }
        }
    }

    /// Hands the bytes not handed yet to the disk (after the last block).
    pub fn finish(&mut self) {
        if let Some(behind) = &mut self.behind {
            advise(behind.fd, behind.hand_to_disk());
        }
    }
}

impl Sink<std::io::Error> for DescriptorSink {
    /// Writes `length` bytes that `fill` writes whole: one buffer for
    /// every block, grown (zeroed) only past its largest yet.
    fn put(&mut self, length: usize, fill: &mut dyn FnMut(&mut [u8])) -> std::io::Result<()> {
        if self.buffer.len() < length {
            self.buffer.resize(length, 0);
        }
        let out = &mut self.buffer[..length];
        fill(out);
        if let Some(crc) = &mut self.crc {
            *crc = crc32c_append(*crc, out);
        }
        self.file.write_all(out)?;
        self.wrote(length);
        Ok(())
    }

    /// Writes large pieces (framed images) where they lie, by `writev`:
    /// copying them into the block buffer first cost as much again as
    /// their copy into the page cache. Small ones (table rows) are copied
    /// into one buffer, one `write`: a piece of `writev` costs the kernel
    /// more than copying a small one.
    fn put_pieces(&mut self, pieces: &[&[u8]]) -> std::io::Result<()> {
        let length: usize = pieces.iter().map(|piece| piece.len()).sum();
        if length < IN_PLACE_FROM * pieces.len() {
            return self.put(length, &mut |out| copy_pieces(out, pieces));
        }
        if let Some(crc) = &mut self.crc {
            *crc = pieces.iter().fold(*crc, |crc, piece| crc32c_append(crc, piece));
        }
        self.write_pieces(pieces)?;
        self.wrote(length);
        Ok(())
    }
}

/// Pieces of at least this many bytes on average are written where they
/// lie (`put_pieces`).
const IN_PLACE_FROM: usize = 4096;
/// At most this many pieces a `writev` (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

/// `WriteBehind`'s advice for the bytes a sink writes, file offsets:
/// [dropped, handed) handed to the disk, [handed, written) not yet.
struct Behind {
    fd: i32,
    window: u64,
    written: u64,
    handed: u64,
    dropped: u64,
}

impl Behind {
    /// None for a window of 0, or a descriptor without an offset (a pipe:
    /// no page cache to advise).
    fn new(file: &File, fd: i32, window: u64) -> Option<Self> {
        if window == 0 {
            return None;
        }
        let mut file = file;
        let start = file.stream_position().ok()?;
        Some(Behind { fd, window, written: start, handed: start, dropped: start })
    }

    /// Counts `length` bytes written; the ranges to advise once a window
    /// of them is not handed yet (`hand_to_disk`).
    fn wrote(&mut self, length: u64) -> Option<[Range<u64>; 2]> {
        self.written += length;
        (self.written - self.handed >= self.window).then(|| self.hand_to_disk())
    }

    /// The bytes to hand to the disk (those not handed yet) and to drop
    /// from the cache (those handed the time before).
    fn hand_to_disk(&mut self) -> [Range<u64>; 2] {
        let ranges = [self.handed..self.written, self.dropped..self.handed];
        (self.dropped, self.handed) = (self.handed, self.written);
        ranges
    }
}

/// POSIX_FADV_DONTNEED for each range: it starts the writeback of dirty
/// pages and drops clean ones, so the new window goes to the disk and the
/// one before it (on disk by now, unless the disk is slower than the
/// writer) leaves the cache; pages still being written stay cached, as
/// without advice. An empty range is skipped (a length of 0 would mean
/// the rest of the file). Advice only: a file system that takes none (an
/// error) changes nothing written, so the error is not reported.
#[cfg(target_os = "linux")]
fn advise(fd: i32, ranges: [Range<u64>; 2]) {
    for range in ranges.into_iter().filter(|range| !range.is_empty()) {
        // SAFETY: posix_fadvise reads no memory of ours; a bad descriptor is an error code.
        unsafe {
            libc::posix_fadvise(fd, range.start as libc::off_t, (range.end - range.start) as libc::off_t,
                                libc::POSIX_FADV_DONTNEED)
        };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_fd: i32, _ranges: [Range<u64>; 2]) {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// Writes `blocks` (each a block of its length) through a sink, after
    /// `before` bytes written to the file; the file's bytes and the sink's size and CRC.
    fn through_sink(file: &mut File, before: usize, blocks: &[usize], window: u64, crc: Option<u32>) -> (u64, Option<u32>) {
        file.write_all(&vec![9u8; before]).unwrap();
        // SAFETY: `file` owns the descriptor and outlives the sink.
        let mut sink = unsafe { DescriptorSink::new(file.as_raw_fd(), crc, window) };
        for (number, length) in blocks.iter().enumerate() {
            sink.put(*length, &mut |out| out.fill(number as u8)).unwrap();
        }
        sink.finish();
        (sink.size, sink.crc)
    }

    fn expected(blocks: &[usize]) -> Vec<u8> {
        blocks.iter().enumerate().flat_map(|(number, length)| vec![number as u8; *length]).collect()
    }

    fn temporary(name: &str) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("run_sink-{}-{name}", std::process::id()));
        let file = File::options().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        (path, file)
    }

    #[test]
    fn a_pipe_takes_no_advice_and_every_byte() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let mut writer = File::from(std::os::fd::OwnedFd::from(writer));
        // SAFETY: `writer` owns the descriptor and outlives the sink.
        assert!(unsafe { DescriptorSink::new(writer.as_raw_fd(), Some(0), 4) }.behind.is_none());
        let (size, crc) = through_sink(&mut writer, 0, &[3, 0, 7, 2], 4, Some(0));
        drop(writer);
        let mut read = Vec::new();
        reader.read_to_end(&mut read).unwrap();
        assert_eq!(read, expected(&[3, 0, 7, 2]));
        assert_eq!((size, crc), (12, Some(crc32c::crc32c(&read))));
    }

    proptest! {
        #[test]
        fn the_advice_never_changes_the_bytes(
            blocks in proptest::collection::vec(0usize..5000, 0..12), before in 0usize..100,
            window in 0u64..9000, start in proptest::option::of(any::<u32>())) {
            let (path, mut file) = temporary("bytes");
            let (size, crc) = through_sink(&mut file, before, &blocks, window, start);
            let written = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            let run = expected(&blocks);
            prop_assert_eq!(&written[before..], &run[..]);
            // The CRC32C only when asked, continued from the one given.
            prop_assert_eq!((size, crc), (run.len() as u64, start.map(|start| crc32c::crc32c_append(start, &run))));
        }

        #[test]
        fn pieces_written_where_they_lie_are_the_pieces_joined(
            pieces in proptest::collection::vec((0usize..12000, any::<u8>()), 0..12), before in 0usize..100,
            window in 0u64..30000, start in proptest::option::of(any::<u32>()), small in 0usize..8) {
            // Pieces of every size, with some small ones after (a block of
            // them below `IN_PLACE_FROM` on average is copied instead).
            let mut pieces: Vec<Vec<u8>> = pieces.iter().map(|(length, byte)| vec![*byte; *length]).collect();
            pieces.extend((0..small).map(|length| vec![length as u8; length]));
            let slices: Vec<&[u8]> = pieces.iter().map(|piece| piece.as_slice()).collect();
            let (path, mut file) = temporary("pieces");
            file.write_all(&vec![9u8; before]).unwrap();
            // SAFETY: `file` owns the descriptor and outlives the sink.
            let mut sink = unsafe { DescriptorSink::new(file.as_raw_fd(), start, window) };
            sink.put_pieces(&slices).unwrap();
            sink.put_pieces(&slices[slices.len() / 2..]).unwrap();
            sink.finish();
            let written = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            let run: Vec<u8> = [slices.concat(), slices[slices.len() / 2..].concat()].concat();
            prop_assert_eq!(&written[before..], &run[..]);
            prop_assert_eq!((sink.size, sink.crc), (run.len() as u64, start.map(|start| crc32c::crc32c_append(start, &run))));
        }

        #[test]
        fn every_byte_is_handed_once_in_order_and_dropped_a_window_behind(
            lengths in proptest::collection::vec(0u64..100, 0..40), start in 0u64..50, window in 1u64..150) {
            let mut behind = Behind { fd: -1, window, written: start, handed: start, dropped: start };
            let (mut handed, mut dropped) = (start, start);
            let mut advised = Vec::new();
            for length in &lengths {
                advised.extend(behind.wrote(*length));
                prop_assert!(behind.written - behind.handed < window);
            }
            advised.push(behind.hand_to_disk());
            for [hand, drop] in advised {
                prop_assert_eq!(hand.start, handed);
                prop_assert_eq!(drop.start, dropped);
                prop_assert_eq!(drop.end, hand.start);
                (handed, dropped) = (hand.end, drop.end);
            }
            prop_assert_eq!(handed, start + lengths.iter().sum::<u64>());
        }
    }
}
