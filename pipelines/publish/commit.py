"""Making a staged build the published version, and pointing LATEST at it.

`commit` runs under the version's commit lock (`lock.CommitLock`, a lease
renewed while it is held) and publishes only if the version's published
``manifest.json`` is still the one seen when the build began
(`check_still_publishable`); the second of two concurrent builds fails with
`ConcurrentBuildError`. Then:

* local filesystems: the staging directory, complete with its manifest, is
  renamed to ``<output>/<version>`` in one step, so the version appears
  complete or not at all. When overwriting, the two directories are swapped
  atomically (``renameat2(RENAME_EXCHANGE)`` on Linux) and the old one
  deleted. Where that call is missing the old version is renamed aside
  (``.staging/<version>.<build_id>.old``) and the new one renamed in; when
  that second rename fails the old version is renamed back before the
  error is raised, and a crash between the two renames is rolled back by
  the next build (`recovery.recover`). The old version is deleted only
  after the new one is in place and the output directory is synced.
  The output directory is synced after the rename; when that sync fails
  (EIO) the rename is undone and the build fails: a version whose commit
  may not survive a crash of the machine is not reported as published.
* object stores (memory://, gs://, s3://, anything without atomic rename):
  an existing ``manifest.json`` is deleted first (a version being replaced is
  unpublished rather than mixed), files the new version does not have are
  removed, every file is copied, sizes are checked, and ``manifest.json`` is
  copied last: the version becomes visible when its manifest is written.
  A published version being replaced is first copied to a held name
  (and LATEST pointed there when it names the version: `_hold`). A commit
  that fails puts it back and deletes what it left unpublished
  (`_undo_failed_copy`); one killed is put back by the next build
  (`recovery`).

`write_latest` then replaces ``LATEST`` (temporary name + rename locally,
one put on object stores) by the published version's name; when it cannot,
`LatestNotUpdated` says so and a later build of the same version finishes
it (`finalizing.finish_latest`). `read_latest` reads it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
from typing import Callable

from ...transforms.files import sync_directory
from ...transforms.layout import (ASIDE_SUFFIX, LATEST_FILE, LATEST_TMP_SUFFIX, MANIFEST_FILE,
                                  held_copy_name)
from ...transforms.urls import redact_url
from .errors import BuildFailed, ConcurrentBuildError, LatestNotUpdated, PublishedWithErrors
from .lock import CommitLock
from .output import Output, latest_name, load_json, point_latest, published_identity
from .recovery import copy_version, remove_version, settle_version
from .staging import Staging

__all__ = ["check_still_publishable", "commit", "latest_is_behind",
           "point_latest", "read_latest", "write_latest"]

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
    lock or has published the version meanwhile, `BuildFailed` or `OSError`
    when nothing was published, `PublishedWithErrors` when the version is
    published but the commit could not be finished cleanly."""
    lock = CommitLock(out, staging.version, build_id=staging.build_id,
                      stale_after=staging.stale_after)
    if not lock.acquire():
        raise ConcurrentBuildError(
            f"another build of version {staging.version!r} ({lock.describe_holder()}) is "
            "publishing it; this build published nothing")
    try:
        # Under the lock: the version must still be in the state this build
        # started from, or a concurrent build has published it.
        check_still_publishable(out, staging)
        lock.check_held()
        if out.local:
            _commit_by_rename(out, staging)
        else:
            _commit_by_copy(out, staging)
    finally:
        lock.release()


def _commit_by_rename(out: Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged = staging.directory
    old: str | None = None  # where the replaced version sits once the new one is in
    undo: Callable[[], None]
    if not os.path.lexists(final):
        os.rename(staged, final)

        def undo() -> None:
            os.rename(final, staged)
    elif _exchange(staged, final):
        old = staged

        def undo() -> None:
            if not _exchange(staged, final):
                raise OSError(errno.EINVAL, "cannot exchange the directories back", final)
    else:
        old = aside = staged + ASIDE_SUFFIX
        os.rename(final, aside)
        # Crash window: <version> is absent until the next rename succeeds;
        # the next build of any version renames the aside copy back.
        try:
            os.rename(staged, final)
        except BaseException as error:
            _put_back(out, aside, final, error)
            raise

        def undo() -> None:
            os.rename(final, staged)
            os.rename(aside, final)
    try:
        sync_directory(out.root)
    except OSError as error:
        _undo_unsynced(out, staging, undo, error)
    if old is not None:
        # The old version goes only now that the new one is in place for
        # good; if this fails, the next build removes it (it carries this
        # build's id, and this build will be dead).
        shutil.rmtree(old, ignore_errors=True)


def _put_back(out: Output, aside: str, final: str, error: BaseException) -> None:
    """Renames the old version back after the new one failed to go in."""
    try:
        os.rename(aside, final)
        sync_directory(out.root)
    except OSError as put_back_error:
        raise PublishedWithErrors(
            f"replacing {out.display_of(final)} failed ({type(error).__name__}: "
            f"{redact_url(str(error))}) and the previous version could not be put back "
            f"({type(put_back_error).__name__}: {redact_url(str(put_back_error))}); it is "
            f"complete at {out.display_of(aside)}, and the next build of any version under "
            f"{out.display} renames it back; the new version was not published",
            published=False) from error


def _undo_unsynced(out: Output, staging: Staging, undo: Callable[[], None],
                   error: OSError) -> None:
    """The rename that published the version could not be made durable:
    undo it, so the build can truthfully fail, or say exactly what is left."""
    where = out.display_of(out.path(staging.version))
    reason = f"{type(error).__name__}: {redact_url(str(error))}"
    try:
        undo()
    except OSError as undo_error:
        raise PublishedWithErrors(
            f"version {staging.version!r} is published at {where}, but syncing "
            f"{out.display} failed ({reason}) and undoing the commit failed too "
            f"({type(undo_error).__name__}: {redact_url(str(undo_error))}): the version may "
            f"not survive a crash of the machine; LATEST was not moved") from error
    try:
        sync_directory(out.root)
        durable = ""
    except OSError:
        durable = " (the undo may not be on disk either; the version was complete)"
    raise BuildFailed(f"syncing {out.display} after renaming the version into place failed "
                      f"({reason}); the commit was undone{durable}: nothing was published")


def _commit_by_copy(out: Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged_files = out.files(staging.directory)
    held = _held_name(out, staging)
    try:
        if held is not None:
            _hold(out, staging.version, held)
        # Unpublish first: while files are replaced, readers must not trust
        # the old manifest's checksums against new bytes.
        out.remove(f"{final}/{MANIFEST_FILE}")
        for file in sorted(set(out.files(final)) - set(staged_files)):
            out.remove(f"{final}/{file}")
        copy_version(out, staging.directory, final, staged_files)
        if held is not None:
            if latest_name(out) == held:
                point_latest(out, staging.version)
            remove_version(out, held)
    except Exception as error:
        _undo_failed_copy(out, staging, held, error)
        raise
    out.remove(staging.directory, recursive=True)


def _undo_failed_copy(out: Output, staging: Staging, held: str | None,
                      error: Exception) -> None:
    """The commit failed: leaves only published versions, as `recovery`
    does after a killed one (`recovery.settle_version`): the held copy (if
    any) back at the version's own name when the version is not published
    there, LATEST back to it, the copy deleted, and an unpublished version's
    files deleted. Says what is left when that fails too."""
    try:
        settle_version(out, staging.version, [] if held is None else [held])
    except (OSError, BuildFailed) as cleanup_error:
        raise BuildFailed(
            f"replacing {out.display_of(out.path(staging.version))} failed "
            f"({type(error).__name__}: {redact_url(str(error))}) and cleaning up after it "
            f"failed too ({type(cleanup_error).__name__}: {redact_url(str(cleanup_error))}); "
            f"readers of {LATEST_FILE} still find a complete version, and the next build of "
            f"any version under {out.display} puts {staging.version!r} back under its own "
            "name or removes what is there unpublished; nothing was published") from error


def _held_name(out: Output, staging: Staging) -> str | None:
    """Where the commit holds the version it replaces (`_hold`): its held
    name (`layout.held_copy_name`) when the version is published, whether
    LATEST names it or not, else None (nothing to hold)."""
    if published_identity(out, staging.version) is None:
        return None
    return held_copy_name(staging.version, staging.build_id)


def _hold(out: Output, version: str, held: str) -> None:
    """Copies the published `version` whole (server-side, manifest last) to
    `held`, and points LATEST there when it names `version`, so readers of
    LATEST keep a complete version while the files at the version's own
    name are replaced. The copy is what a commit that fails or is killed
    midway puts back (`recovery.settle_version`), so the version is never
    lost, whichever version LATEST names."""
    source = out.path(version)
    copy_version(out, source, out.path(held), out.files(source))
    if latest_name(out) == version:
        point_latest(out, held)


def write_latest(out: Output, staging: Staging) -> None:
    """Points ``<output>/LATEST`` at the version `staging` published. Raises
    `LatestNotUpdated` (the version stays published) when it cannot, saying
    what LATEST names, read back (`_latest_failure`)."""
    before = read_latest(out.url)
    try:
        point_latest(out, staging.version, tmp=f"{staging.directory}{LATEST_TMP_SUFFIX}")
    except OSError as error:
        failure = _latest_failure(out, staging, before, error)
        if failure is not None:
            raise failure from error


def _latest_failure(out: Output, staging: Staging, before: str | None,
                    error: OSError) -> PublishedWithErrors | None:
    """What a failed update of LATEST left, read back rather than assumed.
    Locally the rename may have happened and only its sync failed: LATEST
    then names the new version but may not after a crash of the machine, so
    the previous pointer is put back (as the commit undoes an unsynced
    rename) and the retry moves it again. On an object store a put that
    reported an error but landed is a finished update (None)."""
    reason = f"{type(error).__name__}: {redact_url(str(error))}"
    where = out.display_of(out.path(staging.version))
    if read_latest(out.url) == staging.version:
        if not out.local or before == staging.version:
            return None  # a put that landed, or LATEST named the version before as well
        undo_error = _restore_latest(out, staging, before)
        if read_latest(out.url) == staging.version:
            return PublishedWithErrors(
                f"version {staging.version!r} is published at {where} and {LATEST_FILE} "
                f"names it, but that update could not be made durable ({reason}) nor undone "
                f"({undo_error}): after a crash of the machine {LATEST_FILE} may name "
                f"{before!r} again")
    return LatestNotUpdated(
        f"version {staging.version!r} is published at {where}, but {LATEST_FILE} could not "
        f"be updated ({reason}); it still names {read_latest(out.url)!r}. Running the same build "
        f"again (without --overwrite) moves {LATEST_FILE} to it", version=staging.version)


def _restore_latest(out: Output, staging: Staging, before: str | None) -> str | None:
    """Puts back the LATEST that named `before` (None: there was none);
    returns the error that prevented it, as text, or None."""
    try:
        if before is None:
            out.remove(out.path(LATEST_FILE))
            sync_directory(out.root)
        else:
            point_latest(out, before, tmp=f"{staging.directory}{LATEST_TMP_SUFFIX}")
    except OSError as error:
        return f"{type(error).__name__}: {redact_url(str(error))}"
    return None


def _created(out: Output, version: str) -> str | None:
    manifest = load_json(out.read_bytes(out.path(version, MANIFEST_FILE)))
    created = manifest.get("created") if isinstance(manifest, dict) else None
    return created if isinstance(created, str) else None


def latest_is_behind(out: Output, version: str) -> bool:
    """Whether ``LATEST`` should name the published `version` but does not:
    LATEST is missing, names a version that is not published, or one
    published no later than `version` (manifest ``created``, UTC timestamps
    to the second that sort as text: a version published in the same second
    counts as earlier, or a retry could not finish what a quick build left).
    That is what a build whose LATEST update failed leaves."""
    created = _created(out, version)
    if created is None:
        return False
    latest = read_latest(out.url)
    if latest == version:
        return False
    latest_created = _created(out, latest) if latest else None
    return latest_created is None or latest_created <= created


def read_latest(output_path: str) -> str | None:
    """The version named by ``<output>/LATEST``, or None if there is none."""
    return latest_name(Output(output_path))
