"""The shard write step alone, over a build's spill runs: CPU seconds, best of N.

    python benchmarks/bench_shard_write.py RUN_DIR [--repeat 5] [--shard-size 36947897] [--read-back]

RUN_DIR holds the ``*.run`` files of one split (a build cache keeps them:
``<output>/.cache``, after one build of a table). The key space is cut
into `bucket_bytes` ranges of the digest keys, each bucket is measured
(`sorting.measure_bucket`), shards are planned at rows
(`shard_cuts.plan_row_shards`) and every shard is written as a build
writes it (`file_shards.write_shard`, with its index file) into a
scratch staging directory. Per repeat it prints the CPU seconds of the
process (every thread: the write-behind and gather threads count) and the
wall seconds of the writing alone; then the sha256 of every shard and
index file, and the manifest figures (rows, bytes), so that two
checkouts (``PYTHONPATH=...``) can be compared for equal output.
With ``--read-back`` each repeat also reads every shard written back as
publishing does before it publishes a local shard
(`pipelines.publish.file_checks.read_back`: sha256, framing, both CRCs,
count), timed apart, and checks what it found against the manifest
figures.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import tempfile
import time

from recordforge.pipelines.publish.file_checks import read_back
from recordforge.transforms.writer import file_shards, shard_cuts, sorting
from recordforge.transforms.writer.elements import BucketRange, RunInfo
from recordforge.transforms.writer.run_format import RunFile
from recordforge.transforms.writer.step_setup import set_up_worker
from recordforge.transforms.writer.tuning import ShardTuning


def _runs(run_dir: str) -> list[RunInfo]:
    runs = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*.run"))):
        part = RunFile(path)
        runs.append(RunInfo("train", path, part.num_records, part.data_size, kept=True))
    return runs


def _buckets(runs: list[RunInfo], bucket_bytes: int) -> list[BucketRange]:
    """Equal ranges of the first two key bytes (digest keys spread evenly)."""
    count = max(1, sum(run.num_bytes for run in runs) // bucket_bytes)
    bounds = [(index * 65536 // count).to_bytes(2, "big") for index in range(1, count)]
    return [BucketRange("train", index, lo, hi)
            for index, (lo, hi) in enumerate(zip([b""] + bounds, bounds + [None]))]


def _write_all(specs, runs, tuning: ShardTuning, staging: str, temp: str) -> list[dict]:
    options = {"scratch_dir": temp, "memory_bytes": tuning.memory_bytes,
               "fan_in": tuning.fan_in, "prefix_len": tuning.prefix_len,
               "index_every": tuning.index_every}
    shards = [file_shards.write_shard(spec, staging_dir=staging, temp_dir=temp,
                                      compression="none", runs_of=lambda _: runs,
                                      bucket_options=options, index=True)
              for spec in specs]
    sorting.release_read_arena()
    return shards


def _read_back(shards: list[dict], staging: str) -> None:
    """Reads every shard back as publishing does and checks it against
    what its writer reported."""
    for shard in shards:
        path = os.path.join(staging, shard["file"])
        found = read_back(path, shard["file"], compression="none").check
        if found.problems or (found.size, found.sha256, found.records) != (
                shard["num_bytes"], shard["sha256"], shard["num_examples"]):
            raise SystemExit(f"{shard['file']}: read back {found}, written {shard}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shard-size", type=int, default=36_947_897)
    parser.add_argument("--read-back", action="store_true",
                        help="also time reading every shard back as publishing does")
    args = parser.parse_args(argv)
    set_up_worker()  # as the shard writer's DoFn does: malloc keeps freed memory
    tuning = ShardTuning()
    runs = _runs(args.run_dir)
    measured = [sorting.measure_bucket(bucket, runs, "runs.json")
                for bucket in _buckets(runs, tuning.bucket_bytes)]
    # The bucket references name a run list file that `runs_of` ignores.
    specs = shard_cuts.plan_row_shards("train", measured, args.shard_size)
    scratch = tempfile.mkdtemp(prefix="bench_shard_write_")
    try:
        best = best_back = None
        for _ in range(args.repeat):
            staging = os.path.join(scratch, "staging")
            shutil.rmtree(staging, ignore_errors=True)
            cpu, wall = time.process_time(), time.perf_counter()
            shards = _write_all(specs, runs, tuning, staging, os.path.join(scratch, "temp"))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            best = cpu if best is None else min(best, cpu)
            line = f"cpu {cpu:.3f} s  wall {wall:.3f} s"
            if args.read_back:
                back = time.process_time()
                _read_back(shards, staging)
                back = time.process_time() - back
                best_back = back if best_back is None else min(best_back, back)
                line += f"  read back: cpu {back:.3f} s"
            print(line)
        rows = sum(shard["num_examples"] for shard in shards)
        print(f"best cpu {best:.3f} s for {len(specs)} shards, {rows:,} rows: "
              f"{best / rows * 1e6:.3f} us a row")
        if best_back is not None:
            print(f"read back: best cpu {best_back:.3f} s, {best_back / rows * 1e6:.3f} us a "
                  f"row; both: {(best + best_back) / rows * 1e6:.3f} us a row")
        digest = hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()
        print(f"manifest entries (sha256 of shards and index files, rows, bytes): {digest}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
