"""Cleaning up after dead builds of every version, and undoing a commit cut in half.

`recover` runs when any build starts (`staging.open_staging`). It looks at
everything in ``.staging``, of every version, not only the one being built:
a nightly ``version: "{date}"`` never builds the same version twice, so
leftovers of a killed build would otherwise stay forever. A local commit
interrupted between renaming the old version aside and renaming the new one
in leaves ``<version>`` without a manifest and the old version at
``.staging/<version>.<build_id>.old``: it is renamed back (under that
version's commit lock). Then everything of dead builds
(`owners.owner_is_stale`: owner file missing or unreadable, process gone on
this host, heartbeat older than the limit) is deleted, owner files last,
and commit locks whose lease ran out are removed; a running build is never
touched. On object stores, where a commit copies files, a build killed
inside its commit may have left its version without a manifest, or a held
copy of the version it was replacing (`commit`): under the version's commit
lock, the first is deleted and the second once LATEST names something else.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ...transforms.files import sync_directory
from ...transforms.layout import (ASIDE_SUFFIX, LATEST_FILE, LOCK_SUFFIX, MANIFEST_FILE,
                                  OWNER_SUFFIX, STAGING_DIR, STAGING_SUFFIXES, TEMPORARY_TAIL,
                                  held_copy_name)
from .lock import CommitLock
from .output import Output, published_identity
from .owners import BUILD_ID, being_born, owner_is_stale, read_owner

__all__ = ["live_builds", "recover", "remove_version"]

_SUFFIXES = "|".join(re.escape(suffix) for suffix in STAGING_SUFFIXES)
# <version>.<build_id>[<suffix>][<temporary tail>]: everything a build makes
# in .staging. Build ids have a fixed shape, so the version is what precedes one.
_ENTRY = re.compile(rf"^(?P<version>.+?)\.(?P<id>{BUILD_ID})(?:|{_SUFFIXES})"
                    rf"(?:{TEMPORARY_TAIL})?$")


def _staging_entries(out: Output) -> tuple[dict[tuple[str, str], set[str]], list[str]]:
    """((version, build_id) -> names in .staging that belong to that build:
    its directory, owner file, aside copy, and temporary files a killed
    writer may have left), and the versions with a commit lock file."""
    entries: dict[tuple[str, str], set[str]] = {}
    locked = []
    for name in out.names(out.path(STAGING_DIR)):
        match = _ENTRY.match(name)
        if match:
            entries.setdefault((match["version"], match["id"]), set()).add(name)
        elif name.endswith(LOCK_SUFFIX):
            locked.append(name[:-len(LOCK_SUFFIX)])
    return entries, locked


def live_builds(out: Output, stale_after: float) -> list[tuple[str, str]]:
    """(version, build id) of every build of `out` that is running: its
    owner file in .staging is not stale, or it is still writing it
    (`owners.being_born`)."""
    entries, _ = _staging_entries(out)
    return [key for key, names in sorted(entries.items())
            if _alive(out, key, names, stale_after)]


def _owner_of(out: Output, key: tuple[str, str]) -> Any:
    """The owner record of build `key` ((version, build id)); None when it
    is missing or unreadable."""
    version, build_id = key
    return read_owner(out, out.path(STAGING_DIR, f"{version}.{build_id}{OWNER_SUFFIX}"))


def _alive(out: Output, key: tuple[str, str], names: set[str], stale_after: float) -> bool:
    owner = _owner_of(out, key)
    return not owner_is_stale(owner, stale_after) or being_born(out, key[0], key[1], names,
                                                                 owner, stale_after)


def recover(out: Output, version: str, stale_after: float, build_id: str) -> None:
    """Cleans up after dead builds of any version (see the module docstring),
    leaving `build_id` (the caller's own build of `version`) and live builds
    alone. Moves a version back only under its commit lock, so it never
    races a live commit; a build still writing its first owner file is left
    alone (`owners.being_born`).
    """
    entries, locked = _staging_entries(out)
    entries.pop((version, build_id), None)  # our own
    dead = {key for key in entries
            if not _alive(out, key, entries[key], stale_after)}
    # Only the local rename-aside commit makes aside copies.
    asides: dict[str, list[str]] = {}
    for other_version, other in sorted(dead):
        if out.local and f"{other_version}.{other}{ASIDE_SUFFIX}" in entries[(other_version, other)]:
            asides.setdefault(other_version, []).append(other)
    for other_version, builds in sorted(asides.items()):
        lock = CommitLock(out, other_version, build_id=build_id, stale_after=stale_after)
        if lock.try_acquire():
            try:
                for other in builds:
                    _restore_aside(out, other_version, other)
            finally:
                lock.release()
        else:  # a live commit holds the lock: leave its files alone
            dead -= {(other_version, other) for other in builds}
    if not out.local:
        dead = _remove_what_dead_commits_left(out, dead, build_id, stale_after)
    for other_version, other in sorted(dead):
        owner = f"{other_version}.{other}{OWNER_SUFFIX}"
        for name in sorted(entries[(other_version, other)] - {owner}):
            out.remove(out.path(STAGING_DIR, name), recursive=True)
        out.remove(out.path(STAGING_DIR, owner))
    for other_version in locked:
        CommitLock(out, other_version, build_id=build_id,
                   stale_after=stale_after).break_if_stale()


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


def remove_version(out: Output, name: str) -> None:
    """Deletes a version directory, manifest first: a reader never meets
    its files without the manifest saying it is gone."""
    out.remove(out.path(name, MANIFEST_FILE))
    out.remove(out.path(name), recursive=True)


def _remove_what_dead_commits_left(out: Output, dead: set[tuple[str, str]], build_id: str,
                                   stale_after: float) -> set[tuple[str, str]]:
    """Object stores: deletes, under each version's commit lock, the version
    directory a dead build left without a manifest (it was killed while
    copying) and its held copies (`layout.held_copy_name`) that LATEST no
    longer names. Returns the dead builds whose staging may go; those of a
    version whose lock a live build holds stay for a later build."""
    latest = (out.read_bytes(out.path(LATEST_FILE)) or b"").decode("utf-8", "replace").strip()
    cleaned = set()
    for version in sorted({version for version, _ in dead}):
        builds = {other for other_version, other in dead if other_version == version}
        lock = CommitLock(out, version, build_id=build_id, stale_after=stale_after)
        if not lock.try_acquire():
            continue
        try:
            if published_identity(out, version) is None and out.names(out.path(version)):
                out.remove(out.path(version), recursive=True)
            for other in sorted(builds):
                held = held_copy_name(version, other)
                if held != latest and out.names(out.path(held)):
                    remove_version(out, held)
        finally:
            lock.release()
        cleaned |= {(version, other) for other in builds}
    return cleaned
