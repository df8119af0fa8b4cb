"""`SHA256SUMS`: every file of a version with its sha256, as `sha256sum` writes them.

GNU coreutils' format (``<hex>  <file>``, sorted by file), so
``sha256sum -c SHA256SUMS`` works inside a version directory.
`format_sha256sums` and `parse_sha256sums` are the two sides of the format;
`write_sha256sums` lists a staged build's files (every one but
``manifest.json`` and itself), taking shard digests from the manifest.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable, Mapping

from ...transforms.layout import MANIFEST_FILE, SHA256SUMS_FILE
from .manifest import SHA256_HEX, ManifestError, index_files, is_relative_inside
from .output import Output

__all__ = ["format_sha256sums", "parse_sha256sums", "write_sha256sums"]

# sha256sum escapes names with these characters; ours never need that.
_UNSAFE_IN_SUMS = re.compile(r"[\\\n\r]")


def format_sha256sums(entries: Iterable[tuple[str, str]]) -> bytes:
    """``sha256sum`` output for (relative file, hex digest) pairs, sorted by
    file: ``<hex>  <file>`` per line (two spaces: binary-agnostic mode)."""
    lines = []
    for file, digest in sorted(entries):
        if _UNSAFE_IN_SUMS.search(file) or not is_relative_inside(file):
            raise ManifestError(SHA256SUMS_FILE, f"file name {file!r} cannot be listed")
        if not SHA256_HEX.match(digest):
            raise ManifestError(SHA256SUMS_FILE, f"{file}: {digest!r} is not a sha256 hex digest")
        lines.append(f"{digest}  {file}\n")
    return "".join(lines).encode("utf-8")


def parse_sha256sums(data: bytes) -> dict[str, str]:
    """file -> hex digest from ``sha256sum`` output (text or ``*`` binary
    marker accepted). Raises `ManifestError` for a malformed line."""
    sums: dict[str, str] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(SHA256SUMS_FILE, "not UTF-8 text") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line:
            continue
        digest, sep, file = line.partition(" ")
        if not sep or not SHA256_HEX.match(digest.lower()) or file[:1] not in (" ", "*"):
            raise ManifestError(f"{SHA256SUMS_FILE} line {number}", f"not '<sha256>  <file>': {line!r}")
        file = file[1:]
        if file in sums:
            raise ManifestError(f"{SHA256SUMS_FILE} line {number}", f"{file!r} is listed twice")
        sums[file] = digest.lower()
    return sums


def _sha256_of(out: Output, path: str) -> str:
    digest = hashlib.sha256()
    with out.fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_sha256sums(out: Output, directory: str, manifest: Mapping) -> None:
    """Writes ``<directory>/SHA256SUMS`` for every file under `directory`
    (a path of ``out.fs``) but the manifest and itself: shards and their
    index files by their manifest digests (verification re-reads them
    anyway), any other file (dead letters, report) hashed here."""
    shard_sums = {shard["file"]: shard["sha256"] for summary in manifest["splits"].values()
                  for shard in summary["shards"]}
    shard_sums.update((file, shard["index"]["sha256"])
                      for file, shard in index_files(manifest).items())
    entries = []
    for file in out.files(directory):
        if file in (MANIFEST_FILE, SHA256SUMS_FILE):
            continue
        digest = shard_sums.get(file) or _sha256_of(out, f"{directory}/{file}")
        entries.append((file, digest))
    out.write_atomic(f"{directory}/{SHA256SUMS_FILE}", format_sha256sums(entries))
