"""The one namespace of the build's Beam counters.

Every counter a transform increments (`to_examples`: rows converted, dead
letters by reason; `shards`: rows spilled, examples, bytes and shards
written) lives in it, and `pipelines.progress` queries it, live and after
the run, with ``MetricsFilter().with_namespace(METRICS_NAMESPACE)``.
"""

__all__ = ["METRICS_NAMESPACE"]

METRICS_NAMESPACE = "recordforge"
