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

Small outputs that all go to one GroupByKey (a build's result) are taken
out together, keyed by None, by one step (`select_keyed`): a filter per tag
and a keying step per output would be two ParDos each.
"""

from __future__ import annotations

from typing import Any, Iterator

__all__ = ["select", "select_keyed"]


def select(element: tuple[str, Any], tag: str) -> Iterator[Any]:
    """The value of a ``(tag, value)`` pair whose tag is `tag`, none
    otherwise: ``beam.FlatMap(select, tag)`` keeps one output's values."""
    if element[0] == tag:
        yield element[1]



def select_keyed(element: tuple[str, Any], tags: frozenset[str]
                 ) -> Iterator[tuple[None, tuple[str, Any]]]:
    """``(None, (tag, value))`` for a ``(tag, value)`` pair whose tag is in
    `tags`, none otherwise: ``beam.FlatMap(select_keyed, tags)`` keeps
    several outputs' values in one PCollection, tagged and keyed for one
    GroupByKey."""
    if element[0] in tags:
        yield None, element
