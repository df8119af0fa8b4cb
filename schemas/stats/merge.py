"""The canonical merge: partials merged as they come, the top values of text (whose merge depends on the order) in an order fixed by their content."""

from __future__ import annotations

import collections
import hashlib
import itertools
from collections.abc import Iterable

from .distinct import serialized_theta
from .feature_stats import FeatureStatistics
from .frequent import FrequentValues

__all__ = ["MERGE_LEVELS", "MergingStatistics", "merge_order", "merge_partials",
           "partial_digest"]

# The canonical merge of the top values of text, whose merge depends on the
# order: level 1 groups the partials by the top 16 bits of their
# fingerprint, level 2 by the top 8, level 3 is one group; each group
# merges in the order of what distinguishes its members (MERGE_LEVELS:
# bits of the group key).
MERGE_LEVELS = (16, 8, 0)


def partial_digest(stats: FeatureStatistics) -> bytes:
    """SHA-256 of the statistics' canonical JSON (`to_state`): their content."""
    return hashlib.sha256(stats.state_json(sort_keys=True).encode("ascii")).digest()


def merge_order(stats: FeatureStatistics) -> tuple[bytes, int]:
    """(sort key, level-1 group) of a partial in the canonical merge: a
    fingerprint of its content (counts and the canonical theta sketch:
    cheap, and enough to spread partials over the groups). Nothing of where
    its rows were read (a path, a row number) takes part: the same rows
    give the same statistics wherever their files sit and whatever they
    are named."""
    theta = b""
    if stats.theta is not None:
        stats.theta = serialized_theta(stats.theta)  # as pickling would
        theta = stats.theta.data
    offset = stats.frequent.offset if stats.frequent is not None else 0
    fingerprint = hashlib.sha256(b"".join((
        repr((stats.kind, stats.rows, stats.present, stats.num_values, offset)).encode("ascii"),
        theta))).digest()
    return fingerprint, int.from_bytes(fingerprint[:4], "big") >> (32 - MERGE_LEVELS[0])


class MergingStatistics:
    """Partials of one (split, feature) merged as they come, the same
    whatever their order and grouping (`merge` joins two of these).

    Every part of a partial but the top values of text merges the same in
    any order and is merged at once (`merged`: its theta sketch one sketch,
    however many partials). Top values (a Misra-Gries summary) merge in the
    canonical tree, whose order is a sort of all the partials by their
    content (`merge_order`, ties by `partial_digest`): no part of that fold
    is known before the last partial is in, so the summaries wait in
    `waiting` with their place in the order, computed when they come (it
    needs the whole partial), and nothing else of their partial. A summary
    holding no counts (free text each batch of which held no value twice,
    purged to its offset) changes no count wherever it falls in the tree,
    and its offset adds up: it merges at once too.
    """

    __slots__ = ("merged", "waiting")

    def __init__(self):
        self.merged: FeatureStatistics | None = None
        # (level-1 group, fingerprint, digest, summary) per partial with counts
        self.waiting: list[tuple[int, bytes, bytes, FrequentValues]] = []

    def add(self, stats: FeatureStatistics) -> MergingStatistics:
        """Takes a partial (and may keep it as part of what it merges into)."""
        frequent = stats.frequent
        if not stats.order_free and frequent is not None and frequent.counts:
            fingerprint, group = merge_order(stats)
            self.waiting.append((group, fingerprint, partial_digest(stats), frequent))
            stats = stats.without_frequent()
        self.merged = stats if self.merged is None else self.merged.merge(stats)
        return self

    def merge(self, other: MergingStatistics) -> MergingStatistics:
        """Adds what `other` took; returns self."""
        if other.merged is not None:
            self.merged = other.merged if self.merged is None else self.merged.merge(other.merged)
        self.waiting += other.waiting
        return self

    def result(self) -> FeatureStatistics | None:
        """Every partial taken, merged (None: none was)."""
        merged = self.merged
        if merged is None or not self.waiting:
            return merged
        top = _canonical_tree(self.waiting)
        merged.frequent = top if merged.frequent is None else merged.frequent.merge(top)
        self.waiting = []
        return merged


def _canonical_tree(waiting: list[tuple[int, bytes, bytes, FrequentValues]]) -> FrequentValues:
    """The summaries merged in the canonical tree: level 1 groups them by
    `MERGE_LEVELS[0]` bits of their fingerprint and merges each group in
    fingerprint order (ties: digest order), each further level groups the
    results by fewer bits and merges them in the order of their group keys."""
    level: dict[int, list] = collections.defaultdict(list)
    for group, fingerprint, digest, frequent in waiting:
        level[group].append(((fingerprint, digest), frequent))
    results = {group: _merged_in_order(members) for group, members in level.items()}
    for finer, coarser in itertools.pairwise(MERGE_LEVELS):
        level = collections.defaultdict(list)
        for group, frequent in results.items():
            level[group >> (finer - coarser)].append((group, frequent))
        results = {group: _merged_in_order(members) for group, members in level.items()}
    return results[0]


def _merged_in_order(members: list[tuple[object, FrequentValues]]) -> FrequentValues:
    members.sort(key=lambda member: member[0])
    merged = members[0][1]
    for _, frequent in members[1:]:
        merged = merged.merge(frequent)
    return merged


def merge_partials(partials: Iterable[FeatureStatistics]) -> FeatureStatistics | None:
    """All partials of one (split, feature) merged (`MergingStatistics`),
    as `transforms.merge_statistics.MergeStatistics` merges them on a
    runner. The result depends only on the set of partials, never on the
    order they come in or where their rows were read."""
    merging = MergingStatistics()
    for stats in partials:
        merging.add(stats)
    return merging.result()
