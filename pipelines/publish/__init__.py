"""What publishing means: a staged build checked, committed and read back."""

from .finalizing import (FAILED_DIR, LATEST_FILE, BuildFailed, ConcurrentBuildError,
                       PublishError, PublishResult, VersionExistsError, begin_build,
                       check_version_name, finalize, read_latest, resolve_version)

__all__ = ["FAILED_DIR", "LATEST_FILE", "BuildFailed", "ConcurrentBuildError", "PublishError",
           "PublishResult", "VersionExistsError", "begin_build", "check_version_name",
           "finalize", "read_latest", "resolve_version"]
