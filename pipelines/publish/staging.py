"""Where a build writes before it is published: starting a build and its staging directory.

Staging directories live at ``<output>/.staging/<version>.<build_id>/``
beside the build's owner file (`owners`). `begin_build` checks the version
name, cleans up after dead builds of the version (`recovery.recover`),
refuses a version that is already published unless overwriting, and creates
the staging directory.

`Staging` is a context manager that aborts on an exception. Pass
`staging.url` (a plain string) to the pipeline, never the `Staging` object: it
owns a heartbeat thread. The pipeline writes into it (names in
`transforms.layout`)::

    shards <split>-<i:05d>-of-<n:05d>.tfrecord[.gz]
    dead_letter/*.jsonl                   (DEAD_LETTER_DIR)
    _tmp/...                              (TMP_DIR; deleted before publishing)
    _pipeline_result.json                 (RESULT_FILE, last)
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Callable, NamedTuple

from ...transforms.layout import (DEAD_LETTER_DIR, OWNER_SUFFIX, RESULT_FILE, STAGING_DIR,
                                  TMP_DIR)
from ...transforms.urls import redact_url
from .errors import VersionExistsError
from .manifest import utc_timestamp
from .output import Output, published_identity
from .owners import (HEARTBEAT_INTERVAL, STALE_AFTER, Heartbeat, NoHeartbeat, new_build_id,
                     owner_record, pipeline_owner_record)
from .recovery import recover
from .versions import check_version_name

__all__ = ["PIPELINE_LEASE", "Staging", "StagingRef", "begin_build", "begin_pipeline_build",
           "open_staging"]

# How long a build run by a pipeline owns its staging directory when nothing
# shows it died sooner (see `owners.pipeline_owner_record`).
PIPELINE_LEASE = 24 * 3600.0


class StagingRef(NamedTuple):
    """A `Staging` as plain values, for a pipeline step to publish from
    (`Staging.attach`); it holds no thread and pickles."""

    output_path: str
    version: str
    build_id: str
    identity: str | None
    stale_after: float
    url: str


class Staging:
    """A build in progress: where the pipeline writes, and who owns it.

    url: the staging directory (local path or fsspec URL) the pipeline writes
    into; `path` is the same string. tmp_url / result_url / dead_letter_url:
    its scratch directory, result file and dead-letter directory.
    display_url: `url` with credentials redacted, for messages.

    out: the `Output` it belongs to; directory: `url` as a path of
    ``out.fs``. identity: `published_identity` of the version when the build
    began (a commit checks it is unchanged). stale_after: the owner-file
    staleness limit this build uses (for the commit lock).
    """

    def __init__(self, *, out: Output, version: str, build_id: str,
                 identity: str | None, stale_after: float, heartbeat: Heartbeat):
        self.out = out
        self.version = version
        self.build_id = build_id
        self.identity = identity
        self.stale_after = stale_after
        self._heartbeat = heartbeat
        self.directory = out.path(STAGING_DIR, f"{version}.{build_id}")
        self._owner = self.directory + OWNER_SUFFIX
        self._closed = False
        self.url = out.url_of(self.directory)
        self.display_url = redact_url(self.url)
        self.output_url = out.display
        self.tmp_url = f"{self.url}/{TMP_DIR}"
        self.result_url = f"{self.url}/{RESULT_FILE}"
        self.dead_letter_url = f"{self.url}/{DEAD_LETTER_DIR}"

    @property
    def path(self) -> str:
        return self.url

    @property
    def ref(self) -> StagingRef:
        """This build as plain values (`attach` turns them back)."""
        return StagingRef(self.out.url, self.version, self.build_id, self.identity,
                          self.stale_after, self.url)

    @classmethod
    def attach(cls, ref: StagingRef) -> "Staging":
        """The `Staging` of `ref` in another process (a pipeline worker).
        It rewrites no heartbeat: a pipeline's build owns its staging by a
        lease (`begin_pipeline_build`)."""
        return cls(out=Output(ref.output_path), version=ref.version, build_id=ref.build_id,
                   identity=ref.identity, stale_after=ref.stale_after,
                   heartbeat=NoHeartbeat())

    def exists(self) -> bool:
        """Whether the staging directory is still there (not committed, not aborted)."""
        return self.out.fs.exists(self.directory)

    def __reduce__(self):
        raise TypeError("Staging owns a heartbeat thread and is not picklable; "
                        "pass staging.url to the pipeline")

    def __repr__(self) -> str:
        return f"Staging(version={self.version!r}, url={self.display_url!r})"

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def abort(self) -> None:
        """Stops the heartbeat and deletes the staging directory and owner
        file. Idempotent; nothing published is touched.

        Never raises OSError: it runs while the exception that stopped the
        build (its failure, a timeout, Ctrl-C) is on its way out, and that
        is what the caller must see. What a failing filesystem keeps it
        from deleting is said on stderr; the owner file goes even when the
        directory cannot, and the next build removes a staging directory
        that has none."""
        if self._closed:
            return
        self._heartbeat.stop()
        for path, recursive in ((self.directory, True), (self._owner, False)):
            try:
                self.out.remove(path, recursive=recursive)
            except OSError as error:
                _say_left(redact_url(self.out.url_of(path)), error)
        self._closed = True

    def close(self) -> None:
        """Stops the heartbeat and deletes the owner file, leaving the staging
        directory (once committed, gone from .staging) alone. Idempotent."""
        # The owner file goes last: a staging directory without one is dead.
        self._heartbeat.stop()
        self.out.remove(self._owner)
        self._closed = True


def _say_left(what: str, error: OSError) -> None:
    try:
        print(f"recordforge: could not delete {what} ({type(error).__name__}: {error}); "
              "the next build of this output removes it", file=sys.stderr)
    except OSError:
        pass  # stderr is gone too; the next build still removes it


def begin_build(output_path: str, version: str, overwrite: bool = False, *,
                stale_after: float = STALE_AFTER,
                heartbeat_interval: float = HEARTBEAT_INTERVAL) -> Staging:
    """Starts a build of `version` under `output_path` (local path or fsspec
    URL). Returns the `Staging` the pipeline writes into.

    Raises `ConfigError` for an invalid version name and `VersionExistsError`
    if ``<output>/<version>/manifest.json`` exists (once dead builds are
    cleaned up, see `open_staging`) and not `overwrite`.
    """
    check_version_name(version)

    def admit(out: Output, identity: str | None) -> None:
        if identity is not None and not overwrite:
            raise VersionExistsError(
                f"version {version!r} is already published at {out.display}/{version}; "
                "use --overwrite to replace it")

    return open_staging(output_path, version, stale_after=stale_after,
                        heartbeat_interval=heartbeat_interval, admit=admit)


def begin_pipeline_build(output_path: str, version: str, overwrite: bool = False, *,
                         lease: float = PIPELINE_LEASE, bound_to_process: bool = False,
                         stale_after: float = STALE_AFTER) -> Staging:
    """Starts a build of `version` that a pipeline runs and publishes from
    its last step (`WriteDataset`): as `begin_build`, but the owner record
    holds a lease of `lease` seconds instead of a heartbeat (and, with
    `bound_to_process`, dies with this process), because no thread of this
    process is sure to outlive the pipeline. Pass `Staging.ref` to the
    pipeline."""
    check_version_name(version)

    def admit(out: Output, identity: str | None) -> None:
        if identity is not None and not overwrite:
            raise VersionExistsError(
                f"version {version!r} is already published at {out.display}/{version}; "
                "pass overwrite=True to replace it")

    def record(build_id: str, started: str) -> dict:
        return pipeline_owner_record(build_id, started, lease=lease,
                                     bound_to_process=bound_to_process)

    return open_staging(output_path, version, stale_after=stale_after, heartbeat_interval=None,
                        admit=admit, record=record)


def open_staging(output_path: str, version: str, *, stale_after: float,
                 heartbeat_interval: float | None,
                 admit: Callable[[Output, str | None], None],
                 record: Callable[[str, str], dict] = owner_record) -> Staging:
    """Creates the staging of a build of `version` under `output_path` (local
    path or fsspec URL), whose name has already been checked. Returns the
    `Staging` the pipeline writes into.

    Before creating it: rolls back a commit of this version interrupted
    between its two renames, and deletes everything in ``.staging`` that
    belongs to dead builds of this version (`recovery.recover`). Then
    calls ``admit(out, identity)`` (identity: `published_identity` of the
    version), which raises to refuse the build; the owner file is then
    removed and nothing is left behind. ``record(build_id, started)`` makes
    the owner record; ``heartbeat_interval=None``: no heartbeat thread (a
    record holding a lease).
    """
    out = Output(output_path)
    build_id = new_build_id()
    staging_dir = out.path(STAGING_DIR, f"{version}.{build_id}")
    owner_path = staging_dir + OWNER_SUFFIX
    owner = record(build_id, utc_timestamp())
    # The owner file comes first and goes last: every name this build
    # creates in .staging (directory, lock and temporary files) starts with
    # <version>.<build_id>, so a build killed at any point leaves nothing
    # that a later build cannot attribute and clean.
    out.fs.makedirs(out.path(STAGING_DIR), exist_ok=True)
    heartbeat = (NoHeartbeat() if heartbeat_interval is None
                 else Heartbeat(out, owner_path, owner, heartbeat_interval))
    try:
        # (a write that fails removes its temporary file; a rename that
        # succeeded before the directory sync failed leaves the owner file)
        out.write_atomic(owner_path, json.dumps(owner).encode())
        heartbeat.start()
        recover(out, version, stale_after, build_id)
        identity = published_identity(out, version)
        admit(out, identity)
        out.fs.makedirs(staging_dir, exist_ok=True)
        out.fs.makedirs(f"{staging_dir}/{TMP_DIR}", exist_ok=True)
        return Staging(out=out, version=version, build_id=build_id, identity=identity,
                       stale_after=stale_after, heartbeat=heartbeat)
    except BaseException:
        heartbeat.stop()
        # The directory, if it was made before what failed; a later build
        # removes one that this cannot (it has no owner file by then).
        with contextlib.suppress(OSError):
            out.remove(staging_dir, recursive=True)
        out.remove(owner_path)
        raise
