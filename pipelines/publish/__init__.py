"""What publishing means: a staged build checked, committed, and read back.

A build never writes at a final name. It starts in a staging directory and
ends as a complete version or nothing. The modules, in the order a build
meets them (on-disk names: `transforms.layout`):

- `versions`: version names ({date}/{datetime} templates, safe directory names)
- `output`: the output location (fsspec filesystem + root, small file I/O)
- `owners`: build ids, owner records, heartbeats, when a build is dead
- `lock`: the commit lock, one publisher per version
- `recovery`: cleaning up after dead builds, undoing a half-done commit
- `staging`: `begin_build` and the `Staging` directory the pipeline writes into
- `budget`: the pipeline's result, row accounting, the error budget
- `manifest`: building, writing and checking manifest.json
- `checksums`: SHA256SUMS
- `file_checks`: reading one file back (size, sha256, framing, Examples)
- `early_checks`: reading a local build's shards back while the pipeline runs
- `reading_processes`: the processes that read back, which end with the build
- `dataset_paths`: which files of a version a reader opens (verify, inspect)
- `held_manifest`: a shard read against the manifest its reader holds (readers)
- `verify`: verifying a staged or published version; `recordforge verify`
- `report`: report.html (gathering from the shards, writing);
  `report_html` renders it
- `commit`: staged build -> published version (exchange, rename or copy), LATEST
- `read_back`: what a failure once the commit began left, read back, as the outcome
- `finalizing`: `finalize`, which runs the checks, writes and commit in order
- `errors`: the errors that stop a build from publishing
- `inspect`: `recordforge inspect`, records printed as JSON lines

This package exports the driver's API: `begin_build` (`begin_pipeline_build`
for a build a pipeline publishes itself), `finalize`,
`resolve_version`, `read_latest`, `finish_latest` (a retry finishing a
LATEST update that failed) and the errors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .commit import read_latest
    from .errors import (BuildFailed, ConcurrentBuildError, LatestNotUpdated, PublishError,
                         PublishedWithErrors, VersionExistsError)
    from .finalizing import PublishResult, early_shard_checks, finalize, finish_latest
    from .recovery import live_builds
    from .staging import Staging, StagingRef, begin_build, begin_pipeline_build
    from .versions import check_version_name, resolve_version

__all__ = ["BuildFailed", "ConcurrentBuildError", "LatestNotUpdated", "PublishError",
           "PublishResult", "PublishedWithErrors", "Staging", "StagingRef", "VersionExistsError",
           "begin_build", "begin_pipeline_build", "check_version_name", "early_shard_checks",
           "finalize", "finish_latest", "live_builds", "read_latest", "resolve_version"]

# Loaded on first use (PEP 562): the processes that read shards back
# (`reading_processes`) import `file_checks` through this package, and must
# not import what committing and finalizing need (fsspec, numpy, the
# statistics) to read a file.
_MODULE_OF = {
    "read_latest": "commit",
    "BuildFailed": "errors", "ConcurrentBuildError": "errors", "LatestNotUpdated": "errors",
    "PublishError": "errors", "PublishedWithErrors": "errors", "VersionExistsError": "errors",
    "PublishResult": "finalizing", "early_shard_checks": "finalizing", "finalize": "finalizing",
    "finish_latest": "finalizing",
    "live_builds": "recovery",
    "Staging": "staging", "StagingRef": "staging", "begin_build": "staging",
    "begin_pipeline_build": "staging",
    "check_version_name": "versions", "resolve_version": "versions",
}


def __getattr__(name: str) -> Any:
    try:
        module = _MODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
