"""Reading and converting JSONL: the native kernel against pure Python, best of N CPU seconds.

    python benchmarks/bench_jsonl.py --rows 200000 --repeat 5
    python benchmarks/bench_jsonl.py --baseline /path/to/old/checkout   # and the old code

Writes the end-to-end benchmark's five-column table (`e2e_workloads.make_table`)
as JSONL (`bench_native.write_jsonl`), then, in one process per path and
in rounds (native, python[, baseline], native, ...), times what a build's
read step and convert step do with it: ``read``: `read_range` of the
whole file batched as a build batches it (`sources.outputs.batched`: by
the bytes of the lines, or 1000 rows in an older checkout);
``read+convert``: the same, each batch converted
(`BatchConverter.convert_observed_batch`, labels counted, digests under a
salt) as the build's convert step does. Statistics are left out (their
own benchmark). Only functions every version has are called, so an older
checkout is timed the same way (``--baseline DIR``: a PYTHONPATH whose
recordforge is the code to compare with, its native path).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from child_process import run_in_child  # noqa: E402
from e2e_workloads import LABELS, TABLE_FEATURES, make_table  # noqa: E402

BATCH_SIZE = 1000  # (rows of other sources: JSONL is cut by bytes)


def _measure(table: str, repeat: int) -> dict:
    """Best CPU seconds of each step in this process (see the module)."""
    import fsspec

    from recordforge.schemas.feature_config import parse_features
    from recordforge.transforms.batch_converter import BatchConverter
    from recordforge.transforms.readers.tables import plan_table_ranges, read_range
    from recordforge.transforms.sources.outputs import ROWS, batched

    fs = fsspec.filesystem("file")
    specs = parse_features({name: {**body, "from": name} for name, body in TABLE_FEATURES.items()},
                           nested=False)
    converter = BatchConverter(specs, {}, "id", digest_salt=b"bench")
    [unit] = plan_table_ranges(fs, table, "jsonl", range_bytes=0)

    def read(each=None) -> int:
        rows = 0
        for tag, value in batched(read_range(fs, unit, "jsonl"), BATCH_SIZE, unit.source):
            if tag == ROWS:
                rows += len(value)
                if each is not None:
                    each(value)
        return rows

    def convert(batch):
        converter.convert_observed_batch(batch, "label", tuple(LABELS))

    timings = {}
    for name, each in (("read", None), ("read+convert", convert)):
        best = float("inf")
        for _ in range(repeat):
            started = time.process_time()
            rows = read(each)
            best = min(best, time.process_time() - started)
        timings[name] = best
    return {"rows": rows, **timings}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with (its native path)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # (a path's own process)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(_measure(args.measure, args.repeat)))
        return
    from bench_native import write_jsonl

    with tempfile.TemporaryDirectory() as scratch:
        directory = pathlib.Path(scratch)
        table = write_jsonl(make_table(directory, args.rows)[1], directory / "table.jsonl")
        megabytes = table.input_bytes / 1e6
        paths = [("native", "0", None), ("python", "1", None)]
        if args.baseline is not None:
            paths.append(("baseline", "0", args.baseline))
        print(f"{args.rows:,} rows, {megabytes:,.1f} MB of JSONL; best of {args.repeat} "
              "CPU seconds per path, in rounds")
        print(f"{'path':<10} {'read s':>8} {'r+conv s':>9} {'convert s':>9} {'MB/cpu-s':>9}")
        for _ in range(args.rounds):
            for name, pure, pythonpath in paths:
                found = run_in_child(__file__, ["--measure", table.path, "--repeat",
                                                str(args.repeat)], pythonpath,
                                     env={"RECORDFORGE_PURE_PYTHON": pure})
                both = found["read+convert"]
                print(f"{name:<10} {found['read']:>8.3f} {both:>9.3f} "
                      f"{both - found['read']:>9.3f} {megabytes / both:>9.1f}")


if __name__ == "__main__":
    main()
