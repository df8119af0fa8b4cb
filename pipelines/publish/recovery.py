"""Cleaning up after dead builds of a version, and undoing a commit cut in half.

`recover` runs when a build of a version starts (`staging.open_staging`).
A local commit interrupted between renaming the old version aside and
renaming the new one in leaves ``<version>`` without a manifest and the old
version at ``.staging/<version>.<build_id>.old``: it is renamed back. Then
everything of dead builds (`owners.owner_is_stale`) in .staging is deleted,
owner files last; a running build is never touched.
"""

from __future__ import annotations

import os
import re

from ...transforms.files import sync_directory
from ...transforms.layout import (ASIDE_SUFFIX, MANIFEST_FILE, OWNER_SUFFIX, STAGING_DIR,
                                  STAGING_SUFFIXES, TEMPORARY_TAIL)
from .lock import CommitLock
from .output import Output, load_json, published_identity
from .owners import BUILD_ID, being_born, owner_is_stale

__all__ = ["recover"]


def _staging_entries(out: Output, version: str) -> dict[str, set[str]]:
    """build_id -> names in .staging that belong to that build of `version`:
    its directory, owner file, aside copy, and temporary files a killed
    heartbeat may have left."""
    suffixes = "|".join(re.escape(suffix) for suffix in STAGING_SUFFIXES)
    pattern = re.compile(rf"^{re.escape(version)}\.(?P<id>{BUILD_ID})(?:|{suffixes})"
                         rf"(?:{TEMPORARY_TAIL})?$")
    entries: dict[str, set[str]] = {}
    for name in out.names(out.path(STAGING_DIR)):
        match = pattern.match(name)
        if match:
            entries.setdefault(match["id"], set()).add(name)
    return entries


def recover(out: Output, version: str, stale_after: float, build_id: str) -> None:
    """Cleans up after dead builds of `version` (see the module docstring),
    leaving `build_id` (the caller's own build) and live builds alone. Runs
    under the commit lock when it has to move a version, so it never races
    a live commit; a build still writing its first owner file is left alone
    (`owners.being_born`).
    """
    entries = _staging_entries(out, version)
    entries.pop(build_id, None)  # our own
    if not entries:
        return
    owners = {other: load_json(out.read_bytes(
        out.path(STAGING_DIR, f"{version}.{other}{OWNER_SUFFIX}"))) for other in entries}
    dead = {other for other in entries if owner_is_stale(owners[other], stale_after)
            and not being_born(version, other, entries[other], owners[other], stale_after)}
    # Only the local rename-aside commit makes aside copies.
    asides = [other for other in sorted(dead)
              if out.local and f"{version}.{other}{ASIDE_SUFFIX}" in entries[other]]
    if asides:
        lock = CommitLock(out, version, build_id=build_id, stale_after=stale_after)
        if lock.try_acquire():
            try:
                for other in asides:
                    _restore_aside(out, version, other)
            finally:
                lock.release()
        else:
            dead -= set(asides)  # a live commit holds the lock: leave its files alone
    for other in sorted(dead):
        owner = f"{version}.{other}{OWNER_SUFFIX}"
        for name in sorted(entries[other] - {owner}):
            out.remove(out.path(STAGING_DIR, name), recursive=True)
        out.remove(out.path(STAGING_DIR, owner))


def _restore_aside(out: Output, version: str, build_id: str) -> None:
    aside = out.path(STAGING_DIR, f"{version}.{build_id}{ASIDE_SUFFIX}")
    final = out.path(version)
    if published_identity(out, version) is not None:
        return  # the new version made it in; the aside copy is just garbage
    if out.read_bytes(f"{aside}/{MANIFEST_FILE}") is None:
        return
    if os.path.lexists(final):
        # Whatever sits at the final name has no manifest: it is not a
        # published version, so it may go.
        trash = out.path(STAGING_DIR, f"{version}.{build_id}")
        out.remove(trash, recursive=True)
        os.rename(final, trash)
    os.rename(aside, final)
    sync_directory(out.root)
