"""PyTorch DataLoader throughput over a published version: recordforge.torch against the tfrecord package (and TensorFlow).

    python benchmarks/read_loaders.py [--rows 200000] [--images 2000] [--workers 0,2] [--repeat 3]
                                      [--data DIR] [--baseline PYTHONPATH]
                                      [--datasets table,images] [--systems rf,tfrecord,...]

Builds the end-to-end benchmark's table (`--rows` rows) and image set
(`--images` JPEGs) with `recordforge build` (uncompressed, as
`e2e_workloads` describes them, with the index files the build writes),
then reads each
split ``train`` in one process, for each DataLoader worker count, with:

* ``rf``: `recordforge.torch.RecordDataset` in shard order with its
  default check (``"index"``: every shard's size, its index file's sha256,
  every record's span and CRCs); ``rf-sha256`` the same with
  ``check="sha256"`` (every shard's sha256 instead of its index);
  ``rf-crc`` with ``check="crc"`` (sizes, CRCs and counts); ``rf-shuffle``
  with its global shuffle (random access through the index files: the
  index's sha256, each record's span and CRCs); all decode every feature
  to numpy by the manifest;
* ``tfrecord``: the `tfrecord` package's `TFRecordDataset` per shard (its
  index file given, so DataLoader workers split each shard), chained,
  decoding every feature to numpy; it checks no CRC;
* ``tf``: TensorFlow's `TFRecordDataset` + `parse_example` over the shards
  (only when TensorFlow imports; it is no dependency).

Each system's dataset is made before the clock starts, as a training run
makes it once (recordforge reads and checks the manifest then: 8 ms for
the image set's 300 KB manifest; the `tfrecord` package's reader here
reads it for the shard names); the clock covers one epoch, the DataLoader
workers' start included. Systems alternate in rounds (`--repeat`), each
round in another order, the best of each kept, so a slow spell of the
shared machine falls on all alike; a second table gives
records per CPU-second (the process and its DataLoader workers), which a
busy machine disturbs far less than the clock. ``--data DIR`` builds the
two versions there once and reuses them in later runs (`--rows` and
`--images` then only apply to a first run). ``--baseline PYTHONPATH``
also times ``rf`` and ``rf-crc`` of another checkout of recordforge (a
directory whose ``recordforge`` is that checkout: ``rf`` is its own
default check), in a child process once per round, so that a change is
measured against the code it started from in the same run, on the same
versions (columns ``base-rf``, ``base-rf-crc``). ``--systems`` picks the
systems timed (default: all). Records/s counts rows
handed to the training loop (collate returns the batch's length, so no
system pays for stacking tensors).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch.utils.data as torch_data

import recordforge
import recordforge.torch as rf_torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_workloads import config_yaml, make_images, make_table  # noqa: E402

BATCH = 256


def _count(batch: list) -> int:
    return len(batch)


def _build(workload, out: Path) -> Path:
    config = out.parent / f"{workload.name}.yaml"
    config.write_text(config_yaml(workload, str(out), "none"))
    recordforge.build(str(config), beam_args=["--direct_running_mode=in_memory"])
    return out / "bench"


def _records(loader) -> int:
    return sum(loader)


def _rf(version: Path, workers: int, shuffle: bool,
        check: str | None = None) -> Callable[[], int]:
    # no check given: the checkout's own default (a --baseline may predate "index")
    given = {} if check is None else {"check": check}
    dataset = rf_torch.RecordDataset(str(version), "train", shuffle=shuffle, **given)
    loader = torch_data.DataLoader(dataset, batch_size=BATCH, num_workers=workers,
                                   collate_fn=_count)
    return lambda: _records(loader)


def _tfrecord(version: Path, workers: int) -> Callable[[], int]:
    from tfrecord.torch.dataset import TFRecordDataset

    manifest = json.loads((version / "manifest.json").read_text())
    shards = [TFRecordDataset(str(version / s["file"]), str(version / s["index"]["file"]), None)
              for s in manifest["splits"]["train"]["shards"]]
    loader = torch_data.DataLoader(torch_data.ChainDataset(shards), batch_size=BATCH,
                                   num_workers=workers, collate_fn=_count)
    return lambda: _records(loader)


def _tf(version: Path, workers: int) -> Callable[[], int]:
    import recordforge.tf

    del workers  # tf.data runs its own threads
    dataset = recordforge.tf.dataset(str(version), "train", parse=False).batch(BATCH)
    spec = recordforge.tf.feature_spec(str(version))
    import tensorflow as tf

    dataset = dataset.map(lambda records: tf.io.parse_example(records, spec),
                          num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
    return lambda: sum(int(next(iter(batch.values())).shape[0]) for batch in dataset)


def _systems() -> dict:
    systems = {"rf": lambda v, w: _rf(v, w, False),
               "rf-sha256": lambda v, w: _rf(v, w, False, "sha256"),
               "rf-crc": lambda v, w: _rf(v, w, False, "crc"),
               "rf-shuffle": lambda v, w: _rf(v, w, True), "tfrecord": _tfrecord}
    try:
        import tensorflow  # noqa: F401
        systems["tf"] = _tf
    except ImportError:
        pass
    return systems


def _versions(root: Path, rows: int, images: int, datasets: list[str]) -> dict:
    """The table's and the image set's versions under `root` (those of
    `datasets`), built unless a run before built them there."""
    makers = {"table": lambda: make_table(root / "table", rows)[0],
              "images": lambda: make_images(root / "images", images)}
    versions = {}
    for data in datasets:
        make = makers[data]
        version = root / f"out-{data}" / "bench"
        if not (version / "manifest.json").exists():
            _build(make(), root / f"out-{data}")
        versions[data] = version
    return versions


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended
    (DataLoader workers end with their epoch)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _keep(best: dict, key: tuple, rate: float, records: int, cpu_rate: float) -> None:
    """The best records/s and the best records per CPU-second of `key`."""
    old_rate, _, old_cpu = best.get(key, (0, 0, 0))
    best[key] = (max(old_rate, rate), records, max(old_cpu, cpu_rate))


def _round(versions: dict, workers: list[int], systems: dict, best: dict, turn: int) -> None:
    """Each system once over each version and worker count, the order
    turned by `turn` (no system always first on a version, with the cold
    caches that brings); the best (records/s, records, records per
    CPU-second) of each kept in `best`."""
    order = list(systems.items())
    order = order[turn % len(order):] + order[:turn % len(order)]
    for data, version in versions.items():
        for count in workers:
            for name, make in order:
                epoch = make(version, count)  # a training run opens its dataset once
                start, cpu = time.perf_counter(), _cpu_seconds()
                records = epoch()
                rate = records / (time.perf_counter() - start)
                _keep(best, (data, count, name), rate, records,
                      records / max(_cpu_seconds() - cpu, 1e-9))


def _baseline_round(baseline: str, data_dir: Path, workers: str, datasets: list[str],
                    best: dict) -> None:
    """One round of ``rf`` and ``rf-crc`` by the code on `baseline`, in a
    child process, kept in `best` as ``base-rf`` and ``base-rf-crc``."""
    child = subprocess.run(
        [sys.executable, __file__, "--data", str(data_dir), "--workers", workers,
         "--datasets", ",".join(datasets),
         "--repeat", "1", "--systems", "rf,rf-crc", "--json"],
        env={**os.environ, "PYTHONPATH": baseline}, check=True, capture_output=True, text=True)
    for data, count, name, rate, records, cpu_rate in json.loads(child.stdout.splitlines()[-1]):
        _keep(best, (data, count, f"base-{name}"), rate, records, cpu_rate)


def _table(versions: dict, workers: list[int], names: list[str], best: dict,
           column: int = 0) -> None:
    """Records/s (`column` 0) or records per CPU-second (2) of each system,
    and the ratios."""
    ratios = [(a, b) for a, b in (("rf", "tfrecord"), ("rf-sha256", "tfrecord"),
                                  ("rf-crc", "tfrecord"), ("rf-sha256", "base-rf"),
                                  ("rf", "base-rf-crc"), ("rf-crc", "base-rf-crc"))
              if a in names and b in names]
    print(f"| data | workers | {' | '.join(names)} | "
          f"{' | '.join(f'{a} / {b}' for a, b in ratios)} |")
    print(f"|---|---|{'---|' * (len(names) + len(ratios))}")
    for data in versions:
        for count in workers:
            rates = [best[(data, count, name)] for name in names]
            assert len({kept[1] for kept in rates}) == 1, rates  # all read every row
            cells = " | ".join(f"{kept[column]:,.0f}" for kept in rates)
            shares = " | ".join(
                f"{best[(data, count, a)][column] / best[(data, count, b)][column]:.2f}"
                for a, b in ratios)
            print(f"| {data} ({rates[0][1]:,} rows) | {count} | {cells} | {shares} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--datasets", default="table,images", help="which versions to read")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", help="build the versions here once, and reuse them")
    parser.add_argument("--baseline", help="PYTHONPATH of another recordforge to compare")
    parser.add_argument("--systems", help="the systems to time (default: all)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # --baseline's child
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    systems = _systems()
    if args.systems:
        systems = {name: systems[name] for name in args.systems.split(",")}
    with tempfile.TemporaryDirectory(prefix="read-loaders-") as scratch:
        root = Path(args.data or scratch)
        versions = _versions(root, args.rows, args.images, args.datasets.split(","))
        best: dict = {}
        for turn in range(args.repeat):
            _round(versions, workers, systems, best, turn)
            if args.baseline:
                _baseline_round(args.baseline, root, args.workers, list(versions), best)
        if args.json:
            print(json.dumps([[*key, *value] for key, value in best.items()]))
            return 0
        names = list(systems) + (["base-rf", "base-rf-crc"] if args.baseline else [])
        print("Records/s:")
        _table(versions, workers, names, best)
        print("\nRecords per CPU-second (this process and its DataLoader workers):")
        _table(versions, workers, names, best, column=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
