"""Perceptual image hashes: a 64-bit DCT hash of an encoded image, the
Hamming distance between two such hashes, and a 63-byte signature of the
same DCT coefficients that confirms a pair (plain code, no Beam).

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

The signature (`image_fingerprint`) confirms a pair the hash finds. The hash
keeps only each coefficient's side of the median; two unrelated pictures
can agree on most sides while their coefficients differ widely. The
signature keeps the 63 coefficients after DC (the picture's structure
without its mean grey level), each scaled so that the largest magnitude is
127 and rounded to an integer (IEEE double arithmetic, correctly rounded:
the same on every machine). `similar` is their cosine similarity at least
`MIN_SIMILARITY` (0.85), in integers; it ignores brightness and contrast
changes, which scale or offset the coefficients. Planted copies measured
at least 0.89 and unrelated pictures within 12 bits of each other at most
0.79 (benchmarks/bench_image_hash.py, docs/near_duplicates.md). A picture
without structure (a solid colour: every coefficient after DC is zero) has
no signature (0); its pairs are confirmed by the hash alone.

Crops and unsure bits (`image_views`; `image_fingerprint(..., views=True)`:
opt-in, for their cost). A copy cropped by a few percent
shifts the whole picture, and in a picture of little contrast many
coefficients lie near the median: such copies moved up to 18 bits. So an
image also carries the hashes of four *windows* of its picture, each with
one side trimmed by `TRIM` (3.75%), taken
from the same 32x32 grey pixels (the DCT rows of the window, linearly
interpolated, as one integer matrix: no second decode or resize), each
with its own signature (a copy cut on one side by more than a few percent
no longer has the original's whole structure), and for each hash its
`UNSURE_BITS` (2) *unsure* bits: the coefficients nearest the median
(ties: the lower index). The search (`transforms.near_duplicates`)
compares an image's whole picture with the other's whole picture or
windows, not counting unsure bits.

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

__all__ = ["DRAFT_SIDE", "HASH_BITS", "MIN_SIMILARITY", "SIGNATURE_BYTES", "TRIM", "UNSURE_BITS",
           "WINDOWS", "hamming", "hash_image", "image_fingerprint", "image_hash", "similar",
           "split_fingerprint"]

HASH_BITS = 64
_HASH_MASK = (1 << HASH_BITS) - 1
# The coefficients after DC, one signed byte each (offset by 128: a real
# signature is never 0, which stands for "none").
SIGNATURE_BYTES = 63
# Cosine similarity at least 17/20 = 0.85, compared in integers.
MIN_SIMILARITY = (17, 20)
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

# A window trims this share of one side: half way between the whole
# picture and a copy with 5% of the area cut off one side (5% of the side),
# so that a cut of one side by up to 5% is near the whole or a window (a
# trim of 2.53%, the most a 5% crop takes of both sides, found 99.88% of
# one-side 5% cuts; 3.75%, all: docs/near_duplicates.md).
TRIM = 0.0375
# Coefficients nearest the median whose bits a comparison leaves out: 2
# made every planted copy of 2,000 scenes pair, with no two distinct
# scenes paired; 4 and more paired distinct scenes (docs/near_duplicates.md).
UNSURE_BITS = 2
WINDOWS = 4


def _window_rows(start: float, stop: float) -> np.ndarray:
    """`_cosines` for the window [start, stop] (shares of the side) of the
    32 pixels: each of the window's 32 samples interpolated linearly from
    the two nearest pixels (edges clamped), folded into the cosines. Weights
    are >= 0 and sum to 1 per sample, so a row's magnitudes sum to at most
    32 * 2**21, as `_cosines`' do: the same int64 bound."""
    weights = np.zeros((_SIDE, _SIDE))
    for m in range(_SIDE):
        at = (start + (m + 0.5) * (stop - start) / _SIDE) * _SIDE - 0.5
        low = math.floor(at)
        for pixel, weight in ((low, 1 - (at - low)), (low + 1, at - low)):
            weights[m, min(_SIDE - 1, max(0, pixel))] += weight
    cosines = np.array([[math.cos(math.pi * k * (2 * m + 1) / (2 * _SIDE)) for m in range(_SIDE)]
                        for k in range(_KEPT)])
    rows = np.rint(cosines @ weights * (1 << _FRACTION_BITS)).astype(np.int64)
    # Exact row sums, as the cosines have them (32 for DC, 0 for the rest),
    # so that a solid colour has no structure in a window either: the
    # rounding error goes to each row's largest entry.
    target = np.zeros(_KEPT, dtype=np.int64)
    target[0] = _SIDE << _FRACTION_BITS
    rows[np.arange(_KEPT), np.abs(rows).argmax(axis=1)] += target - rows.sum(axis=1)
    return rows


_TRIM_START, _TRIM_END = _window_rows(TRIM, 1.0), _window_rows(0.0, 1 - TRIM)


def _grey(im: Image.Image) -> np.ndarray:
    """Steps 2-3: the 32x32 grey levels of an opened Pillow image, int64."""
    from PIL import Image  # not at module level: see image_decode

    gray = to_8bit(im).convert("L").resize((_SIDE, _SIDE), Image.Resampling.LANCZOS)
    return np.asarray(gray).astype(np.int64)


def _low_frequencies(im: Image.Image) -> np.ndarray:
    """Steps 2-4: the 64 lowest DCT coefficients (row-major, DC first) of
    an opened (or already decoded) Pillow image, exact int64."""
    return (_COSINES @ _grey(im) @ _COSINES_T).ravel()


def _as_ints(rows: np.ndarray) -> list[int]:
    """Each row of uint8 as one big-endian integer."""
    return [int.from_bytes(row.tobytes(), "big") for row in rows]


def _twice_medians(lows: np.ndarray) -> np.ndarray:
    """Twice the median of each row of 64 coefficients, as a column (exact)."""
    ordered = np.sort(lows, axis=1)
    return (ordered[:, 31] + ordered[:, 32])[:, None]


def _hashes_of(lows: np.ndarray) -> list[int]:
    """Step 5 for each row of 64 coefficients (rows at once: numpy's cost is
    per call): the bits of the coefficients above their median."""
    return _as_ints(np.packbits(2 * lows > _twice_medians(lows), axis=1))


def _unsure_of(lows: np.ndarray) -> list[int]:
    """The bits of each row's `UNSURE_BITS` coefficients nearest its median
    (a stable sort: ties go to the lower index, the same on every machine)."""
    nearest = np.argsort(np.abs(2 * lows - _twice_medians(lows)), axis=1, kind="stable")
    unsure = np.zeros(lows.shape, dtype=bool)
    np.put_along_axis(unsure, nearest[:, :UNSURE_BITS], True, axis=1)
    return _as_ints(np.packbits(unsure, axis=1))


def _signatures_of(lows: np.ndarray) -> list[int]:
    """Each row's coefficients after DC scaled to -127..127, offset by 128,
    as one big-endian integer; 0 when they are all zero (module docstring)."""
    structure = lows[:, 1:].astype(np.float64)
    largest = np.abs(structure).max(axis=1, keepdims=True)
    scaled = np.rint(structure * 127 / np.where(largest == 0, 1, largest)).astype(np.int16) + 128
    return [0 if flat else value for flat, value in
            zip((largest == 0).ravel().tolist(), _as_ints(scaled.astype(np.uint8)))]


def _hash_of(low: np.ndarray) -> int:
    return _hashes_of(low[None])[0]


def _signature_of(low: np.ndarray) -> int:
    return _signatures_of(low[None])[0]


def _views_of(lows: np.ndarray) -> list[tuple[int, int, int]]:
    """(hash, unsure bits, signature) of each row of 64 coefficients."""
    return list(zip(_hashes_of(lows), _unsure_of(lows), _signatures_of(lows)))


# The row matrices of the views, stacked: the grey levels are multiplied by
# all of them at once, then by the column matrices.
_ROWS = np.concatenate([_COSINES, _TRIM_START, _TRIM_END])


def image_views(grey: np.ndarray) -> list[tuple[int, int, int]]:
    """(hash, unsure bits, signature) of the whole 32x32 grey picture, then
    of its `WINDOWS` windows (left, right, top, bottom side trimmed by
    `TRIM`)."""
    whole, top, bottom = np.split(_ROWS @ grey, 3)
    across = whole @ _ROWS.T  # the whole rows by each column matrix
    lows = np.stack([across[:, :_KEPT], across[:, _KEPT:2 * _KEPT], across[:, 2 * _KEPT:],
                     top @ _COSINES_T, bottom @ _COSINES_T]).reshape(1 + WINDOWS, HASH_BITS)
    return _views_of(lows)


def hash_image(im: Image.Image) -> int:
    """Steps 2-5 on an opened (or already decoded) Pillow image: the same as
    ``int(str(imagehash.phash(im)), 16)`` but for ties with the median."""
    return _hash_of(_low_frequencies(im))


def image_hash(data: bytes, path: str = "image") -> int:
    """The 64-bit perceptual hash of an encoded image (module docstring).

    data: the file's bytes; path: its name for messages. Raises RowError
    (stage ``decode``): ``empty_file``, ``image_too_large``,
    ``image_corrupt`` or ``image_truncated``.
    """
    return split_fingerprint(image_fingerprint(data, path))[0]


def image_fingerprint(data: bytes, path: str = "image", views: bool = False) -> int:
    """The hash and the signature of an encoded image from one decode, as
    one integer (`split_fingerprint` parts it): ``signature << 64 | hash``;
    with `views`, above them the hash's unsure bits (64 bits), then each
    window's hash, unsure bits and signature (about 100 µs an image more,
    and a search about 0.5 ms an image dearer: docs/near_duplicates.md).
    Raises as `image_hash`."""
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
        grey = _grey(im)
    except DECODE_ERRORS as exc:
        raise classified(exc, path) from None
    finally:
        im.close()
    if not views:
        low = (_COSINES @ grey @ _COSINES_T).ravel()
        return _signature_of(low) << HASH_BITS | _hash_of(low)
    (value, unsure, signature), *windows = image_views(grey)
    fields = [value, signature, unsure, *(field for window in windows for field in window)]
    packed, shift = 0, 0
    for field, width in zip(fields, _WIDTHS):
        packed |= field << shift
        shift += width
    return packed


# Bits of each field of an image_fingerprint value, from the low bits up:
# hash, signature, unsure bits, then (hash, unsure bits, signature) per window.
_VIEW_WIDTHS = (HASH_BITS, HASH_BITS, 8 * SIGNATURE_BYTES)
_WIDTHS = (HASH_BITS, 8 * SIGNATURE_BYTES, HASH_BITS) + _VIEW_WIDTHS * WINDOWS


def split_fingerprint(value: int) -> tuple[int, int, int, tuple[tuple[int, int, int], ...]]:
    """(hash, signature, unsure bits, windows) of an `image_fingerprint`
    value, windows as (hash, unsure bits, signature) triples; a value of
    the hash and signature alone (an older one: no views) gives unsure
    bits 0 and no windows."""
    fields = []
    for width in _WIDTHS:
        fields.append(value & ((1 << width) - 1))
        value >>= width
    windows = tuple(tuple(fields[at:at + 3]) for at in range(3, len(fields), 3))
    return fields[0], fields[1], fields[2], windows if any(map(any, windows)) else ()


def hamming(a: int, b: int) -> int:
    """The number of bits in which two hashes differ."""
    return (a ^ b).bit_count()


def signature_array(signatures) -> np.ndarray:
    """Signatures (ints) as an (n, 63) int32 array of -127..127 (a missing
    signature, 0, as a row of -128)."""
    raw = b"".join(int(s).to_bytes(SIGNATURE_BYTES, "big") for s in signatures)
    octets = np.frombuffer(raw, dtype=np.uint8).reshape(-1, SIGNATURE_BYTES)
    return octets.astype(np.int32) - 128


def similar(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row of two `signature_array`s: whether their cosine similarity
    is at least `MIN_SIMILARITY`, or either signature is missing (all -128).
    Integer arithmetic: products below 2**14, sums of 63 below 2**20, the
    compared squares below 2**50."""
    missing = (a[:, 0] == -128) | (b[:, 0] == -128)
    dot = np.einsum("ij,ij->i", a, b, dtype=np.int64)
    norms = np.einsum("ij,ij->i", a, a, dtype=np.int64) * np.einsum(
        "ij,ij->i", b, b, dtype=np.int64)
    top, bottom = MIN_SIMILARITY
    return missing | ((dot > 0) & (dot * dot * bottom * bottom >= top * top * norms))
