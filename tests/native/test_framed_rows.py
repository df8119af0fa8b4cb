"""The table kernels' framed Examples against the Python reference: the
buffer is `FramedExamples.of` the Examples the Python row path makes of
the rows the kernel took, a declined row an empty span (generated CSV
runs with declined rows mixed in, empty runs, every kernel)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from recordforge.schemas.dead_letters import RowError
from recordforge.transforms.framed_examples import FramedExamples
from recordforge.transforms.native_rows import kernel_examples, kernel_keys
from recordforge.transforms.readers.csv import CsvRunBatch, iter_csv
from recordforge.transforms.tfrecord import FRAMING

from .test_csv_kernel import cases, csv_files, schemas


def _python_row(converter, row) -> tuple[bytes | None, bytes] | None:
    """(key, Example) the Python row path makes of `row`, None for a dead letter."""
    try:
        return converter._convert_row(row)
    except RowError:  # (a dead letter: the kernel must have declined the row)
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, data=csv_files())
def test_the_kernels_buffer_frames_the_python_paths_examples(native, tmp_path_factory,
                                                             schema, data):
    specs, key, _ = schema
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(data)
    converter = cases.converter(specs, key, native)
    reference = cases.converter(specs, key, None)
    for batch in iter_csv(str(path), columns=True):
        if not isinstance(batch, CsvRunBatch):
            continue
        plan = converter._native._plan(batch.column_names())
        if plan is None:
            continue
        done = native.convert_csv_run(batch.run, len(batch), plan[0])
        if done is None:
            continue
        framed, offsets, keys, _, _, declined = done
        keys = kernel_keys(keys)
        sizes = np.diff(np.frombuffer(offsets, dtype="<i8"))
        assert len(sizes) == len(keys) == len(batch)
        taken = sizes > 0
        assert int((~taken).sum()) == declined
        rows = [batch.row(index) for index in range(len(batch))]
        made = [_python_row(reference, row) for row, took in zip(rows, taken) if took]
        assert None not in made  # (the kernel takes only rows Python stores)
        expected = [example for _, example in made]
        # A declined row has no key; a taken row the Python path's.
        assert list(keys) == [made.pop(0)[0] if took else None for took in taken]
        assert framed == FramedExamples.of(expected).framed
        assert sizes[taken].tolist() == [len(example) + FRAMING for example in expected]
        examples = kernel_examples(framed, offsets, declined)
        listed = list(examples)
        assert [example for example in listed if example is not None] == expected
        assert isinstance(examples, FramedExamples) == (declined == 0)


def test_empty_runs_give_an_empty_buffer(native):
    plan = native.CsvPlan(1, [(b"a", 0, ("int", -5, 5, None))])
    for done in (native.convert_csv_run(b"", 0, plan),
                 native.convert_jsonl_run(b"", 0, plan, [[b"a"]]),
                 native.convert_arrow_batch([("int64", 0, 0, None, b"", None)], 0, plan)):
        framed, offsets, keys, _, _, declined = done
        assert (framed, np.frombuffer(offsets, dtype="<i8").tolist(), declined) == (b"", [0], 0)
        assert keys == (b"", np.zeros(1, "<i8").tobytes(), None) and kernel_keys(keys) == []
        assert kernel_examples(framed, offsets, declined) == FramedExamples.of([])
