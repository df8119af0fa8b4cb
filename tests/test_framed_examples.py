"""FramedExamples: a batch's Examples framed into one buffer, read as a sequence."""

import pickle

import numpy as np
import pytest
from hypothesis import given, strategies as st

from recordforge.transforms.framed_examples import FramedExamples
from recordforge.transforms.tfrecord import FRAMING
from recordforge.transforms.tfrecord.framing import python_frame_records

examples_lists = st.lists(st.binary(max_size=64), max_size=20)


@given(examples_lists)
def test_reads_as_the_examples_it_was_made_of(examples):
    framed = FramedExamples.of(examples)
    assert len(framed) == len(examples)
    assert list(framed) == examples
    assert [framed[i] for i in range(len(examples))] == examples
    assert framed == examples
    assert framed.framed == python_frame_records(examples)  # the framing of a TFRecord file
    assert framed.framed_sizes().tolist() == [len(example) + FRAMING for example in examples]


@given(examples_lists, st.integers(-25, 25), st.integers(-25, 25))
def test_a_slice_is_the_slice_of_the_examples(examples, start, stop):
    framed = FramedExamples.of(examples)
    assert list(framed[start:stop]) == examples[start:stop]
    assert framed[start:stop:2] == examples[start:stop:2]


@given(examples_lists)
def test_pickles_as_its_buffer(examples):
    framed = FramedExamples.of(examples)
    copy = pickle.loads(pickle.dumps(framed))
    assert copy == framed and list(copy) == examples


def test_index_errors_and_negative_indexes():
    framed = FramedExamples.of([b"a", b"bc"])
    assert framed[-1] == b"bc"
    with pytest.raises(IndexError, match="out of range"):
        framed[2]


@pytest.mark.parametrize("offsets", [[], [1, 17], [0, 16, 33], [0, 10]])
def test_offsets_that_do_not_fit_the_buffer_are_refused(offsets):
    with pytest.raises(ValueError, match="FramedExamples"):
        FramedExamples(bytes(32), np.array(offsets, dtype=np.int64))
