"""What a failure after the commit began left in the output, read back, as the build's outcome.

Once `commit.commit` starts, an error no longer means that nothing was
published: the version may be in place before a later step failed (a sync,
LATEST moved back from a held copy, the lock's release, removing staged
files). `after_failure` reads the output back, the version's manifest
against the one this build wrote and the name in LATEST, and gives the
outcome that is true of it:

* the version at its name is not this build's: `BuildFailed` (exit 1),
  whose message ends with what is at the version's name (the previous
  version, complete; nothing; files without a manifest, which the next
  build removes) and what LATEST names;
* it is this build's: None, and the build goes on to LATEST (it
  published); `late_warning` then names the step that failed, what is
  there, and that the next build removes what the step left;
* the output cannot be read back: `PublishedWithErrors` (exit 3), saying
  the version may or may not be published and how to find out;
* a `PublishedWithErrors` of the commit (published, but not durable; or
  the previous version left at another name) keeps its words and kind, the
  read-back added.

The LATEST update reads back its own failures (`commit.write_latest`).
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from ...transforms.layout import LATEST_FILE
from ...transforms.urls import redact_url
from .errors import BuildFailed, PublishedWithErrors
from .output import Output, latest_name, published_identity

__all__ = ["OnDisk", "after_failure", "late_warning", "read_back", "warn"]


class OnDisk(NamedTuple):
    """The version's state in the output, read back. ours: its manifest is
    the one this build wrote; holds: what its name holds, in words;
    latest: the name in LATEST (None: no LATEST)."""

    ours: bool
    holds: str
    latest: str | None

    def describe(self, out: Output, version: str) -> str:
        latest = f"names {self.latest!r}" if self.latest else "does not exist"
        return (f"read back: {out.display_of(out.path(version))} holds {self.holds}; "
                f"{LATEST_FILE} {latest}")


def read_back(out: Output, version: str, ours: str) -> OnDisk:
    """The state of `version` in `out`; `ours`: the sha256 of the manifest
    this build wrote. Raises OSError when the output cannot be read."""
    identity = published_identity(out, version)
    if identity == ours:
        holds = "this build's version, complete (its manifest is the one this build wrote)"
    elif identity is not None:
        holds = "the previous version, complete"
    elif out.names(out.path(version)):
        holds = "files without a manifest (no published version; the next build removes them)"
    else:
        holds = "nothing"
    return OnDisk(identity == ours, holds, latest_name(out))


def after_failure(out: Output, version: str, ours: str, step: str,
                  error: BaseException) -> BuildFailed | PublishedWithErrors | None:
    """The error to raise for `error`, raised by `step` once the commit
    began (see the module docstring), its message ending with what was read
    back; None when the version is this build's (it published)."""
    reason = str(error) if isinstance(error, (BuildFailed, PublishedWithErrors)) else \
        f"{step} failed ({type(error).__name__}: {redact_url(str(error))})"
    try:
        state = read_back(out, version, ours)
    except OSError as read_error:
        return PublishedWithErrors(
            f"{reason}, and the output cannot be read back ({type(read_error).__name__}: "
            f"{redact_url(str(read_error))}): version {version!r} may or may not be published "
            f"at {out.display_of(out.path(version))}; `recordforge verify {out.display}` says "
            "which version is there and whether it is whole", published=False)
    if isinstance(error, PublishedWithErrors):  # it says what the commit left; add the rest
        return PublishedWithErrors(f"{reason}; {state.describe(out, version)}",
                                   published=error.published)
    if state.ours:
        return None
    nothing = "" if "nothing was published" in reason else "; nothing was published"
    return BuildFailed(f"{reason}{nothing}; {state.describe(out, version)}")


def late_warning(out: Output, version: str, ours: str, step: str, error: BaseException) -> str:
    """What to say of a step that failed after this build's version was
    published (and LATEST moved as asked): the build published, and what
    the step left is a dead build's leftovers."""
    try:
        state = read_back(out, version, ours).describe(out, version)
    except OSError as read_error:
        state = f"the output cannot be read back now ({type(read_error).__name__})"
    return (f"version {version!r} was published, but {step} did not finish "
            f"({type(error).__name__}: {redact_url(str(error))}); {state}; the next build "
            "removes what it left")


def warn(message: str) -> None:
    """Prints a warning of a build that published: stderr may be gone (a
    closed pipe) and then the status alone says what happened."""
    try:
        print(f"recordforge: warning: {redact_url(message)}", file=sys.stderr)
    except OSError:
        pass
