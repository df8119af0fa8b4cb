"""Python's cyclic garbage collector, tuned for work done in batches of rows.

Every row of a batch (its dict of values, its SourceRow, its (key, example)
pair) is a tracked container that lives as long as the batch is being read,
checked and encoded. With CPython's default thresholds a young collection
runs every 700 allocations, so nearly every row outlives one or two young
collections, is promoted to the oldest generation and makes the collector
run full collections over everything the process holds. Those collections
cost a 1M-row table build a fifth of its time. Letting the youngest
generation grow to tens of thousands of objects lets a batch's rows die
young: no promotion, no full collections, and the memory they add is a few
batches' worth of small objects.

The threshold is process-wide. It is raised (never lowered) in the setup of
the DoFns that make rows, so the process that runs them gets it on any
runner; a process that asked for a higher one, or turned the collector
off, keeps its setting.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "relax_young_collections"]

YOUNG_THRESHOLD = 50_000


def relax_young_collections() -> None:
    """Raises the youngest generation's threshold to YOUNG_THRESHOLD
    allocations (leaves a higher one, and the older generations, alone)."""
    young, middle, old = gc.get_threshold()
    if young and young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
