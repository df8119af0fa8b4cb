"""The errors that stop a build from publishing, and what the CLI makes of them.

`VersionExistsError`: the version is already published (the CLI exits 2 and
suggests --overwrite). `BuildFailed` (exit 1; `ConcurrentBuildError` is
one): nothing was published. `PublishedWithErrors` (exit 3): the version
is published but publishing did not finish: `LatestNotUpdated` when
``LATEST`` could not be replaced (running the same build again finishes
it), or the commit could not be made durable and could not be undone.
"""

from __future__ import annotations

__all__ = ["BuildFailed", "ConcurrentBuildError", "LatestNotUpdated", "PublishError",
           "PublishedWithErrors", "VersionExistsError"]


class PublishError(Exception):
    """Base of the errors that stop a build from publishing."""


class VersionExistsError(PublishError):
    """The version is already published and overwrite was not requested."""


class BuildFailed(PublishError):
    """The build is not published: error budget exceeded, rows lost, an empty
    split, damaged output, ...

    reasons: the top dead-letter reasons as (reason, count, sample record or
    None). kept_at: where the dead-letter files of the failed build were
    moved (a redacted URL), or None. problems: verification problems, if any.
    """

    def __init__(self, message: str, *, reasons=(), kept_at: str | None = None,
                 problems=()):
        super().__init__(message)
        self.reasons = list(reasons)
        self.kept_at = kept_at
        self.problems = list(problems)
        self.report_at: str | None = None

    def with_kept_at(self, kept_at: str | None, report_at: str | None = None) -> "BuildFailed":
        """The same failure, its message extended by where dead letters
        (and the report) went."""
        message = str(self)
        if kept_at:
            message += f"\ndead-letter files of this build were kept in {kept_at}"
        if report_at:
            message += f"\nthe report of this build was kept at {report_at}"
        failure = type(self)(message, reasons=self.reasons, kept_at=kept_at or None,
                             problems=self.problems)
        failure.report_at = report_at
        return failure


class ConcurrentBuildError(BuildFailed):
    """Another build published (or is publishing) the same version."""


class PublishedWithErrors(PublishError):
    """Publishing did not finish cleanly; the message says exactly what
    state the output is in. `published`: whether the new version is the
    published one (False: nothing new was published, but the previous
    version is not where readers look for it either)."""

    def __init__(self, message: str, *, published: bool = True):
        super().__init__(message)
        self.published = published


class LatestNotUpdated(PublishedWithErrors):
    """The version is published, but ``LATEST`` still names another one.
    A build of the same version without overwrite finishes the update."""

    def __init__(self, message: str, *, version: str):
        super().__init__(message)
        self.version = version
