"""A build that runs out of disk leaves nothing behind (issue 41.10).

The output lives on a real tmpfs (needs root) filled so that a generated
number of KiB short of what a build needs is free: the build runs out of
space in its late steps (statistics, report, keeping them under .failed/,
SHA256SUMS, the manifest, the commit lock, LATEST). Whatever it says, what
is on disk agrees: exit 1 leaves no version, no LATEST, an empty .staging
and no temporary file anywhere (nor an empty folder under .failed/); exit 0
or 3 leaves a complete version. With the space back, the build publishes.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines.publish import verify

CONFIG = textwrap.dedent("""\
    name: full-disk
    version: "1.0.0"
    source: {{type: csv, path: {csv}}}
    features:
      id: {{type: int64}}
      name: {{type: string}}
      score: {{type: float}}
    splits: {{train: 0.8, test: 0.2}}
    key: id
    output: {{path: "{output}", compression: gzip, shard_size: 1MB}}
    """)


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    """(a 4 MiB tmpfs, the config of a build writing to it, the KiB that build uses)."""
    base = tmp_path_factory.mktemp("full-disk")
    mount = base / "mnt"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    rng = random.Random(1)
    csv = base / "rows.csv"
    csv.write_text("id,name,score\n" + "".join(
        f"{i},{''.join(rng.choice('abcdefghij') for _ in range(40))},{rng.random()}\n"
        for i in range(3000)))
    config = base / "config.yaml"
    config.write_text(CONFIG.format(csv=csv, output=mount / "out"))
    try:
        before = _free_kib(mount)
        assert _build(config).returncode == 0
        used = before - _free_kib(mount)
        yield mount, config, used
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _free_kib(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize // 1024


def _build(config: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("recordforge")
    return subprocess.run([str(script), "build", str(config), "--",
                           "--direct_running_mode=in_memory"],
                          capture_output=True, text=True, timeout=300)


def _leftovers(root: Path) -> list[str]:
    """Temporary files anywhere under `root`, and empty folders under .failed/."""
    found = [str(path) for path in root.rglob("*.tmp")]
    failed = root / ".failed"
    if failed.exists():
        found += [str(path) for path in [failed, *failed.rglob("*")]
                  if path.is_dir() and not any(path.iterdir())]
    return found


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(short_kib=st.integers(min_value=4, max_value=160))
def test_a_full_disk_late_in_the_build_leaves_nothing_behind(disk, short_kib):
    mount, config, used = disk
    for path in mount.iterdir():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    free = _free_kib(mount)
    filler = mount / "filler"
    with open(filler, "wb") as handle:  # leaves `used - short_kib` KiB free
        for _ in range(max(0, free - used + short_kib)):
            handle.write(bytes(1024))
    root = mount / "out"
    done = _build(config)
    verdict = [line for line in done.stderr.splitlines() if line.startswith("recordforge build")]
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _leftovers(root) == [], verdict
    assert not (root / ".staging").exists() or list((root / ".staging").iterdir()) == [], \
        (verdict, list((root / ".staging").iterdir()))
    if done.returncode == 1:
        assert "nothing was published" in verdict[0], verdict
        assert not (root / "1.0.0").exists() and not (root / "LATEST").exists()
    else:
        assert verify.verify_dataset(str(root / "1.0.0")).ok
    filler.unlink()
    again = _build(config)
    assert again.returncode in ((0,) if done.returncode != 0 else (2,)), again.stderr[-3000:]
    assert (root / "LATEST").read_text() == "1.0.0\n"
