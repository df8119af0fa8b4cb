"""Opening untrusted image bytes with Pillow: the decompression-bomb guard and
what a decode failure means, shared by the image checks
(`transforms/readers/images.py`) and the perceptual hash (`image_hash`).

Every failure is a `RowError` (stage ``decode``) with one of the image
reasons of docs/reasons.md: ``image_too_large`` (Pillow's decompression-bomb
pixel limit, ``Image.MAX_IMAGE_PIXELS``: its warning is an error here),
``image_truncated`` or ``image_corrupt``.
"""

from __future__ import annotations

import io
import struct
import threading
import warnings
from typing import TYPE_CHECKING

from .dead_letters import RowError

# Pillow is imported where an image is opened: a table build imports this
# module (through the image checks and the perceptual hash) and never does.
if TYPE_CHECKING:
    from PIL import Image

__all__ = ["DECODE_ERRORS", "classified", "image_error", "open_image", "to_8bit"]

# Pillow raises a zoo of exception types for damaged data; these all mean
# "this image cannot be decoded" (Image.open itself treats most of them so).
DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError,
                 TypeError, KeyError, ZeroDivisionError)


def image_error(reason: str, message: str) -> RowError:
    """The dead-letter error of an image that cannot be used."""
    return RowError(reason, message, stage="decode")


# warnings.catch_warnings swaps process-wide filters; the lock keeps our own
# concurrent calls from restoring each other's filters (which would leak the
# "error" filter or lose it).
_open_lock = threading.Lock()


def open_image(data: bytes, path: str, formats: tuple[str, ...] | None) -> Image.Image:
    """Image.open on `data` with Pillow's decompression-bomb warning as an error."""
    from PIL import Image

    with _open_lock, warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data), formats=formats)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise image_error("image_too_large", f"{path}: {exc}") from None


def classified(exc: BaseException, path: str) -> RowError:
    """The RowError of a decoder exception: truncated data or corrupt data."""
    text = str(exc)
    if isinstance(exc, EOFError) or "truncated" in text.lower():
        return image_error("image_truncated", f"{path}: the image data ends early ({text})")
    return image_error("image_corrupt", f"{path}: the image data cannot be decoded "
                       f"({type(exc).__name__}: {text})")


def to_8bit(im: Image.Image) -> Image.Image:
    """16- and 32-bit grayscale scaled to 8-bit "L" (Pillow's own convert
    would clip every value above 255); other modes unchanged."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        return im.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    return im
