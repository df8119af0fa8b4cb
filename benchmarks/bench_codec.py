"""TFRecord codec throughput: our writer and reader against two baselines.

Baselines, measured in the same run on the same records:
- a loop over Beam's `_TFRecordUtil.write_record` (what Beam's own TFRecord
  sink does per record), into an in-memory file;
- Python's `gzip` module at level 6 over the same framed stream (what a
  hand-written gzip writer, or Beam's gzip sink, costs);
- for the shard writer's gzip chunks (one member per ~4 MB,
  `tfrecord.gzip_compress`, which stores data deflate barely shrinks):
  every chunk deflated at isal's level, as before storing was chosen, written
  and read back.

Records are serialized Examples shaped like table rows (100 B, 1 KB) and
like encoded images (real JPEGs of 10-200 KB), so sizes and compressibility
are realistic.

Usage: python benchmarks/bench_codec.py [--megabytes 64]
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import random
import string
import sys
import time

from apache_beam.io.tfrecordio import _TFRecordUtil

from isal import isal_zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_workloads import _render_jpegs  # noqa: E402
from recordforge.schemas.example import encode_example  # noqa: E402
from recordforge.transforms import tfrecord  # noqa: E402

CHUNK_BYTES = 4 << 20


def _vocabulary(rng: random.Random, size: int = 5000) -> tuple[list[str], list[float]]:
    """Random words with Zipf frequencies, as in natural-language text columns.
    (A handful of words repeated over and over would flatter zlib's slower,
    more thorough matching; real text columns look like this.)"""
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
             for _ in range(size)]
    return words, [1 / (rank + 1) for rank in range(size)]


def make_records(size: int, total_bytes: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    words, weights = _vocabulary(rng)
    jpegs = _render_jpegs(rng, 40) if size >= 50_000 else []
    records, total = [], 0
    while total < total_bytes:
        if size >= 50_000:
            # Image-like: real JPEG bytes (noisy gradients of 10-200 KB), which
            # deflate barely shrinks yet, unlike random bytes, still encodes
            # with Huffman codes rather than storing.
            payload = {"image": rng.choice(jpegs), "label": rng.randrange(10),
                       "height": rng.randrange(64, 512), "width": rng.randrange(64, 512)}
        else:
            text_len = max(8, size - 60)
            text = " ".join(rng.choices(words, weights, k=text_len // 5 + 1))[:text_len]
            payload = {"id": rng.randrange(1 << 40), "count": rng.randrange(1000),
                       "score": rng.random(), "text": text, "label": rng.randrange(10)}
        record = encode_example(payload)
        records.append(record)
        total += len(record)
    return records


def best_of(fn, repeats=3):
    times = []
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def bench(size: int, megabytes: int) -> list[tuple]:
    records = make_records(size, megabytes * 1_000_000)
    total = sum(len(r) for r in records)
    mb = total / 1e6
    rows = []

    def ours(compression):
        buffer = io.BytesIO()
        with tfrecord.TFRecordWriter(buffer, compression) as writer:
            for start in range(0, len(records), 1000):
                writer.write_many(records[start:start + 1000])
        return buffer.getvalue()

    def beam_loop():
        buffer = io.BytesIO()
        for record in records:
            _TFRecordUtil.write_record(buffer, record)
        return buffer.getvalue()

    def python_gzip6():
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=0) as f:
            for record in records:
                _TFRecordUtil.write_record(f, record)
        return buffer.getvalue()

    t_beam, beam_bytes = best_of(beam_loop)
    t_plain, plain_bytes = best_of(lambda: ours("none"))
    assert plain_bytes == beam_bytes, "our framing differs from Beam's"
    t_gz6, gz6_bytes = best_of(python_gzip6, repeats=1)
    t_gz, gz_bytes = best_of(lambda: ours("gzip"))
    t_read_plain, read_plain = best_of(
        lambda: sum(1 for _ in tfrecord.iter_records(io.BytesIO(plain_bytes), compression="none")))
    t_read_gz, read_gz = best_of(
        lambda: sum(1 for _ in tfrecord.iter_records(io.BytesIO(gz_bytes), compression="gzip")))
    t_read_py, _ = best_of(lambda: gzip.decompress(gz6_bytes), repeats=1)
    assert read_plain == read_gz == len(records)
    chunks = [plain_bytes[i:i + CHUNK_BYTES] for i in range(0, len(plain_bytes), CHUNK_BYTES)]
    t_members, members = best_of(lambda: b"".join(map(tfrecord.gzip_compress, chunks)))
    t_deflated, deflated = best_of(lambda: b"".join(
        isal_zlib.compress(chunk, tfrecord.DEFAULT_GZIP_LEVEL, 31) for chunk in chunks))
    t_read_members, read_members = best_of(
        lambda: sum(1 for _ in tfrecord.iter_records(io.BytesIO(members), compression="gzip")))
    t_read_deflated, read_deflated = best_of(
        lambda: sum(1 for _ in tfrecord.iter_records(io.BytesIO(deflated), compression="gzip")))
    assert read_members == read_deflated == len(records)
    label = "JPEG" if size >= 50_000 else f"{size // 1000} KB" if size >= 1000 else f"{size} B"
    rows.append((label, "write plain", mb / t_plain, "Beam write_record loop", mb / t_beam))
    rows.append((label, "write gzip", mb / t_gz, "Python gzip level 6", mb / t_gz6,
                 len(gz_bytes) / len(gz6_bytes)))
    rows.append((label, "read plain", mb / t_read_plain, "", None))
    rows.append((label, "read gzip", mb / t_read_gz, "Python gzip.decompress (no parsing)",
                 mb / t_read_py))
    rows.append((label, "write chunks", mb / t_members, "isal deflate of every chunk",
                 mb / t_deflated, len(members) / len(deflated)))
    rows.append((label, "read chunks", mb / t_read_members, "the same, deflated chunks",
                 mb / t_read_deflated))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=64, help="data per record size")
    args = parser.parse_args(argv)
    print(f"# codec benchmark, {args.megabytes} MB per record size, "
          f"gzip level {tfrecord.DEFAULT_GZIP_LEVEL}, {os.cpu_count()} cores")
    print(f"{'records':>8} | {'ours':<12} | {'MB/s':>7} | {'baseline':<36} | {'MB/s':>7} | "
          f"{'ratio':>6} | size vs baseline")
    for size in (100, 1000, 100_000):
        for row in bench(size, args.megabytes):
            label, what, ours, base_name, base = row[:5]
            ratio = f"{ours / base:5.1f}x" if base else ""
            size_note = f"{row[5]:.3f}" if len(row) > 5 else ""
            base_text = f"{base:7.0f}" if base else ""
            print(f"{label:>8} | {what:<12} | {ours:7.0f} | {base_name:<36} | {base_text:>7} | "
                  f"{ratio:>6} | {size_note}")


if __name__ == "__main__":
    main()
