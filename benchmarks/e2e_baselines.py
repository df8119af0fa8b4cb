"""What users write by hand instead of recordforge, for the end-to-end benchmark.

Two baselines build the same Examples as recordforge from a `Workload`
(`e2e_workloads.py`), with recordforge's Example codec and no checks, no dead
letters, no shuffle and no manifest:

* ``beam``: a Beam pipeline as a Beam user writes it today: Beam's own
  ``ReadFromText`` (CSV, skipping the header), ``ReadFromParquet`` or
  ``MatchFiles`` + ``ReadMatches`` (images) -> a ``Map`` that builds the
  Example -> ``WriteToTFRecord`` with the same shard count recordforge writes.
  Beam options after ``--`` (default: DirectRunner, Beam's own defaults).
* ``script``: one process, one loop: ``csv`` / ``pyarrow`` / ``os.walk`` ->
  the same per-row function -> `tfrecord.TFRecordWriter`, one record at a
  time, starting a new file every ``rows / num_shards`` rows.

    python benchmarks/e2e_baselines.py beam WORKLOAD.json OUT_DIR --compression gzip
    python benchmarks/e2e_baselines.py script WORKLOAD.json OUT_DIR

The per-row functions are module-level (picklable); the encoder is built once
per process, as a careful hand-written pipeline would.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_workloads import LABELS, Workload  # noqa: E402

from recordforge.schemas.example import ExampleEncoder  # noqa: E402

__all__ = ["image_example", "large_example", "main", "run_beam", "run_script",
           "table_example"]

_LABEL_IDS = {label: i for i, label in enumerate(LABELS)}
_TABLE = ExampleEncoder({"id": "int64", "count": "int64", "score": "float",
                         "text": "bytes", "label": "int64"})
_IMAGE = ExampleEncoder({"image/encoded": "bytes", "image/height": "int64",
                         "image/width": "int64", "image/format": "bytes",
                         "image/filename": "bytes", "label": "int64"})
_LARGE = ExampleEncoder({"id": "int64", "label": "int64", "payload": "bytes"})


def table_example(row) -> bytes:
    """A CSV line (str), its fields (list) or a Parquet row (dict) ->
    serialized Example."""
    if not isinstance(row, dict):
        ident, count, score, text, label = row.split(",") if isinstance(row, str) else row
        row = {"id": int(ident), "count": int(count), "score": float(score), "text": text,
               "label": label}
    return _TABLE.encode({"id": [row["id"]], "count": [row["count"]],
                          "score": [float(row["score"])], "text": [row["text"].encode("utf-8")],
                          "label": [_LABEL_IDS[row["label"]]]})


def large_example(line) -> bytes:
    """A line (str) of the large-records CSV, or its fields -> serialized Example."""
    ident, label, payload = line.split(",", 2) if isinstance(line, str) else line
    return _LARGE.encode({"id": [int(ident)], "label": [_LABEL_IDS[label]],
                          "payload": [payload.encode("utf-8")]})


def image_example(root: str, path: str, data: bytes) -> bytes:
    """An image file's bytes -> serialized Example (size from the header)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as picture:
        width, height = picture.size
        fmt = picture.format
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    return _IMAGE.encode({"image/encoded": [data], "image/height": [height],
                          "image/width": [width], "image/format": [fmt.encode("utf-8")],
                          "image/filename": [rel.encode("utf-8")],
                          "label": [_LABEL_IDS[rel.split("/")[-2]]]})


def _read_image_match(readable_file, root: str) -> bytes:
    with readable_file.open() as f:
        data = f.read()
    return image_example(root, readable_file.metadata.path, data)


def run_beam(workload: Workload, output: str, compression: str, beam_args: list[str]) -> None:
    """The hand-written Beam pipeline."""
    import apache_beam as beam
    from apache_beam.io import fileio
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.options.pipeline_options import PipelineOptions

    os.makedirs(output, exist_ok=True)
    suffix = ".tfrecord.gz" if compression == "gzip" else ".tfrecord"
    write = beam.io.WriteToTFRecord(
        os.path.join(output, "train"), file_name_suffix=suffix, num_shards=workload.num_shards,
        compression_type=(CompressionTypes.GZIP if compression == "gzip"
                          else CompressionTypes.UNCOMPRESSED))
    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        if workload.kind == "images":
            examples = (p
                        | "Match" >> fileio.MatchFiles(os.path.join(workload.path, "*", "*.jpg"))
                        | "Read" >> fileio.ReadMatches()
                        | "ToExample" >> beam.Map(_read_image_match, workload.path))
        elif workload.source_type == "parquet":
            examples = (p
                        | "Read" >> beam.io.ReadFromParquet(workload.path)
                        | "ToExample" >> beam.Map(table_example))
        else:
            to_example = large_example if workload.kind == "large" else table_example
            examples = (p
                        | "Read" >> beam.io.ReadFromText(workload.path, skip_header_lines=1)
                        | "ToExample" >> beam.Map(to_example))
        _ = examples | "Write" >> write


def _script_examples(workload: Workload):
    if workload.kind == "images":
        for directory, dirnames, files in os.walk(workload.path):
            dirnames.sort()
            for name in sorted(files):
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    yield image_example(workload.path, path, f.read())
    elif workload.source_type == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(workload.path).iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                yield table_example(row)
    else:
        to_example = large_example if workload.kind == "large" else table_example
        with open(workload.path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            next(reader)
            for fields in reader:
                yield to_example(fields)


def run_script(workload: Workload, output: str, compression: str) -> None:
    """The single-process loop: one record at a time into rotating files."""
    from recordforge.transforms.tfrecord import TFRecordWriter, suffix_for

    os.makedirs(output, exist_ok=True)
    per_shard = math.ceil(workload.rows / workload.num_shards)
    shard, written, f, writer = 0, 0, None, None
    try:
        for record in _script_examples(workload):
            if writer is None:
                name = (f"train-{shard:05d}-of-{workload.num_shards:05d}"
                        f"{suffix_for(compression)}")
                f = open(os.path.join(output, name), "wb")
                writer = TFRecordWriter(f, compression)
            writer.write(record)
            written += 1
            if written == per_shard:
                writer.close()
                f.close()
                shard, written, f, writer = shard + 1, 0, None, None
    finally:
        if writer is not None:
            writer.close()
            f.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("baseline", choices=("beam", "script"))
    parser.add_argument("workload", help="a Workload as JSON (file)")
    parser.add_argument("output", help="directory for the TFRecord files")
    parser.add_argument("--compression", choices=("none", "gzip"), default="none")
    args = parser.parse_args(ours)
    workload = Workload.from_json(Path(args.workload).read_text())
    if args.baseline == "beam":
        run_beam(workload, args.output, args.compression, beam_args)
    else:
        run_script(workload, args.output, args.compression)
    return 0


if __name__ == "__main__":
    sys.exit(main())
