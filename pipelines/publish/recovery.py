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
copy of the version it was replacing (`commit`). Held copies are found by
listing the output root, not from the staging record (a kill may leave a
copy that no record names), and the version each stands for is read from
its manifest. Under the version's commit lock: when the version has no
manifest, a held copy is copied back to its name (manifest last), LATEST is
moved from the copy to it, and the copy is deleted (`settle_version`);
whatever is left at a version's name without a manifest is deleted.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from ...schemas.errors import ConfigError
from ...transforms.files import sync_directory
from ...transforms.layout import (ASIDE_SUFFIX, LOCK_SUFFIX, MANIFEST_FILE,
                                  OWNER_SUFFIX, STAGING_DIR, STAGING_SUFFIXES, TEMPORARY_TAIL,
                                  held_copy_name)
from .errors import BuildFailed
from .lock import CommitLock
from .output import Output, latest_name, load_json, point_latest, published_identity
from .owners import BUILD_ID, being_born, owner_is_stale, read_owner
from .versions import check_version_name

__all__ = ["copy_version", "live_builds", "recover", "remove_version", "settle_version"]

_SUFFIXES = "|".join(re.escape(suffix) for suffix in STAGING_SUFFIXES)
# <version>.<build_id>[<suffix>][<temporary tail>]: everything a build makes
# in .staging. Build ids have a fixed shape, so the version is what precedes one.
_ENTRY = re.compile(rf"^(?P<version>.+?)\.(?P<id>{BUILD_ID})(?:|{_SUFFIXES})"
                    rf"(?:{TEMPORARY_TAIL})?$")
# <version>.<build_id> at the top of the output: a held copy's name.
_HELD = re.compile(rf"^(?P<stem>.+)\.(?P<id>{BUILD_ID})$")


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
        running = {other for other_version, other in entries
                   if (other_version, other) not in dead}
        dead = _remove_what_dead_commits_left(out, dead, build_id, stale_after, running)
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


def copy_version(out: Output, source: str, target: str, files: Mapping[str, int]) -> None:
    """Copies a version's `files` (name -> size) from `source` to `target`
    server-side: every file but the manifest, their sizes checked, then the
    manifest, so the copy is a version only once it is complete."""
    for file in sorted(files):
        if file != MANIFEST_FILE:
            out.fs.copy(f"{source}/{file}", f"{target}/{file}")
    copied = out.files(target)
    for file, size in files.items():
        if file != MANIFEST_FILE and copied.get(file) != size:
            raise BuildFailed(f"copying {file} to {out.display_of(target)} gave "
                              f"{copied.get(file)} bytes instead of {size}; nothing was published")
    out.fs.copy(f"{source}/{MANIFEST_FILE}", f"{target}/{MANIFEST_FILE}")


def _held_version(out: Output, name: str) -> str | None:
    """The version that the top-level entry `name` is a held copy of
    (`layout.held_copy_name`), read from its manifest; None when `name` is
    not one (a version published under its own name, or no manifest)."""
    match = _HELD.match(name)
    manifest = load_json(out.read_bytes(out.path(name, MANIFEST_FILE))) if match else None
    version = manifest.get("version") if isinstance(manifest, dict) else None
    if not isinstance(version, str) or version == name or \
            held_copy_name(version, match["id"]) != name:
        return None
    try:
        check_version_name(version)
    except ConfigError:
        return None
    return version


def _held_copies(out: Output, running: set[str]) -> tuple[dict[str, list[str]], set[str]]:
    """What overwrites on an object store left at the top of the output,
    found by listing it (a killed commit's staging record may be gone):
    (version -> the held copies of it, and the names shaped like a held copy
    that have no manifest: a copy cut short, or the unpublished remains of a
    version with such a name). Entries of `running` builds are left out."""
    held: dict[str, list[str]] = {}
    unpublished = set()
    for name in out.names(out.root):
        match = _HELD.match(name)
        if match is None or match["id"] in running or name.startswith("."):
            continue
        version = _held_version(out, name)
        if version is not None:
            held.setdefault(version, []).append(name)
        elif published_identity(out, name) is None:
            unpublished.add(name)
    return held, unpublished


def settle_version(out: Output, version: str, held: list[str]) -> None:
    """Under `version`'s commit lock: gives the version back its own name
    from a held copy when it is not published there (the copy LATEST names
    first, else the newest), moves LATEST from a held copy to the version,
    deletes the held copies (manifest first), and deletes whatever is left
    at the version's name without a manifest. Every step leaves a state this
    function finishes when run again: it copies the manifest last and moves
    LATEST before deleting what LATEST named."""
    latest = latest_name(out)
    # Newest first (build ids begin with their UTC start time), then the one
    # LATEST names before all: it is what readers were given.
    order = sorted(held, key=lambda name: _HELD.match(name)["id"], reverse=True)
    order.sort(key=lambda name: name != latest)
    for name in order:
        # (a copy cut short has no manifest: it is only deleted)
        if published_identity(out, version) is None and \
                published_identity(out, name) is not None:
            out.remove(out.path(version), recursive=True)
            copy_version(out, out.path(name), out.path(version), out.files(out.path(name)))
        if latest_name(out) == name and published_identity(out, version) is not None:
            point_latest(out, version)
        remove_version(out, name)
    if published_identity(out, version) is None and out.names(out.path(version)):
        out.remove(out.path(version), recursive=True)


def _remove_what_dead_commits_left(out: Output, dead: set[tuple[str, str]], build_id: str,
                                   stale_after: float,
                                   running: set[str]) -> set[tuple[str, str]]:
    """Object stores: under each version's commit lock, restores the
    versions that dead overwrites left under a held name (`_held_copies`,
    `settle_version`) and deletes what dead commits left without a
    manifest. Returns the dead builds whose staging may go; those of a
    version whose lock a live build holds stay for a later build."""
    held, unpublished = _held_copies(out, running | {build_id})
    cleaned = set()
    for version in sorted({version for version, _ in dead} | set(held) | unpublished):
        lock = CommitLock(out, version, build_id=build_id, stale_after=stale_after)
        if not lock.try_acquire():
            continue
        try:
            settle_version(out, version, held.get(version, []))
        finally:
            lock.release()
        cleaned |= {key for key in dead if key[0] == version}
    return cleaned
