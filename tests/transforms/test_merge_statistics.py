"""Statistics partials as JSON, and MergeStatistics on a runner (transforms/merge_statistics.py)."""

from __future__ import annotations

import json
import os
import random

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.stats import FeatureStatistics, StatisticsPlan, merge_partials
from recordforge.transforms.readers.rows import SourceRow
from recordforge.transforms.merge_statistics import (MergeStatistics, StatisticsSetup,
                                                     partial_from_json, partial_json_text,
                                                     partial_to_json, statistics_entry)
from recordforge.transforms.to_examples import STATISTICS, BatchConversion

SPECS = parse_features({
    "id": {"type": "int64"},
    "big": {"type": "int64", "required": False},
    "price": {"type": "float", "allow_nan": True, "required": False},
    "city": {"type": "string"},
    "label": {"type": "int64", "vocabulary": ["cat", "dog", "eel"]},
    "blob": {"type": "bytes", "required": False},
    "tags": {"type": "float", "shape": [-1], "required": False},
})
SPLITS = (("train", 0.6), ("test", 0.4))


def _conversion() -> BatchConversion:
    plan = StatisticsPlan.from_specs(SPECS, {})
    conversion = BatchConversion(SPECS, {}, "id", None,
                                 statistics=StatisticsSetup(plan, "shop", SPLITS))
    conversion.setup()
    return conversion


def _partials(conversion: BatchConversion, rows: list[SourceRow]) -> list:
    return [value for tag, value in conversion.convert(rows) if tag == STATISTICS]


_row = st.fixed_dictionaries({
    "big": st.none() | st.integers(-(1 << 63), (1 << 63) - 1),
    "price": st.none() | st.floats(width=32),
    "city": st.text(min_size=1, max_size=4).filter(lambda text: text.strip() == text),
    "label": st.sampled_from(["cat", "dog", "eel"]),
    "blob": st.none() | st.binary(max_size=8),
    "tags": st.none() | st.lists(st.floats(-1e6, 1e6, width=32), max_size=4),
})


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, min_size=1, max_size=60))
def test_partials_roundtrip_through_json_exactly(values):
    conversion = _conversion()
    rows = [SourceRow("shop.jsonl", i + 1, {"id": i, **{k: v for k, v in row.items()
                                                       if v is not None}})
            for i, row in enumerate(values)]
    partials = _partials(conversion, rows)
    assert partials
    for partial in partials:
        as_json = partial_to_json(partial)
        text = json.dumps(as_json, allow_nan=False)
        back = partial_from_json(json.loads(text))
        assert back[0] == partial[0]
        assert partial_to_json(back) == as_json
        assert back[1].to_json() == partial[1].to_json()
        # the JSON text made around the theta sketch's base64 is json's own
        assert partial_json_text(partial) == json.dumps(as_json, separators=(",", ":"))
        assert partial_json_text(back) == partial_json_text(partial)
        for sort_keys in (False, True):
            assert partial[1].state_json(sort_keys) == json.dumps(as_json[1], sort_keys=sort_keys,
                                                                  separators=(",", ":"))
        # and it merges as the original does
        twice = partial_from_json(as_json)[1].merge(back[1])
        assert twice.to_json() == partial_from_json(as_json)[1].merge(
            partial_from_json(as_json)[1]).to_json()


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, min_size=1, max_size=25), st.booleans())
def test_one_item_lists_give_the_statistics_of_their_items(values, as_tuples):
    """Values read as one-item lists (an Example's features), text as
    UTF-8 bytes or as str: the statistics of the same values read bare."""
    def wrapped(value):
        if value is None or isinstance(value, list):
            return value
        return (value,) if as_tuples else [value]

    bare = [SourceRow("shop.tfrecord", i + 1, {"id": i, **{k: v for k, v in row.items()
                                                          if v is not None}})
            for i, row in enumerate(values)]
    listed = [SourceRow(row.source, row.row, {key: wrapped(value) if key != "id" else [value]
                                              for key, value in row.values.items()})
              for row in bare]
    as_bytes = [SourceRow(row.source, row.row, {
        key: [value[0].encode("utf-8")] if key == "city" else value
        for key, value in row.values.items()}) for row in listed]
    expected = _merged_states(_partials(_conversion(), bare))
    for rows in (listed, as_bytes):
        assert _merged_states(_partials(_conversion(), rows)) == expected


@pytest.mark.parametrize("texts", [['"theta":""', "theta", '"theta":"x"', "é\u2028"], ["a"] * 3])
def test_state_json_is_jsons_own_whatever_the_values_hold(texts):
    stats = FeatureStatistics.from_values("string", "bytes", len(texts), texts)
    for partial in (stats, partial_from_json(partial_to_json((("train", "t"), stats)))[1]):
        for sort_keys in (False, True):
            assert partial.state_json(sort_keys) == json.dumps(stats.to_state(), sort_keys=sort_keys,
                                                               separators=(",", ":"))
    assert partial_json_text((("tr\u00e9", "t"), stats)) == json.dumps(
        [["tr\u00e9", "t"], stats.to_state()], separators=(",", ":"))


def test_exact_parts_survive_json():
    partial = (("train", "big"), FeatureStatistics.from_values(
        "numeric", "int64", 3, [(1 << 63) - 1, (1 << 63) - 2, -(1 << 63)]))
    back = partial_from_json(json.loads(json.dumps(partial_to_json(partial))))[1]
    assert back.sum == partial[1].sum and back.sum_squares == partial[1].sum_squares
    assert back.to_json()["numeric"]["sum"] == (1 << 63) - 3
    assert back.histogram == partial[1].histogram
    vocabulary = (("test", "label"), FeatureStatistics.from_values(
        "vocabulary", "int64", 4, [0, 2, 2, 1], vocabulary=("cat", "dog", "eel")))
    labels = partial_from_json(json.loads(json.dumps(partial_to_json(vocabulary))))[1].labels
    assert labels.dtype.name == "int64" and labels.tolist() == [1, 1, 2]


def _table_batches() -> list[list[SourceRow]]:
    rng = random.Random(3)
    return [[SourceRow("shop.jsonl", i + 1, {
        "id": i, "price": rng.uniform(-10, 10), "label": rng.choice(["cat", "dog"]),
        "city": str(rng.randrange(3000)) if rng.random() < 0.7 else "oslo",
        "tags": [rng.random() for _ in range(i % 3)]})
        for i in range(start, start + 500)] for start in range(0, 12_000, 500)]


def _table_partials() -> list:
    conversion = _conversion()
    return [partial for rows in _table_batches() for partial in _partials(conversion, rows)]


def _merged_states(partials: list) -> dict:
    by_key = {}
    for key, stats in partials:
        by_key.setdefault(key, []).append(stats)
    return {key: merge_partials(members).to_state() for key, members in by_key.items()}


def test_held_statistics_are_one_partial_per_split_and_feature_for_the_run():
    """Held, a run of batches gives its statistics once, one partial per
    split and feature, text's included (its batches' partials merged in
    their order); where nothing purges (the counts exact) they merge to
    what the batches give one by one."""
    conversion = _conversion()
    batches = _table_batches()
    for rows in batches:
        assert not [value for tag, value in conversion.convert(rows, hold_statistics=True)
                    if tag == STATISTICS]
    held = [value for _, value in conversion.held_statistics()]
    assert len(held) == len({key for key, _ in held})
    assert not list(conversion.held_statistics())
    merged = _merged_states(held)
    each = _merged_states(_table_partials())
    assert {key: state for key, state in merged.items() if key[1] != "city"} == \
        {key: state for key, state in each.items() if key[1] != "city"}
    few = [[row for row in rows if row.values["city"] in ("oslo", "7", "8")] for rows in batches]
    conversion = _conversion()
    for rows in few:
        list(conversion.convert(rows, hold_statistics=True))
    held = [value for _, value in conversion.held_statistics()]
    singly = [partial for rows in few for partial in _partials(_conversion(), rows)]
    assert _merged_states(held) == _merged_states(singly)


def test_merge_statistics_gives_the_canonical_merge_in_any_order():
    partials = _table_partials()
    expected = {}
    for key in sorted({key for key, _ in partials}):
        mine = [partial_from_json(partial_to_json(p))[1] for p in partials if p[0] == key]
        expected[key] = json.dumps([*key, merge_partials(mine).to_json()], sort_keys=True)
    city = json.loads(expected["train", "city"])[2]["string"]
    assert city["exact"] is False  # above the frequent values' capacity: the ordered path
    shuffled = list(partials)
    random.Random(9).shuffle(shuffled)
    with TestPipeline() as p:
        entries = (p | beam.Create([partial_to_json(partial) for partial in shuffled])
                   | beam.Map(partial_from_json)
                   | MergeStatistics()
                   | beam.Map(lambda entry: json.dumps(list(entry), sort_keys=True)))
        assert_that(entries, equal_to(list(expected.values())))


@settings(max_examples=6, deadline=None)
@given(st.lists(st.text("abz_/-.", min_size=1, max_size=16).filter(
    lambda folder: folder.strip("/") and ".." not in folder), min_size=2, max_size=3,
    unique=True), st.integers(0, 2**16))
def test_statistics_depend_only_on_the_rows_not_where_they_were_read(folders, seed):
    """The same rows read from files in another folder (or another output's
    copy of the inputs) give the same stats.json entry, also above the
    frequent values' capacity, where text partials merge in a fixed order:
    nothing of a path or a row number takes part in it."""
    rng = random.Random(seed)
    rows = [{"id": i, "label": "cat", "city": str(rng.randrange(4000)) if rng.random() < 0.8
             else "oslo"} for i in range(9000)]
    merged = set()
    for folder in folders:
        conversion = _conversion()
        partials = [partial for start in range(0, len(rows), 500)
                    for partial in _partials(conversion, [
                        SourceRow(f"/{folder.strip('/')}/part-{start // 3000}.jsonl", i + 1,
                                  row) for i, row in enumerate(rows[start:start + 500], start)])]
        city = [stats for key, stats in partials if key == ("train", "city")]
        entry = merge_partials(city).to_json()
        assert entry["string"]["exact"] is False  # above the capacity: the ordered merge
        merged.add(json.dumps(entry, sort_keys=True))
    assert len(merged) == 1


def _finished(keyed) -> tuple[str, list]:
    return "finished", list(statistics_entry(keyed))


def test_merge_statistics_finishes_each_merged_key_in_its_last_step():
    """`finish` makes what each merged key is given as, with the same merge
    as `merge_partials`."""
    partials = _table_partials()
    expected = []
    for key in sorted({key for key, _ in partials}):
        mine = [partial_from_json(partial_to_json(p))[1] for p in partials if p[0] == key]
        expected.append(json.dumps(["finished", [*key, merge_partials(mine).to_json()]],
                                   sort_keys=True))
    shuffled = list(partials)
    random.Random(3).shuffle(shuffled)
    with TestPipeline() as p:
        merged = (p | beam.Create([partial_to_json(partial) for partial in shuffled])
                  | beam.Map(partial_from_json)
                  | MergeStatistics(finish=_finished))
        assert_that(merged | beam.Map(lambda done: json.dumps(list(done), sort_keys=True)),
                    equal_to(expected))


def _prism_args() -> list[str]:
    from recordforge.pipelines import prism

    binary = prism.binary_path()
    if not os.path.exists(binary):
        pytest.skip("the Prism binary is not installed")
    return ["--runner=PrismRunner", f"--prism_location={binary}", "--environment_type=LOOPBACK"]


def _merged_entries(pipeline, partials: list):
    return (pipeline | beam.Create([partial_to_json(partial) for partial in partials])
            | beam.Map(partial_from_json)
            | MergeStatistics()
            | beam.Map(lambda entry: json.dumps(list(entry), sort_keys=True)))


def _check_merged_on(runner: str, partials: list) -> None:
    if runner == "prism":
        with beam.Pipeline(options=PipelineOptions(_prism_args())) as p:
            assert_that(_merged_entries(p, partials), equal_to(_expected_entries(partials)))
        return
    distributed = pytest.importorskip("dask.distributed")
    from apache_beam.runners.dask.dask_runner import DaskRunner

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        options = PipelineOptions([f"--dask_client_address={cluster.scheduler_address}"])
        pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
        assert_that(_merged_entries(pipeline, partials), equal_to(_expected_entries(partials)))
        result = pipeline.run()
        try:
            result.wait_until_finish()
        finally:
            result.client.close()


def _expected_entries(partials: list) -> list[str]:
    return [json.dumps([*key, merge_partials([partial_from_json(partial_to_json(p))[1]
                                              for p in partials if p[0] == key]).to_json()],
                       sort_keys=True)
            for key in sorted({key for key, _ in partials})]


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["prism", "dask"])
def test_merge_statistics_gives_the_canonical_merge_on_prism_and_dask(runner):
    """The accumulator crosses processes pickled (Dask's workers, Prism's
    loopback worker) and merges to the same entries."""
    partials = _table_partials()
    random.Random(5).shuffle(partials)
    _check_merged_on(runner, partials)
