"""What each of the writer's steps sets up on its worker: memory habits and counters."""

from __future__ import annotations

from apache_beam.metrics import Metrics

from ..gc_tuning import relax_young_collections
from ..malloc_tuning import keep_freed_memory
from ..metrics import METRICS_NAMESPACE

__all__ = ["ShardCounters", "counter", "set_up_worker"]


def set_up_worker(*, rows_die_young: bool = False) -> None:
    """Keeps freed memory for reuse (the writer's buffers are freed and
    made again all the time); with `rows_die_young` (steps that take
    rows a batch at a time, or sort them), collects the young generation
    less often."""
    if rows_die_young:
        relax_young_collections()
    keep_freed_memory()


def counter(name: str):
    """The writer's counter `name`, in the namespace every step shares."""
    return Metrics.counter(METRICS_NAMESPACE, name)


class ShardCounters:
    """The counters of shards published: examples, bytes and files."""

    def __init__(self):
        self._examples = counter("examples_written")
        self._bytes = counter("bytes_written")
        self._shards = counter("shards_written")

    def count(self, num_examples: int, num_bytes: int) -> None:
        self._examples.inc(num_examples)
        self._bytes.inc(num_bytes)
        self._shards.inc()
