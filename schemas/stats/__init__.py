"""Dataset statistics: mergeable per-feature summaries of the checked values, the entries of `stats.json`.

The one door of the statistics wing; code outside it imports these names.
Its rooms, each one job:

    plan           the kinds of feature and what a build's statistics cover
    sums           exact sums and sums of squares (mean and std to the bit)
    numeric        a batch's numeric update (histogram merged, theta hashes kept) natively, or numpy's
    histogram      ValueHistogram: exact counts in buckets of adaptive width (quantiles)
    distinct       theta sketches in canonical form (distinct counts)
    frequent       FrequentValues: Misra-Gries top values of text
    text           a batch's text partial (top values, theta) in one native pass, or Python's
    feature_stats  FeatureStatistics: one feature in one split, built and merged
    entries        a FeatureStatistics as its stats.json entry; a stored sketch read back
    merge          partials merged as they come; top values of text in the canonical order
    batches        a batch's checked values -> partials per (split, feature)
    stored         an earlier version's stats.json checked before drift reads it

Every part but the top values of text gives the same result in any merge
order; `merge_partials` makes that one the same too, so stats.json depends
only on the rows. docs/statistics.md says what each field guarantees.
Nothing here knows about Beam.
"""

from .batches import StatisticsAccumulator, batch_statistics
from .entries import QUANTILE_RANKS, sketch_from_json
from .feature_stats import FeatureStatistics
from .frequent import FREQUENT_CAPACITY, FrequentValues
from .histogram import HISTOGRAM_BUCKETS, ValueHistogram
from .merge import MERGE_LEVELS, MergingStatistics, merge_order, merge_partials, partial_digest
from .plan import FORMAT, KINDS, StatisticsPlan, feature_kind
from .stored import stored_statistics_problem

__all__ = ["FORMAT", "FREQUENT_CAPACITY", "HISTOGRAM_BUCKETS", "KINDS", "MERGE_LEVELS",
           "QUANTILE_RANKS", "FeatureStatistics", "FrequentValues", "MergingStatistics",
           "StatisticsAccumulator", "StatisticsPlan", "ValueHistogram", "batch_statistics",
           "feature_kind", "merge_order", "merge_partials", "partial_digest", "sketch_from_json",
           "stored_statistics_problem"]
