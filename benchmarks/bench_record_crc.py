"""The extension's framing and record walk on many short records: best of N, CPU seconds.

    python benchmarks/bench_record_crc.py [--records 1000000] [--size 170] [--repeat 7]
    python benchmarks/bench_record_crc.py --baseline /path/to/old/checkout

Makes `--records` random records of `--size` bytes on average (uniform in
size from three quarters to five quarters of it, as a table's Examples
vary with their text), then times the extension's kernels that compute a
CRC32C per record, each on its own:

- ``frame``: ``frame_records`` (`framing.frame_records`: the length,
  its CRC, the record and its data CRC, for every record);
- ``walk``: ``count_walk`` over the framed buffer (`damage.count_complete`,
  the read-back of a shard: both CRCs of every record checked);
- ``walk-list``: ``walk_records`` (`damage.complete_records`, the same
  walk listing where each record starts and ends).

Each pass's answer is hashed, so that two checkouts are seen to agree.
`--baseline` runs the same passes with another checkout first on
PYTHONPATH, in a child process, alternating with this one round by
round, and prints both and their CPU ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time

from child_process import best_of_rounds, print_passes, run_in_child

PASSES = ("frame", "walk", "walk-list")


def _records(count: int, size: int) -> list[bytes]:
    """`count` random records of about `size` bytes, the same every run."""
    rng = random.Random(37)
    low, high = size * 3 // 4, size * 5 // 4
    blob = rng.randbytes(high * 64)
    return [blob[start:start + rng.randint(low, high)]
            for start in (rng.randrange(high * 63) for _ in range(count))]


def measure(count: int, size: int) -> dict:
    """One round: {pass: [cpu seconds, digest of what it returned]}."""
    from recordforge.schemas.native import kernels

    native = kernels()
    if native is None:
        sys.exit("the extension does not load")
    records = _records(count, size)
    results = {}

    def timed(name, run):
        cpu = time.process_time()
        value = run()
        results[name] = [time.process_time() - cpu, hashlib.sha256(repr(value).encode()).hexdigest()]
        return value

    framed = timed("frame", lambda: native.frame_records(records))
    timed("walk", lambda: native.count_walk(framed))
    timed("walk-list", lambda: native.walk_records(framed))
    results["frame"][1] = hashlib.sha256(framed).hexdigest()
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=170)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with, run alternately")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.round:
        print(json.dumps(measure(args.records, args.size)))
        return
    sides = {"this": None} if args.baseline is None else {"baseline": args.baseline, "this": None}
    arguments = ["--round", "--records", str(args.records), "--size", str(args.size)]
    best = best_of_rounds(args.repeat, sides,
                          lambda pythonpath: run_in_child(__file__, arguments, pythonpath))
    print(f"{args.records} records of ~{args.size} bytes, best of {args.repeat}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print_passes(best, PASSES, lambda figures: f"cpu {figures[0] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
