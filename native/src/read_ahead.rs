//! Whole files read in order by a thread of their own, a bounded number of
//! bytes ahead of the one who takes them (`transforms/page_cache.py`'s
//! `read_files_once`: an image build's images).
//!
//! Reading a file costs its reader the system calls, the copy out of the
//! page cache and, for a file not cached, the wait for the disk. Done here,
//! without Python's lock, that work runs on another core while the caller
//! checks the file before. A Python thread could not: it would need the
//! interpreter's lock between each call, which a converting thread holds.
//!
//! As `page_cache.read_files_once` does without it, the thread opens a
//! window of files ahead and advises the kernel to read them
//! (POSIX_FADV_WILLNEED), so that their reads reach the disk together.
//! What a file gives is what `page_cache._read_and_drop` gives: its bytes
//! (to the end, however its size changed), then advice to drop it from
//! the page cache. A file that cannot be opened, or is not a regular file
//! (a named pipe is not waited for), is `Left` to the caller's own read,
//! which raises as it would have; a read that fails gives its `errno`.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// What reading one file gave.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Read(Vec<u8>),
    /// Not opened ahead (cannot be opened, or not a regular file).
    Left,
    /// The read failed with this errno.
    Failed(i32),
}

/// The files read and not yet taken, in order, and what they hold.
#[derive(Default)]
struct Queue {
    ready: VecDeque<(usize, Outcome)>,
    held_bytes: usize,
    done: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
    stop: AtomicBool,
}

/// Reads `paths` in order on a thread, at most `budget` bytes of files
/// read ahead and not taken (a file larger than that is read alone), with
/// at most `window` files opened and advised ahead of the one it reads.
pub struct ReadAhead {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    pub fn start(paths: Vec<PathBuf>, budget: usize, window: usize) -> io::Result<ReadAhead> {
        let shared = Arc::new(Shared { queue: Mutex::default(), changed: Condvar::new(),
                                       stop: AtomicBool::new(false) });
        let reader = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || read_all(&reader, paths, budget, window.max(1)))?;
        Ok(ReadAhead { shared, thread: Some(thread) })
    }

    /// The outcome of the file at `index`; outcomes of files before it not
    /// taken are dropped. None past the last file, or for an index taken or
    /// passed before.
    pub fn take(&self, index: usize) -> Option<Outcome> {
        let mut queue = lock(&self.shared.queue);
        loop {
            while let Some((at, _)) = queue.ready.front() {
                if *at > index {
                    return None;
                }
                let (at, outcome) = queue.ready.pop_front().expect("front was just seen");
                if let Outcome::Read(bytes) = &outcome {
                    queue.held_bytes -= bytes.len();
                }
                self.shared.changed.notify_all();
                if at == index {
                    return Some(outcome);
                }
            }
            if queue.done {
                return None;
            }
            queue = self.shared.changed.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A poisoned lock only means a panic elsewhere; the queue is still whole.
fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read_all(shared: &Shared, paths: Vec<PathBuf>, budget: usize, window_files: usize) {
    // Files opened and advised (POSIX_FADV_WILLNEED) ahead, so that their
    // reads reach the disk together: `page_cache._open_ahead`'s window.
    let mut window: VecDeque<Option<(File, u64)>> = VecDeque::new();
    let mut window_bytes = 0usize;
    let mut next_open = 0usize;
    for index in 0..paths.len() {
        {
            // Wait for room: nothing held, or less than the budget.
            let mut queue = lock(&shared.queue);
            while queue.held_bytes > 0 && queue.held_bytes >= budget && !shared.stop.load(Ordering::Relaxed) {
                queue = shared.changed.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        }
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        while window.len() < window_files && next_open < paths.len()
            && (window.is_empty() || window_bytes < budget) {
            let opened = open_advised(&paths[next_open]);
            window_bytes = window_bytes.saturating_add(opened.as_ref().map_or(0, |(_, size)| *size as usize));
            window.push_back(opened);
            next_open += 1;
        }
        let outcome = match window.pop_front().flatten() {
            Some((file, size)) => {
                window_bytes = window_bytes.saturating_sub(size as usize);
                read_opened(file, size)
            }
            None => Outcome::Left,
        };
        let mut queue = lock(&shared.queue);
        if let Outcome::Read(bytes) = &outcome {
            queue.held_bytes += bytes.len();
        }
        queue.ready.push_back((index, outcome));
        shared.changed.notify_all();
    }
    lock(&shared.queue).done = true;
    shared.changed.notify_all();
}

/// A regular file at `path`, opened and advised to be read soon, and its
/// size; None for one that cannot be opened or is not regular.
fn open_advised(path: &Path) -> Option<(File, u64)> {
    use std::os::fd::AsRawFd;
    // Non-blocking: a named pipe is not waited for at its open.
    let file = OpenOptions::new().read(true).custom_flags(libc_nonblock()).open(path).ok()?;
    let size = match file.metadata() {
        Ok(meta) if meta.file_type().is_file() => meta.len(),
        _ => return None,
    };
    // SAFETY: fcntl and posix_fadvise read no memory of ours.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
    }
    Some((file, size))
}

fn read_opened(file: File, size: u64) -> Outcome {
    match read_to_end(&file, size) {
        Ok(bytes) => {
            drop_from_cache(&file);
            Outcome::Read(bytes)
        }
        Err(error) => Outcome::Failed(error.raw_os_error().unwrap_or(0)),
    }
}

/// The file's bytes to its end; `size` only guesses the room (an
/// allocation no larger than the file the system reported, plus one byte
/// to see the end without growing).
fn read_to_end(mut file: &File, size: u64) -> io::Result<Vec<u8>> {
    let room = usize::try_from(size).unwrap_or(usize::MAX).saturating_add(1);
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(room).map_err(|_| io::Error::from_raw_os_error(12))?; // ENOMEM
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn libc_nonblock() -> i32 {
    libc::O_NONBLOCK | libc::O_CLOEXEC
}

/// Advice only, as `page_cache._drop`: the bytes were read once.
fn drop_from_cache(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise reads no memory of ours; a bad descriptor is an error code.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// `ReadAhead` for Python (`page_cache.read_files_once`, with its
/// `READ_AHEAD_BYTES` and `READ_AHEAD_FILES`): `take(index)`
/// gives the file's bytes, its read's errno (int), or None (left to the
/// caller's own read); `close()` stops the thread and waits for it.
#[pyo3::pyclass(module = "recordforge._native", name = "FileReadAhead")]
pub struct PyFileReadAhead {
    ahead: Option<ReadAhead>,
}

#[pyo3::pymethods]
impl PyFileReadAhead {
    #[new]
    fn new(paths: Vec<PathBuf>, budget: usize, window: usize) -> pyo3::PyResult<Self> {
        Ok(PyFileReadAhead { ahead: Some(ReadAhead::start(paths, budget, window)?) })
    }

    fn take(&self, py: pyo3::Python<'_>, index: usize) -> pyo3::PyResult<pyo3::PyObject> {
        use pyo3::IntoPyObjectExt;
        let Some(ahead) = &self.ahead else { return Ok(py.None()) };
        match py.allow_threads(|| ahead.take(index)) {
            Some(Outcome::Read(bytes)) => pyo3::types::PyBytes::new(py, &bytes).into_py_any(py),
            Some(Outcome::Failed(errno)) => errno.into_py_any(py),
            Some(Outcome::Left) | None => Ok(py.None()),
        }
    }

    fn close(&mut self, py: pyo3::Python<'_>) {
        if let Some(ahead) = self.ahead.take() {
            py.allow_threads(|| drop(ahead));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn files(sizes: &[usize]) -> (tempdir::Dir, Vec<PathBuf>) {
        let dir = tempdir::Dir::new();
        let paths = sizes.iter().enumerate().map(|(i, &size)| {
            let path = dir.path.join(format!("f{i}"));
            std::fs::write(&path, (0..size).map(|b| (b * 7 + i) as u8).collect::<Vec<u8>>()).unwrap();
            path
        }).collect();
        (dir, paths)
    }

    mod tempdir {
        pub struct Dir { pub path: std::path::PathBuf }
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                let path = std::env::temp_dir().join(format!(
                    "read-ahead-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
                std::fs::create_dir_all(&path).unwrap();
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) { let _ = std::fs::remove_dir_all(&self.path); }
        }
    }

    proptest! {
        /// Every file taken gives its bytes, whichever files are skipped
        /// and however small the budget.
        #[test]
        fn taken_files_give_their_bytes(sizes in prop::collection::vec(0usize..5000, 0..12),
                                        skip in prop::collection::vec(any::<bool>(), 12),
                                        budget in 0usize..20000, window in 0usize..20) {
            let (_dir, paths) = files(&sizes);
            let ahead = ReadAhead::start(paths.clone(), budget, window).unwrap();
            for (index, path) in paths.iter().enumerate() {
                if skip[index] {
                    continue;
                }
                prop_assert_eq!(ahead.take(index), Some(Outcome::Read(std::fs::read(path).unwrap())));
            }
            prop_assert_eq!(ahead.take(paths.len()), None);
        }
    }

    #[test]
    fn files_that_cannot_be_read_ahead_are_left_to_the_caller() {
        let (dir, mut paths) = files(&[3]);
        paths.push(dir.path.join("missing"));
        paths.push(dir.path.clone()); // a directory
        let ahead = ReadAhead::start(paths, 1 << 20, 16).unwrap();
        assert!(matches!(ahead.take(0), Some(Outcome::Read(bytes)) if bytes.len() == 3));
        assert_eq!(ahead.take(1), Some(Outcome::Left));
        assert_eq!(ahead.take(2), Some(Outcome::Left));
        assert_eq!(ahead.take(3), None);
    }

    #[test]
    fn an_index_taken_or_passed_gives_none() {
        let (_dir, paths) = files(&[1, 2, 3]);
        let ahead = ReadAhead::start(paths, 1 << 20, 16).unwrap();
        assert!(ahead.take(1).is_some());
        assert_eq!(ahead.take(0), None);
        assert_eq!(ahead.take(1), None);
        assert!(ahead.take(2).is_some());
    }

    #[test]
    fn dropping_it_early_stops_the_thread() {
        let (_dir, paths) = files(&[10_000; 50]);
        let ahead = ReadAhead::start(paths, 1, 16).unwrap();
        assert!(ahead.take(0).is_some());
        drop(ahead); // joins: the thread waits for room, sees the stop
    }

    #[test]
    fn the_thread_holds_at_most_the_budget_or_one_file() {
        let (_dir, paths) = files(&[1000; 20]);
        let ahead = ReadAhead::start(paths, 2500, 16).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let held = lock(&ahead.shared.queue).held_bytes;
        assert!(held <= 3000, "held {held}");
        assert!(lock(&ahead.shared.queue).ready.len() <= 3);
    }
}
