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
  the same per-row function -> recordforge's `TFRecordWriter`, one record at
  a time, starting a new file every ``rows / num_shards`` rows.
* ``tf``: the same loop as TensorFlow's own tutorials write it: each row a
  ``tf.train.Example`` of ``tf.train.Feature``s, ``SerializeToString()``,
  ``tf.io.TFRecordWriter`` (``TFRecordOptions(compression_type="GZIP")`` for
  gzip). It imports TensorFlow and no recordforge, so it runs under the
  interpreter of an environment that has TensorFlow (``pip install
  tensorflow-cpu pyarrow pillow pyyaml``); recordforge never needs it.

    python benchmarks/e2e_baselines.py beam WORKLOAD.json OUT_DIR --compression gzip
    python benchmarks/e2e_baselines.py script WORKLOAD.json OUT_DIR
    TF_ENV/bin/python benchmarks/e2e_baselines.py tf WORKLOAD.json OUT_DIR

The per-row functions are module-level (picklable); the encoder is built once
per process, as a careful hand-written pipeline would. The ``beam`` and
``script`` rows and the ``tf`` rows are the same values in the same
features: only the codec differs (`recordforge_encode`, `tensorflow_encode`).
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import math
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_workloads import LABELS, Workload  # noqa: E402

__all__ = ["image_example", "large_example", "main", "recordforge_encode", "run_beam",
           "run_script", "table_example", "tensorflow_encode"]

_LABEL_IDS = {label: i for i, label in enumerate(LABELS)}
# Each kind of row's features and their value types.
_FEATURES = {
    "table": {"id": "int64", "count": "int64", "score": "float", "text": "bytes",
              "label": "int64"},
    "image": {"image/encoded": "bytes", "image/height": "int64", "image/width": "int64",
              "image/format": "bytes", "image/filename": "bytes", "label": "int64"},
    "large": {"id": "int64", "label": "int64", "payload": "bytes"},
}
# (kind of row, {feature: [values]}) -> serialized Example.
Encode = Callable[[str, dict], bytes]


@functools.cache
def _recordforge_encoders() -> dict:
    from recordforge.schemas.example import ExampleEncoder

    return {kind: ExampleEncoder(features) for kind, features in _FEATURES.items()}


def recordforge_encode(kind: str, values: dict) -> bytes:
    """The Example of `values` by recordforge's codec (``beam``, ``script``)."""
    return _recordforge_encoders()[kind].encode(values)


def _tensorflow_feature(value_type: str, value: list):
    import tensorflow as tf  # a lookup in sys.modules after the first row

    if value_type == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
    if value_type == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=value))


def tensorflow_encode(kind: str, values: dict) -> bytes:
    """The Example of `values` as TensorFlow's tutorials build it (``tf``)."""
    import tensorflow as tf

    example = tf.train.Example(features=tf.train.Features(feature={
        name: _tensorflow_feature(value_type, values[name])
        for name, value_type in _FEATURES[kind].items()}))
    return example.SerializeToString()


def table_example(row, encode: Encode = recordforge_encode) -> bytes:
    """A CSV line (str), its fields (list) or a Parquet row (dict) ->
    serialized Example."""
    if not isinstance(row, dict):
        ident, count, score, text, label = row.split(",") if isinstance(row, str) else row
        row = {"id": int(ident), "count": int(count), "score": float(score), "text": text,
               "label": label}
    return encode("table", {"id": [row["id"]], "count": [row["count"]],
                            "score": [float(row["score"])],
                            "text": [row["text"].encode("utf-8")],
                            "label": [_LABEL_IDS[row["label"]]]})


def large_example(line, encode: Encode = recordforge_encode) -> bytes:
    """A line (str) of the large-records CSV, or its fields -> serialized Example."""
    ident, label, payload = line.split(",", 2) if isinstance(line, str) else line
    return encode("large", {"id": [int(ident)], "label": [_LABEL_IDS[label]],
                            "payload": [payload.encode("utf-8")]})


def image_example(root: str, path: str, data: bytes,
                  encode: Encode = recordforge_encode) -> bytes:
    """An image file's bytes -> serialized Example (size from the header)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as picture:
        width, height = picture.size
        fmt = picture.format
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    return encode("image", {"image/encoded": [data], "image/height": [height],
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


def _script_examples(workload: Workload, encode: Encode) -> Iterator[bytes]:
    if workload.kind == "images":
        for directory, dirnames, files in os.walk(workload.path):
            dirnames.sort()
            for name in sorted(files):
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    yield image_example(workload.path, path, f.read(), encode)
    elif workload.source_type == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(workload.path).iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                yield table_example(row, encode)
    else:
        to_example = large_example if workload.kind == "large" else table_example
        with open(workload.path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            next(reader)
            for fields in reader:
                yield to_example(fields, encode)


class _RecordforgeWriter:
    """recordforge's `TFRecordWriter` on a file of its own (the writer leaves
    the file it is given open)."""

    def __init__(self, path: str, compression: str):
        from recordforge.transforms.tfrecord import TFRecordWriter

        self._file = open(path, "wb")
        self._writer = TFRecordWriter(self._file, compression)
        self.write = self._writer.write

    def close(self) -> None:
        self._writer.close()
        self._file.close()


def _tensorflow_writer(path: str, compression: str):
    import tensorflow as tf

    return tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(
        compression_type="GZIP" if compression == "gzip" else ""))


def run_script(workload: Workload, output: str, compression: str,
               loop: str = "recordforge") -> None:
    """The single-process loop: one record at a time into rotating files;
    `loop`: "recordforge" (its codec and writer) or "tensorflow"."""
    encode, open_writer = ((tensorflow_encode, _tensorflow_writer) if loop == "tensorflow"
                           else (recordforge_encode, _RecordforgeWriter))
    suffix = ".tfrecord.gz" if compression == "gzip" else ".tfrecord"
    os.makedirs(output, exist_ok=True)
    per_shard = math.ceil(workload.rows / workload.num_shards)
    shard, written, writer = 0, 0, None
    try:
        for record in _script_examples(workload, encode):
            if writer is None:
                name = f"train-{shard:05d}-of-{workload.num_shards:05d}{suffix}"
                writer = open_writer(os.path.join(output, name), compression)
            writer.write(record)
            written += 1
            if written == per_shard:
                writer.close()
                shard, written, writer = shard + 1, 0, None
    finally:
        if writer is not None:
            writer.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("baseline", choices=("beam", "script", "tf"))
    parser.add_argument("workload", help="a Workload as JSON (file)")
    parser.add_argument("output", help="directory for the TFRecord files")
    parser.add_argument("--compression", choices=("none", "gzip"), default="none")
    args = parser.parse_args(ours)
    workload = Workload.from_json(Path(args.workload).read_text())
    if args.baseline == "beam":
        run_beam(workload, args.output, args.compression, beam_args)
    else:
        run_script(workload, args.output, args.compression,
                   "tensorflow" if args.baseline == "tf" else "recordforge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
