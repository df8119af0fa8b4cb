"""Importing Beam without what a build does not use, for the console script's `build`.

A small build (a few hundred thousand rows, a few thousand images) spends
most of its CPU importing Beam (~1.2 s of ~1.4 s), before its first row.
Two pieces of that import are for nothing recordforge does:

* pandas (~0.25 s): `apache_beam.typehints` imports it whenever it is
  installed, only to register Beam's conversions between pandas objects
  and batches of elements (`apache_beam.typehints.pandas_type_compatibility`,
  for DoFns that declare pandas batch types and for Beam DataFrames).
  recordforge declares no such type, and Beam's DataFrame modules import
  those conversions themselves.
* Beam's own filesystem for ``s3://`` (boto3, ~0.08 s): recordforge reads
  and writes object stores through fsspec; Beam itself touches one only
  where its options name a location there (`import_beam_filesystems`).

`import_beam_lean` imports Beam while those modules cannot be imported,
then lets them be imported again: whatever needs them later imports them
as usual (pandas for ``pyarrow.Table.to_pandas``, Beam's S3 filesystem,
which registers itself with Beam's `FileSystems` as it is imported). Only
the console script's `build` does this (`cli`): a caller's own process
keeps Beam as it imports it, and the other commands import Beam late or
not at all.
"""

from __future__ import annotations

import sys
from typing import Sequence

__all__ = ["import_beam_filesystems", "import_beam_lean"]

# Modules importing Beam does not import, by the name Beam imports them by.
_LEFT_OUT = ("pandas", "apache_beam.io.aws.s3filesystem")


def import_beam_lean() -> None:
    """Imports `apache_beam` without `_LEFT_OUT` (but those imported
    already), unless Beam is imported already."""
    if "apache_beam" in sys.modules:
        return
    left_out = [name for name in _LEFT_OUT if name not in sys.modules]
    for name in left_out:
        sys.modules[name] = None  # importing it raises ModuleNotFoundError meanwhile
    try:
        import apache_beam  # noqa: F401
    finally:
        for name in left_out:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def import_beam_filesystems(beam_args: Sequence[str]) -> None:
    """Imports Beam's S3 filesystem when a Beam option names an ``s3://``
    location (a temp or staging location), which `import_beam_lean` left
    out; otherwise nothing."""
    if any("s3://" in str(arg).lower() for arg in beam_args):
        import apache_beam.io.aws.s3filesystem  # noqa: F401
