"""A benchmark's measuring pass run in a child process, with a chosen checkout's recordforge.

A benchmark that compares two checkouts (`--baseline PYTHONPATH`) runs its
measuring pass in a fresh interpreter per side and round, so that each side
imports its own recordforge and extension and neither warms the other's
caches. `run_in_child` runs one pass and returns what it printed as JSON;
`best_of_rounds` alternates the sides round by round and keeps each pass's
least times, checking that every round gave the same answer, and
`print_passes` prints them with the CPU ratio against the baseline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, Mapping, Sequence

__all__ = ["best_of_rounds", "print_passes", "run_in_child"]


def run_in_child(script: str, arguments: Sequence[str], pythonpath: str | None = None,
                 env: Mapping[str, str] | None = None) -> Any:
    """Runs `script` with `arguments` in a fresh interpreter and returns the
    JSON value of the last line it printed. `pythonpath`, when given, is the
    child's PYTHONPATH (the checkout measured); `env` adds variables to this
    process's environment."""
    child_env = {**os.environ, **(env or {})}
    if pythonpath is not None:
        child_env["PYTHONPATH"] = pythonpath
    output = subprocess.run([sys.executable, script, *arguments], env=child_env, check=True,
                            capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def best_of_rounds(repeat: int, sides: Mapping[str, str | None],
                   one_round: Callable[[str | None], Mapping[str, Sequence]]
                   ) -> dict[str, dict[str, list]]:
    """``side -> pass name -> [least of each time..., answer]`` over `repeat`
    rounds, each calling ``one_round(pythonpath)`` for every side in turn.
    `one_round` gives ``pass name -> [time, ..., answer]``; a side whose
    answer changes between rounds ends the benchmark."""
    best: dict[str, dict[str, list]] = {side: {} for side in sides}
    for _ in range(repeat):
        for side, pythonpath in sides.items():
            for name, (*times, answer) in one_round(pythonpath).items():
                seen = best[side].setdefault(name, [*times, answer])
                seen[:-1] = [min(old, new) for old, new in zip(seen[:-1], times)]
                if seen[-1] != answer:
                    sys.exit(f"{side} {name}: {answer!r} differs from an earlier round's")
    return best


def print_passes(best: Mapping[str, Mapping[str, list]], names: Sequence[str],
                 describe: Callable[[list], str]) -> None:
    """Prints a line a pass of `names`: each side's figures (`describe` of
    its ``[times..., answer]``) and, where a ``baseline`` side ran, the CPU
    ratio of the first times, once both sides are seen to give the same
    answer (else the benchmark ends)."""
    for name in names:
        line = "  ".join(f"{side} {describe(best[side][name])}" for side in best)
        if "baseline" in best:
            if best["this"][name][-1] != best["baseline"][name][-1]:
                sys.exit(f"{name}: this code's answer differs from the baseline's")
            line += f"  cpu ratio {best['baseline'][name][0] / best['this'][name][0]:.2f}x"
        print(f"{name:9s} {line}")
