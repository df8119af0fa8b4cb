"""Image sources in units of work: list and label the images into batches, read one batch.

Image rows hold ``path`` (relative to the root, ``/``-separated), ``label``
(always a string) and the columns of `images.image_columns`. Labels come from
the parent folder's name (``labels="directory"``; images directly in the root
are ``unlabeled_image``) or from a labels table (`labels`); a labels-table
row naming a file that is not among the listed images is a ``read_error``.
Planning holds the listing and the labels table in memory (about 200 bytes
per image); image bytes are only ever held one batch at a time.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, NamedTuple

import fsspec

from ...schemas.dead_letters import RowError, dead_letter
from ..page_cache import read_files_once
from ..urls import redact_url
from .common import READ_ERRORS, display_name, read_error
from .images import ImageOptions, image_columns
from .labels import read_labels_table
from .listing import list_images
from .rows import SourceRow

__all__ = [
    "DEFAULT_IMAGE_BATCH_SIZE",
    "ImageItem",
    "folder_labels",
    "known_labels",
    "plan_images",
    "read_image_items",
]

# Image rows carry their bytes: ~64 images of ~30 KB keep a batch at a few MB.
DEFAULT_IMAGE_BATCH_SIZE = 64


class ImageItem(NamedTuple):
    """One image to read: its path in the filesystem, relative path, label."""

    fs_path: str
    rel: str
    label: str


def plan_images(path: str, extensions: Iterable[str], labels: str,
                batch_size: int = DEFAULT_IMAGE_BATCH_SIZE
                ) -> tuple[list[list[ImageItem]], list[dict]]:
    """Lists and labels the images of a source: batches of `ImageItem` (sorted
    by relative path) and the dead letters of listing and labelling."""
    fs, listed, problems = list_images(path, extensions)
    items: list[ImageItem] = []
    if labels == "directory":
        for fs_path, rel in listed:
            if "/" in rel:
                items.append(ImageItem(fs_path, rel, rel.rsplit("/", 2)[-2]))
            else:
                problems.append(_unlabeled(fs, fs_path, rel, "it is directly in source.path, "
                                           "not inside a class folder (labels: directory)"))
    else:
        # Links leading outside the root or to nothing are dead letters of the
        # listing already; their labels-table rows must not be reported again.
        reported = {letter["input"].get("path") for letter in problems
                    if isinstance(letter["input"], dict)}
        entries, label_problems = read_labels_table(labels)
        problems.extend(label_problems)
        for fs_path, rel in listed:
            entry = entries.pop(rel, None)
            if entry is None:
                problems.append(_unlabeled(fs, fs_path, rel,
                                           f"it has no row in the labels table {redact_url(labels)}"))
            else:
                items.append(ImageItem(fs_path, rel, entry[0]))
        for rel, (label, source, row) in sorted(entries.items()):
            if rel in reported:
                continue  # a link outside the root or a dangling one: already a dead letter
            problems.append(dead_letter(
                source=source, row=row, key=None, stage="read", reason="read_error",
                feature=None, message=f"{source} line {row}: no image file {rel!r} below "
                f"{redact_url(path)} with an extension in the source's extensions",
                input={"file": rel, "label": label}))
    batches = [items[i:i + batch_size] for i in range(0, len(items), batch_size)]
    return batches, problems


def _unlabeled(fs, fs_path: str, rel: str, why: str) -> dict:
    source = display_name(fs, fs_path)
    return dead_letter(source=source, row=None, key=None, stage="read",
                       reason="unlabeled_image", feature=None,
                       message=f"{source} has no label: {why}", input={"path": rel})


def known_labels(path: str, labels: str, extensions: Iterable[str]) -> list[str]:
    """Sorted distinct labels known before a run: the class folder names of the
    listed images (``labels="directory"``) or the labels of the usable rows of
    the labels table. Used for ``vocabulary: auto``."""
    if labels == "directory":
        return folder_labels(list_images(path, extensions)[1])
    entries, _ = read_labels_table(labels)
    return sorted({label for label, _, _ in entries.values()})


def folder_labels(listed: Iterable[tuple[str, str]]) -> list[str]:
    """Sorted distinct class folder names of listed ``(fs_path, rel)``
    images (`list_images`); images directly in the root have none."""
    return sorted({rel.rsplit("/", 2)[-2] for _, rel in listed if "/" in rel})


def read_image_items(fs: fsspec.AbstractFileSystem, items: Iterable[ImageItem],
                     options: ImageOptions) -> Iterator[SourceRow | dict]:
    """Reads and checks images: a SourceRow (path, label, image columns) per good
    image, a dead letter per file that cannot be read (``read_error``: vanished,
    unreadable) or fails its checks (stage "decode")."""
    items = list(items)
    for item, read in zip(items, read_files_once(fs, [item.fs_path for item in items])):
        source = display_name(fs, item.fs_path)
        try:
            data = read()
        except READ_ERRORS as exc:
            yield read_error(source, None, exc, input=_raw_input(item), rows=1)
            continue
        try:
            columns = image_columns(data, source, options)
        except RowError as exc:
            yield dead_letter(source=source, row=None, key=None, stage=exc.stage,
                              reason=exc.reason, feature=exc.feature, message=exc.message,
                              input=_raw_input(item))
            continue
        yield SourceRow(source, None, {"path": item.rel, "label": item.label, **columns})


def _raw_input(item: ImageItem) -> dict[str, Any]:
    """What a dead letter of an image shows as its input."""
    return {"path": item.rel, "label": item.label}
