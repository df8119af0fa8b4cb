"""A table's reading units read and converted by one DoFn (transforms/unit_conversion.py)."""

from __future__ import annotations

import json
import random

import apache_beam as beam
import fsspec
import yaml
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings, strategies as st

import recordforge
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.stats import StatisticsPlan
from recordforge.transforms.merge_statistics import StatisticsSetup, partial_to_json
from recordforge.transforms.readers.rows import SourceRow
from recordforge.transforms.readers.tables import FileRange
from recordforge.transforms.sources.outputs import COUNTS
from recordforge.transforms.to_examples import STATISTICS, BatchConversion
from recordforge.transforms.unit_conversion import ConvertTables, unit_outputs

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
SPECS = parse_features({"id": {"type": "int64"}, "city": {"type": "string"},
                        "price": {"type": "float"}})
SPLITS = (("train", 0.7), ("test", 0.3))


def _conversion() -> BatchConversion:
    plan = StatisticsPlan.from_specs(SPECS, {})
    conversion = BatchConversion(SPECS, {}, "id", None,
                                 statistics=StatisticsSetup(plan, "shop", SPLITS))
    conversion.setup()
    return conversion


def _rows(count: int, distinct: int, seed: int) -> list[dict]:
    """Rows whose cities are `distinct` names, some far more often than
    others: above 1,024 of them, summaries purge."""
    rng = random.Random(seed)
    return [{"id": index, "city": f"c{int(distinct * rng.random() ** 2)}",
             "price": rng.uniform(-5, 5)} for index in range(count)]


@settings(max_examples=25, deadline=None)
@given(count=st.integers(1, 2600), distinct=st.sampled_from([3, 700, 5000]),
       batch_size=st.sampled_from([1, 97, 1000]), seed=st.integers(0, 2))
def test_a_unit_gives_its_statistics_once_its_batches_merged_in_their_order(
        tmp_path_factory, count, distinct, batch_size, seed):
    """However many batches a unit has, its statistics leave once, after
    its rows, one partial per split and feature: its batches' own partials
    (each converted alone) merged in the order they were read."""
    path = tmp_path_factory.mktemp("unit") / "rows.json"
    rows = _rows(count, distinct, seed)
    path.write_text(json.dumps(rows))
    fs = fsspec.filesystem("file")
    unit = FileRange(str(path), "rows.json", 0, None, None)
    outputs = list(unit_outputs(fs, unit, "json", None, batch_size, _conversion()))
    tags = [tag for tag, _ in outputs]
    first = tags.index(STATISTICS)
    assert set(tags[first:]) == {STATISTICS}  # last, and nothing after them
    assert [value for tag, value in outputs if tag == COUNTS] == [("rows.json", count)]
    held = [value for tag, value in outputs if tag == STATISTICS]
    assert len(held) == len({key for key, _ in held})
    # the same rows converted a batch at a time, each batch's partials
    # merged in order
    alone = _conversion()
    expected = {}
    for start in range(0, count, batch_size):
        batch = [SourceRow("rows.json", None, row) for row in rows[start:start + batch_size]]
        for tag, (key, stats) in ((tag, value) for tag, value in alone.convert(batch)
                                  if tag == STATISTICS):
            if key in expected:
                expected[key].merge(stats)
            else:
                expected[key] = stats
    assert {key: json.dumps(partial_to_json((key, stats))[1], sort_keys=True)
            for key, stats in held} == \
        {key: json.dumps(partial_to_json((key, stats))[1], sort_keys=True)
         for key, stats in expected.items()}


def test_the_statistics_of_a_table_build_leave_once_per_unit(tmp_path):
    """Three JSON files of 2,500 rows (three batches each): the step gives
    one partial per file, split and feature, not one per batch."""
    for index in range(3):
        (tmp_path / f"part-{index}.json").write_text(json.dumps(_rows(2500, 5000, index)))
    plan = StatisticsPlan.from_specs(SPECS, {})
    with TestPipeline(argv=IN_MEMORY) as pipeline:
        converted = pipeline | ConvertTables(
            str(tmp_path), "json", specs=SPECS, vocabularies={}, key_column="id",
            statistics=StatisticsSetup(plan, "shop", SPLITS), spread=False)
        counted = (converted.statistics
                   | beam.Map(lambda partial: (partial[0], 1)) | beam.CombinePerKey(sum))
        assert_that(counted, equal_to([((split, feature), 3) for split, _ in SPLITS
                                       for feature in ("id", "city", "price")]))


def test_builds_with_and_without_the_cache_give_the_same_statistics(tmp_path):
    """Text whose summaries purge (5,000 cities, some far more often than
    others) in units of several batches: the cached build, again from its
    pieces, and a build without the cache publish the same stats.json."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.json").write_text(json.dumps(_rows(2500, 5000, index)))

    def build(output: str, version: str, cache: bool):
        config = tmp_path / f"{output}-{version}.yaml"
        config.write_text(yaml.safe_dump({
            "name": "shop", "version": version,
            "source": {"type": "json", "path": str(source)},
            "features": {"id": {"type": "int64"}, "city": {"type": "string"},
                         "price": {"type": "float"}},
            "key": "id", "splits": {"train": 0.7, "test": 0.3},
            "output": {"path": str(tmp_path / output)}, "cache": {"enabled": cache}}))
        result = recordforge.build(str(config), beam_args=IN_MEMORY)
        stats = json.loads((tmp_path / output / version / "stats.json").read_text())
        stats.pop("version")
        return result, stats

    _, cold = build("cached", "v1", True)
    warm_result, warm = build("cached", "v2", True)
    assert warm_result.manifest["cache"]["files_reused"] == 3
    _, plain = build("plain", "v1", False)
    assert cold == warm == plain
    cities = [split["features"]["city"]["string"] for split in cold["splits"].values()]
    assert len(cities) == 2 and all(city["top_values"] for city in cities)
