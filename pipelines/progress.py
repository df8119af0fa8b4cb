"""What a person watching a build sees: a live progress line and a summary.

What Beam 2.77 offers for live progress, measured here:

* DirectRunner (FnApiRunner, in_memory and multi_processing): ``pipeline.run()``
  blocks until the pipeline is done, and ``result.metrics()`` only exists
  afterwards, so counters cannot be polled during a local build.
* BundleBasedDirectRunner: ``run()`` returns at once, but counters appear
  only when a bundle commits (with few large bundles: near the end).
* Dataflow and other remote runners: ``run()`` returns at once and
  ``result.metrics()`` can be queried while the job runs.

So `BuildProgress` watches the build's staging directory, which every runner
fills as it goes (spill files while rows are read, sorted buckets, then the
shards): bytes written there, their rate and the phase they show. When the
driver hands it a running `PipelineResult` (`attach`), it also polls the
``recordforge`` counters for row counts; after the run they give the final
line. The driver uses it like this::

    hide_beam_noise(verbose)
    with BuildProgress(staging_url) as progress:     # starts the watcher thread
        result = pipeline.run()
        progress.attach(result)                      # optional: counters
        result.wait_until_finish()
    print_summary(manifest, output=url, wall_seconds=seconds)

On a terminal (stderr is a TTY) the line is redrawn in place twice a second;
otherwise (cron, CI logs) a plain line is printed every 30 seconds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import warnings
from typing import Any, Callable, Mapping, Sequence, TextIO

from ..schemas.native import path_note
from ..transforms.layout import TMP_DIR, is_shard_file
from ..transforms.metrics import METRICS_NAMESPACE

__all__ = [
    "METRICS_NAMESPACE",
    "BuildProgress",
    "ProgressSnapshot",
    "scan_staging",
    "format_line",
    "human_bytes",
    "describe_inputs",
    "format_summary",
    "print_summary",
    "hide_beam_noise",
]

TTY_INTERVAL = 0.5
PLAIN_INTERVAL = 30.0
# Listing a remote staging directory costs requests; do it rarely.
REMOTE_SCAN_INTERVAL = 60.0


@dataclasses.dataclass
class ProgressSnapshot:
    """What is known about a running build at one moment (None = not known)."""

    elapsed: float = 0.0
    phase: str = "starting"
    staged_bytes: int | None = None
    shard_files: int = 0
    rows_read: int | None = None
    examples_written: int | None = None
    dead_letters: int | None = None
    bytes_rate: float | None = None
    rows_rate: float | None = None


def scan_staging(staging_url: str) -> tuple[int, int, str]:
    """(bytes under the staging directory, finished shard files, phase).

    phase: "reading" (rows are being read and spilled), "sorting" (sorted
    buckets are being written), "writing shards", or "starting" (nothing yet).
    Works on local paths with os.scandir; other URLs go through fsspec.
    """
    total = shards = 0
    sorting = writing = False
    for path, size in _walk(staging_url):
        total += size
        parts = path.replace("\\", "/").split("/")
        name = parts[-1]
        if TMP_DIR not in parts and is_shard_file(name):
            shards += 1
            writing = True
        elif "shards" in parts:
            writing = True
        elif "buckets" in parts or "merge" in parts:
            sorting = True
    phase = ("writing shards" if writing else "sorting" if sorting
             else "reading" if total else "starting")
    return total, shards, phase


def scan_cache(cache_url: str, since: float) -> int:
    """Bytes of the build cache's files (a local cache) written since
    `since` (seconds since the epoch): a cached build's reading and encoding
    writes its rows there, not into staging. 0 for a cache elsewhere (object
    stores are not scanned: it would cost a listing of every piece)."""
    if "://" in cache_url and not cache_url.startswith("file://"):
        return 0
    root = cache_url[len("file://"):] if cache_url.startswith("file://") else cache_url
    total = 0
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # renamed away while we looked
                    continue
                if info.st_mtime >= since:
                    total += info.st_size
    except (FileNotFoundError, NotADirectoryError):
        return 0
    return total


def _walk(url: str):
    if "://" not in url or url.startswith("file://"):
        root = url[len("file://"):] if url.startswith("file://") else url
        stack = [root]
        while stack:
            try:
                with os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                            elif entry.is_file(follow_symlinks=False):
                                yield entry.path, entry.stat(follow_symlinks=False).st_size
                        except FileNotFoundError:  # renamed away while we looked
                            continue
            except (FileNotFoundError, NotADirectoryError):
                continue
        return
    import fsspec
    fs, path = fsspec.core.url_to_fs(url)
    for name, info in fs.find(path, detail=True).items():
        yield name, int(info.get("size") or 0)


def human_bytes(n: float) -> str:
    """`n` bytes in decimal units: '512 B', '1.5 MB'."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def format_line(snap: ProgressSnapshot) -> str:
    """One progress line, showing only what is known."""
    parts = [_duration(snap.elapsed), snap.phase]
    if snap.rows_read is not None:
        parts.append(f"{snap.rows_read:,} rows read")
    if snap.examples_written is not None:
        parts.append(f"{snap.examples_written:,} examples written")
    if snap.dead_letters is not None:
        parts.append(f"{snap.dead_letters:,} dead letters")
    if snap.staged_bytes is not None:
        parts.append(f"{human_bytes(snap.staged_bytes)} written")
    if snap.shard_files:
        parts.append(f"{snap.shard_files} shards")
    if snap.rows_rate is not None:
        parts.append(f"{snap.rows_rate:,.0f} rows/s")
    elif snap.bytes_rate is not None:
        parts.append(f"{human_bytes(snap.bytes_rate)}/s")
    return " | ".join(parts)


class BuildProgress:
    """Shows a running build's progress on `stream` (default stderr).

    staging_url: the build's staging directory (what `staging.Staging.url` gives).
    cache_url: the build cache's directory, when the build uses it: what the
      build writes there counts as read and encoded (`scan_cache`).
    interval: seconds between lines; default 0.5 on a TTY, 30 otherwise.
    enabled: False shows nothing (e.g. ``--quiet``); default True.
    Methods: `start`/`stop` (or use it as a context manager), `attach(result)`
    to poll a running PipelineResult's counters, `update(**counts)` to set
    counts the driver knows, `snapshot()` for the current state.
    """

    def __init__(self, staging_url: str, *, stream: TextIO | None = None,
                 interval: float | None = None, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic, cache_url: str | None = None):
        self._staging_url = staging_url
        self._cache_url = cache_url
        self._wall_started = time.time()
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = interval if interval is not None else (
            TTY_INTERVAL if self._tty else PLAIN_INTERVAL)
        self._enabled = enabled
        self._clock = clock
        self._remote = "://" in staging_url and not staging_url.startswith("file://")
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: Any = None
        self._counts: dict[str, int] = {}
        self._started = clock()
        self._last_scan = (0, 0, "starting")
        self._last_scan_time: float | None = None
        self._rate_base: tuple[float, int, int | None] | None = None
        self._rates: tuple[float | None, float | None] = (None, None)
        self._line_width = 0

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> "BuildProgress":
        self._started = self._clock()
        self._wall_started = time.time()
        if self._enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="recordforge-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the watcher and prints the final line."""
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._enabled:
            self._poll_metrics()
            self._emit(format_line(self.snapshot(rescan=True)), final=True)

    def __enter__(self) -> "BuildProgress":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- inputs --------------------------------------------------------------------

    def attach(self, result: Any) -> None:
        """Polls `result.metrics()` (a running or finished PipelineResult) for
        the ``recordforge`` counters from now on."""
        with self._lock:
            self._result = result

    def update(self, **counts: int) -> None:
        """Sets counts the driver knows: rows_read, examples_written, dead_letters."""
        with self._lock:
            self._counts.update({k: int(v) for k, v in counts.items() if v is not None})

    # -- state ---------------------------------------------------------------------

    def snapshot(self, rescan: bool = False) -> ProgressSnapshot:
        now = self._clock()
        due = self._remote and (self._last_scan_time is None
                                or now - self._last_scan_time >= REMOTE_SCAN_INTERVAL)
        if rescan or not self._remote or due:
            try:
                staged, shards, phase = scan_staging(self._staging_url)
                if self._cache_url is not None:
                    cached = scan_cache(self._cache_url, self._wall_started)
                    staged += cached
                    if cached and phase == "starting":
                        phase = "reading"
                self._last_scan = (staged, shards, phase)
            except Exception:  # noqa: BLE001 - progress must never break a build
                pass
            self._last_scan_time = now
        staged, shards, phase = self._last_scan
        with self._lock:
            counts = dict(self._counts)
        rows = counts.get("rows_read")
        if rows is None and "rows_converted" in counts:
            # Rows that became examples plus rows that failed: every row read.
            rows = counts["rows_converted"] + counts.get("dead_letters", 0)
        self._update_rates(now, staged, rows)
        return ProgressSnapshot(
            elapsed=now - self._started, phase=phase, staged_bytes=staged, shard_files=shards,
            rows_read=rows, examples_written=counts.get("examples_written"),
            dead_letters=counts.get("dead_letters"), bytes_rate=self._rates[0],
            rows_rate=self._rates[1])

    def _update_rates(self, now: float, staged: int, rows: int | None) -> None:
        # Rates over the whole run so far: steadier than instant rates, and
        # right at the end (the final line states the build's throughput).
        elapsed = now - self._started
        if elapsed <= 0:
            return
        self._rates = (staged / elapsed if staged else None,
                       rows / elapsed if rows else None)

    def _poll_metrics(self) -> None:
        with self._lock:
            result = self._result
        if result is None:
            return
        try:
            from apache_beam.metrics.metric import MetricsFilter
            query = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
        except Exception:  # noqa: BLE001 - runners differ in what they can report
            return
        totals: dict[str, int] = {}
        for counter in query.get("counters", []):
            value = counter.committed if counter.committed is not None else counter.attempted
            if isinstance(value, int):
                name = counter.key.metric.name
                totals[name] = totals.get(name, 0) + value
        self.update(**totals)

    # -- output --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop_event.wait(self._interval):
            self._poll_metrics()
            self._emit(format_line(self.snapshot()))

    def _emit(self, line: str, final: bool = False) -> None:
        try:
            if self._tty:
                pad = max(0, self._line_width - len(line))
                self._stream.write("\r" + line + " " * pad + ("\n" if final else ""))
                self._line_width = 0 if final else len(line)
            else:
                self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # closed or broken stream: keep building
            pass


# --- the end-of-build summary -----------------------------------------------------------


def format_summary(manifest: Mapping[str, Any], *, output: str | None = None,
                   wall_seconds: float | None = None, notes: Sequence[str] = ()) -> str:
    """The summary table of a published build, from its manifest; `notes`
    are lines of what else the build found (duplicates)."""
    rows = [("split", "examples", "shards", "bytes", "mean shard")]
    total_examples = total_shards = total_bytes = 0
    for split, info in manifest.get("splits", {}).items():
        shards = len(info.get("shards", []))
        examples, size = int(info.get("num_examples", 0)), int(info.get("num_bytes", 0))
        rows.append((split, f"{examples:,}", str(shards), human_bytes(size),
                     human_bytes(size / shards) if shards else "-"))
        total_examples += examples
        total_shards += shards
        total_bytes += size
    rows.append(("total", f"{total_examples:,}", str(total_shards), human_bytes(total_bytes),
                 human_bytes(total_bytes / total_shards) if total_shards else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(row):
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths)))

    out = [f"{manifest.get('name', '?')} {manifest.get('version', '?')} "
           f"({manifest.get('compression', '?')})"]
    out.append(line(rows[0]))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(row) for row in rows[1:-1])
    out.append("  ".join("-" * w for w in widths))
    out.append(line(rows[-1]))
    dead = manifest.get("dead_letter", {}) or {}
    num_input = manifest.get("num_input_rows")
    dead_rows = int(dead.get("num_rows", 0) or 0)
    share = f" ({dead_rows / num_input:.2%} of {num_input:,} input rows)" if num_input else ""
    out.append(f"dead letters: {dead_rows:,}{share}")
    for reason, count in sorted((dead.get("by_reason") or {}).items(),
                                key=lambda item: (-item[1], item[0])):
        out.append(f"  {reason:<28} {count:>8,}")
    inputs = describe_inputs(manifest)
    if inputs:
        out.append(f"input files: {inputs}")
    out.extend(notes)
    out.append(f"row path: {path_note()}")  # the native kernels or pure Python, and why
    if wall_seconds is not None:
        rate = f", {total_examples / wall_seconds:,.0f} examples/s" if wall_seconds > 0 else ""
        out.append(f"wall time: {_duration(wall_seconds)}{rate}")
    if output:
        out.append(f"output: {output}")
    return "\n".join(out)


def describe_inputs(manifest: Mapping[str, Any]) -> str | None:
    """The input files of a build in words, from its manifest's ``inputs``
    and ``cache`` blocks: ``"1 read, 3 from the cache, 0 skipped"``.
    None for a build from a PCollection (no ``inputs``). Shared by the
    summary and the report, so both count as the manifest does."""
    inputs = manifest.get("inputs") or {}
    if not inputs:
        return None
    files = len(inputs.get("files") or [])
    cache = manifest.get("cache") or {}
    reused = cache.get("files_reused") if isinstance(cache, Mapping) else None
    if isinstance(reused, int) and not isinstance(reused, bool) and 0 < reused <= files:
        used = f"{files - reused:,} read, {reused:,} from the cache"
    else:
        used = f"{files:,} read"
    skipped = inputs.get("skipped") or {}
    reasons = ", ".join(f"{reason} {count:,}" for reason, count in sorted(skipped.items()))
    return f"{used}, {sum(skipped.values()):,} skipped" + (f" ({reasons})" if reasons else "")


def print_summary(manifest: Mapping[str, Any], *, output: str | None = None,
                  wall_seconds: float | None = None, stream: TextIO | None = None,
                  notes: Sequence[str] = ()) -> None:
    """Prints `format_summary` to `stream` (default stderr)."""
    stream = stream if stream is not None else sys.stderr
    stream.write(format_summary(manifest, output=output, wall_seconds=wall_seconds,
                                notes=notes) + "\n")
    stream.flush()


# --- Beam's own chatter -------------------------------------------------------------


class _DropBeamRecords(logging.Filter):
    """Drops below-ERROR records logged through the root logger by Beam's
    modules (``logging.warning(...)`` at import time, e.g. the apitools notice)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        path = record.pathname.replace("\\", "/")
        return "/apache_beam/" not in path


_ROOT_FILTER = _DropBeamRecords()
# Libraries under Beam's runners that log INFO chatter in this process
# (the Dask runner's scheduler and nanny).
_QUIET_LOGGERS = ("distributed", "tornado")

# Beam options that quiet worker processes (multi_processing DirectRunner
# workers and portable SDK harnesses log INFO to stderr by default).
# Above CRITICAL (60): a failing step logs its traceback at ERROR in the
# worker and again in the driver (the job service relays it), a worker
# stopped by Ctrl-C logs "harness failed" at CRITICAL; without -v the
# build's own one-line verdict names the error and the step instead.
QUIET_BEAM_ARGS = ("--default_sdk_harness_log_level=60",)


def hide_beam_noise(verbose: bool) -> list[str]:
    """Quiets Beam's log lines and warnings in this process unless `verbose`
    (then Beam's INFO logs are shown). Safe to call more than once.

    Returns Beam options to add to the pipeline's options (when the user did
    not set them) to quiet worker processes too; empty when verbose.
    """
    root = logging.getLogger()
    beam_logger = logging.getLogger("apache_beam")
    if verbose:
        root.removeFilter(_ROOT_FILTER)
        for logger in (beam_logger, *map(logging.getLogger, _QUIET_LOGGERS)):
            logger.setLevel(logging.NOTSET)
        if not root.handlers:
            logging.basicConfig(level=logging.INFO,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        else:
            root.setLevel(min(root.level or logging.INFO, logging.INFO))
        return []
    beam_logger.setLevel(logging.CRITICAL)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if _ROOT_FILTER not in root.filters:
        root.addFilter(_ROOT_FILTER)
    warnings.filterwarnings("ignore", module=r"(apache_beam|distributed)(\..*)?$")
    # gRPC (under the portable runners) prints to stderr from C++; Dask's
    # worker processes read their log levels from the environment.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    return list(QUIET_BEAM_ARGS)
