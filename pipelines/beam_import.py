"""Importing Beam without what a build does not use, for the console script's `build`.

A small build (a few hundred thousand rows, a few thousand images) spends
most of its CPU importing Beam (~1.2 s of ~1.4 s), before its first row.
Five pieces of that import are for nothing recordforge does:

* pandas (~0.25 s): `apache_beam.typehints` imports it whenever it is
  installed, only to register Beam's conversions between pandas objects
  and batches of elements (`apache_beam.typehints.pandas_type_compatibility`,
  for DoFns that declare pandas batch types and for Beam DataFrames).
  recordforge declares no such type, and Beam's DataFrame modules import
  those conversions themselves.
* Beam's own filesystems for ``s3://`` (boto3, ~0.08 s) and ``gs://``
  (google-cloud-storage, google.auth, ~0.15 s): recordforge reads and
  writes object stores through fsspec; Beam itself touches one only where
  its options name a location there (a temp or staging location, a
  package to stage) or its runner is Dataflow (`import_beam_filesystems`).
* httplib2 and requests (~0.05 s with pyparsing and urllib3), which Beam
  imports for its stager's downloads and its BigQuery IO's metadata
  look-up, neither of which a local build reaches.
* pymongo and bson (~0.055 s), for Beam's MongoDB IO, which no build
  uses: without them `apache_beam.io.mongodbio` takes the fallback Beam
  has for an incompatible bson package (its MongoDB IO does not work,
  the rest of Beam does) for the rest of the process, and its warning
  about that package is dropped (`_quiet_mongodb_fallback`).

`import_beam_lean` imports Beam while those modules cannot be imported,
then lets them be imported again: whatever needs them later imports them
as usual (pandas for ``pyarrow.Table.to_pandas``, Beam's S3 and GCS
filesystems, which register themselves with Beam's `FileSystems` as they
are imported). The GCS client module (`apache_beam.io.gcp.gcsio`) is also
imported by `apache_beam.io`, in the same try block as Beam's
cross-language IO wrappers: it is imported deferred rather than left out
(`lazy_modules.LazyLoader`, its body runs when first used, by one
thread while any other waits), so
`apache_beam.io` holds the names it always does; so are httplib2 and
requests, which Beam's modules import as modules and use only inside
functions (a library imported later that uses them at its own import,
such as google-auth's transport for gcsfs, runs them then). Only the console
script's `build` does this (`cli`): a caller's own process keeps Beam as
it imports it, and the other commands import Beam late or not at all.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import logging
import sys
from typing import Sequence

from .lazy_modules import LazyLoader

__all__ = ["import_beam_filesystems", "import_beam_lean"]

# Modules importing Beam does not import, by the name Beam imports them by.
_LEFT_OUT = ("pandas", "apache_beam.io.aws.s3filesystem", "apache_beam.io.gcp.gcsfilesystem",
             "bson", "pymongo")
# What Beam's MongoDB IO logs when bson cannot be imported.
_MONGODB_LOGGER = "apache_beam.io.mongodbio"
_MONGODB_FALLBACK_WARNING = "Could not find a compatible bson package."
# Modules importing Beam imports without running them; each runs when first
# used. Beam's GCS client only while google-cloud-storage is installed
# (`_DeferringFinder`); httplib2 (with pyparsing) for the stager's downloads
# of packages named by URL, requests (with urllib3) for the Dataflow job id
# Beam's BigQuery IO asks the GCE metadata server for: ~0.05 CPU-s together.
_DEFERRED = ("apache_beam.io.gcp.gcsio", "httplib2", "requests")
_DEFERRED_ONLY_WITH = {"apache_beam.io.gcp.gcsio": "google.cloud.storage"}


def import_beam_lean() -> None:
    """Imports `apache_beam` without `_LEFT_OUT` (but those imported
    already) and with `_DEFERRED` not run yet, unless Beam is imported
    already."""
    if "apache_beam" in sys.modules:
        return
    left_out = [name for name in _LEFT_OUT if name not in sys.modules]
    for name in left_out:
        sys.modules[name] = None  # importing it raises ModuleNotFoundError meanwhile
    deferring = _DeferringFinder()
    sys.meta_path.insert(0, deferring)
    try:
        with _quiet_mongodb_fallback():
            import apache_beam  # noqa: F401
    finally:
        sys.meta_path.remove(deferring)
        for name in left_out:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


@contextlib.contextmanager
def _quiet_mongodb_fallback():
    """Drops the warning of Beam's MongoDB IO that no compatible bson
    package was found: it was left out, and is no incompatible package
    (the warning would show in a verbose build)."""
    logger = logging.getLogger(_MONGODB_LOGGER)

    def not_the_fallback_warning(record: logging.LogRecord) -> bool:
        return record.getMessage() != _MONGODB_FALLBACK_WARNING

    logger.addFilter(not_the_fallback_warning)
    try:
        yield
    finally:
        logger.removeFilter(not_the_fallback_warning)


class _DeferringFinder:
    """Finds each of `_DEFERRED` where the path finder does, with a loader
    that runs its body at its first attribute lookup. Beam's GCS client only
    while google-cloud-storage is installed: without it the import fails
    at once, as Beam expects (`apache_beam.io` then leaves the GCS names
    out); one not installed at all fails at once as usual."""

    def find_spec(self, name, path=None, target=None):
        if name not in _DEFERRED:
            return None
        needs = _DEFERRED_ONLY_WITH.get(name)
        if needs is not None and not _installed(needs):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = LazyLoader(spec.loader)
        return spec


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def import_beam_filesystems(beam_args: Sequence[str]) -> None:
    """Imports the Beam filesystems `import_beam_lean` left out that the
    build's Beam options can reach: S3's where an option names an ``s3://``
    location, GCS's where one names a ``gs://`` location or the runner is
    Dataflow (which creates a default ``gs://`` temp location when none
    is given); otherwise nothing. One whose client is not installed is
    skipped, as Beam skips it."""
    args = [str(arg).lower() for arg in beam_args]
    with contextlib.suppress(ModuleNotFoundError):
        if any("s3://" in arg for arg in args):
            import apache_beam.io.aws.s3filesystem  # noqa: F401
    with contextlib.suppress(ModuleNotFoundError):
        if any("gs://" in arg or "dataflow" in arg for arg in args):
            import apache_beam.io.gcp.gcsfilesystem  # noqa: F401
