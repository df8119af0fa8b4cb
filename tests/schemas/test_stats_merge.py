"""Merged statistics depend only on the set of partials, in any order and grouping."""

from __future__ import annotations

import collections
import copy
import heapq
import itertools
import json
import pickle
import random

import numpy as np
from hypothesis import given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.stats import (FREQUENT_CAPACITY, MERGE_LEVELS, FeatureStatistics,
                                       FrequentValues, MergingStatistics, StatisticsAccumulator,
                                       StatisticsPlan, ValueHistogram, batch_statistics,
                                       merge_order, merge_partials, partial_digest)

KINDS = ("numeric-int64", "numeric-float", "bytes", "vocabulary", "string")
VOCABULARY = ("a", "b", "c", "d")


def _partial(kind: str, values: list) -> FeatureStatistics:
    if kind == "numeric-int64":
        return FeatureStatistics.from_values("numeric", "int64", len(values), values)
    if kind == "numeric-float":
        return FeatureStatistics.from_values("numeric", "float", len(values), values)
    if kind == "bytes":
        return FeatureStatistics.from_values("bytes", "bytes", len(values), values)
    if kind == "vocabulary":
        return FeatureStatistics.from_values("vocabulary", "int64", len(values), values,
                                             vocabulary=VOCABULARY)
    return FeatureStatistics.from_values("string", "bytes", len(values), values)


def _values(kind: str):
    if kind == "numeric-int64":
        return st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(-50, 50)
    if kind == "numeric-float":
        return st.floats(width=32) | st.sampled_from([0.0, -0.0, 1.5, -2.25])
    if kind == "bytes":
        return st.binary(max_size=12)
    if kind == "vocabulary":
        return st.integers(0, len(VOCABULARY) - 1)
    return st.text(max_size=3)


@st.composite
def _batches(draw):
    kind = draw(st.sampled_from(KINDS))
    batches = draw(st.lists(st.lists(_values(kind), min_size=1, max_size=40), min_size=1,
                            max_size=12))
    return kind, batches


def _json(stats: FeatureStatistics) -> str:
    return json.dumps(stats.to_json(), sort_keys=True, allow_nan=False)


def _random_tree(partials: list, rng: random.Random) -> FeatureStatistics:
    """Merges copies of the partials in a random order and random grouping,
    as bundles and combiner lifting would."""
    pool = [copy.deepcopy(stats) for stats in partials]
    rng.shuffle(pool)
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        merged = pool[i].merge(pool[j])
        pool = [stats for k, stats in enumerate(pool) if k not in (i, j)] + [merged]
    return pool[0]


@settings(max_examples=80, deadline=None)
@given(_batches(), st.randoms(use_true_random=False))
def test_partials_merge_to_the_same_json_in_any_order_and_grouping(batches, rng):
    kind, values = batches
    partials = [_partial(kind, batch) for batch in values]
    if kind == "string":
        assert not partials[0].order_free
        first = merge_partials(copy.deepcopy(partials))
        shuffled = copy.deepcopy(partials)
        rng.shuffle(shuffled)
        assert _json(merge_partials(shuffled)) == _json(first)
        return
    assert partials[0].order_free
    one = _partial(kind, [value for batch in values for value in batch])
    expected = _json(_random_tree(partials, rng))
    assert _json(_random_tree(partials, rng)) == expected
    # merged partials give what one batch of all the values gives
    assert _json(one) == expected


@settings(max_examples=80, deadline=None)
@given(_batches(), st.randoms(use_true_random=False))
def test_added_values_give_what_merged_partials_give(batches, rng):
    kind, values = batches
    partials = [_partial(kind, batch) for batch in values]
    added = FeatureStatistics(partials[0].kind, partials[0].stored,
                              vocabulary=VOCABULARY if kind == "vocabulary" else None)
    for batch in values:
        added.add_values(len(batch), batch)
    merged = copy.deepcopy(partials[0])
    for stats in partials[1:]:  # text: merged in the order the values were added
        merged.merge(stats)
    assert _json(added) == _json(merged)
    # the same sketches, to the byte (the theta sketch in its canonical form)
    assert added.to_state() == merged.to_state()
    if kind != "string":
        assert added.to_state() == _random_tree(partials, rng).to_state()


def _plan_and_batches(seed: int):
    specs = parse_features({"n": {"type": "int64"}, "x": {"type": "float"},
                            "city": {"type": "string"},
                            "label": {"type": "int64", "vocabulary": list(VOCABULARY)},
                            "blob": {"type": "bytes"},
                            "tags": {"type": "int64", "shape": [-1], "required": False}})
    rng = random.Random(seed)
    batches = []
    for index in range(30):
        size = rng.choice((1, 40, 700))
        columns = {"n": ("scalars", [rng.randrange(-10**9, 10**9) for _ in range(size)]),
                   "x": ("scalars", [rng.gauss(0, 1e4) for _ in range(size)]),
                   "city": ("scalars", [str(rng.randrange(2000)) for _ in range(size)]),
                   "label": ("scalars", [rng.randrange(len(VOCABULARY)) for _ in range(size)]),
                   "blob": ("scalars", [b"x" * rng.randrange(50) for _ in range(size)]),
                   "tags": ("rows", [None if rng.random() < 0.2 else
                                     [rng.randrange(9) for _ in range(rng.randrange(3))]
                                     for _ in range(size)])}
        split_of = np.array([rng.randrange(2) for _ in range(size)])
        batches.append((columns, split_of))
    return StatisticsPlan.from_specs(specs, {}), batches


def _merged_by_key(partials) -> dict:
    by_key = {}
    for key, stats in partials:
        by_key.setdefault(key, []).append(stats)
    return {key: merge_partials(members).to_state() for key, members in by_key.items()}


def _folded(batches, plan, names) -> list:
    """Each batch's own partials (`batch_statistics`) merged per (split,
    feature) in the order of the batches, in (split, feature) order."""
    held = {}
    for columns, split_of in batches:
        for key, stats in batch_statistics(plan, columns.__getitem__, split_of, names):
            if key in held:
                held[key].merge(stats)
            else:
                held[key] = stats
    return sorted(held.items(), key=lambda item: item[0])


def test_an_accumulator_gives_its_batches_partials_merged_in_their_order():
    """Flushed after a run of batches, one partial per (split, feature):
    the batches' own partials merged in the order they were added, text's
    top values too (whose merge depends on the order: 2,000 cities purge).
    Flushed after each batch, the batch's own partials."""
    plan, batches = _plan_and_batches(5)
    names = ["train", "test"]
    own = [partial for columns, split_of in batches
           for partial in batch_statistics(plan, columns.__getitem__, split_of, names)]
    for flush_every in (1, 7, len(batches)):
        accumulator = StatisticsAccumulator(plan, names)
        partials = []
        for start in range(0, len(batches), flush_every):
            run = batches[start:start + flush_every]
            for columns, split_of in run:
                assert accumulator.add(columns.__getitem__, split_of) is None
            flushed = accumulator.flush()
            expected = _folded(run, plan, names)
            assert [key for key, _ in flushed] == [key for key, _ in expected]
            for (key, stats), (_, folded) in zip(flushed, expected):
                if key[1] == "city":
                    assert stats.frequent == folded.frequent
                assert merge_partials([stats]).to_state() == merge_partials([folded]).to_state()
            partials += flushed
        assert not accumulator.flush()
        if flush_every == 1:
            assert _merged_by_key(partials) == _merged_by_key(own)
    # A run's text partial is one thing, not the canonical merge of its
    # batches' partials, once its values purge (what makes the test above
    # say something about the order).
    run = _folded(batches, plan, names)
    assert any(stats.frequent != merge_partials(
        [p for k, p in own if k == key]).frequent for key, stats in run if key[1] == "city")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=FREQUENT_CAPACITY - 3,
                max_size=3 * FREQUENT_CAPACITY), st.integers(0, 3000))
def test_a_purge_subtracts_the_count_past_the_capacity(counts, excess):
    # mostly ones (free text) as well as many repeats
    counts = [1] * excess + counts
    values = {f"v{index}": count for index, count in enumerate(counts)}
    summary = FrequentValues.of(values)
    if len(values) <= FREQUENT_CAPACITY:
        assert (summary.counts, summary.offset) == (values, 0)
        return
    threshold = heapq.nlargest(FREQUENT_CAPACITY + 1, values.values())[-1]
    assert summary.offset == threshold
    assert summary.counts == {value: count - threshold for value, count in values.items()
                              if count > threshold}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1,
                         max_size=300), min_size=1, max_size=8),
       st.randoms(use_true_random=False))
def test_value_histograms_are_the_histogram_of_the_union(batches, rng):
    everything = np.array([value for batch in batches for value in batch])
    one = ValueHistogram.of(everything)
    sketches = [ValueHistogram.of(np.array(batch)) for batch in batches]
    rng.shuffle(sketches)
    merged = sketches[0]
    for sketch in sketches[1:]:
        merged = merged.merge(sketch) if rng.random() < 0.5 else sketch.merge(merged)
    assert merged == one
    assert ValueHistogram.deserialize(merged.serialize()) == one


def test_coarsened_histograms_merge_to_the_histogram_of_the_union():
    # Enough distinct values that batches coarsen at different shifts.
    rng = np.random.default_rng(12)
    batches = [rng.lognormal(mean, sigma, size) for mean, sigma, size in
               ((0, 3, 5000), (5, 0.1, 3000), (-2, 1, 4000), (0, 0.01, 10), (9, 4, 6000))]
    one = ValueHistogram.of(np.concatenate(batches))
    sketches = [ValueHistogram.of(batch) for batch in batches]
    assert len({sketch.shift for sketch in sketches}) > 2
    for order in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        merged = sketches[order[0]]
        for index in order[1:]:
            merged = merged.merge(sketches[index])
        assert merged == one


def _text_partials(seed: int) -> list[FeatureStatistics]:
    """Batches of text with more distinct values than the frequent-items
    sketch holds exactly (768), so its merges depend on the order."""
    rng = random.Random(seed)
    values = [str(rng.randrange(5000)) if rng.random() < 0.7 else f"common{rng.randrange(20)}"
              for _ in range(60_000)]
    return [FeatureStatistics.from_values("string", "bytes", 1000, values[i:i + 1000])
            for i in range(0, len(values), 1000)]


def test_text_partials_merge_canonically_above_the_sketch_capacity():
    partials = _text_partials(1)
    rng = random.Random(7)
    plain, canonical = set(), set()
    for _ in range(4):
        shuffled = copy.deepcopy(partials)
        rng.shuffle(shuffled)
        merged = copy.deepcopy(shuffled[0])
        for stats in shuffled[1:]:
            merged.merge(stats)
        plain.add(_json(merged))
        canonical.add(_json(merge_partials(copy.deepcopy(shuffled))))
    # merging as they come gives different top values; the canonical tree one
    assert len(plain) > 1
    assert len(canonical) == 1
    entry = json.loads(canonical.pop())
    assert entry["string"]["exact"] is False
    top = entry["string"]["top_values"]
    assert all(item["lower_bound"] <= item["count"] <= item["upper_bound"] for item in top)


def _merged_in_shuffled_orders(partials, rng, times=3) -> set:
    results = set()
    for _ in range(times):
        shuffled = copy.deepcopy(partials)
        rng.shuffle(shuffled)
        results.add(_json(merge_partials(shuffled)))
    return results


def test_partials_merge_in_the_order_of_their_content():
    partials = _text_partials(2)
    rng = random.Random(3)
    assert len(_merged_in_shuffled_orders(partials, rng)) == 1
    # spread over the level-1 groups by their content alone
    assert len({merge_order(stats)[1] for stats in partials}) > len(partials) // 2


@settings(max_examples=200, deadline=None)
@given(counts=st.dictionaries(st.text(), st.integers(1, 10**6), max_size=60),
       offset=st.integers(0, 10**6))
def test_frequent_values_state_lists_pairs_sorted_by_value(counts, offset):
    """The state's items are the [value, count] pairs in the order sorting
    the pairs gives (the partials' JSON in cache pieces and their content
    digest depend on it), and read back to the same summary."""
    frequent = FrequentValues(dict(counts), offset)
    state = frequent.to_state()
    assert state == {"offset": offset, "items": sorted(map(list, counts.items()))}
    assert FrequentValues.from_state(json.loads(json.dumps(state))) == frequent


def _reference_group(members) -> FeatureStatistics:
    ordered = sorted(members, key=lambda member: member[0])
    merged = None
    for _, run in itertools.groupby(ordered, key=lambda member: member[0]):
        run = list(run)
        if len(run) > 1:
            run.sort(key=lambda member: partial_digest(member[1]))
        for _, stats in run:
            merged = stats if merged is None else merged.merge(stats)
    return merged


def _reference_tree(partials: list[FeatureStatistics]) -> FeatureStatistics:
    """The canonical merge as it is defined, over whole partials: level 1
    groups them by MERGE_LEVELS[0] bits of their fingerprint and merges each
    group in fingerprint order (ties: digest order), each further level
    groups the results by fewer bits and merges them in group order."""
    level = collections.defaultdict(list)
    for stats in partials:
        key, group = merge_order(stats)
        level[group].append((key, stats))
    results = {group: _reference_group(members) for group, members in level.items()}
    for finer, coarser in itertools.pairwise(MERGE_LEVELS):
        level = collections.defaultdict(list)
        for group, stats in results.items():
            level[group >> (finer - coarser)].append((group, stats))
        results = {group: _reference_group(members) for group, members in level.items()}
    return results[0]


def _mixed_text_partials(seed: int) -> list[FeatureStatistics]:
    """Batches of text that purge (more distinct values than the capacity,
    some repeated), of free text whose summary purges to its offset alone,
    of a few values (exact), and without values; some batches alike."""
    rng = random.Random(seed)
    pool = rng.choice((300, 1500, 4000))
    partials = []
    for index in range(rng.randrange(2, 24)):
        shape = rng.choice(("purging", "purging", "free", "few", "none", "again"))
        size = rng.randrange(200, 1600)
        if shape == "purging":
            values = [str(rng.randrange(pool)) if rng.random() < 0.8 else f"hot{rng.randrange(9)}"
                      for _ in range(size)]
        elif shape == "free":
            values = [f"free-{seed}-{index}-{i}" for i in range(size)]
        elif shape == "few":
            values = [rng.choice("abcde") for _ in range(size)]
        elif shape == "again" and partials:
            partials.append(copy.deepcopy(rng.choice(partials)))
            continue
        else:
            values = []
        partials.append(FeatureStatistics.from_values("string", "bytes", size, values))
    return partials


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.randoms(use_true_random=False))
def test_merging_as_they_come_gives_the_canonical_tree_in_any_grouping(seed, rng):
    """Partials taken in any order by any number of accumulators (bundles),
    pickled as a runner moves them and merged in any order, give what the
    canonical tree of whole partials gives, to the state's last byte."""
    partials = _mixed_text_partials(seed)
    expected = _reference_tree(copy.deepcopy(partials)).to_state()
    shuffled = copy.deepcopy(partials)
    rng.shuffle(shuffled)
    cuts = sorted(rng.sample(range(len(shuffled) + 1), rng.randrange(1, 4)))
    bundles = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(shuffled)])]
    accumulators = []
    for bundle in bundles:
        merging = MergingStatistics()
        for stats in bundle:
            merging.add(stats)
        accumulators.append(pickle.loads(pickle.dumps(merging)))
    rng.shuffle(accumulators)
    merged = accumulators[0]
    for accumulator in accumulators[1:]:
        merged.merge(accumulator)
    assert merged.result().to_state() == expected
    assert merge_partials(copy.deepcopy(partials)).to_state() == expected


def test_merging_holds_one_sketch_and_only_the_summaries_with_counts():
    """What a merge holds does not grow with the partials it took: one
    theta sketch whatever their number; free text (no value twice in a
    batch, purged to its offset) leaves nothing waiting, and a partial
    whose summary keeps counts leaves that summary alone, not its sketch."""
    merging, sizes = MergingStatistics(), []
    for index in range(40):
        values = [f"free-{index}-{i}" for i in range(2000)]
        merging.add(FeatureStatistics.from_values("string", "bytes", len(values), values))
        assert not merging.waiting
        sizes.append(len(pickle.dumps(merging)))
    # full from the third batch on (4,096 hashes of 6,000 values): the same
    # size since, but for the counts' few bytes
    assert max(sizes[2:]) - min(sizes[2:]) < 32
    assert sizes[-1] < 34_000
    values = [str(i % 1500) for i in range(3000)] + ["hot"] * 50
    repeated = FeatureStatistics.from_values("string", "bytes", len(values), values)
    for count in range(1, 4):
        merging.add(copy.deepcopy(repeated))
        assert len(merging.waiting) == count
        assert all(type(summary) is FrequentValues for *_, summary in merging.waiting)
    assert merging.merged.frequent.counts == {}  # the free text's offsets alone
    assert merging.result().frequent.counts
