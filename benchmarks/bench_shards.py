"""Shard writer benchmark: throughput of `WriteShards` and peak memory.

The data is generated inside the pipeline (a Create of seeds, then a DoFn
that yields ExampleBatches), so the input is never held in memory: what the
memory figure shows is the writer's own footprint. Records are serialized
Examples shaped like table rows (~1 KB of Zipf-distributed text, gzip
compresses them ~2.5x), like small table rows (5 columns, ~150 bytes) or
like encoded images (random bytes, 16-80 KB). Each row gets its own key, as
with ``key: path``.

Per run it reports:
- end-to-end time, and the time of the same pipeline with the writer
  replaced by a byte count (generation alone); writer throughput is
  example bytes / (end-to-end - generation), i.e. the writer stage alone;
- CPU seconds of the whole process tree (and the kernel's share of them),
  and example MB per CPU second (on a shared machine, wall time also
  measures the neighbours);
- peak RSS of the whole process tree (psutil, sampled every 0.1 s);
- the shards: count and size spread per split.

Usage:
  python benchmarks/bench_shards.py --gigabytes 1 --kind table --compression none
  python benchmarks/bench_shards.py --gigabytes 4 --kind image --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import string
import tempfile
import threading
import time

import apache_beam as beam
import psutil
from apache_beam.options.pipeline_options import PipelineOptions

from recordforge.pipelines.runners import local_runner  # the engine of a local build
from recordforge.schemas.example import encode_example
from recordforge.transforms.writer import WriteShards

ROWS_PER_BATCH = 1000
BATCHES_PER_SEED = 16
POOL_SIZE = 4096


class _GenerateBatches(beam.DoFn):
    """seed -> BATCHES_PER_SEED ExampleBatches of ROWS_PER_BATCH rows."""

    def __init__(self, kind: str):
        self._kind = kind

    def setup(self):
        rng = random.Random(7)
        if self._kind == "image":
            self._pool = [encode_example({"image/encoded": rng.randbytes(rng.randint(16_000, 80_000)),
                                          "label": rng.randrange(10)})
                          for _ in range(256)]
        elif self._kind == "small":
            words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
                     for _ in range(5000)]
            self._pool = [encode_example({
                "id": rng.randrange(1 << 40), "score": rng.random(), "label": rng.randrange(10),
                "name": " ".join(rng.choices(words, k=6))[:50], "city": rng.choice(words)})
                for _ in range(POOL_SIZE)]
        else:
            words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
                     for _ in range(5000)]
            weights = [1 / (rank + 1) for rank in range(len(words))]
            self._pool = [encode_example({
                "id": rng.randrange(1 << 40), "score": rng.random(), "label": rng.randrange(10),
                "text": " ".join(rng.choices(words, weights, k=190))[:950]})
                for _ in range(POOL_SIZE)]

    def process(self, seed: int):
        pool = self._pool
        rng = random.Random(seed)
        for batch in range(BATCHES_PER_SEED):
            base = (seed * BATCHES_PER_SEED + batch) * ROWS_PER_BATCH
            yield [((base + row).to_bytes(8, "big"), pool[rng.randrange(len(pool))])
                   for row in range(ROWS_PER_BATCH)]


class _PeakRss:
    """Samples the RSS of this process and all its children, and adds up
    their CPU time (user + system)."""

    def __init__(self, interval: float = 0.1):
        self.peak = 0
        self.cpu_seconds = 0.0
        self.system_seconds = 0.0
        self._cpu: dict[int, tuple[float, float]] = {}
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                    times = process.cpu_times()
                    self._cpu[process.pid] = (times.user, times.system)
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self.cpu_seconds = (sum(user + system for user, system in self._cpu.values())
                                - sum(self._cpu_start))
            self.system_seconds = (sum(system for _, system in self._cpu.values())
                                   - self._cpu_start[1])
            self._stop.wait(self._interval)

    def __enter__(self):
        times = psutil.Process().cpu_times()
        self._cpu_start = (times.user, times.system)
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()


def _seeds_for(kind: str, gigabytes: float) -> tuple[list[int], int]:
    sample = _GenerateBatches(kind)
    sample.setup()
    mean = sum(map(len, sample._pool)) / len(sample._pool)
    seeds = max(1, round(gigabytes * 1e9 / (mean * ROWS_PER_BATCH * BATCHES_PER_SEED)))
    return list(range(seeds)), int(seeds * BATCHES_PER_SEED * ROWS_PER_BATCH * mean)


def _options(workers: int) -> PipelineOptions:
    if workers > 1:
        return PipelineOptions(["--direct_running_mode=multi_processing",
                                f"--direct_num_workers={workers}"])
    return PipelineOptions(["--direct_running_mode=in_memory", "--direct_num_workers=1"])


def _generation_only(seeds, kind, workers) -> float:
    start = time.perf_counter()
    options = _options(workers)
    with beam.Pipeline(runner=local_runner(options), options=options) as pipeline:
        _ = (pipeline
             | "Seeds" >> beam.Create(seeds)
             | "Generate" >> beam.ParDo(_GenerateBatches(kind))
             | "Bytes" >> beam.Map(lambda batch: sum(len(example) for _, example in batch))
             | "Sum" >> beam.CombineGlobally(sum))
    return time.perf_counter() - start


def _write(seeds, kind, workers, out_dir, compression, shard_size) -> float:
    start = time.perf_counter()
    options = _options(workers)
    with beam.Pipeline(runner=local_runner(options), options=options) as pipeline:
        metadata = (pipeline
                    | "Seeds" >> beam.Create(seeds)
                    | "Generate" >> beam.ParDo(_GenerateBatches(kind))
                    | "Write" >> WriteShards(out_dir, dataset_name="bench",
                                             splits=[("train", 0.9), ("test", 0.1)],
                                             shuffle=True, shard_size=shard_size,
                                             compression=compression))
        _ = metadata | "Json" >> beam.Map(json.dumps) | "Save" >> beam.io.WriteToText(
            os.path.join(out_dir, "_metadata"), shard_name_template="")
    return time.perf_counter() - start


def _shard_summary(out_dir: str) -> dict:
    with open(os.path.join(out_dir, "_metadata")) as lines:
        shards = [json.loads(line) for line in lines]
    summary = {}
    for split in sorted({shard["split"] for shard in shards}):
        sizes = [shard["num_bytes"] for shard in shards if shard["split"] == split]
        mean = sum(sizes) / len(sizes)
        summary[split] = {"shards": len(sizes), "bytes": sum(sizes),
                          "min/mean": round(min(sizes) / mean, 4),
                          "max/mean": round(max(sizes) / mean, 4),
                          "examples": sum(shard["num_examples"] for shard in shards
                                          if shard["split"] == split)}
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.0,
                        help="example bytes to write (default 1)")
    parser.add_argument("--kind", choices=["table", "small", "image"], default="table")
    parser.add_argument("--compression", choices=["none", "gzip"], default="none")
    parser.add_argument("--shard-megabytes", type=float, default=256)
    parser.add_argument("--workers", type=int, default=1,
                        help="1: DirectRunner in_memory on one core; >1: multi_processing")
    parser.add_argument("--skip-generation-baseline", action="store_true")
    parser.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    args = parser.parse_args(argv)

    seeds, example_bytes = _seeds_for(args.kind, args.gigabytes)
    work_dir = tempfile.mkdtemp(prefix="bench_shards_", dir=args.work_dir)
    out_dir = os.path.join(work_dir, "out")
    try:
        generation = 0.0
        if not args.skip_generation_baseline:
            generation = _generation_only(seeds, args.kind, args.workers)
        with _PeakRss() as rss:
            total = _write(seeds, args.kind, args.workers, out_dir, args.compression,
                           int(args.shard_megabytes * 1e6))
        report = {
            "kind": args.kind, "compression": args.compression, "workers": args.workers,
            "example_megabytes": round(example_bytes / 1e6, 1),
            "seconds_end_to_end": round(total, 2),
            "seconds_generation_only": round(generation, 2),
            "end_to_end_MBps": round(example_bytes / 1e6 / total, 1),
            "cpu_seconds_process_tree": round(rss.cpu_seconds, 2),
            # The kernel's share: file writes and reads, page faults, deletes.
            "system_cpu_seconds_process_tree": round(rss.system_seconds, 2),
            "end_to_end_MB_per_cpu_second": round(example_bytes / 1e6 / rss.cpu_seconds, 1),
            "peak_rss_MB_process_tree": round(rss.peak / 1e6, 1),
            "splits": _shard_summary(out_dir),
        }
        if generation:
            report["writer_MBps"] = round(example_bytes / 1e6 / max(1e-9, total - generation), 1)
        leftovers = [name for name in os.listdir(out_dir) if name.startswith("_tmp")]
        report["temporary_files_left"] = leftovers
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
