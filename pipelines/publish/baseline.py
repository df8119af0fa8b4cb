"""The baselines a build's statistics are compared with: earlier published versions' `stats.json`, read as untrusted input.

Which versions (`validation.baseline`, `BaselineChoice`): the version
LATEST names (the default), one version pinned by name, or the last N
published versions (newest first, by their manifests' ``created``).

An earlier version is read by the rules `verify` and `inspect` follow
(`dataset_paths`): a safe version name of a real directory of the output
root (LATEST's content or a link cannot lead elsewhere), regular files only
(no link, FIFO or device), sizes checked before reading, JSON parsed only
when nested a bounded depth, and the document checked field by field for
what drift reads (`schemas.stats.stored`). A version that fails any of it
is a `Baseline` with a `problem` naming the file and saying why: the build
compares with nothing in its place, warns, and every gate that needs it
says the baseline is unusable. Nothing here raises for what an earlier
build left behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...schemas.stats import stored_statistics_problem
from ...transforms.layout import MANIFEST_FILE, STATS_FILE
from ...transforms.urls import redact_url
from .dataset_paths import (DatasetNotFoundError, Located, load_version_manifest, locate_root,
                            locate_version, parse_json, read_limited, version_in_root)

__all__ = ["Baseline", "BaselineChoice", "MAX_STATS_BYTES", "load_baselines"]

# stats.json holds per feature a few KB (a value histogram of at most 2,048
# buckets, 50 top values): 256 MiB is tens of thousands of features.
MAX_STATS_BYTES = 256 << 20
_WHAT_TO_DO = ("the build compares with nothing in its place; pin another version with "
               "validation.baseline, or rebuild or remove that version")


@dataclass(frozen=True)
class BaselineChoice:
    """Which earlier versions a build compares with: `version` (pinned by
    name), else the `last` N published versions, else (both None) the
    version LATEST names."""

    version: str | None = None
    last: int | None = None

    def describe(self) -> str:
        if self.version is not None:
            return f"version {self.version!r}"
        if self.last is not None:
            return f"the last {self.last} published version(s)"
        return "the version LATEST names"


@dataclass(frozen=True)
class Baseline:
    """One version compared with. stats: its checked stats.json, or None
    with `problem` saying why it cannot be used (naming the file)."""

    version: str | None
    stats: dict | None = None
    problem: str | None = None


def load_baselines(output_path: str, choice: BaselineChoice = BaselineChoice()
                   ) -> tuple[list[Baseline], list[str]]:
    """(the baselines `choice` names, newest first; warnings). No baseline
    at all (a first build, LATEST absent, no published version) is an
    empty list; a version that cannot be used is a Baseline with a
    problem, also given as a warning."""
    try:
        root = locate_root(output_path)
    except DatasetNotFoundError:
        return [], []  # nothing published there yet: no baseline, nothing to warn of
    except (OSError, ValueError, ImportError) as error:
        return [], [f"the output {redact_url(output_path)} cannot be read for a baseline "
                    f"({type(error).__name__}: {error}); the build compares with nothing"]
    if choice.version is not None:
        baselines = [_load(_in_root(root), choice.version)]
    elif choice.last is not None:
        versions, warnings = _published_versions(root)
        baselines = [_load(_in_root(root), version) for version in versions[:choice.last]]
        return baselines, warnings + _warnings(baselines)
    else:
        baselines = _latest(output_path)
    return baselines, _warnings(baselines)


def _warnings(baselines: list[Baseline]) -> list[str]:
    return [f"the baseline {baseline.problem}; {_WHAT_TO_DO}" for baseline in baselines
            if baseline.problem is not None]


def _in_root(root: Located) -> Located:
    """A fresh `Located` of the output root (`version_in_root` moves it)."""
    return Located(root.fs, root.version_dir, root.url)


def _latest(output_path: str) -> list[Baseline]:
    located = locate_version(output_path)
    if located.latest is None and not located.problems:
        return []  # no LATEST: nothing published yet
    if located.problems:
        where = redact_url(located.url)
        return [Baseline(located.latest, problem=f"named by {where}/"
                         f"{located.problems[0]}")]
    return [_stats_of(located, located.latest)]


def _load(root: Located, version: str) -> Baseline:
    located = version_in_root(root, version)
    if located.problems:
        return Baseline(version, problem=f"in {redact_url(root.url)}: {located.problems[0]}")
    return _stats_of(located, version)


def _stats_of(located: Located, version: str) -> Baseline:
    """The checked stats.json of the version `located` points at."""
    where = f"{redact_url(located.url)}/{STATS_FILE}"
    path = f"{located.version_dir}/{STATS_FILE}"
    try:
        if not located.fs.exists(path):
            return Baseline(version, problem=f"{where} does not exist (version {version!r} was "
                            "built with statistics off, or is not a recordforge version)")
        document = parse_json(read_limited(located.fs, path, MAX_STATS_BYTES))
    except (OSError, ValueError) as error:
        return Baseline(version, problem=f"{where} cannot be used: {error}")
    problem = stored_statistics_problem(document)
    if problem is not None:
        return Baseline(version, problem=f"{where} cannot be used: {problem}")
    return Baseline(version, stats=document)


def _published_versions(root: Located) -> tuple[list[str], list[str]]:
    """(the published versions of the root, newest first by their
    manifests' ``created``; warnings for versions whose manifest cannot be
    used). Hidden entries (staging, held copies) and links are not versions."""
    dated, warnings = [], []
    try:
        entries = root.fs.ls(root.version_dir, detail=True)
    except OSError as error:
        return [], [f"listing {redact_url(root.url)} for baselines failed: {error}"]
    for info in entries:
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if info.get("type") != "directory" or info.get("islink") or name.startswith("."):
            continue
        located = version_in_root(_in_root(root), name)
        if located.problems or not located.fs.exists(f"{located.version_dir}/{MANIFEST_FILE}"):
            continue  # not a published version (a build not committed, a foreign folder)
        manifest, problem = load_version_manifest(located)
        if problem is not None:
            warnings.append(f"version {name!r} is left out of the baselines: "
                            f"{redact_url(located.url)}/{problem}")
            continue
        dated.append((manifest["created"], name))
    return [name for _, name in sorted(dated, reverse=True)], warnings
