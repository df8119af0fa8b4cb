"""Incremental and resumed builds against full builds, on a table in many files.

    python benchmarks/bench_incremental.py                  # 1 GB in 100 files (~12 minutes)
    python benchmarks/bench_incremental.py --gigabytes 0.2 --rounds 1  # a quicker look
    python benchmarks/bench_incremental.py --json OUT.json

Steps, each `recordforge build` as its own process tree, timed by wall
clock and CPU seconds (the children's rusage):

1. ``full``: the table built from scratch with ``cache.enabled: false``;
2. ``cached``: the same build with the cache on (it writes the pieces):
   what a first nightly build costs;
3. then 5% of the files are changed or added (half rewritten, half new),
   and ``--rounds`` times in turn (3 by default):

   - ``incremental``: built again into the same output, from the cache as
     the first build left it (restored before each round);
   - ``full-after``: the same inputs from scratch, whose shard checksums
     must equal ``incremental``'s;
   - ``resume``: a build into a fresh output killed (SIGKILL to its
     process group) once 70% of the units have pieces, then run again; its
     shards must equal ``full-after``'s.

With ``--scenario identical`` (issue 38.8's acceptance), ``full`` is not
run and the steps after ``cached`` are instead: every file is written again, all but
``--changed-files`` (2) with their own bytes (new modification times);
``incremental`` and ``full-after`` as above, whose manifests must say
that exactly the identical files were reused and whose shards must be
equal; and ``fingerprint``: the build's fingerprinting of its inputs
(`source_inputs`, which hashes every local input) timed in this process,
once with the files in the page cache and once after dropping them from
it. A build hashes each input three times (before the pipeline, when the
worker plans the file, after the pipeline): ``hashing_share`` is three
fingerprintings (warm) over the full-after build, ``hashing_share_cold``
one cold and two warm ones.

    python benchmarks/bench_incremental.py --scenario identical --gigabytes 0.1 --files 40

Ratios are within each round (incremental / full-after, resume /
full-after, alone and with the killed run's time added), so that a slower
spell of a shared machine falls on both sides of a ratio; the summary
gives their medians. The cache's size is given relative to the published
shards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from e2e_workloads import LABELS, TABLE_FEATURES, _text  # noqa: E402

RECORDFORGE = [sys.executable, "-m", "recordforge.pipelines.cli"]


def write_part(path: Path, size: int, seed: int) -> int:
    """A CSV file of about `size` bytes; returns its rows."""
    rng = random.Random(seed)
    rows = 0
    written = 0
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write("id,count,score,text,label\n")
        lines = []
        while written < size:
            line = (f"{seed * 10_000_000 + rows},{rng.randint(-1000, 100_000)},"
                    f"{round(rng.uniform(-100.0, 100.0), 4)!r},{_text(rng)},"
                    f"{rng.choice(LABELS)}\n")
            lines.append(line)
            written += len(line)
            rows += 1
            if len(lines) >= 10_000:
                out.writelines(lines)
                lines = []
        out.writelines(lines)
    return rows


def config(source: Path, output: Path, shard_size: int, cache: bool) -> dict:
    return {"name": "bench_incremental", "version": "bench",
            "source": {"type": "csv", "path": str(source)},
            "features": TABLE_FEATURES, "key": "id",
            "output": {"path": str(output), "shard_size": shard_size, "shuffle": True},
            "dead_letter": {"max_error_rate": 0.0},
            "cache": {"enabled": cache}}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_build(config_path: Path, label: str, results: dict) -> dict:
    cpu = _children_cpu()
    started = time.monotonic()
    done = subprocess.run([*RECORDFORGE, "build", str(config_path), "--overwrite"],
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{done.stderr[-3000:]}")
    figures = {"wall_s": round(wall, 2), "cpu_s": round(_children_cpu() - cpu, 2)}
    results[label] = figures
    print(f"{label:12s} {figures['wall_s']:8.2f} s wall {figures['cpu_s']:8.2f} s CPU",
          flush=True)
    return figures


def shard_checksums(output: Path) -> list[str]:
    manifest = json.loads((output / "bench" / "manifest.json").read_text())
    return [shard["sha256"] for split in manifest["splits"].values()
            for shard in split["shards"]]


def manifest_cache(output: Path) -> dict:
    return json.loads((output / "bench" / "manifest.json").read_text()).get("cache", {})


def pieces(cache: Path) -> list[Path]:
    return [path for path in cache.glob("*.piece")] if cache.exists() else []


def restore_cache(snapshot: Path, cache: Path) -> None:
    """Puts the cache back as `snapshot` holds it (hard links: builds never
    change a file in place), out of the page cache as a first build leaves
    it (its writer hands what it writes to the disk and drops it)."""
    shutil.rmtree(cache, ignore_errors=True)
    shutil.copytree(snapshot, cache, copy_function=os.link)
    for path in cache.iterdir():
        with open(path, "rb") as fileobj:
            os.posix_fadvise(fileobj.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def kill_at(config_path: Path, cache: Path, pieces_wanted: float, units: int) -> dict:
    """Runs a build and kills its process group (SIGKILL) once the cache
    holds `pieces_wanted` pieces; returns its wall and CPU seconds."""
    cpu, started = _children_cpu(), time.monotonic()
    process = subprocess.Popen([*RECORDFORGE, "build", str(config_path)],
                               start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    while len(pieces(cache)) < pieces_wanted and process.poll() is None:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    killed = {"wall_s": round(time.monotonic() - started, 2),
              "cpu_s": round(_children_cpu() - cpu, 2),
              "pieces_left": len(pieces(cache)), "units": units}
    print(f"killed after {killed['wall_s']} s with {killed['pieces_left']} of {units} pieces",
          flush=True)
    return killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--changed", type=float, default=0.05)
    parser.add_argument("--kill-at", type=float, default=0.7)
    parser.add_argument("--rounds", type=int, default=3,
                        help="incremental, full-after and resumed builds, this many times in "
                             "turn; ratios are within each round, the summary their medians")
    parser.add_argument("--scenario", choices=("changed", "identical"), default="changed",
                        help="changed: 5%% of the files changed or added, and a resumed build; "
                             "identical: every file rewritten, all but --changed-files with "
                             "the same bytes")
    parser.add_argument("--changed-files", type=int, default=2)
    parser.add_argument("--scratch", help="working directory (default: a temporary one)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="rf-incremental-"))
    source = scratch / "table"
    source.mkdir(parents=True, exist_ok=True)
    part_bytes = int(args.gigabytes * 1e9 / args.files)
    print(f"writing {args.files} files of {part_bytes / 1e6:.1f} MB into {source}", flush=True)
    for index in range(args.files):
        write_part(source / f"part-{index:04d}.csv", part_bytes, index)
    shard_size = max(1 << 20, int(args.gigabytes * 1e9 / 8))
    results: dict = {"gigabytes": args.gigabytes, "files": args.files,
                     "changed_fraction": args.changed, "kill_at": args.kill_at}

    def write_config(name: str, output: Path, cache: bool) -> Path:
        path = scratch / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config(source, output, shard_size, cache)))
        return path

    try:
        if args.scenario == "changed":  # identical compares with full-after only
            run_build(write_config("full", scratch / "full", False), "full", results)
        cached = scratch / "cached"
        run_build(write_config("cached", cached, True), "cached", results)
        if args.scenario == "identical":
            identical_rewrites(args, source, part_bytes, scratch, write_config, cached, results)
            return _finish(args, results, scratch, results["identical"])
        # The cache as a first build left it, restored before every incremental build.
        before = scratch / "cache-before"
        shutil.copytree(cached / ".cache", before, copy_function=os.link)
        # 5% of the files: half rewritten, half added.
        changed = max(2, round(args.files * args.changed))
        for index in range(changed // 2):
            write_part(source / f"part-{index * 7 % args.files:04d}.csv", part_bytes, 1000 + index)
        for index in range(changed - changed // 2):
            write_part(source / f"part-new-{index:04d}.csv", part_bytes, 2000 + index)
        full_after = scratch / "full-after"
        resumed = scratch / "resumed"
        results["rounds"] = []
        for round_index in range(args.rounds):
            figures: dict = {}
            restore_cache(before, cached / ".cache")
            run_build(write_config("cached", cached, True), "incremental", figures)
            figures["incremental_cache"] = manifest_cache(cached)
            units = len(pieces(cached / ".cache"))  # the changed inputs' units included
            run_build(write_config("full-after", full_after, False), "full-after", figures)
            expected = shard_checksums(full_after)
            figures["incremental_identical"] = shard_checksums(cached) == expected
            # Resume: kill at ~70% of the units, run again.
            shutil.rmtree(resumed, ignore_errors=True)
            resume_config = write_config("resumed", resumed, True)
            figures["killed"] = kill_at(resume_config, resumed / ".cache", args.kill_at * units,
                                        units)
            run_build(resume_config, "resume", figures)
            figures["resume_cache"] = manifest_cache(resumed)
            figures["resume_identical"] = shard_checksums(resumed) == expected
            base = figures["full-after"]
            figures["ratios"] = {
                "incremental_speedup_wall": round(base["wall_s"] / figures["incremental"]["wall_s"],
                                                  2),
                "incremental_speedup_cpu": round(base["cpu_s"] / figures["incremental"]["cpu_s"], 2),
                "resume_cost_wall": round(figures["resume"]["wall_s"] / base["wall_s"], 3),
                "resume_cost_cpu": round(figures["resume"]["cpu_s"] / base["cpu_s"], 3),
                "killed_plus_resume_cpu": round((figures["killed"]["cpu_s"]
                                                 + figures["resume"]["cpu_s"]) / base["cpu_s"], 3),
            }
            print(f"round {round_index + 1}: " + json.dumps(figures["ratios"]), flush=True)
            results["rounds"].append(figures)

        shards_bytes = sum(path.stat().st_size for path in (cached / "bench").glob("*.tfrecord"))
        cache_bytes = sum(path.stat().st_size for path in (cached / ".cache").iterdir())
        rounds = [figures["ratios"] for figures in results["rounds"]]
        results["ratios"] = {key: round(statistics.median(ratios[key] for ratios in rounds), 3)
                             for key in rounds[0]}
        results["ratios"]["cached_build_cost_cpu"] = round(
            results["cached"]["cpu_s"] / results["full"]["cpu_s"], 3)
        results["ratios"]["cache_bytes_per_shard_byte"] = round(cache_bytes / shards_bytes, 3)
        results["incremental_identical"] = all(figures["incremental_identical"]
                                               for figures in results["rounds"])
        results["resume_identical"] = all(figures["resume_identical"]
                                          for figures in results["rounds"])
        print("medians: " + json.dumps(results["ratios"], indent=1))
        print(f"identical: incremental {results['incremental_identical']}, "
              f"resume {results['resume_identical']}")
    except BaseException:
        _finish(args, results, scratch, False)
        raise
    return _finish(args, results, scratch,
                   results["incremental_identical"] and results["resume_identical"])


def _finish(args, results: dict, scratch: Path, ok: bool) -> int:
    if not args.scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if ok else 1


def time_fingerprints(source: Path, cold: bool) -> float:
    """Seconds `source_inputs` takes on the table (what a build does before
    and after its pipeline), after dropping the files from the page cache
    when `cold`."""
    from recordforge.transforms.readers.inputs import source_inputs
    if cold:
        for path in source.iterdir():
            with open(path, "rb") as fileobj:
                os.posix_fadvise(fileobj.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    started = time.monotonic()
    source_inputs("csv", str(source))
    return time.monotonic() - started


def identical_rewrites(args, source: Path, part_bytes: int, scratch: Path, write_config,
                       cached: Path, results: dict) -> None:
    """Every file written again, all but `args.changed_files` with their own
    bytes; the cached build against one from scratch (see the module)."""
    paths = sorted(source.iterdir())
    changed = set(range(0, len(paths), max(1, len(paths) // args.changed_files))[
        :args.changed_files])
    for index, path in enumerate(paths):
        if index in changed:
            write_part(path, part_bytes, 5000 + index)
        else:
            path.write_bytes(path.read_bytes())  # the same bytes, a new mtime
    run_build(write_config("cached", cached, True), "incremental", results)
    cache = manifest_cache(cached)
    full_after = scratch / "full-after"
    run_build(write_config("full-after", full_after, False), "full-after", results)
    warm = min(time_fingerprints(source, cold=False) for _ in range(3))
    cold = time_fingerprints(source, cold=True)
    base = results["full-after"]["wall_s"]
    input_bytes = sum(path.stat().st_size for path in paths)
    results["fingerprint"] = {"warm_s": round(warm, 3), "cold_s": round(cold, 3),
                              "input_bytes": input_bytes,
                              "warm_gb_per_s": round(input_bytes / warm / 1e9, 2)}
    results["incremental_cache"] = cache
    results["identical"] = (shard_checksums(cached) == shard_checksums(full_after)
                            and cache.get("files_reused") == len(paths) - len(changed))
    results["ratios"] = {
        "incremental_speedup_wall": round(base / results["incremental"]["wall_s"], 2),
        "incremental_speedup_cpu": round(results["full-after"]["cpu_s"]
                                         / results["incremental"]["cpu_s"], 2),
        "hashing_share": round(3 * warm / base, 4),
        "hashing_share_cold": round((cold + 2 * warm) / base, 4),
    }
    print(f"files reused {cache.get('files_reused')} of {len(paths)} "
          f"({len(changed)} changed); identical shards and reuse: {results['identical']}")
    print(f"fingerprinting {input_bytes / 1e9:.2f} GB: {warm:.2f} s warm, {cold:.2f} s cold")
    print("ratios: " + json.dumps(results["ratios"]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
