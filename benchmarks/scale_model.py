"""Scale model of the shard writer on an object store: requests, bytes and
time as the dataset grows, for the shuffle exchange and for the file
exchange it replaced (commit 302206e), projected to 1 TB and 10 TB.

    python benchmarks/scale_model.py --quick --json OUT.json   # a few minutes
    python benchmarks/scale_model.py --json OUT.json           # larger sizes, gzip too
    python benchmarks/scale_model.py --quick --order key       # key-ordered output

Every size of the writer is divided by one factor, SCALE = 1024, so that a
build of D bytes here stands for a build of D × 1024 bytes with the
production sizes: shard_size 256 MB -> 256 KB, spill run 64 MB -> 64 KB,
bucket 32 MB -> 32 KB, in-memory sort budget 256 MB -> 256 KB, chunk
4 MB -> 4 KB, run index step 64 KB -> 64 B, routed packet 1 MB -> 1 KB,
input batch ~1 MB -> ~1 KB, object-store upload part 8 MB -> 8 KB. The
writer's requests depend on how many runs, buckets, chunks, shards and
parts there are, which the common factor keeps; byte counts scale by the
factor; rows (~120 B here) cannot shrink with it, so times say how each
design grows, not what a production build takes.

The output store is `counting_fs.CountingFileSystem` (``counted://``, in
memory), which counts what S3 or GCS would bill: a GET per read call, a
PUT per written object (a multipart upload of ceil(size / part) parts plus
two calls above one part), HEAD, LIST, COPY (a move is a COPY and a
DELETE) and DELETE. The shuffle exchange's bytes through the runner's
GroupByKeys come from its `exchange_bytes` counter. Both designs run on the
FnApiRunner (in_memory, one worker), the new one with
``exchange="shuffle"``, as it runs on a distributed runner; the old one
from a copy of commit 302206e (`--old-tree`, made with ``git archive`` when
not given). At every size the new one must write the same shard bytes as
this tree's file exchange (``exchange="files"``, what the DirectRunner
runs; built too, its costs not reported). 302206e cut shuffled plain
shards at chunks, which is why its bytes are compared with nothing.

With ``--order key`` the rows have random keys and are written in key
order (``shuffle=False``). "new" then routes rows by bucket bounds taken
before the run from the first rows of evenly spread batches (what a
build reading tables does, `pipelines.key_sample`), and "lanes" is the
shuffle exchange without such bounds (rows wait for their split's
sample, as in `WriteDataset`).

Projection: the fitted power law of each measure at D / SCALE, bytes times
SCALE. Hours: requests × 30 ms + bytes / 100 MB/s, over 1,000 parallel
streams. Cost: object-store request charges at S3 Standard's published
prices (us-east-1; GCS Standard's class A and B operations cost the same):
PUT, COPY, POST and LIST $0.005 per 1,000; GET and HEAD $0.0004 per 1,000;
DELETE free.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
OLD_COMMIT = "302206e"
SCALE = 1024
MB = 1 << 20
PRODUCTION = {"shard_size": 256 * MB, "run_bytes": 64 * MB, "bucket_bytes": 32 * MB,
              "memory_bytes": 256 * MB, "max_chunk_bytes": 4 * MB, "index_every": 64 << 10,
              "route_bytes": 1 * MB, "batch_bytes": 1 * MB, "part_bytes": 8 * MB}
ROW_BYTES = (60, 180)  # payload sizes of the generated rows
LATENCY_S = 0.030
STREAM_BYTES_PER_S = 100 * MB
STREAMS = 1000
PRICE_PER_1000 = {"PUT": 0.005, "COPY": 0.005, "LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004,
                  "DELETE": 0.0}
QUICK_SIZES = (1 * MB, 2 * MB, 4 * MB, 8 * MB)
FULL_SIZES = (4 * MB, 8 * MB, 16 * MB, 32 * MB, 64 * MB)
FULL_OLD_LIMIT = 32 * MB  # the old design's requests grow with the square of the size


def scaled(name: str) -> int:
    return max(1, PRODUCTION[name] // SCALE)


# -- one measured build (run in its own process, with the design's code) ------


def _batches(total: int, seed: int = 0, keyed: bool = False):
    rng = random.Random(seed)
    batch, batch_bytes, produced = [], 0, 0
    while produced < total:
        row = rng.randbytes(rng.randint(*ROW_BYTES))
        batch.append((b"key-%012d" % rng.randrange(10 ** 12) if keyed else None, row))
        batch_bytes += len(row) + 16
        produced += len(row) + 16
        if batch_bytes >= scaled("batch_bytes"):
            yield batch
            batch, batch_bytes = [], 0
    if batch:
        yield batch


def _sampled_bounds(batches: list, tuning, *, compression: str, input_bytes: int) -> tuple:
    """Bucket bounds from the first 64 rows of up to 256 evenly spread
    batches, as a build samples its first table files' heads, as many as
    a build of `input_bytes` takes (`ShardTuning.key_bucket_count`)."""
    from recordforge.transforms.writer import bucket_bounds_of

    chosen = batches[::max(1, len(batches) // 256)]
    keys = [key for batch in chosen for key, _ in batch[:64]]
    count = tuning.key_bucket_count(compression=compression, shard_size=scaled("shard_size"),
                                    input_bytes=input_bytes)
    return bucket_bounds_of(keys, count, tuning.prefix_len)


def _worker(design: str, size: int, compression: str, order: str = "shuffled") -> dict:
    import counting_fs
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    try:
        from recordforge.pipelines.runners import local_runner
    except ImportError:  # the old design's tree had it in the build module
        from recordforge.pipelines.build import _local_runner as local_runner
    from recordforge.transforms.writer import ShardTuning, WriteShards

    store = counting_fs.register()
    store.reset(part_bytes=scaled("part_bytes"))
    sizes = {"run_bytes": scaled("run_bytes"), "bucket_bytes": scaled("bucket_bytes"),
             "memory_bytes": scaled("memory_bytes"),
             "max_chunk_bytes": scaled("max_chunk_bytes"),
             "index_every": scaled("index_every")}
    extra = {}
    if design in ("new", "lanes"):
        sizes["route_bytes"] = scaled("route_bytes")
        extra["exchange"] = "shuffle"
    elif design == "files":
        extra["exchange"] = "files"
    tuning = ShardTuning(**sizes)
    keyed = order == "key"
    batches = list(_batches(size, keyed=keyed))
    if keyed and design == "new":
        extra["key_bounds"] = _sampled_bounds(batches, tuning, compression=compression,
                                              input_bytes=size)
    options = PipelineOptions(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    pipeline = beam.Pipeline(runner=local_runner(options), options=options)
    staging = "counted://bench/out/.staging/v1"
    _ = (pipeline
         | "Batches" >> beam.Create(batches)
         | "Write" >> WriteShards(staging, dataset_name="scale-model", splits=[("train", 1.0)],
                                  shuffle=not keyed, shard_size=scaled("shard_size"),
                                  compression=compression, tuning=tuning, **extra))
    started = time.perf_counter()
    result = pipeline.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - started
    exchange = sum(counter.committed for counter in result.metrics().query(
        MetricsFilter().with_name("exchange_bytes"))["counters"])
    summary = store.summary()
    prefix = "/bench/out/.staging/v1/"
    shards = {path[len(prefix):]: hashlib.sha256(data.getvalue()).hexdigest()
              for path, data in sorted(store.store.items())
              if path.startswith(prefix) and "/" not in path[len(prefix):]}
    left = sorted(path for path in store.store if not path.startswith(prefix)
                  or "/" in path[len(prefix):])
    # The dataset's bytes: every row framed as a TFRecord (what plain shards
    # hold); the generator stops at the first batch that reaches `size`.
    dataset_bytes = sum(len(example) + 16 for batch in batches for _, example in batch)
    return {"design": design, "size": size, "compression": compression, "order": order,
            "seconds": seconds,
            "rows": sum(map(len, batches)), "dataset_bytes": dataset_bytes,
            "exchange_bytes": exchange, **summary,
            "shards": shards, "left_behind": left}


# -- driver ----------------------------------------------------------------------


def _old_tree(path: str | None) -> str:
    """A directory holding ``recordforge/`` as of OLD_COMMIT."""
    if path:
        return path
    root = tempfile.mkdtemp(prefix="recordforge-old-")
    target = os.path.join(root, "recordforge")
    os.makedirs(target)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD_COMMIT], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    return root


def _measure(design: str, size: int, compression: str, order: str, old_tree: str) -> dict:
    env = dict(os.environ)
    paths = [str(HERE)]
    if design == "old":
        paths.append(old_tree)
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--worker",
                           design, str(size), compression, order], env=env, capture_output=True,
                          text=True)
    if done.returncode:
        raise RuntimeError(f"{design} at {size} bytes failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``log y = k log x + c``: (k, c)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(max(y, 1e-9)) for _, y in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    k = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
         / sum((x - mean_x) ** 2 for x in xs))
    return k, mean_y - k * mean_x


def _data(run: dict) -> int:
    """The run's dataset bytes (framed rows; a little above its nominal size)."""
    return run.get("dataset_bytes", run["size"])


def _moved(run: dict) -> int:
    """Bytes moved: the store's reads, writes and copies, and the shuffle."""
    return (run["bytes_read"] + run["bytes_written"] + run["bytes_copied"]
            + run["exchange_bytes"])


def _price(run: dict) -> float:
    """Request charge per request, in dollars, for this run's mix of kinds."""
    charge = sum(run["by_kind"][kind] * PRICE_PER_1000[kind] / 1000 for kind in run["by_kind"])
    return charge / max(1, run["requests"])


def project(runs: list[dict], dataset_bytes: float) -> dict:
    """A design's requests, bytes, hours and request charges for a production
    dataset of `dataset_bytes`, from its runs' power laws."""
    size = dataset_bytes / SCALE
    k_req, c_req = fit([(_data(run), run["requests"]) for run in runs])
    k_bytes, c_bytes = fit([(_data(run), _moved(run)) for run in runs])
    requests = math.exp(c_req) * size ** k_req
    moved = math.exp(c_bytes) * size ** k_bytes * SCALE
    hours = (requests * LATENCY_S + moved / STREAM_BYTES_PER_S) / STREAMS / 3600
    return {"requests": requests, "bytes_moved": moved, "bytes_moved_per_dataset_byte":
            moved / dataset_bytes, "hours_on_1000_streams": hours,
            "request_dollars": requests * _price(runs[-1])}


def _table(results: dict) -> str:
    lines = ["| design | compression | size here (stands for) | requests | GET | PUT | "
             "bytes moved / dataset | shuffle bytes / dataset | seconds |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for run in results["runs"]:
        if run["design"] == "files":
            continue  # built for the identity check only
        lines.append(
            f"| {run['design']} | {run['compression']} | {run['size'] / MB:g} MB "
            f"({run['size'] * SCALE / (1 << 30):g} GB) | {run['requests']:,} | "
            f"{run['by_kind']['GET']:,} | {run['by_kind']['PUT']:,} | "
            f"{_moved(run) / _data(run):.3f} | {run['exchange_bytes'] / _data(run):.3f} | "
            f"{run['seconds']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 sizes, 1-8 MB, plain shards")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON")
    parser.add_argument("--old-tree", help="directory holding recordforge/ at 302206e")
    parser.add_argument("--compressions", default=None,
                        help="comma-separated: none,gzip (default: none with --quick, "
                             "else both)")
    parser.add_argument("--order", choices=("shuffled", "key"), default="shuffled",
                        help="shuffled rows (default) or rows in key order")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        design, size, compression, order = args.worker
        print(json.dumps(_worker(design, int(size), compression, order)))
        return 0
    designs = ("new", "lanes", "files", "old") if args.order == "key" else ("new", "files", "old")
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    compressions = (args.compressions or ("none" if args.quick else "none,gzip")).split(",")
    old_tree = _old_tree(args.old_tree)
    runs = []
    for compression in compressions:
        for size in sizes:
            for design in designs:
                if design == "old" and not args.quick and size > FULL_OLD_LIMIT:
                    continue
                run = _measure(design, size, compression, args.order, old_tree)
                runs.append(run)
                print(f"{design} {compression} {size / MB:g} MB: {run['requests']:,} requests, "
                      f"{_moved(run) / _data(run):.4f}x bytes moved, {run['seconds']:.2f} s",
                      file=sys.stderr)
    identical = {}
    for run in runs:
        if run["design"] == "files":
            for other in runs:
                if (other["design"] in ("new", "lanes") and other["size"] == run["size"]
                        and other["compression"] == run["compression"]):
                    name = f"{run['compression']}-{run['size']}"
                    if other["design"] == "lanes":
                        name = f"lanes-{name}"
                    identical[name] = other["shards"] == run["shards"]
    results = {"scale": SCALE, "production_sizes": PRODUCTION, "order": args.order, "runs": runs,
               "identical_shards": identical, "exponents": {}, "projection": {},
               "assumptions": {"latency_s": LATENCY_S, "stream_bytes_per_s": STREAM_BYTES_PER_S,
                               "streams": STREAMS, "price_per_1000_requests": PRICE_PER_1000}}
    for design in [design for design in designs if design != "files"]:
        for compression in compressions:
            chosen = [run for run in runs if run["design"] == design
                      and run["compression"] == compression]
            name = design if len(compressions) == 1 else f"{design}-{compression}"
            results["exponents"][name] = {
                "requests": fit([(_data(run), run["requests"]) for run in chosen])[0],
                "bytes": fit([(_data(run), _moved(run)) for run in chosen])[0],
                "seconds": fit([(_data(run), run["seconds"]) for run in chosen])[0],
                "bytes_moved_per_dataset_byte": max(_moved(run) / _data(run)
                                                    for run in chosen)}
            results["projection"][name] = {"1TB": project(chosen, 1 << 40),
                                           "10TB": project(chosen, 10 << 40)}
    first = "new" if len(compressions) == 1 else f"new-{compressions[0]}"
    results["exponents"]["requests"] = results["exponents"][first]["requests"]
    results["exponents"]["bytes"] = results["exponents"][first]["bytes"]
    print(_table(results))
    print(json.dumps({key: results[key] for key in ("exponents", "projection",
                                                    "identical_shards")}, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0 if all(identical.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
