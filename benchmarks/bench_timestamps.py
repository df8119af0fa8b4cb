"""A table of ISO 8601 timestamps and declared null texts: this checkout against another, alternating.

    python benchmarks/bench_timestamps.py --rows 1000000 --code DIR --baseline OLD_DIR

Writes a CSV table (id, when: ISO 8601 with milliseconds and `Z`, count
with 2% "NA" cells, score, label of 10; `source.csv.null_values: ["",
"NA"]`) and builds it with `recordforge build -- --direct_running_mode=
in_memory --direct_num_workers=1` in rounds: the baseline's code (a
directory holding it as ``DIR/recordforge``), then this checkout's, each
with its native path, then this checkout's pure Python path; CPU seconds
of the process tree (`e2e_measure.measure`) per build, and the sha256 of
every shard, dead-letter file and stats.json, which must be equal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import pathlib
import random
import shutil
import sys
import tempfile

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from e2e_measure import measure  # noqa: E402

LABELS = [f"class_{i}" for i in range(10)]


def make_table(directory: pathlib.Path, rows: int) -> pathlib.Path:
    rng = random.Random(37)
    epoch = dt.datetime(2015, 1, 1)
    path = directory / "table.csv"
    with open(path, "w", encoding="utf-8") as out:
        out.write("id,when,count,score,label\n")
        for i in range(rows):
            when = epoch + dt.timedelta(milliseconds=rng.randint(0, 3 * 10**11))
            count = "NA" if rng.random() < 0.02 else str(rng.randint(-1000, 100_000))
            out.write(f"{i},{when.isoformat(timespec='milliseconds')}Z,{count},"
                      f"{round(rng.uniform(-100.0, 100.0), 4)!r},{rng.choice(LABELS)}\n")
    config = directory / "table.yaml"
    config.write_text(yaml.safe_dump({
        "name": "bench_timestamps", "version": "bench",
        "source": {"type": "csv", "path": str(path), "csv": {"null_values": ["", "NA"]}},
        "features": {"id": {"type": "int64", "min": 0},
                     "when": {"type": "timestamp", "unit": "ms"},
                     "count": {"type": "int64", "required": False},
                     "score": {"type": "float"},
                     "label": {"type": "int64", "vocabulary": LABELS}},
        "key": "id", "output": {"path": str(directory / "out"), "shuffle": True},
        "dead_letter": {"max_error_rate": 0.0}}, sort_keys=False))
    return config


def _digests(root: pathlib.Path) -> dict[str, str]:
    version = root / (root / "LATEST").read_text().strip()
    return {str(p.relative_to(version)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(version.rglob("*")) if p.is_file() and (
                ".tfrecord" in p.name or p.suffix == ".jsonl" or p.name == "stats.json")}


def build(config: pathlib.Path, code: str, output: pathlib.Path, pure: bool):
    env = {**os.environ, "PYTHONPATH": code, "RECORDFORGE_PURE_PYTHON": "1" if pure else "0"}
    shutil.rmtree(output, ignore_errors=True)
    done = measure([sys.executable, "-c", "import sys; from recordforge.pipelines import build; "
                    "sys.exit(build.run(sys.argv[1:]))", str(config), "--output", str(output),
                    "--", "--direct_running_mode=in_memory", "--direct_num_workers=1"], env=env)
    assert done.returncode == 0, done.stderr_tail
    return done, _digests(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--code", required=True,
                        help="a directory holding this checkout as CODE/recordforge")
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="bench_timestamps_"))
    work.mkdir(parents=True, exist_ok=True)
    config = make_table(work, args.rows)
    print(f"table: {args.rows} rows, {(work / 'table.csv').stat().st_size / 1e6:.1f} MB")
    builds = [("base", args.baseline, False), ("native", args.code, False),
              ("python", args.code, True)]
    for round_ in range(args.rounds):
        seen = {}
        for name, code, pure in builds:
            done, digests = build(config, code, work / name, pure)
            seen[name] = digests
            print(f"round {round_ + 1} {name:6s} cpu {done.cpu_s:6.2f} s  "
                  f"wall {done.wall_s:6.2f} s  peak {done.peak_rss / 1e6:6.0f} MB", flush=True)
        assert seen["base"] == seen["native"] == seen["python"], "the builds differ"
    print("files equal on every path")


if __name__ == "__main__":
    main()
