"""Beam's Prism runner: where its binary is cached, and `recordforge install-prism`.

    recordforge install-prism [--go GO] [--cache-dir DIR]

Prism is Beam's portable runner written in Go. Beam would download a release
binary from the internet the first time a `PrismRunner` pipeline runs; the
Go module proxy serves its source instead, so this builds it once with
``go install github.com/apache/beam/sdks/v2/go/cmd/prism@v<apache-beam version>``
into a cache directory and prints the binary's path. The runner profile
``configs/runners/prism.yaml`` names that path (``${RECORDFORGE_PRISM}``), so
``recordforge runner-args prism`` gives ``--prism_location=<cached binary>``
and Beam never downloads anything.

Cache directory: ``$RECORDFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/recordforge``,
else ``~/.cache/recordforge``; the binary is ``prism/v<version>/prism`` in it, one
per Beam version, so upgrading apache-beam builds a matching Prism.
Exit status: 0 installed (or already there); 1 the build failed (Go missing,
no network, a compile error), with Go's own output.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Mapping, Sequence

__all__ = ["PRISM_PACKAGE", "beam_version", "binary_path", "cache_dir", "install", "main"]

PRISM_PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"


def beam_version() -> str:
    """The installed apache-beam version: the Prism release to build (read
    from the package metadata: importing Beam takes seconds)."""
    return importlib.metadata.version("apache-beam")


def cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """recordforge's cache directory (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get("RECORDFORGE_CACHE_DIR"):
        return environ["RECORDFORGE_CACHE_DIR"]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "recordforge")


def binary_path(version: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Where the Prism binary for `version` (default: the installed
    apache-beam's) is, or will be once installed."""
    return os.path.join(cache_dir(environ), "prism", f"v{version or beam_version()}", "prism")


def install(go: str = "go", version: str | None = None) -> str:
    """Builds Prism for `version` (default: the installed apache-beam's) into
    the cache unless it is there already; returns the binary's path.

    Raises OSError when Go cannot be run and RuntimeError (with Go's output)
    when the build fails. The binary is built in a temporary directory beside
    its final place and renamed there, so an interrupted install never leaves
    a half-written binary at the cached name."""
    version = version or beam_version()
    target = binary_path(version)
    if os.access(target, os.X_OK):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".install-", dir=os.path.dirname(target)) as gobin:
        env = {**os.environ, "GOBIN": gobin}
        done = subprocess.run([go, "install", f"{PRISM_PACKAGE}@v{version}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"`{go} install {PRISM_PACKAGE}@v{version}` failed "
                               f"(exit {done.returncode}):\n{done.stdout.strip()}")
        os.replace(os.path.join(gobin, "prism"), target)
    return target


def _default_go() -> str:
    """`go` on PATH, else the standard install location."""
    found = shutil.which("go")
    if found:
        return found
    return "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else "go"


def main(argv: Sequence[str]) -> int:
    """``recordforge install-prism``: builds Prism into the cache and prints its path."""
    parser = argparse.ArgumentParser(
        prog="recordforge install-prism",
        description="Build Beam's Prism runner for the installed apache-beam version from the "
                    "Go module proxy into recordforge's cache and print its path (used by "
                    "`recordforge runner-args prism`).")
    parser.add_argument("--go", default=None, help="the go command (default: go on PATH, "
                                                   "else /usr/local/go/bin/go)")
    parser.add_argument("--cache-dir", help="cache directory (default: $RECORDFORGE_CACHE_DIR, "
                                            "$XDG_CACHE_HOME/recordforge or ~/.cache/recordforge)")
    args = parser.parse_args(list(argv))
    if args.cache_dir:
        os.environ["RECORDFORGE_CACHE_DIR"] = os.path.abspath(args.cache_dir)
    try:
        path = install(args.go or _default_go())
    except (OSError, RuntimeError) as error:
        print(f"recordforge install-prism: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0
