"""The malloc settings that keep freed buffers for reuse (`malloc_tuning`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"

# Buffers of 100 KB to 8 MB made, written and freed, a few alive at a time:
# how a build's blocks and arrays come and go. Prints the page faults taken.
CHURN = textwrap.dedent("""
    import random, resource, sys
    import numpy as np
    from recordforge.transforms import malloc_tuning
    tuned = malloc_tuning.keep_freed_memory() if sys.argv[1] == "tuned" else False
    rng = random.Random(0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    alive = []
    for _ in range(300):
        alive.append(np.ones(rng.randint(100 << 10, 8 << 20) // 8))
        if len(alive) > 3:
            alive.pop(0)
    print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _churn(mode: str, **environment: str) -> tuple[bool, int]:
    clean = {name: value for name, value in os.environ.items()
             if name != "GLIBC_TUNABLES" and not name.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True,
                          env={**clean, **environment}, check=True)
    tuned, faults = done.stdout.split()
    return tuned == "True", int(faults)


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_kept_freed_memory_spares_most_page_faults_of_buffer_churn():
    tuned, tuned_faults = _churn("tuned")
    untuned, plain_faults = _churn("plain")
    assert tuned and not untuned
    assert tuned_faults * 4 < plain_faults, (tuned_faults, plain_faults)


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
@pytest.mark.parametrize("environment", [{"MALLOC_TRIM_THRESHOLD_": "1000000"},
                                         {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}])
def test_thresholds_set_in_the_environment_are_left_alone(environment):
    tuned, _ = _churn("tuned", **environment)
    assert not tuned
