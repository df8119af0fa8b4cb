"""The native tests compare the extension with the Python reference; without it they skip."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from recordforge.transforms.framed_examples import FramedExamples
from recordforge.transforms.splits import HASH_SIZE, HashedExamples
from recordforge.transforms.tfrecord.framing import python_frame_records

try:
    from recordforge import _native
except ImportError as error:  # built without cargo: the Python path is the whole product
    _native = None
    _MISSING = str(error)


@pytest.fixture(scope="session")
def native():
    """The compiled kernels, whatever RECORDFORGE_PURE_PYTHON says (the
    tests compare both paths in one process)."""
    if _native is None:
        pytest.skip(f"the native extension is not built ({_MISSING})")
    return _native


def _digests(examples):
    """A converted batch's digests joined, checked against hashlib's of each
    row's key (its example without one); None for a batch without them."""
    if not isinstance(examples, HashedExamples):
        return None
    joined = examples.joined_digests()
    assert joined == b"".join(
        hashlib.blake2b(example if key is None else key, key=examples.salt,
                        digest_size=HASH_SIZE).digest() for key, example in examples)
    assert examples.columns == ([key for key, _ in examples],
                                [example for _, example in examples])
    return joined


def _framed(examples):
    """A converted batch's Examples framed: the kernel's buffer (a
    `FramedExamples`, read whole: its CRCs too), or the Python path's list
    framed by the reference; with the framed sizes."""
    column = examples.examples if hasattr(examples, "examples") else [e for _, e in examples]
    if isinstance(column, FramedExamples):
        return column.framed, column.framed_sizes().tolist()
    return python_frame_records(list(column)), [len(example) + 16 for example in column]


def _outcome(converter, specs, batch, label):
    """Everything a converter gives for a batch, as plain values to compare
    across paths: examples, labels (as a list), dead letters, the label
    counts and the statistics both with one split and with the rows dealt
    alternately to two (which picks each split's values from the checked
    columns), the rows' digests (`_digests`), when the converter has
    a digest salt, and the Examples framed (`_framed`): the kernel's
    buffer must be the reference's framing of the Python path's list."""
    from recordforge.schemas.stats import StatisticsPlan, batch_statistics
    from recordforge.transforms.to_examples import label_counts

    vocabulary = next((spec.vocabulary for spec in specs if spec.name == label
                       and isinstance(spec.vocabulary, tuple)), None)
    plan = StatisticsPlan.from_specs(specs, {})
    examples, labels, dead_letters, values = converter.convert_observed_batch(
        batch, label, vocabulary, plan)
    layouts = [(np.zeros(len(examples), dtype=np.int64), ["all"]),
               (np.arange(len(examples), dtype=np.int64) % 2, ["even", "odd"])]
    counted = [label_counts(names, split_of, labels) for split_of, names in layouts]
    statistics = [[(where, stats.to_state())
                   for where, stats in batch_statistics(plan, values, split_of, names)]
                  for split_of, names in layouts]
    if getattr(examples, "key_nones", None) is not None:  # (a count downstream takes as it is)
        assert examples.key_nones == [key for key, _ in examples].count(None)
    return (examples, list(labels), dead_letters, counted, statistics, _digests(examples),
            _framed(examples))


@pytest.fixture(scope="session")
def outcome():
    """_outcome: what the differential tests compare of a converted batch."""
    return _outcome
