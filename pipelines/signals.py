"""Stopping a build on SIGINT or SIGTERM: workers stopped, nothing published, a clear exit status.

A scheduler stops a job with SIGTERM, a person with Ctrl-C (SIGINT, which
the terminal also sends to Beam's worker processes). Inside `interruptible`
both are handled alike: the handler stops this process's worker processes
(SIGTERM, then SIGKILL after `WORKER_GRACE` seconds) so nothing writes into
the staging directory any more, and raises `Interrupted` (a
KeyboardInterrupt) in the main thread; the build's cleanup deletes the
staging directory and the command exits ``128 + signal`` (130, 143) saying
nothing was published. A runner that reports its workers' deaths as a
pipeline failure before the handler's exception arrives is told apart by
`received`. The runner's threads that fail because their workers died of
the signal, and its log lines about them, print nothing (`_thread_error`
tells them apart by the signal's arrival, which the kernel reports through
the wakeup pipe before the main thread runs its handler).

Inside `deferred` (the commit and the LATEST update) a signal is only
recorded: the few renames finish, and the build reports what it published.
Inside `held` (the staging directory's creation, until the build guards
it) a signal waits the same way and is raised when the block ends, so the
build's clean-up always knows the directory it must delete.

Before any of that, `install_first` (called by the command line as its
first statement) covers the seconds spent importing Beam: a signal inside
`commanding` raises `Interrupted` for the command to report; one outside
it (the command is not running yet, or has returned) exits at once with
``128 + signal`` and one line, as nothing has been written yet.

A handler's `Interrupted` lands wherever the main thread is, and where
Python cannot pass an exception on (a weakref callback, such as the import
system's module-lock clean-up, a ``__del__``) Python ignores it and prints
its traceback: the signal would be lost and the build would publish. From
`install_first` on, such an `Interrupted` prints nothing and is kept
(`_unraisable`), and the command raises it again at its next check point
(`raise_swallowed`): when the build's handling starts (`interruptible`),
before the commit (`publish.finalizing`), and when a command returns
(`cli`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["WORKER_GRACE", "Interrupted", "commanding", "deferred", "held", "install_first",
           "interruptible", "raise_swallowed", "received", "stop_workers"]

WORKER_GRACE = 5.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The build was stopped by `signum`; `exit_status` is 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class _State:
    def __init__(self):
        self.received: int | None = None
        self.arrivals = 0  # signals `_handle` took, for `held`
        self.arrived = False
        self.deferring = 0
        self.quieted = False
        self.wakeup: int | None = None
        self.excepthook = None
        self.commanding = 0
        self.first: dict | None = None  # the handlers `install_first` replaced
        self.unraisablehook = None  # the hook `install_first` replaced
        self.swallowed: int | None = None  # an Interrupted Python ignored: its signal


_state = _State()


def _descendants(pid: int) -> list[int]:
    """The processes descended from `pid` (Linux /proc), children first."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(parent, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in parents.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def stop_workers(grace: float = WORKER_GRACE) -> None:
    """Sends SIGTERM to every process descended from this one (Beam's
    worker processes and theirs), reaps them, and SIGKILLs what is left
    after `grace` seconds."""
    workers = _descendants(os.getpid())
    for pid in workers:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while True:
        for pid in workers:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap our own children
            except OSError:
                pass
        workers = [pid for pid in workers if _alive(pid)]
        if not workers or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def _signal_arrived() -> bool:
    """Whether a signal reached this process during the block, even if the
    main thread has not run its handler yet (the C-level handler writes its
    number to the wakeup pipe at once)."""
    if _state.received is not None or _state.arrived:
        return True
    if _state.wakeup is not None:
        try:
            _state.arrived = bool(os.read(_state.wakeup, 64))
        except (BlockingIOError, OSError):
            pass
    return _state.arrived


def _thread_error(args) -> None:
    """A runner thread that fails because its workers died of the signal
    (Ctrl-C reaches them too, maybe before this process's handler runs):
    the build's outcome is decided, its traceback says nothing. Any other
    thread error goes to the previous hook."""
    deadline = time.monotonic() + 0.5
    while not _signal_arrived() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not _signal_arrived() and _state.excepthook is not None:
        _state.excepthook(args)


def _quiet() -> None:
    """After a signal the runner's loggers report the workers' deaths
    (tracebacks on stderr); the build reports the interruption itself, once."""
    if not _state.quieted:
        _state.quieted = True
        logging.disable(logging.CRITICAL)


def _handle(signum: int, frame) -> None:
    first = _state.received is None
    _state.received = signum
    _state.arrivals += 1
    if _state.deferring:
        return
    if first:
        _quiet()
        stop_workers()
    raise Interrupted(signum)


def _unraisable(unraisable) -> None:
    """`sys.unraisablehook` from `install_first` on: an `Interrupted` that
    Python ignored is kept for `raise_swallowed`, silently; anything else
    goes to the hook in place before."""
    if isinstance(unraisable.exc_value, Interrupted):
        _state.swallowed = unraisable.exc_value.signum
        return
    (_state.unraisablehook or sys.__unraisablehook__)(unraisable)


def raise_swallowed() -> None:
    """Raises, once, the `Interrupted` that Python ignored where a handler
    raised it (see the module docstring); nothing inside `deferred`, whose
    signals wait by design."""
    signum = _state.swallowed
    if signum is not None and not _state.deferring:
        _state.swallowed = None
        raise Interrupted(signum)


def _handle_first(signum: int, frame) -> None:
    if _state.commanding:
        raise Interrupted(signum)
    # Outside the command there is nothing to clean up and no code that could
    # report an exception without a traceback.
    os.write(2, b"recordforge: interrupted\n")
    os._exit(128 + signum)


def install_first() -> None:
    """Handles SIGINT and SIGTERM from now on (main thread only), so that a
    signal while the command starts prints one line, not a traceback."""
    if threading.current_thread() is not threading.main_thread() or _state.first is not None:
        return
    _state.first = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    for signum in _SIGNALS:
        signal.signal(signum, _handle_first)
    if sys.unraisablehook is not _unraisable:
        _state.unraisablehook, sys.unraisablehook = sys.unraisablehook, _unraisable


@contextmanager
def commanding() -> Iterator[None]:
    """While a command runs a signal raises `Interrupted` (which the command
    reports); afterwards the handlers in place before `install_first` are
    put back, so a process that calls the command (a test, a notebook)
    keeps its own."""
    install_first()
    if not _state.commanding:
        _state.swallowed = None
    _state.commanding += 1
    try:
        yield
    finally:
        _state.commanding -= 1
        first = _state.first
        if not _state.commanding and first is not None:
            _state.first = None
            for signum, handler in first.items():
                # None: a handler installed from C, which Python cannot put back.
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            if sys.unraisablehook is _unraisable:
                sys.unraisablehook = _state.unraisablehook or sys.__unraisablehook__
            _state.unraisablehook = None
            _state.swallowed = None


@contextmanager
def interruptible() -> Iterator[None]:
    """Handles SIGINT and SIGTERM as described in the module docstring
    while the block runs (main thread only; elsewhere a no-op), then puts
    the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raise_swallowed()  # a signal while the command started, whose exception Python ignored
    previous = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    _state.received, _state.arrived = None, False
    _state.excepthook = threading.excepthook
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _state.wakeup = read_end
    threading.excepthook = _thread_error
    for signum in _SIGNALS:
        signal.signal(signum, _handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_wakeup)
        threading.excepthook = _state.excepthook
        _state.wakeup = None
        os.close(read_end)
        os.close(write_end)
        if _state.quieted:
            _state.quieted = False
            logging.disable(logging.NOTSET)


def received() -> Interrupted | None:
    """The interruption received in the current `interruptible` block, if any."""
    return Interrupted(_state.received) if _state.received is not None else None


@contextmanager
def deferred() -> Iterator[None]:
    """While the block runs a signal is recorded (`received`), not raised."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1


@contextmanager
def held() -> Iterator[None]:
    """While the block runs a signal waits, as in `deferred`; one that came
    meanwhile is raised as `Interrupted` when the block ends. For steps that
    must not be cut in two (a directory made and put under the guard that
    deletes it), after which the build still stops."""
    arrivals = _state.arrivals
    with deferred():
        yield
    if _state.arrivals != arrivals and _state.received is not None:
        raise Interrupted(_state.received)
