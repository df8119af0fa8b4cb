"""What sampling key-ordered bucket bounds costs the driver on an object store.

    python benchmarks/bench_key_sample.py            # about a minute

A key-ordered plain build on a distributed runner reads the first rows of
up to 256 table files before the pipeline (`pipelines/key_sample.py`).
This starts a moto S3 server on loopback (s3fs reaches it through
AWS_ENDPOINT_URL), puts three 39 MB CSV files and three 162 MB Parquet
files (21 int64 columns, one row group each) there, and counts the GET
requests and bytes that `sample_bucket_bounds` fetches (s3fs's
`_fetch_range`), beside two naive heads of the same files: the same rows
read with the client's default blocks (s3fs fetches 50 MB at the first
read), and, for Parquet, the first rows of every column (`iter_parquet`,
which reads a row group's column chunks). Parquet without a key reads
the first pages of its features' columns (here 2 of the 21).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time

FILES = 3
CSV_ROWS = 1_500_000
PARQUET_ROWS = 1_000_000
PARQUET_COLUMNS = 20  # besides the key column


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _moto_server():
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def _write_inputs(fs, work: str) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs.mkdir("sampling")
    rng = np.random.default_rng(5)
    columns = {f"c{i}": rng.integers(0, 1 << 40, PARQUET_ROWS) for i in range(PARQUET_COLUMNS)}
    columns["id"] = rng.integers(0, 1 << 40, PARQUET_ROWS)
    parquet = os.path.join(work, "wide.parquet")
    pq.write_table(pa.table(columns), parquet, row_group_size=PARQUET_ROWS)
    table = os.path.join(work, "keys.csv")
    with open(table, "w") as out:
        out.write("id,c0\n")
        for key, value in zip(rng.integers(0, 1 << 40, CSV_ROWS),
                              rng.integers(0, 1 << 40, CSV_ROWS)):
            out.write(f"{key},{value}\n")
    for index in range(FILES):
        fs.put_file(parquet, f"sampling/parquet/part-{index}.parquet")
        fs.put_file(table, f"sampling/csv/part-{index}.csv")


def main() -> int:
    import s3fs

    import recordforge
    from recordforge.pipelines import key_sample
    from recordforge.transforms.readers.parquet import iter_parquet
    from recordforge.transforms.writer import ShardTuning

    fetched: list[int] = []
    fetch = s3fs.core.S3File._fetch_range

    def counted(self, start, end):
        fetched.append(end - start)
        return fetch(self, start, end)

    s3fs.core.S3File._fetch_range = counted
    with _moto_server() as endpoint, tempfile.TemporaryDirectory() as work:
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1"})
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        _write_inputs(fs, work)
        print("| input | files | read by | GETs | MB fetched |")
        print("|---|---:|---|---:|---:|")

        def report(kind: str, how: str, sample, keyed: bool = True) -> None:
            fetched.clear()
            sample()
            size = fs.size(f"sampling/{kind}/part-0.{kind}") / 1e6
            what = f"{kind}, {size:.0f} MB each" + ("" if keyed else ", no key")
            print(f"| {what} | {FILES} | {how} | {len(fetched)} | {sum(fetched) / 1e6:.1f} |")

        # Without a key the examples (here of 2 features) are the keys.
        for kind, key in (("csv", "id"), ("parquet", "id"), ("parquet", None)):
            config = recordforge.load_config({
                "name": "sampled", "version": "1",
                "source": {"type": kind, "path": f"s3://sampling/{kind}"},
                "features": {"id": {"type": "int64"}, "c0": {"type": "int64"}}, "key": key,
                "output": {"path": os.path.join(work, "out"), "shuffle": False,
                           "compression": "none"}})

            def sample(config=config):
                bounds = key_sample.sample_bucket_bounds(config, {}, ShardTuning())
                assert len(bounds) == ShardTuning().hash_buckets, len(bounds)

            report(kind, "`sample_bucket_bounds`", sample, key is not None)
            block = key_sample.HEAD_BLOCK
            key_sample.HEAD_BLOCK = None  # the client's default blocks
            try:
                report(kind, "the same, the client's default blocks", sample, key is not None)
            finally:
                key_sample.HEAD_BLOCK = block
        per_file = -(-key_sample.SAMPLE_ROWS // FILES)

        def every_column():
            for index in range(FILES):
                rows = iter_parquet(f"sampling/parquet/part-{index}.parquet", fs=fs)
                key_sample._first_rows(rows, per_file)
                rows.close()

        report("parquet", "first rows of every column (`iter_parquet`)", every_column)
    return 0


if __name__ == "__main__":
    sys.exit(main())
