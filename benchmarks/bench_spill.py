"""The spill's per-row cost: `RunBuffer.add` and `RunBuffer.write` on realistic batches.

    python benchmarks/bench_spill.py                         # 250k rows, best of 5
    python benchmarks/bench_spill.py --baseline DIR --rounds 2   # and another checkout, alternating
    python benchmarks/bench_spill.py --ordered               # key-ordered rows with keys of their own
    python benchmarks/bench_spill.py --keyed                 # shuffled rows with keys of their own
    python benchmarks/bench_spill.py --framed                # Examples handed over framed

What the build cache's piece writer does with a unit's rows
(`cache.pieces.PieceWriter`): the converting step's batches (1000 rows,
`HashedExamples` with their digests back to back and their columns, no
keys, Examples of 80-160 random bytes) go into a shuffling `RunBuffer`
with two splits (0.8 / 0.2), then each split is written as a run file
through a CRC32C-keeping writer, as the piece writer's (behind a
`page_cache.WriteBehind` where the code's piece writer has one), each
time to new files kept until the end. Per code: the
best of `--repeat` of each step in microseconds a row, and the sha256 of
the run files, which must be the same for every code measured (the run
fails otherwise). With ``--baseline DIR`` (a directory holding another
checkout as ``DIR/recordforge``) each round measures that code first,
then this one, each in a fresh process with the same rows. With
``--ordered`` the rows have keys of their own (ids of up to 9 digits) and
the buffer orders them by key (``shuffle: false``); with ``--keyed`` they
have such keys and are shuffled (hashed by key), as a table with a
``key`` column is. With ``--framed`` each batch's Examples come as one
`FramedExamples` (framed before the add, as a converter that frames them
hands them over; for code that has the class). Each batch is made just before it is added (its
objects fresh, as the converting step's), and only the adds are timed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time

from child_process import run_in_child

_HERE = os.path.dirname(os.path.abspath(__file__))


def _assigner():
    from recordforge.transforms.splits import SplitAssigner

    return SplitAssigner("bench", [("train", 0.8), ("test", 0.2)])


def _batches(rows: int, batch_rows: int, seed: int, ordered: bool = False,
             keyed: bool = False, framed: bool = False):
    """The batches, each made just before it is asked for (as the
    converting step hands over batches it has just made: their objects
    still in the caches)."""
    import numpy as np
    from recordforge.transforms.splits import HashedExamples

    assigner = _assigner()
    generator = np.random.default_rng(seed)
    for start in range(0, rows, batch_rows):
        count = min(batch_rows, rows - start)
        sizes = generator.integers(80, 161, size=count)
        blob = generator.bytes(int(sizes.sum()))
        ends = np.cumsum(sizes).tolist()
        examples = [blob[end - size:end] for end, size in zip(ends, sizes.tolist())]
        keys = ([str(key).encode() for key in generator.integers(0, 10**9, count).tolist()]
                if ordered or keyed else [None] * count)
        digests, joined, _ = assigner.hash_rows_joined(keys if ordered or keyed else examples)
        if framed:
            from recordforge.transforms.framed_examples import FramedExamples

            column = FramedExamples.of(examples)
        yield HashedExamples(zip(keys, examples), assigner.salt, digests, joined=joined,
                             columns=(keys, column if framed else examples))


def _checked_file(fileobj):
    """The piece writer's CRC32C-keeping file: the code's own where it has
    one (`run_kernel.CheckedFile`, whose CRC the kernel keeps), else one
    like the older code's `cache.pieces._Checksummed`."""
    try:
        from recordforge.transforms.writer.run_kernel import CheckedFile
    except ImportError:
        return _Checksummed(fileobj)
    return CheckedFile(fileobj)


def _on_disk(fileobj):
    """The piece writer's file under its CRC32C: a `page_cache.WriteBehind`
    where the code's kernel gives that advice itself as it writes a run
    (`WriteBehind.wrote`), else the file as the older piece writer wrote it."""
    try:
        from recordforge.transforms.page_cache import WriteBehind
    except ImportError:
        return fileobj
    return WriteBehind(fileobj) if hasattr(WriteBehind, "wrote") else fileobj


class _Checksummed:
    """The piece writer's CRC32C-keeping file before `run_kernel.CheckedFile`."""

    def __init__(self, fileobj):
        import crc32c

        self._crc32c, self._fileobj, self.crc = crc32c.crc32c, fileobj, 0

    def write(self, data) -> int:
        self.crc = self._crc32c(data, self.crc)
        return self._fileobj.write(data)


def measure(rows: int, repeat: int, scratch: str, ordered: bool = False,
            keyed: bool = False, framed: bool = False) -> dict:
    """Best of `repeat` of add and write, in µs a row, and the runs' sha256."""
    from recordforge.schemas.native import path_note
    from recordforge.transforms.writer import RunBuffer

    assigner = _assigner()
    best_add = best_write = float("inf")
    digests, paths = [], []
    for _ in range(repeat):
        buffer = RunBuffer(assigner, shuffle=not ordered, sample_every=(64 << 20) // 64,
                           prefix_len=64, index_every=64 << 10)
        adding = 0.0
        for batch in _batches(rows, 1000, seed=37, ordered=ordered, keyed=keyed, framed=framed):
            started = time.process_time()
            buffer.add(batch)
            adding += time.process_time() - started
        added = time.process_time()
        digests = []
        for split in buffer.splits_held():
            # A new file each time, kept to the end, as a build's runs are:
            # its pages new to the cache, not those a truncation just freed.
            paths.append(os.path.join(scratch, f"s{split}-{len(paths)}.run"))
            with open(paths[-1], "wb") as fileobj:
                on_disk = _on_disk(fileobj)
                buffer.write(split, _checked_file(on_disk))
                if on_disk is not fileobj:
                    on_disk.finish(durable=False)
            digests.append(paths[-1])
        written = time.process_time()
        for at, path in enumerate(digests):
            with open(path, "rb") as fileobj:
                digests[at] = hashlib.sha256(fileobj.read()).hexdigest()
        best_add = min(best_add, adding)
        best_write = min(best_write, written - added)
    for path in paths:
        os.remove(path)
    return {"path": path_note(), "add_us": best_add / rows * 1e6,
            "write_us": best_write / rows * 1e6, "runs": digests}


def _in_process(pythonpath: str | None, rows: int, repeat: int, scratch: str,
                ordered: bool, keyed: bool, framed: bool) -> dict:
    return run_in_child(
        os.path.join(_HERE, "bench_spill.py"),
        ["--rows", str(rows), "--repeat", str(repeat), "--scratch", scratch, "--json"]
        + (["--ordered"] if ordered else []) + (["--keyed"] if keyed else [])
        + (["--framed"] if framed else []),
        pythonpath)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with")
    parser.add_argument("--scratch")
    parser.add_argument("--ordered", action="store_true",
                        help="rows with keys of their own, ordered by key")
    parser.add_argument("--keyed", action="store_true",
                        help="shuffled rows with keys of their own (hashed by key)")
    parser.add_argument("--framed", action="store_true",
                        help="each batch's Examples handed over as one FramedExamples")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    scratch = args.scratch or tempfile.mkdtemp(prefix="bench_spill_")
    os.makedirs(scratch, exist_ok=True)
    if args.json:
        print(json.dumps(measure(args.rows, args.repeat, scratch, args.ordered, args.keyed,
                                 args.framed)))
        return
    codes = [("this code", os.environ.get("PYTHONPATH"))]
    if args.baseline is not None:
        codes.insert(0, ("baseline", args.baseline))
    print(f"{args.rows:,} rows, best of {args.repeat}; µs a row (CPU)")
    print(f"{'code':<10} {'add':>6} {'write':>6} {'both':>6}  path")
    reference = None
    for _ in range(args.rounds):
        for name, pythonpath in codes:
            result = _in_process(pythonpath, args.rows, args.repeat, scratch, args.ordered,
                                 args.keyed, args.framed)
            if reference is None:
                reference = result["runs"]
            elif result["runs"] != reference:
                raise SystemExit(f"{name} wrote different run files")
            print(f"{name:<10} {result['add_us']:>6.3f} {result['write_us']:>6.3f} "
                  f"{result['add_us'] + result['write_us']:>6.3f}  {result['path']}")
    print("every code wrote the same run files (sha256)")


if __name__ == "__main__":
    main()
