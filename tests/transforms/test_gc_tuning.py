"""The garbage-collector tuning of row-making steps (transforms/gc_tuning.py)."""

import gc

import pytest
from recordforge.transforms.gc_tuning import YOUNG_THRESHOLD, relax_young_collections


@pytest.fixture(autouse=True)
def restore_thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_the_default_young_threshold_is_raised_and_older_ones_kept():
    gc.set_threshold(700, 10, 10)
    relax_young_collections()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)


@pytest.mark.parametrize("setting", [(YOUNG_THRESHOLD * 2, 5, 5), (0, 10, 10)])
def test_a_higher_threshold_or_a_disabled_collector_is_left_alone(setting):
    gc.set_threshold(*setting)
    relax_young_collections()
    assert gc.get_threshold() == setting


def test_row_making_steps_relax_the_threshold_in_their_setup():
    from recordforge.schemas.feature_config import parse_features
    from recordforge.transforms.sources.tables import _ReadTableRanges
    from recordforge.transforms.to_examples import _ConvertBatchesFn
    from recordforge.transforms.writer import ShardTuning
    from recordforge.transforms.writer.file_exchange import _SpillFn

    specs = parse_features({"x": {"type": "int64"}})
    for dofn in (_ReadTableRanges("memory://t/*.csv", "csv", 10),
                 _ConvertBatchesFn(specs, {}, None, None),
                 _SpillFn("memory://runs", "d", [("train", 1.0)], True, ShardTuning())):
        gc.set_threshold(700, 10, 10)
        dofn.setup()
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD, type(dofn).__name__
