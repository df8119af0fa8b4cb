"""A Beam pipeline of your own: Parquet rows read by Beam, published by `recordforge.WriteDataset`.

    python examples/parquet_to_dataset.py ROWS.parquet OUTPUT [-- BEAM_OPTIONS ...]

Beam's own `ReadFromParquet` gives one dict per row (column -> value);
`WriteDataset` checks, encodes, shards and publishes them with the features
of configs/examples/flights.yaml (its `source:` section is not used). The
version is published when the pipeline completes; rows that fail their
checks are written into the version's dead_letter/ and also handed back as
a PCollection, printed here.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import recordforge

CONFIG = pathlib.Path(__file__).resolve().parents[1] / "configs" / "examples" / "flights.yaml"


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    beam_args = argv[argv.index("--") + 1:] if "--" in argv else []
    rows_path, output = (argv[:argv.index("--")] if "--" in argv else argv)[:2]
    with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
        written = (pipeline
                   | "ReadParquet" >> beam.io.ReadFromParquet(rows_path)
                   | "Publish" >> recordforge.WriteDataset(CONFIG, **{"output.path": output}))
        _ = written.dead_letters | "ShowDeadLetters" >> beam.Map(
            lambda record: print(f"dead letter: {record['reason']}: {record['message']}"))
    print(f"published {output}")


if __name__ == "__main__":
    main()
