"""End-to-end benchmark: recordforge against what users would write instead.

    python benchmarks/run_e2e.py [--quick] [--workloads table,images,large,samples]
                                 [--repeat N] [--check] [--scratch DIR] [--keep]

Generates its inputs into a scratch directory (`e2e_workloads.py`), then for
each workload and output compression (none, gzip) runs, each as its own
process tree and one at a time:

* ``rf-w1``: ``recordforge build`` with ``--direct_running_mode=in_memory
  --direct_num_workers=1`` (one core);
* ``rf-w2``: ``recordforge build`` with ``multi_processing``, 2 workers;
* ``beam``: the hand-written Beam pipeline (`e2e_baselines.py`), Beam's
  DirectRunner defaults (one worker);
* ``script``: the hand-written single-process loop;
* ``tf``: the same loop written with TensorFlow (``tf.train.Example``,
  ``tf.io.TFRecordWriter``), run by the interpreter of an environment that
  has TensorFlow (``--tf-python``, or ``RECORDFORGE_BENCH_TF_PYTHON``): only
  when one is given, since recordforge never installs TensorFlow.

and records wall time, CPU seconds and peak RSS of the process tree
(`e2e_measure.py`; every command runs with Python's bytecode caches, as an
installed package does: `e2e_measure.child_env`), rows/s, MB/s written,
shard count and size spread. With ``--check`` (the default with
``--quick``) it also reads every output back and checks that all of them
wrote the same multiset of Examples. Before every
measured run the inputs are read once and dirty pages are flushed
(`_settle`), so that no system pays for the disk: neither for writing back
what the generator (or the run before) wrote, nor for reading inputs the
machine dropped from its page cache. ``samples`` times
the two bundled example configs in both local modes (to choose the default).

Prints a table and ratios and writes them into ``benchmarks/RESULTS.md``
between markers for the mode (quick or full), keeping the rest of the file.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil  # noqa: E402

import e2e_measure  # noqa: E402
import e2e_workloads  # noqa: E402
from e2e_workloads import Workload  # noqa: E402

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
SYSTEMS = ("rf-w1", "rf-w2", "beam", "script", "tf")
# The interpreter of an environment with TensorFlow, for the ``tf`` system.
TF_PYTHON_ENV = "RECORDFORGE_BENCH_TF_PYTHON"
RF_MODES = {"rf-w1": ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
            "rf-w2": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]}

# Sizes: (full, quick).
SIZES = {"table_rows": (1_000_000, 100_000), "images": (10_000, 1_000),
         "large_gb": ((1.0, 4.0), (0.2, 0.5))}


def _command(system: str, workload: Workload, work: Path, output: Path,
             compression: str, tf_python: str | None = None) -> list[str]:
    if system in RF_MODES:
        config = work / f"{workload.name}-{compression}.yaml"
        config.write_text(e2e_workloads.config_yaml(workload, str(output), compression))
        return [str(BIN / "recordforge"), "build", str(config), "--overwrite", "--",
                *RF_MODES[system]]
    spec = work / f"{workload.name}.json"
    spec.write_text(workload.to_json())
    python = tf_python if system == "tf" else sys.executable
    return [python, str(HERE / "e2e_baselines.py"), system, str(spec), str(output),
            "--compression", compression]


def _run(systems: list[str], workload: Workload, compression: str, work: Path, repeat: int,
         check: bool, tf_python: str | None = None) -> list[dict]:
    """Runs every system `repeat` times, in rounds that run each system once:
    a slow spell of a shared machine then falls on every system alike rather
    than on all the runs of one. Per system: the fastest run's figures, the
    highest peak RSS, and (with `check`) the sorted digests of what it wrote."""
    runs: dict[str, list] = {system: [] for system in systems}
    digests: dict[str, list | None] = dict.fromkeys(systems)
    stats: dict[str, dict] = {}
    for _ in range(repeat):
        for system in systems:
            output = work / "out" / f"{workload.name}-{compression}-{system}"
            shutil.rmtree(output, ignore_errors=True)
            _settle(workload)
            measured = e2e_measure.measure(
                _command(system, workload, work, output, compression, tf_python), env=CHILD_ENV)
            if measured.returncode != 0:
                raise RuntimeError(f"{system} on {workload.name} ({compression}) failed with "
                                   f"status {measured.returncode}:\n{measured.stderr_tail}")
            files = e2e_measure.output_files(str(output))
            stats[system] = e2e_measure.shard_stats(files)
            if check and digests[system] is None:
                digests[system] = e2e_measure.example_digests(files)
            shutil.rmtree(output, ignore_errors=True)
            runs[system].append(measured)
    rows = []
    for system in systems:
        best = min(runs[system], key=lambda m: m.wall_s)
        rows.append({"workload": workload.name, "rows": workload.rows,
                     "compression": compression, "system": system, "wall_s": best.wall_s,
                     "cpu_s": best.cpu_s, "walls": [m.wall_s for m in runs[system]],
                     "peak_rss": max(m.peak_rss for m in runs[system]), **stats[system],
                     "digests": digests[system]})
    return rows


CHILD_ENV = e2e_measure.child_env()


def _settle(workload: Workload) -> None:
    """Flushes dirty pages to disk and reads the workload's input files, so
    that every system starts from the same warm page cache and an idle disk."""
    os.sync()
    root = Path(workload.path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        with open(path, "rb", buffering=0) as fileobj:
            while fileobj.read(1 << 22):
                pass


def _samples(work: Path, repeat: int) -> list[dict]:
    """The bundled example configs in both local modes: the figures behind
    the default running mode."""
    results = []
    for name in ("flights", "flowers"):
        config = REPO / "configs" / "examples" / f"{name}.yaml"
        for system in ("rf-w1", "rf-w2"):
            walls, peak = [], 0
            for _ in range(repeat):
                output = work / "out" / f"sample-{name}-{system}"
                shutil.rmtree(output, ignore_errors=True)
                measured = e2e_measure.measure(
                    [str(BIN / "recordforge"), "build", str(config), "--output", str(output),
                     "--overwrite", "--", *RF_MODES[system]], env=CHILD_ENV)
                if measured.returncode != 0:
                    raise RuntimeError(f"sample {name} ({system}) failed:\n"
                                       f"{measured.stderr_tail}")
                walls.append(measured.wall_s)
                peak = max(peak, measured.peak_rss)
                shutil.rmtree(output, ignore_errors=True)
            results.append({"workload": f"sample-{name}", "system": system,
                            "wall_s": min(walls), "walls": walls, "peak_rss": peak})
    return results


# --- report -------------------------------------------------------------------------


def _versions() -> str:
    from importlib import metadata

    names = ("apache-beam", "protobuf", "pyarrow", "pillow", "isal", "crc32c", "recordforge")
    parts = [f"python {platform.python_version()}"]
    for name in names:
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True, check=True).stdout.strip()
        parts.append(f"tree {commit}{' + local changes' if dirty else ''}")
    except (OSError, subprocess.CalledProcessError):
        pass
    return ", ".join(parts)


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return (f"{os.cpu_count()} cores ({model}), "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, {platform.system()}")


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}"


def _table(rows: list[dict]) -> list[str]:
    lines = ["| workload | comp | system | wall s | CPU s | rows/s | MB/s written | "
             "peak RSS MB | shards | size spread |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['compression']} | {r['system']} | {r['wall_s']:.1f} | "
            f"{r['cpu_s']:.1f} | {r['rows'] / r['wall_s']:,.0f} | "
            f"{r['bytes'] / r['wall_s'] / 1e6:,.1f} | {_mb(r['peak_rss'])} | {r['shards']} | "
            f"{r['spread']:.1%} |")
    return lines


def _find(rows, workload, compression, system):
    return next((r for r in rows if r["workload"] == workload and r["compression"] == compression
                 and r["system"] == system), None)


def _ratios(rows: list[dict]) -> list[str]:
    lines = ["| workload | comp | rf-w1 vs beam | rf-w1 vs script | rf-w1 vs tf | "
             "rf-w2 vs rf-w1 | rf-w1 CPU vs beam CPU |", "|---|---|---:|---:|---:|---:|---:|"]
    seen = []
    for r in rows:  # in the order they ran
        if (r["workload"], r["compression"]) not in seen:
            seen.append((r["workload"], r["compression"]))
    for workload, compression in seen:
        w1, w2, beam, script, tf = (_find(rows, workload, compression, s) for s in SYSTEMS)

        def speedup(fast, slow, key="wall_s"):
            return f"{slow[key] / fast[key]:.2f}x" if fast and slow else "-"
        lines.append(f"| {workload} | {compression} | {speedup(w1, beam)} | "
                     f"{speedup(w1, script)} | {speedup(w1, tf)} | {speedup(w2, w1)} | "
                     f"{speedup(w1, beam, 'cpu_s')} |")
    return lines


def _targets(rows: list[dict]) -> list[str]:
    """The targets, each with the figure and whether it is met."""
    out = []

    def line(name, value, goal, met):
        out.append(f"| {name} | {value} | {goal} | {'met' if met else 'NOT met'} |")

    for workload, per_s, factor in (("table-csv", 100_000, 5.0), ("table-parquet", 100_000, 5.0),
                                    ("images", 2_000, 2.5)):
        w1 = _find(rows, workload, "none", "rf-w1")
        beam = _find(rows, workload, "none", "beam")
        tf = _find(rows, workload, "none", "tf")
        if w1:
            rate = w1["rows"] / w1["wall_s"]
            line(f"{workload}: rows/s, one core", f"{rate:,.0f}", f">= {per_s:,}", rate >= per_s)
        if w1 and beam:
            ratio = beam["wall_s"] / w1["wall_s"]
            line(f"{workload}: vs hand-written Beam", f"{ratio:.2f}x", f">= {factor:g}x",
                 ratio >= factor)
        if w1 and tf and workload.startswith("table"):
            ratio = tf["wall_s"] / w1["wall_s"]
            line(f"{workload}: vs the TensorFlow loop", f"{ratio:.2f}x", ">= 3x", ratio >= 3.0)
    for r in rows:
        if r["compression"] == "gzip" and r["system"] == "rf-w1":
            beam = _find(rows, r["workload"], "gzip", "beam")
            if beam:
                ratio = beam["wall_s"] / r["wall_s"]
                goal = 4.0 if r["workload"].startswith("table") else 3.0
                line(f"{r['workload']} gzip: vs hand-written Beam gzip", f"{ratio:.2f}x",
                     f">= {goal:g}x", ratio >= goal)
    for r in rows:
        if r["system"] == "rf-w2":
            w1 = _find(rows, r["workload"], r["compression"], "rf-w1")
            if w1:
                ratio = w1["wall_s"] / r["wall_s"]
                line(f"{r['workload']} {r['compression']}: 2 workers vs 1", f"{ratio:.2f}x",
                     ">= 1.6x", ratio >= 1.6)
    rf = [r for r in rows if r["system"].startswith("rf")]
    if rf:
        worst = max(rf, key=lambda r: r["peak_rss"])
        line("peak RSS, every recordforge build",
             f"{_mb(worst['peak_rss'])} MB ({worst['workload']} {worst['compression']} "
             f"{worst['system']})", "< 1,500 MB", worst["peak_rss"] < 1.5e9)
    large = sorted({r["workload"] for r in rf if r["workload"].startswith("large-")},
                   key=lambda name: float(name[6:-2]))
    if len(large) >= 2:
        for system in ("rf-w1", "rf-w2"):
            for compression in ("none", "gzip"):
                small = _find(rows, large[0], compression, system)
                big = _find(rows, large[-1], compression, system)
                if small and big:
                    growth = big["peak_rss"] / small["peak_rss"]
                    line(f"peak RSS {large[0]} -> {large[-1]} ({system}, {compression})",
                         f"{_mb(small['peak_rss'])} -> {_mb(big['peak_rss'])} MB "
                         f"({growth:.2f}x)", "flat (<= 1.2x)", growth <= 1.2)
    if not out:
        return []
    return ["| target | measured | goal | |", "|---|---|---|---|", *out]


def _checks(rows: list[dict]) -> list[str]:
    lines = []
    for workload, compression in sorted({(r["workload"], r["compression"]) for r in rows}):
        group = [r for r in rows if r["workload"] == workload and r["compression"] == compression
                 and r["digests"] is not None]
        if len(group) < 2:
            continue
        reference = group[0]["digests"]
        same = all(r["digests"] == reference for r in group)
        lines.append(f"- {workload} {compression}: {len(reference):,} examples; "
                     f"{', '.join(r['system'] for r in group)} "
                     f"{'wrote the same multiset of Examples' if same else 'DIFFER'}")
    return lines


def _samples_table(samples: list[dict]) -> list[str]:
    if not samples:
        return []
    lines = ["| sample | mode | wall s (best) | runs | peak RSS MB |", "|---|---|---:|---|---:|"]
    for s in samples:
        mode = "in_memory, 1 worker" if s["system"] == "rf-w1" else "multi_processing, 2 workers"
        lines.append(f"| {s['workload']} | {mode} | {s['wall_s']:.1f} | "
                     f"{', '.join(f'{w:.1f}' for w in s['walls'])} | {_mb(s['peak_rss'])} |")
    return lines


def _report(mode: str, rows: list[dict], samples: list[dict], started: str, loads: tuple,
            repeat: int, workloads: list[Workload]) -> str:
    inputs = [f"- {w.name}: {w.rows:,} rows, {w.input_bytes / 1e6:,.0f} MB on disk, "
              f"{w.num_shards} shards of {w.shard_size / 1e6:,.1f} MB target"
              for w in workloads]
    parts = [f"### {mode} run, {started}", "",
             f"Machine: {_machine()}. Load average (1/5/15 min) before: {loads[0]}, "
             f"after: {loads[1]}.", f"Versions: {_versions()}.",
             f"Each figure is the fastest of {repeat} run(s); peak RSS is the highest.", "",
             "Inputs:", *inputs, ""]
    if rows:
        parts += ["Figures:", "", *_table(rows), "", "Ratios (wall time; higher is better "
                  "for recordforge):", "", *_ratios(rows), ""]
        targets = _targets(rows)
        if targets:
            parts += ["Targets:", "", *targets, ""]
        checks = _checks(rows)
        if checks:
            parts += ["Same Examples (sorted sha256 of every Example, deterministic form):", "",
                      *checks, ""]
    if samples:
        parts += ["Bundled samples, local modes:", "", *_samples_table(samples), ""]
    return "\n".join(parts)


def _write_results(path: Path, mode: str, text: str) -> None:
    """Replaces this mode's section between its markers, keeping the rest."""
    begin, end = f"<!-- e2e:{mode}:begin -->", f"<!-- e2e:{mode}:end -->"
    current = path.read_text() if path.exists() else "# End-to-end benchmark results\n"
    block = f"{begin}\n{text}\n{end}"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        current = head + block + rest.split(end, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    temporary = path.with_suffix(".md.tmp")
    temporary.write_text(current)
    temporary.replace(path)


# --- driver -------------------------------------------------------------------------


def _make_workloads(kinds: list[str], work: Path, quick: bool, args) -> list[Workload]:
    pick = 1 if quick else 0
    made = []
    if "table" in kinds:
        made += e2e_workloads.make_table(work / "table",
                                         args.table_rows or SIZES["table_rows"][pick])
    if "images" in kinds:
        made.append(e2e_workloads.make_images(work / "images",
                                              args.images or SIZES["images"][pick]))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="recordforge end-to-end benchmark")
    parser.add_argument("--quick", action="store_true",
                        help="small inputs (100k rows, 1k images, 0.2/0.5 GB large); "
                             "a few minutes; checks the Examples")
    parser.add_argument("--workloads", default="table,images,large,samples",
                        help="comma-separated subset of table,images,large,samples")
    parser.add_argument("--systems",
                        help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all; "
                             "tf only with --tf-python)")
    parser.add_argument("--tf-python", default=os.environ.get(TF_PYTHON_ENV),
                        help="the Python of an environment with TensorFlow, pyarrow, pillow "
                             f"and pyyaml, for the tf system (default: ${TF_PYTHON_ENV})")
    parser.add_argument("--compressions", default="none,gzip")
    parser.add_argument("--table-rows", type=int, help="override the table size")
    parser.add_argument("--images", type=int, help="override the number of images")
    parser.add_argument("--large-gb", help="comma-separated sizes of the large workload, "
                                           "e.g. 1,4")
    parser.add_argument("--large-systems", default="rf-w1,rf-w2,script",
                        help="systems run on the large workload (beam holds every "
                             "record in memory on the DirectRunner)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (best kept)")
    parser.add_argument("--check", action="store_true",
                        help="compare the Examples every system wrote (default with --quick)")
    parser.add_argument("--scratch", help="directory for inputs and outputs "
                                          "(default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--no-results", action="store_true", help="print only")
    args = parser.parse_args(argv)

    kinds = args.workloads.split(",")
    systems = ([s for s in args.systems.split(",") if s] if args.systems else
               [s for s in SYSTEMS if s != "tf" or args.tf_python])
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    if "tf" in systems and not args.tf_python:
        parser.error(f"the tf system needs --tf-python (or ${TF_PYTHON_ENV})")
    compressions = args.compressions.split(",")
    check = args.check or args.quick
    mode = "quick" if args.quick else "full"
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="recordforge-e2e-"))
    scratch.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    e2e_measure.compile_recordforge(CHILD_ENV)
    load_before = _load()
    rows: list[dict] = []
    workloads: list[Workload] = []
    try:
        for workload in _make_workloads(kinds, scratch, args.quick, args):
            workloads.append(workload)
            for compression in compressions:
                for row in _run(systems, workload, compression, scratch, args.repeat, check,
                                args.tf_python):
                    rows.append(row)
                    _progress(row)
        if "large" in kinds:
            sizes = ([float(x) for x in args.large_gb.split(",")] if args.large_gb
                     else SIZES["large_gb"][1 if args.quick else 0])
            large_systems = [s for s in args.large_systems.split(",") if s in systems]
            for gigabytes in sizes:
                workload = e2e_workloads.make_large(scratch / "large", gigabytes)
                workloads.append(workload)
                try:
                    for compression in compressions:
                        for row in _run(large_systems, workload, compression, scratch,
                                        args.repeat, check and args.quick, args.tf_python):
                            rows.append(row)
                            _progress(row)
                finally:
                    os.unlink(workload.path)  # several GB: never left behind
        samples = _samples(scratch, max(args.repeat, 2)) if "samples" in kinds else []
    finally:
        if not args.keep and not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    text = _report(mode, rows, samples, started, (load_before, _load()), args.repeat, workloads)
    print(text)
    if not args.no_results:
        _write_results(Path(args.results), mode, text)
    return 0


def _progress(row: dict) -> None:
    print(f"  {row['workload']:<14} {row['compression']:<5} {row['system']:<7} "
          f"{row['wall_s']:7.1f} s  {row['rows'] / row['wall_s']:>10,.0f} rows/s  "
          f"peak {row['peak_rss'] / 1e6:,.0f} MB", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
