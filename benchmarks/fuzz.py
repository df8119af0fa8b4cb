"""Long fuzz runs of the reliability properties.

Runs every Hypothesis property of tests/reliability/test_fuzz_inputs.py (the
TFRecord reader, the Example decoder, the CSV/JSONL readers, the config
loader) for a time budget each, in rounds of fresh random examples, and
prints how many examples each property ran. A property that finds a failing
input stops the run with Hypothesis's report (the shrunk input and a
reproduction blob).

    python benchmarks/fuzz.py [--seconds-per-property 30] [--round 2000] [-k csv]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

PROPERTIES = Path(__file__).resolve().parents[1] / "tests" / "reliability" / "test_fuzz_inputs.py"


def load_properties(round_size: int):
    """The property module, with `round_size` examples per Hypothesis run;
    returns (name, test function) pairs."""
    os.environ["RECORDFORGE_FUZZ_EXAMPLES"] = str(round_size)
    spec = importlib.util.spec_from_file_location("fuzz_properties", PROPERTIES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(name, function) for name, function in vars(module).items()
            if name.startswith("test_") and hasattr(function, "hypothesis")]


def run_property(function, seconds: float) -> tuple[int, int, float]:
    """Runs `function` in rounds until `seconds` pass; returns (examples,
    rounds, elapsed seconds)."""
    count = 0
    inner = function.hypothesis.inner_test

    def counted(*args, **kwargs):
        nonlocal count
        count += 1
        return inner(*args, **kwargs)

    # Hypothesis documents inner_test as replaceable (for wrappers like this).
    function.hypothesis.inner_test = counted
    started = time.monotonic()
    rounds = 0
    try:
        while time.monotonic() - started < seconds:
            function()
            rounds += 1
    finally:
        function.hypothesis.inner_test = inner
    return count, rounds, time.monotonic() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds-per-property", type=float, default=30.0)
    parser.add_argument("--round", type=int, default=2000,
                        help="examples per Hypothesis run (each run draws fresh inputs)")
    parser.add_argument("-k", dest="select", default="",
                        help="only properties whose name contains this")
    args = parser.parse_args(argv)
    properties = [(name, function) for name, function in load_properties(args.round)
                  if args.select in name]
    print(f"{'property':<45} {'examples':>9} {'rounds':>6} {'seconds':>8} {'per s':>7}")
    total = 0
    for name, function in properties:
        count, rounds, elapsed = run_property(function, args.seconds_per_property)
        total += count
        print(f"{name:<45} {count:>9} {rounds:>6} {elapsed:>8.1f} {count / elapsed:>7.0f}",
              flush=True)
    print(f"{'total':<45} {total:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
