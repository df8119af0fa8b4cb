"""Perceptual image hashes: a 64-bit DCT hash of an encoded image, and the
Hamming distance between two such hashes (plain code, no Beam).

The hash (`image_hash`) is the classic pHash as ``imagehash.phash`` computes
it with its defaults, defined exactly:

1. Decode the first frame of the image (JPEG, PNG, GIF, BMP, WebP: whatever
   Pillow opens; animated images: frame 0). A JPEG is decoded in Pillow's
   draft mode: libjpeg scales it by 1/2, 1/4 or 1/8 inside its inverse DCT,
   to the smallest size that is still at least `DRAFT_SIDE` (64) pixels on
   both sides, and gives its luma channel. This is what makes the hash cheap
   (a 1/8 decode costs a fraction of a full one); it is also the one step
   where the hash differs from ``imagehash.phash`` on a fully decoded image.
2. Convert to 8-bit grayscale, Pillow's ``convert("L")`` (ITU-R 601-2 luma;
   alpha is ignored; 16-bit grayscale is first scaled to 8 bits).
3. Resize to 32x32 pixels with Pillow's LANCZOS filter.
4. Take the 2-D DCT-II of the 32x32 pixel values (unnormalised), and keep the
   8x8 lowest frequencies, DC included (the top-left block): 64 numbers.
5. Bit i is set when number i (row-major) is greater than the median of the
   64 (the mean of the 32nd and 33rd smallest). Bit 0 is the hash's most
   significant bit, so ``f"{image_hash(data):016x}"`` is imagehash's hex
   string of the same image.

The DC coefficient is almost always the largest, so its bit is almost always
set: 63 bits carry the picture, as in imagehash.

Step 4 is computed in exact integer arithmetic: the cosines are rounded to
multiples of 2**-21 and the products summed in int64 (at most 2**62, so
never overflowing). The hash is therefore the same on every machine and
worker, and an image whose coefficients tie with the median (a solid colour,
a pure horizontal gradient: their other coefficients are exactly zero) gets
a definite hash. imagehash computes the DCT in floating point with scipy's
FFT: where a coefficient is within ~0.1 (in units of one grey level times
the DCT's sums) of the median, the two may set that bit differently; nowhere
else (tests/schemas/test_image_hash.py checks this against imagehash).

Decoding is guarded as the image checks guard it (`image_decode`): above
Pillow's decompression-bomb pixel limit an image is ``image_too_large`` and
never decoded, and data Pillow cannot decode raises a `RowError` naming the
file (``empty_file``, ``image_corrupt`` or ``image_truncated``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .image_decode import DECODE_ERRORS, classified, image_error, open_image, to_8bit

if TYPE_CHECKING:  # Pillow itself is imported where an image is opened
    from PIL import Image

__all__ = ["DRAFT_SIDE", "HASH_BITS", "hamming", "hash_image", "image_hash"]

HASH_BITS = 64
# The DCT's input side and the side of the low-frequency block kept.
_SIDE = 32
_KEPT = 8
# A JPEG is decoded at a 1/2-1/8 scale no smaller than this on either side:
# twice the DCT's input, so the LANCZOS step still averages >= 2x2 pixels.
DRAFT_SIDE = 64
# Cosines as integers of 21 fractional bits: pixels are below 2**8 and each
# 1-D pass sums 32 = 2**5 products of cosines below 2**21, so a coefficient
# stays below 2**8 * (2**5 * 2**21)**2 = 2**60, twice it below 2**61.
_FRACTION_BITS = 21


def _cosines() -> np.ndarray:
    """The first 8 rows of the 32-point DCT-II matrix, cos(pi k (2n+1) / 64),
    as int64 multiples of 2**-21 (math.cos: the same on every machine)."""
    scale = 1 << _FRACTION_BITS
    return np.array([[round(math.cos(math.pi * k * (2 * n + 1) / (2 * _SIDE)) * scale)
                      for n in range(_SIDE)] for k in range(_KEPT)], dtype=np.int64)


_COSINES = _cosines()
_COSINES_T = np.ascontiguousarray(_COSINES.T)


def _hash_pixels(pixels: np.ndarray) -> int:
    """Steps 4-5 on a 32x32 array of grey levels."""
    low = _COSINES @ pixels.astype(np.int64) @ _COSINES_T  # (8, 8), exact
    flat = low.ravel()
    ordered = np.sort(flat)
    twice_median = ordered[31] + ordered[32]
    bits = np.packbits(2 * flat > twice_median)
    return int.from_bytes(bits.tobytes(), "big")


def hash_image(im: Image.Image) -> int:
    """Steps 2-5 on an opened (or already decoded) Pillow image: the same as
    ``int(str(imagehash.phash(im)), 16)`` but for ties with the median."""
    from PIL import Image  # not at module level: see image_decode

    gray = to_8bit(im).convert("L").resize((_SIDE, _SIDE), Image.Resampling.LANCZOS)
    return _hash_pixels(np.asarray(gray))


def image_hash(data: bytes, path: str = "image") -> int:
    """The 64-bit perceptual hash of an encoded image (module docstring).

    data: the file's bytes; path: its name for messages. Raises RowError
    (stage ``decode``): ``empty_file``, ``image_too_large``,
    ``image_corrupt`` or ``image_truncated``.
    """
    from PIL import UnidentifiedImageError  # not at module level: see image_decode

    if not data:
        raise image_error("empty_file", f"{path}: the image file is empty (0 bytes)")
    try:
        im = open_image(data, path, None)
    except UnidentifiedImageError:
        raise image_error("image_corrupt", f"{path}: not a readable image") from None
    except DECODE_ERRORS as exc:
        raise classified(exc, path) from None
    try:
        # Only JPEG has a draft mode; for other formats this does nothing.
        im.draft("L", (DRAFT_SIDE, DRAFT_SIDE))
        return hash_image(im)
    except DECODE_ERRORS as exc:
        raise classified(exc, path) from None
    finally:
        im.close()


def hamming(a: int, b: int) -> int:
    """The number of bits in which two hashes differ."""
    return (a ^ b).bit_count()
