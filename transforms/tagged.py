"""Multi-output steps: one DoFn output of ``(tag, value)`` pairs split into labelled PCollections.

A step with several outputs (a reader's rows, dead letters and counts; the
converter's examples, dead letters and label counts) yields ``(tag,
value)`` pairs from one DoFn output, and one labelled filter per tag takes
its values out::

    tagged = batches | "Convert" >> beam.ParDo(ConvertFn())
    examples = tagged | "SelectExamples" >> beam.FlatMap(select, "examples")

rather than ``ParDo(...).with_outputs(...)``: Beam's Dask runner (2.77)
hands every tagged output of a multi-output ParDo to every consumer,
whatever its tag.
"""

from __future__ import annotations

from typing import Any, Iterator

__all__ = ["select"]


def select(element: tuple[str, Any], tag: str) -> Iterator[Any]:
    """The value of a ``(tag, value)`` pair whose tag is `tag`, none
    otherwise: ``beam.FlatMap(select, tag)`` keeps one output's values."""
    if element[0] == tag:
        yield element[1]

