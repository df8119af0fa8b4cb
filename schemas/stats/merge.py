"""The canonical merge: partials whose merge depends on the order (text) merged in an order fixed by their content."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
from typing import Any, Iterable

from .distinct import compact_theta
from .feature_stats import FeatureStatistics

__all__ = ["MERGE_LEVELS", "merge_group", "merge_order", "merge_partials", "partial_digest"]

# The canonical merge of partials whose merge depends on the order (text
# features): level 1 groups them by the top 16 bits of their digest, level 2
# by the top 8, level 3 is one group; each group merges in the order of
# what distinguishes its members (MERGE_LEVELS: bits of the group key).
MERGE_LEVELS = (16, 8, 0)


def partial_digest(stats: FeatureStatistics) -> bytes:
    """SHA-256 of the statistics' canonical JSON (`to_state`): their content."""
    return hashlib.sha256(json.dumps(stats.to_state(), sort_keys=True,
                                     separators=(",", ":")).encode("utf-8")).digest()


def merge_order(stats: FeatureStatistics) -> tuple[bytes, int]:
    """(sort key, level-1 group) of a partial in `merge_partials`: a
    fingerprint of its content (counts and the canonical theta sketch:
    cheap, and enough to spread partials over the groups). Nothing of where
    its rows were read (a path, a row number) takes part: the same rows
    give the same statistics wherever their files sit and whatever they
    are named."""
    theta = b""
    if stats.theta is not None:
        stats.theta = compact_theta(stats.theta)  # as pickling would
        theta = stats.theta.serialize()
    offset = stats.frequent.offset if stats.frequent is not None else 0
    fingerprint = hashlib.sha256(b"".join((
        repr((stats.kind, stats.rows, stats.present, stats.num_values, offset)).encode("ascii"),
        theta))).digest()
    return fingerprint, int.from_bytes(fingerprint[:4], "big") >> (32 - MERGE_LEVELS[0])


def merge_group(members: Iterable[tuple[Any, FeatureStatistics]]) -> FeatureStatistics:
    """Merges ``(order, statistics)`` pairs in the order of `order`; pairs
    of one order (partials alike in fingerprint) in the order of their
    whole content (`partial_digest`)."""
    ordered = sorted(members, key=lambda member: member[0])
    merged = None
    for _, run in itertools.groupby(ordered, key=lambda member: member[0]):
        run = list(run)
        if len(run) > 1:
            run.sort(key=lambda member: partial_digest(member[1]))
        for _, stats in run:
            merged = stats if merged is None else merged.merge(stats)
    return merged


def merge_partials(partials: Iterable[FeatureStatistics]) -> FeatureStatistics | None:
    """All partials of one (split, feature) merged in the canonical tree
    that `transforms.merge_statistics.MergeStatistics` runs on a runner:
    level 1 groups them by `MERGE_LEVELS[0]` bits of their fingerprint and
    merges each group in fingerprint order (`merge_order`), each further
    level groups the results by fewer bits and merges them in the order of
    their group keys. The result depends only on the set of partials, never
    on the order they come in or where their rows were read."""
    level: dict[int, list] = collections.defaultdict(list)
    for stats in partials:
        key, group = merge_order(stats)
        level[group].append((key, stats))
    if not level:
        return None
    results = {group: merge_group(members) for group, members in level.items()}
    for finer, coarser in zip(MERGE_LEVELS, MERGE_LEVELS[1:]):
        level = collections.defaultdict(list)
        for group, stats in results.items():
            level[group >> (finer - coarser)].append((group, stats))
        results = {group: merge_group(members) for group, members in level.items()}
    return results[0]
