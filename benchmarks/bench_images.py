"""Throughput of the source readers on one core.

Measures images/s of `images.image_columns` on generated ~30 KB JPEGs in
header and full decode mode (target: >= 3000 images/s in header mode), and
rows/s of the readers `csv.iter_csv`, `jsonl.iter_jsonl` and
`parquet.iter_parquet` on generated files.

    python benchmarks/bench_images.py [--images 2000] [--rows 200000]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import tempfile
import time
from pathlib import Path

from PIL import Image, ImageFilter

from recordforge.transforms.readers import csv as csv_reader, jsonl, parquet
from recordforge.transforms.readers.images import ImageOptions, image_columns


def make_jpegs(count: int, target_bytes: int = 30_000, distinct: int = 50) -> list[bytes]:
    """`count` JPEGs of about `target_bytes` (`distinct` different images, cycled)."""
    rng = random.Random(0)
    images = []
    for i in range(distinct):
        base = Image.effect_noise((400, 300), 40 + i % 20).convert("RGB")
        im = base.filter(ImageFilter.GaussianBlur(0.9))
        buffer = io.BytesIO()
        im.save(buffer, "JPEG", quality=rng.choice((80, 85, 90)))
        images.append(buffer.getvalue())
    return [images[i % distinct] for i in range(count)]


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>12,.0f}/s"


def bench_images(count: int) -> None:
    jpegs = make_jpegs(count)
    mean = sum(map(len, jpegs)) / len(jpegs)
    print(f"images: {count} JPEGs of 400x300, mean {mean / 1000:.1f} KB")
    for label, options in (("header", ImageOptions(decode="header")),
                           ("full", ImageOptions(decode="full")),
                           ("resize 128 + JPEG", ImageOptions(resize_max_side=128,
                                                              encode_format="JPEG"))):
        n = count if label == "header" else max(1, count // 4)
        start = time.perf_counter()
        for i in range(n):
            image_columns(jpegs[i], "bench.jpg", options)
        print(f"  image_columns {label:<18} {rate(n, time.perf_counter() - start)}")


def bench_tables(rows: int, workdir: Path) -> None:
    rng = random.Random(1)
    csv_path = workdir / "rows.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "name", "score", "comment"])
        for i in range(rows):
            comment = f'said "hi", {i}' if i % 10 == 0 else f"comment {i}"
            writer.writerow([i, f"name{rng.randrange(1000)}", rng.random(), comment])
    jsonl_path = workdir / "rows.jsonl"
    with open(jsonl_path, "w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps({"id": i, "name": f"n{i}", "score": i / 7, "tags": ["a", "b"]}))
            f.write("\n")
    import pyarrow as pa
    import pyarrow.parquet as pq
    parquet_path = workdir / "rows.parquet"
    pq.write_table(pa.table({"id": list(range(rows)), "name": [f"n{i}" for i in range(rows)],
                             "score": [i / 7 for i in range(rows)]}),
                   parquet_path, row_group_size=50_000)
    print(f"tables: {rows} rows each")
    for label, reader in (("iter_csv", lambda: csv_reader.iter_csv(str(csv_path))),
                          ("iter_jsonl", lambda: jsonl.iter_jsonl(str(jsonl_path))),
                          ("iter_parquet", lambda: parquet.iter_parquet(str(parquet_path)))):
        start = time.perf_counter()
        n = sum(1 for _ in reader())
        assert n == rows, (label, n)
        print(f"  {label:<32} {rate(n, time.perf_counter() - start)}")
    size = csv_path.stat().st_size
    start = time.perf_counter()
    points = csv_reader.csv_split_points(str(csv_path), 1 << 20)
    seconds = time.perf_counter() - start
    print(f"  csv_split_points ({size / 1e6:.0f} MB, {len(points)} ranges) "
          f"{size / seconds / 1e6:>8,.0f} MB/s")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args(argv)
    bench_images(args.images)
    with tempfile.TemporaryDirectory() as tmp:
        bench_tables(args.rows, Path(tmp))


if __name__ == "__main__":
    main()
