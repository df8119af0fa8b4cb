"""Image checks and optional resizing/re-encoding: plain functions, no Beam.

`image_columns(data, path, options)` turns one image file's bytes into the
image columns of a row (``image``, ``height``, ``width``, ``channels``,
``format``) or raises `RowError` (stage ``decode``) saying why the image is
unusable.

What is reported:

* ``decode: auto`` (the default) makes the cheapest check after which
  TensorFlow's decoder accepts the image (`_check_complete`: JPEG data must
  reach its end-of-image marker; PNG chunk CRCs checked and the image data
  stream inflated, to exactly the size its header describes, never more
  than one byte past it; other formats decoded in full). Formats TensorFlow
  cannot decode (TIFF) are refused in ``formats`` unless the images are
  re-encoded or ``decode: header`` turns the checks off; ``header`` parses only the file
  header (fast; may pass truncated data); ``full`` also decodes every pixel
  of the first frame, and for PNG verifies every chunk's CRC, so truncated
  and corrupt data are caught. Pillow's ``LOAD_TRUNCATED_IMAGES``
  is never set: a truncated image is always an error.
* Without resize/encode the original bytes are kept and ``height``/``width``
  are the stored dimensions. EXIF orientation is *not* applied, which is what
  ``tf.io.decode_jpeg``/``decode_image`` decode too.
* With resize or encode the first frame is decoded, EXIF orientation applied
  (``ImageOps.exif_transpose``), resized with LANCZOS and encoded again without
  EXIF; ``height``/``width``/``channels``/``format`` describe the new bytes.
  ``resize_max_side`` keeps the aspect ratio and never upscales;
  ``resize_size`` is an exact (width, height). The output format is
  ``encode_format``, else the original format when it is JPEG or PNG, else PNG.
  JPEG output is always RGB (alpha composited over white, CMYK/grayscale/16-bit
  converted; 16-bit scaled to 8-bit); PNG output keeps L, LA, RGB, RGBA and
  16-bit grayscale, and expands palettes to RGB/RGBA.
* ``channels`` follows the decoded mode: palette images count 3, or 4 with
  transparency (as TensorFlow's PNG/GIF decoders expand them); CMYK JPEG 4;
  grayscale 1 (16-bit too).
* Animated GIF/PNG/WebP: the first frame is checked and reported; the original
  bytes (all frames) are kept unless resized/re-encoded (first frame only).

Limits: ``min_size``/``max_size`` are (width, height) and apply to the stored
dimensions, before any decoding. An image larger than ``max_size`` or above
Pillow's decompression-bomb pixel limit (``Image.MAX_IMAGE_PIXELS``) is
``image_too_large`` and never decoded; Pillow's bomb warning is turned into an
error only inside our own ``Image.open`` call. ``formats`` restricts the
container format (Pillow names: JPEG, PNG, GIF, WEBP, BMP ...); color modes are
accepted unless ``modes`` lists the allowed Pillow modes (e.g. ``("RGB", "L")``).
"""

from __future__ import annotations

import dataclasses
import io
import struct
import zlib
from typing import TYPE_CHECKING, Any

from ...schemas.dead_letters import RowError
# The bomb guard and the meaning of a decode failure are shared with the
# perceptual hash (schemas/image_hash.py), which cannot import this layer.
from ...schemas.image_decode import (DECODE_ERRORS as _DECODE_ERRORS, classified as _classified,
                                     image_error as _error, open_image as _open,
                                     to_8bit as _to_8bit)
from ...schemas.image_hash import image_fingerprint

if TYPE_CHECKING:  # Pillow itself is imported where an image is opened (image_decode)
    from PIL import Image

__all__ = ["DECODE_MODES", "ENCODE_FORMATS", "TENSORFLOW_FORMATS", "ImageOptions",
           "image_columns"]

DECODE_MODES = ("auto", "header", "full")
ENCODE_FORMATS = ("JPEG", "PNG")
# What `tf.io.decode_image` decodes: kept bytes of another format (TIFF)
# would be published images no TensorFlow reader can open.
TENSORFLOW_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP")
_DEFAULT_JPEG_QUALITY = 90


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """Checks and transforms for image sources (from ``source.image``).

    formats: allowed Pillow format names. min_size/max_size: (width, height).
    decode: "header" or "full". resize_max_side / resize_size: at most one.
    encode_format: "JPEG" or "PNG", or None. encode_quality: JPEG quality 1-100
    (default 90). modes: allowed Pillow color modes, or None for any.
    """

    formats: tuple[str, ...] = ("JPEG", "PNG")
    min_size: tuple[int, int] = (1, 1)
    max_size: tuple[int, int] = (8192, 8192)
    decode: str = "auto"
    resize_max_side: int | None = None
    resize_size: tuple[int, int] | None = None
    encode_format: str | None = None
    encode_quality: int | None = None
    modes: tuple[str, ...] | None = None
    # Also give each image's perceptual hash (column ``image_hash``; None
    # when it cannot be computed): near-duplicate detection turns it on;
    # with perceptual_views the hash also carries the image's views (four
    # edge-trimmed windows and unsure bits, `image_hash.image_views`).
    perceptual_hash: bool = False
    perceptual_views: bool = False

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "formats", tuple(str(f).upper() for f in self.formats))
        if not self.formats:
            raise ValueError("formats: list at least one image format, e.g. [JPEG, PNG]")
        for name in ("min_size", "max_size"):
            size = tuple(getattr(self, name))
            if len(size) != 2 or not all(isinstance(v, int) and v >= 1 for v in size):
                raise ValueError(f"{name}: expected [width, height] of positive integers, got {size!r}")
            set_(self, name, size)
        if any(lo > hi for lo, hi in zip(self.min_size, self.max_size)):
            raise ValueError(f"min_size {list(self.min_size)} exceeds max_size {list(self.max_size)}")
        if self.decode not in DECODE_MODES:
            raise ValueError(f"decode: expected one of {list(DECODE_MODES)}, got {self.decode!r}")
        if self.resize_max_side is not None and self.resize_size is not None:
            raise ValueError("resize: give either max_side or size, not both")
        if self.resize_max_side is not None and not (
                isinstance(self.resize_max_side, int) and self.resize_max_side >= 1):
            raise ValueError(f"resize.max_side: expected a positive integer, got {self.resize_max_side!r}")
        if self.resize_size is not None:
            size = tuple(self.resize_size)
            if len(size) != 2 or not all(isinstance(v, int) and v >= 1 for v in size):
                raise ValueError(f"resize.size: expected [width, height] of positive integers, got {size!r}")
            set_(self, "resize_size", size)
        if self.encode_format is not None:
            set_(self, "encode_format", str(self.encode_format).upper())
            if self.encode_format not in ENCODE_FORMATS:
                raise ValueError(f"encode.format: expected one of {list(ENCODE_FORMATS)}, "
                                 f"got {self.encode_format!r}")
        if self.encode_quality is not None and not (
                isinstance(self.encode_quality, int) and 1 <= self.encode_quality <= 100):
            raise ValueError(f"encode.quality: expected an integer 1-100, got {self.encode_quality!r}")
        if self.modes is not None:
            set_(self, "modes", tuple(self.modes))
        undecodable = [f for f in self.formats if f not in TENSORFLOW_FORMATS]
        if undecodable and self.decode != "header" and not self.transforms:
            raise ValueError(f"formats: TensorFlow cannot decode {', '.join(undecodable)}; "
                             "re-encode such images (encode.format: PNG or JPEG), or set "
                             "decode: header to keep their bytes without decoding checks")

    @property
    def transforms(self) -> bool:
        """True when image bytes are rewritten (resize or re-encode)."""
        return (self.resize_max_side is not None or self.resize_size is not None
                or self.encode_format is not None)


def _open_checked(data: bytes, path: str, options: ImageOptions) -> Image.Image:
    from PIL import UnidentifiedImageError  # here: see schemas/image_decode

    try:
        return _open(data, path, options.formats)
    except UnidentifiedImageError:
        pass
    except _DECODE_ERRORS as exc:
        raise _classified(exc, path) from None
    # Not one of the allowed formats: say which format it is, if any.
    try:
        other = _open(data, path, None)
    except RowError:
        raise
    except (UnidentifiedImageError, *_DECODE_ERRORS):
        raise _error("image_corrupt", f"{path}: not a readable image "
                     f"(expected {'/'.join(options.formats)})") from None
    fmt = other.format
    other.close()
    raise _error("image_format_not_allowed",
                 f"{path}: format {fmt} is not in formats {list(options.formats)}")


def _check_size(width: int, height: int, path: str, options: ImageOptions) -> None:
    max_w, max_h = options.max_size
    if width > max_w or height > max_h:
        raise _error("image_too_large", f"{path}: {width}x{height} exceeds max_size "
                     f"{max_w}x{max_h}; not decoded")
    from PIL import Image  # here: see schemas/image_decode

    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise _error("image_too_large", f"{path}: {width}x{height} pixels exceeds the "
                     f"decompression-bomb limit of {limit} pixels; not decoded")
    min_w, min_h = options.min_size
    if width < min_w or height < min_h:
        raise _error("image_too_small", f"{path}: {width}x{height} is below min_size "
                     f"{min_w}x{min_h}")


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_png_chunks(data: bytes, path: str) -> None:
    """Verifies the CRC of every PNG chunk up to IEND (Pillow skips IDAT CRCs;
    libpng, which TensorFlow uses, rejects them)."""
    pos, size = len(_PNG_SIGNATURE), len(data)
    while True:
        if pos + 8 > size:
            raise _error("image_truncated", f"{path}: PNG data ends before the IEND chunk")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 8 + length + 4
        if end > size:
            raise _error("image_truncated", f"{path}: PNG chunk {kind!r} at byte {pos} "
                         "runs past the end of the file")
        stored = struct.unpack(">I", data[end - 4:end])[0]
        if zlib.crc32(data[pos + 4:end - 4]) != stored:
            raise _error("image_corrupt", f"{path}: PNG chunk {kind!r} at byte {pos} "
                         "has a bad CRC")
        if kind == b"IEND":
            return
        pos = end


# Bytes of a PNG's image data inflated at a time by the `auto` check.
_INFLATE_STEP = 1 << 20


def _check_complete(im: Image.Image, data: bytes, path: str) -> None:
    """``decode: auto``: the cheapest check after which TensorFlow's decoder
    accepts the image. JPEG: the segments up to the first scan are walked
    and the end-of-image marker must follow it (libjpeg, as TensorFlow calls
    it, rejects data that ends early but only warns about damaged entropy
    data, which it decodes). PNG: every chunk's CRC, up to IEND, and the
    image data inflated to the end of its zlib stream (libpng rejects either
    fault), without unfiltering pixels. Other formats are decoded in full."""
    fmt = _format_name(im)
    if fmt == "JPEG":
        _check_jpeg_ends(data, path)
    elif fmt == "PNG":
        _check_png_chunks(data, path)
        _check_png_stream(data, path)
    else:
        _load(im, data, path)


def _check_jpeg_ends(data: bytes, path: str) -> None:
    pos, size = 2, len(data)
    while True:
        if pos + 4 > size:
            raise _error("image_truncated", f"{path}: JPEG data ends before its first scan")
        if data[pos] != 0xFF:
            raise _error("image_corrupt", f"{path}: no JPEG marker at byte {pos}")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            break
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            pos += 2
            continue
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    # Inside entropy-coded data a 0xFF is followed by 0x00 or a restart
    # marker, so the first FF D9 after the scan is the end of the image.
    if data.rfind(b"\xff\xd9", pos) < 0:  # (searched from the end, where it is)
        raise _error("image_truncated", f"{path}: JPEG data ends early (no end-of-image "
                     "marker after the image data)")


# PNG colour type -> samples per pixel (the PNG specification, 11.2.2).
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7 passes: (first column, first row, column step, row step).
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))


def _png_raw_size(data: bytes, path: str) -> int:
    """The bytes a PNG's image data must inflate to, from its IHDR chunk:
    each row of each (Adam7) pass is a filter byte and its packed samples.
    libpng, as TensorFlow calls it, rejects image data of another size."""
    start = len(_PNG_SIGNATURE)
    length, kind = struct.unpack(">I4s", data[start:start + 8])
    if kind != b"IHDR" or length != 13:
        raise _error("image_corrupt", f"{path}: PNG data does not start with its IHDR chunk")
    width, height, depth, colour, _, _, interlace = struct.unpack(
        ">IIBBBBB", data[start + 8:start + 21])
    if colour not in _PNG_SAMPLES:
        raise _error("image_corrupt", f"{path}: PNG colour type {colour} does not exist")
    bits = depth * _PNG_SAMPLES[colour]

    def rows(columns: int, count: int) -> int:
        return count * (1 + (columns * bits + 7) // 8) if columns and count else 0

    if not interlace:
        return rows(width, height)
    return sum(rows(max(0, (width - x + dx - 1) // dx), max(0, (height - y + dy - 1) // dy))
               for x, y, dx, dy in _ADAM7)


class _BoundedInflate:
    """A zlib stream inflated in steps, never past `limit` bytes of output
    (a stream that would give more is refused as soon as it passes it)."""

    def __init__(self, limit: int, path: str):
        self.stream = zlib.decompressobj()
        self.limit = limit
        self.total = 0
        self.path = path

    def feed(self, chunk: bytes) -> None:
        """Inflates `chunk` (b"": what the stream still holds back)."""
        try:
            while True:
                room = self.limit + 1 - self.total
                if room <= 0:
                    raise _error("image_corrupt", f"{self.path}: PNG image data inflates to "
                                 f"more than the {self.limit} bytes its header describes")
                got = len(self.stream.decompress(chunk, min(room, _INFLATE_STEP)))
                self.total += got
                chunk = self.stream.unconsumed_tail
                if not chunk and (got == 0 or self.stream.eof):
                    return
        except zlib.error as exc:
            raise _error("image_corrupt", f"{self.path}: PNG image data does not inflate "
                         f"({exc})") from None


def _check_png_stream(data: bytes, path: str) -> None:
    """The image data inflates to the end of its zlib stream, and to exactly
    the size IHDR describes (`_png_raw_size`), inflating at most one byte more."""
    expected = _png_raw_size(data, path)
    inflate = _BoundedInflate(expected, path)
    pos, size = len(_PNG_SIGNATURE), len(data)
    while pos + 8 <= size:
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            inflate.feed(data[pos + 8:pos + 8 + length])
        elif kind == b"IEND":
            break
        pos += 12 + length
    inflate.feed(b"")
    if inflate.total > expected:
        raise _error("image_corrupt", f"{path}: PNG image data inflates to more than the "
                     f"{expected} bytes its header describes")
    if not inflate.stream.eof:
        raise _error("image_truncated", f"{path}: PNG image data ends before its zlib "
                     "stream does")
    if inflate.total != expected:
        raise _error("image_corrupt", f"{path}: PNG image data inflates to {inflate.total} "
                     f"bytes; its header ({_png_header_text(data)}) needs {expected}")


def _png_header_text(data: bytes) -> str:
    start = len(_PNG_SIGNATURE) + 8
    width, height, depth, colour = struct.unpack(">IIBB", data[start:start + 10])
    return f"{width}x{height}, {depth}-bit, colour type {colour}"


def _load(im: Image.Image, data: bytes, path: str) -> None:
    """Decodes every pixel of the current (first) frame."""
    try:
        im.load()
    except _DECODE_ERRORS as exc:
        raise _classified(exc, path) from None
    if im.format == "PNG":
        _check_png_chunks(data, path)


def _format_name(im: Image.Image) -> str:
    # Pillow names camera JPEGs with a multi-picture segment "MPO"; the file is
    # a JPEG and every JPEG decoder reads its first picture.
    return "JPEG" if im.format == "MPO" else im.format


def _channels(im: Image.Image) -> int:
    if im.mode in ("P", "PA"):
        return 4 if im.mode == "PA" or "transparency" in im.info else 3
    from PIL import Image  # here: see schemas/image_decode

    return Image.getmodebands(im.mode)


def _has_alpha(im: Image.Image) -> bool:
    return im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        im.mode == "P" and "transparency" in im.info)


def _workable(im: Image.Image) -> Image.Image:
    """A mode LANCZOS resampling and the encoders handle: palettes expanded
    (resampling a palette would fall back to nearest-neighbour)."""
    if im.mode in ("P", "PA"):
        return im.convert("RGBA" if _has_alpha(im) else "RGB")
    if im.mode == "1":
        return im.convert("L")
    if im.mode == "I":
        return im.convert("I;16") if im.getextrema()[1] < 65536 else im
    return im


def _for_format(im: Image.Image, fmt: str) -> Image.Image:
    if fmt == "JPEG":
        im = _to_8bit(im)
        if _has_alpha(im):
            from PIL import Image  # here: see schemas/image_decode

            rgba = im.convert("RGBA")
            background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            im = Image.alpha_composite(background, rgba)
        return im if im.mode == "RGB" else im.convert("RGB")
    if im.mode in ("L", "LA", "RGB", "RGBA", "I;16"):
        return im
    if im.mode in ("I;16B", "I;16L", "I"):
        return _to_8bit(im)
    return im.convert("RGBA" if _has_alpha(im) else "RGB")


def _new_size(width: int, height: int, options: ImageOptions) -> tuple[int, int]:
    if options.resize_size is not None:
        return options.resize_size
    side = options.resize_max_side
    longest = max(width, height)
    if side is None or longest <= side:
        return width, height
    return max(1, round(width * side / longest)), max(1, round(height * side / longest))


def _transform(im: Image.Image, data: bytes, path: str, options: ImageOptions
               ) -> tuple[bytes, Image.Image, str]:
    from PIL import Image, ImageOps  # here: see schemas/image_decode

    _load(im, data, path)
    source_format = _format_name(im)
    try:
        out = ImageOps.exif_transpose(im)
    except _DECODE_ERRORS as exc:
        raise _error("image_corrupt", f"{path}: unreadable EXIF orientation "
                     f"({type(exc).__name__}: {exc})") from None
    out = _workable(out)
    size = _new_size(*out.size, options)
    if size != out.size:
        # reducing_gap: a cheap integer box reduction first while the image is
        # over 3x the target, then LANCZOS; Pillow documents the result as
        # indistinguishable from a plain LANCZOS pass, at a fraction of the cost.
        out = out.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    fmt = options.encode_format or (source_format if source_format in ENCODE_FORMATS else "PNG")
    out = _for_format(out, fmt)
    params: dict[str, Any] = {}
    if fmt == "JPEG":
        params["quality"] = options.encode_quality or _DEFAULT_JPEG_QUALITY
    buffer = io.BytesIO()
    out.save(buffer, format=fmt, **params)
    return buffer.getvalue(), out, fmt


def image_columns(data: bytes, path: str, options: ImageOptions) -> dict:
    """The image columns of one image file.

    data: the file's bytes; path: its name for messages. Returns ``image``
    (bytes: the original unless resized/re-encoded), ``height``, ``width``,
    ``channels`` (ints) and ``format`` (Pillow's name, e.g. "JPEG").
    Raises RowError (stage "decode") with reason ``empty_file``,
    ``image_corrupt``, ``image_truncated``, ``image_format_not_allowed``,
    ``image_too_small`` or ``image_too_large``.
    """
    columns = _checked_columns(data, path, options)
    if options.perceptual_hash:
        columns["image_hash"] = _perceptual_hash(data, path, options.perceptual_views)
    return columns


def _perceptual_hash(data: bytes, path: str, views: bool) -> int | None:
    """The image's perceptual hash and signature (`schemas.image_hash`,
    `image_fingerprint`), made here where its bytes are in hand; None when it cannot be decoded for it (a check
    that did not decode the pixels, `decode: header`, may pass such an
    image: it is kept, and counted as not hashed, not dropped)."""
    try:
        return image_fingerprint(data, path, views=views)
    except RowError:
        return None


def _checked_columns(data: bytes, path: str, options: ImageOptions) -> dict:
    """`image_columns` without the perceptual hash."""
    if not data:
        raise _error("empty_file", f"{path}: the image file is empty (0 bytes)")
    im = _open_checked(data, path, options)
    try:
        width, height = im.size
        _check_size(width, height, path, options)
        if options.modes is not None and im.mode not in options.modes:
            raise _error("image_format_not_allowed",
                         f"{path}: color mode {im.mode} is not in modes {list(options.modes)}")
        if options.transforms:
            image, out, fmt = _transform(im, data, path, options)
            return {"image": image, "height": out.height, "width": out.width,
                    "channels": _channels(out), "format": fmt}
        if options.decode == "full":
            _load(im, data, path)
        elif options.decode == "auto":
            _check_complete(im, data, path)
        return {"image": data, "height": height, "width": width,
                "channels": _channels(im), "format": _format_name(im)}
    finally:
        im.close()
