"""Making a staged build the published version, and pointing LATEST at it.

`commit` runs under the version's commit lock (`lock.CommitLock`) and
publishes only if the version's published ``manifest.json`` is still the one
seen when the build began (`check_still_publishable`); the second of two
concurrent builds fails with `ConcurrentBuildError`. Then:

* local filesystems: the staging directory is renamed to ``<output>/<version>``
  in one step, so the version appears complete or not at all. When
  overwriting, the two directories are swapped atomically
  (``renameat2(RENAME_EXCHANGE)`` on Linux) and the old one deleted; where
  that call is missing the old version is renamed aside first, and a crash
  between the two renames is rolled back by the next build
  (`recovery.recover`).
* object stores (memory://, gs://, s3://, anything without atomic rename):
  an existing ``manifest.json`` is deleted first (a version being replaced is
  unpublished rather than mixed), files the new version does not have are
  removed, every file is copied, sizes are checked, and ``manifest.json`` is
  copied last.

`write_latest` then replaces ``LATEST`` (temporary name + rename locally,
one put on object stores) by the published version's name; `read_latest`
reads it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys

from ...transforms.files import sync_directory
from ...transforms.layout import ASIDE_SUFFIX, LATEST_FILE, LATEST_TMP_SUFFIX, MANIFEST_FILE
from ...transforms.urls import redact_url
from .errors import BuildFailed, ConcurrentBuildError, PublishError
from .lock import CommitLock
from .output import Output, published_identity
from .staging import Staging

__all__ = ["check_still_publishable", "commit", "read_latest", "write_latest"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two paths (Linux renameat2 RENAME_EXCHANGE). False
    where the call or the filesystem does not support it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), a, None, b)


def check_still_publishable(out: Output, staging: Staging) -> None:
    """Raises `ConcurrentBuildError` when another build published this
    version since `staging` began."""
    if published_identity(out, staging.version) != staging.identity:
        raise ConcurrentBuildError(
            f"version {staging.version!r} was published at {out.display}/{staging.version} by "
            "another build while this one ran; this build published nothing")


def commit(out: Output, staging: Staging) -> None:
    """Publishes the staged build as ``<output>/<version>`` (see the module
    docstring). Raises `ConcurrentBuildError` when another build holds the
    lock or has published the version meanwhile."""
    lock = CommitLock(out, staging.version, build_id=staging.build_id,
                      stale_after=staging.stale_after)
    if not lock.acquire():
        holder = lock.holder or {}
        raise ConcurrentBuildError(
            f"another build of version {staging.version!r} (build {holder.get('build_id')}, "
            f"host {holder.get('host')}, pid {holder.get('pid')}) is publishing it; "
            "this build published nothing")
    try:
        # Under the lock: the version must still be in the state this build
        # started from, or a concurrent build has published it.
        check_still_publishable(out, staging)
        if out.local:
            _commit_by_rename(out, staging)
        else:
            _commit_by_copy(out, staging)
    finally:
        lock.release()


def _commit_by_rename(out: Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged = staging.directory
    if not os.path.lexists(final):
        os.rename(staged, final)
    elif _exchange(staged, final):
        # The old version now sits at the staging name; a crash before the
        # delete leaves it to the stale-staging cleanup.
        shutil.rmtree(staged)
    else:
        aside = staged + ASIDE_SUFFIX
        os.rename(final, aside)
        # Crash window: <version> is absent until the next line; the next
        # begin_build of this version renames the aside copy back.
        os.rename(staged, final)
        shutil.rmtree(aside)
    sync_directory(out.root)


def _commit_by_copy(out: Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged_files = out.files(staging.directory)
    # Unpublish first: while files are replaced, readers must not trust the
    # old manifest's checksums against new bytes.
    out.remove(f"{final}/{MANIFEST_FILE}")
    for file in sorted(set(out.files(final)) - set(staged_files)):
        out.remove(f"{final}/{file}")
    for file in sorted(staged_files):
        if file != MANIFEST_FILE:
            out.fs.copy(f"{staging.directory}/{file}", f"{final}/{file}")
    copied = out.files(final)
    for file, size in staged_files.items():
        if file != MANIFEST_FILE and copied.get(file) != size:
            raise BuildFailed(f"copying {file} to {out.display}/{staging.version} gave "
                              f"{copied.get(file)} bytes instead of {size}; nothing was published")
    out.fs.copy(f"{staging.directory}/{MANIFEST_FILE}", f"{final}/{MANIFEST_FILE}")
    out.remove(staging.directory, recursive=True)


def write_latest(out: Output, staging: Staging) -> None:
    """Points ``<output>/LATEST`` at the version `staging` published. Raises
    `PublishError` (the version stays published) when it cannot."""
    try:
        out.write_atomic(out.path(LATEST_FILE), f"{staging.version}\n".encode(),
                         tmp=f"{staging.directory}{LATEST_TMP_SUFFIX}")
    except OSError as error:
        # The version is complete and published; only the pointer is stale.
        raise PublishError(
            f"version {staging.version!r} is published at "
            f"{out.display_of(out.path(staging.version))}, but {LATEST_FILE} could not be "
            f"updated ({type(error).__name__}: {redact_url(str(error))}); it still names "
            "the previous version") from error


def read_latest(output_path: str) -> str | None:
    """The version named by ``<output>/LATEST``, or None if there is none."""
    out = Output(output_path)
    data = out.read_bytes(out.path(LATEST_FILE))
    if data is None:
        return None
    return data.decode("utf-8").strip() or None
