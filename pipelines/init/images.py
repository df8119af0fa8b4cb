"""An image directory -> the image features, a class vocabulary from its folders, an error budget.

Its images are checked as the build checks them (every pixel decoded, at
most `_MAX_IMAGES_CHECKED` in listing order; the rest are assumed alike),
and the error budget is set above the share that fails, so that building
the output without edits succeeds.
"""

from __future__ import annotations

import math
import os
from collections import Counter

from ...schemas.errors import ConfigError
from ...transforms.readers.image_items import known_labels
from ...transforms.readers.images import ImageOptions, image_columns
from ...transforms.readers.listing import list_images
from .sniff import IMAGE_SUFFIXES
from .yaml_text import flow

__all__ = ["image_features"]

_MAX_IMAGES_CHECKED = 2_000
_LABELS_SHOWN = 10


def image_features(path: str) -> tuple[list[tuple[str, dict, str]], float, list[str]]:
    """([(feature name, settings, comment)], error budget, source lines)."""
    _, listed, _ = list_images(path, IMAGE_SUFFIXES)
    if not listed:
        raise ConfigError("source.path", f"no image files under {path}")
    suffixes = sorted({os.path.splitext(rel)[1].lower() for _, rel in listed})
    labels = known_labels(path, "directory", suffixes)
    checked = listed[:_MAX_IMAGES_CHECKED]
    options = ImageOptions(formats=("JPEG", "PNG", "GIF", "WEBP", "BMP"), decode="full")
    formats: Counter = Counter()
    failures: Counter = Counter()
    sizes = []
    for fs_path, rel in checked:
        try:
            with open(fs_path, "rb") as f:
                columns = image_columns(f.read(), rel, options)
        except Exception as error:  # noqa: BLE001 - counted by its reason, as the build will
            failures[getattr(error, "reason", type(error).__name__)] += 1
            continue
        formats[columns["format"]] += 1
        sizes.append((columns["width"], columns["height"]))
    failed = sum(failures.values())
    budget = max(0.01, math.ceil(failed / len(checked) * 150) / 100) if failed else 0.01
    notes = ["  labels: directory", f"  extensions: {flow(suffixes)}", "  image:",
             f"    formats: {flow(sorted(formats) or ['JPEG', 'PNG'])}",
             "    decode: full               # decode every pixel: truncated files become "
             "dead letters"]
    if sizes:
        notes.append(f"    # sizes seen: {min(w for w, _ in sizes)}x{min(h for _, h in sizes)}"
                     f" .. {max(w for w, _ in sizes)}x{max(h for _, h in sizes)} over "
                     f"{len(sizes)} images")
    if failed:
        notes.append(f"# {failed} of {len(checked)} images fail the checks "
                     f"({', '.join(f'{r}: {n}' for r, n in failures.most_common())}): "
                     f"max_error_rate is set above that")
    features = [("image/encoded", {"type": "bytes", "from": "image"}, ""),
                ("image/height", {"type": "int64", "from": "height"}, ""),
                ("image/width", {"type": "int64", "from": "width"}, ""),
                ("image/format", {"type": "string", "from": "format"}, ""),
                ("image/filename", {"type": "string", "from": "path"}, "")]
    if labels:
        shown = ", ".join(labels[:_LABELS_SHOWN]) + (", ..." if len(labels) > _LABELS_SHOWN
                                                     else "")
        features += [("label", {"type": "int64", "from": "label", "vocabulary": "auto"},
                      f"{len(labels)} classes: {shown}"),
                     ("label/text", {"type": "string", "from": "label"}, "")]
    return features, budget, notes
