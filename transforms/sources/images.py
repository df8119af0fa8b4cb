"""ReadImages: an image directory into RowBatches of image rows, as labelled Beam steps.

The steps are thin over `readers`: list and label the images into batches
of `ImageItem`s (`image_items.plan_images`, one DoFn on the root), reshuffle
the batches so a multi-worker runner spreads them (not with one worker),
and read and check each batch (`image_items.read_image_items`). Listing and
labelling problems are dead letters beside the rows.
"""

from __future__ import annotations

import apache_beam as beam
import fsspec

from ...schemas.dead_letters import counted_rows
from ..batch_coder import TaggedBatch
from ..gc_tuning import relax_young_collections
from ..malloc_tuning import keep_freed_memory
from ..readers.image_items import (DEFAULT_IMAGE_BATCH_SIZE, ImageItem, plan_images,
                                   read_image_items)
from ..readers.images import ImageOptions
from ..readers.labels import labels_format
from ..readers.listing import normalized_extensions
from ..urls import redact_url
from .outputs import COUNTS, DEAD, UNIT, SplitTagged, batched, passed_on

__all__ = ["ReadImages"]


class _PlanImages(beam.DoFn):
    """root path -> ("unit", [ImageItem as a tuple]) per batch of images, plus
    dead letters and their counts for listing and labelling problems."""

    def __init__(self, extensions: tuple[str, ...], labels: str, batch_size: int):
        self._extensions = extensions
        self._labels = labels
        self._batch_size = batch_size

    def process(self, path: str):
        batches, problems = plan_images(path, self._extensions, self._labels, self._batch_size)
        for problem in problems:
            yield DEAD, problem
            yield COUNTS, (problem["source"], counted_rows(problem))
        for batch in batches:
            # Plain tuples: Beam's coder writes them natively, where it
            # would pickle each NamedTuple on its own (17 us per image).
            yield UNIT, [tuple(item) for item in batch]


class _ReadImageBatches(beam.DoFn):
    """("unit", ImageItems as plain tuples) -> (tag, value) pairs: one
    RowBatch, dead letters, (root, n); the plan's other pairs pass on."""

    def __init__(self, path: str, options: ImageOptions):
        self._path = path
        self._options = options

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._path)[0]
        self._source = redact_url(self._path)
        relax_young_collections()  # rows are made here, a batch at a time
        keep_freed_memory()  # buffers are freed and made again all the time

    def process(self, tagged: tuple[str, object]):
        if passed_on(tagged):
            yield tagged
            return
        # (tag, value): ("rows", RowBatch) | ("dead_letter", dict) | ("counts", (root, n))
        items = [ImageItem(*item) for item in tagged[1]]
        yield from batched(read_image_items(self._fs, items, self._options),
                            max(1, len(items)), self._source)


class ReadImages(beam.PTransform):
    """Reads an image directory into RowBatches of image rows.

    Takes a pipeline (PBegin). path: the root directory (fsspec URL);
    extensions: e.g. (".jpg", ".png"); labels: "directory" or the path of a
    labels table (.csv/.jsonl with columns file,label); options: ImageOptions;
    batch_size: images per RowBatch; spread: reshuffle the batches so a
    runner's workers share them (False where there is one worker: the
    Reshuffle spreads nothing). Gives `ReadOutputs`; counts are
    ``(source, n)`` per batch of images (source: the root) plus one per
    listing/labelling dead letter.
    """

    def __init__(self, path: str, extensions: tuple[str, ...], labels: str,
                 options: ImageOptions, batch_size: int = DEFAULT_IMAGE_BATCH_SIZE,
                 spread: bool = True):
        super().__init__()
        if labels != "directory":
            labels_format(labels)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._path = path
        self._extensions = normalized_extensions(extensions)
        self._labels = labels
        self._options = options
        self._batch_size = batch_size
        self._spread = spread

    def expand(self, pbegin):
        planned = (
            pbegin
            | "Root" >> beam.Create([self._path])
            | "PlanImages" >> beam.ParDo(
                _PlanImages(self._extensions, self._labels, self._batch_size)))
        # ("unit", up to batch_size ImageItems as plain tuples) | the plan's
        # dead letters and counts, which go along (`passed_on`): no second
        # origin to flatten at the end
        batches = planned
        if self._spread:
            batches = batches | "ReshuffleBatches" >> beam.Reshuffle()
        read = batches | "ReadImages" >> beam.ParDo(
            _ReadImageBatches(self._path, self._options)).with_output_types(TaggedBatch)
        return read | "Split" >> SplitTagged()
