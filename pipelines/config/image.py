"""The `source.image:` section: image checks and optional resizing and re-encoding."""

from __future__ import annotations

from typing import Any, Sequence

from ...schemas.errors import ConfigError
from .keys import section

__all__ = ["IMAGE_FORMATS", "IMAGE_MODES", "parse_image"]

_IMAGE_KEYS = ("formats", "modes", "min_size", "max_size", "decode", "resize", "encode")


IMAGE_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF")


_FORMAT_ALIASES = {"JPG": "JPEG", "TIF": "TIFF"}


def parse_image(value: Any) -> tuple[Any, dict]:
    body = section(value, "source.image", _IMAGE_KEYS, required=False)
    formats = body.get("formats", ["JPEG", "PNG"])
    if isinstance(formats, str):
        formats = [formats]
    if not isinstance(formats, (list, tuple)) or not formats:
        raise ConfigError("source.image.formats", f"must be a non-empty list from "
                          f"{', '.join(IMAGE_FORMATS)}")
    formats = tuple(dict.fromkeys(_image_format(f, "source.image.formats", IMAGE_FORMATS)
                                  for f in formats))
    modes = _parse_modes(body.get("modes"))
    min_size = _size_pair(body.get("min_size", [1, 1]), "source.image.min_size")
    max_size = _size_pair(body.get("max_size", [8192, 8192]), "source.image.max_size")
    if min_size[0] > max_size[0] or min_size[1] > max_size[1]:
        raise ConfigError("source.image.min_size", f"{list(min_size)} is larger than max_size "
                          f"{list(max_size)}")
    decode = body.get("decode", "header")
    if decode not in ("header", "full"):
        raise ConfigError("source.image.decode", f"must be `header` (parse the header only, "
                          f"fast) or `full` (decode every pixel), not {decode!r}")
    resize_max_side, resize_size = _parse_resize(body.get("resize"))
    encode_format, encode_quality = _parse_encode(body.get("encode"))
    # Imported here so loading a table config never imports the image stack.
    from ...transforms.readers.images import ImageOptions
    try:
        options = ImageOptions(formats=formats, min_size=min_size, max_size=max_size,
                               decode=decode, resize_max_side=resize_max_side,
                               resize_size=resize_size, encode_format=encode_format,
                               encode_quality=encode_quality, modes=modes)
    except (TypeError, ValueError) as error:
        raise ConfigError("source.image", str(error)) from None
    resolved = {
        "formats": list(formats), "modes": None if modes is None else list(modes),
        "min_size": list(min_size), "max_size": list(max_size),
        "decode": decode,
        "resize": (None if resize_max_side is None and resize_size is None else
                   {"max_side": resize_max_side} if resize_max_side is not None else
                   {"size": list(resize_size)}),
        "encode": (None if encode_format is None else
                   {"format": encode_format, "quality": encode_quality}),
    }
    return options, resolved


# Pillow's color modes an image file can be stored in.
IMAGE_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV",
               "I", "F", "I;16", "I;16B", "I;16L")


def _parse_modes(value: Any) -> tuple[str, ...] | None:
    """`source.image.modes`: the allowed color modes, or null for any."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError("source.image.modes", f"must be a non-empty list of Pillow color "
                          f"modes ({', '.join(IMAGE_MODES)}) or null for any")
    for mode in value:
        if mode not in IMAGE_MODES:
            raise ConfigError("source.image.modes", f"{mode!r} is not a Pillow color mode; "
                              f"use {', '.join(IMAGE_MODES)}")
    return tuple(dict.fromkeys(value))


def _image_format(value: Any, key: str, allowed: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"{value!r} is not an image format; use {', '.join(allowed)}")
    upper = _FORMAT_ALIASES.get(value.upper(), value.upper())
    if upper not in allowed:
        raise ConfigError(key, f"{value!r} is not supported; use {', '.join(allowed)}")
    return upper


def _size_pair(value: Any, key: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ConfigError(key, f"must be [width, height] in pixels (two positive integers), "
                          f"not {value!r}")
    return int(value[0]), int(value[1])


def _parse_resize(value: Any) -> tuple[int | None, tuple[int, int] | None]:
    if value is None:
        return None, None
    body = section(value, "source.image.resize", ("max_side", "size"), required=False)
    if len(body) != 1:
        raise ConfigError("source.image.resize", "give exactly one of `{max_side: N}` (keep "
                          "the aspect ratio) or `{size: [width, height]}`")
    if "max_side" in body:
        side = body["max_side"]
        if isinstance(side, bool) or not isinstance(side, int) or side < 1:
            raise ConfigError("source.image.resize.max_side", f"must be a positive integer "
                              f"(pixels), not {side!r}")
        return side, None
    return None, _size_pair(body["size"], "source.image.resize.size")


def _parse_encode(value: Any) -> tuple[str | None, int | None]:
    if value is None:
        return None, None
    body = section(value, "source.image.encode", ("format", "quality"), required=False)
    if "format" not in body:
        raise ConfigError("source.image.encode.format", "missing; use JPEG or PNG")
    from ...transforms.readers.images import ENCODE_FORMATS
    fmt = _image_format(body["format"], "source.image.encode.format", ENCODE_FORMATS)
    quality = body.get("quality")
    if quality is not None:
        if fmt == "PNG":
            raise ConfigError("source.image.encode.quality", "PNG is lossless and has no "
                              "quality; remove it")
        if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
            raise ConfigError("source.image.encode.quality", f"must be an integer from 1 to "
                              f"100, not {quality!r}")
    elif fmt != "PNG":
        quality = 90
    return fmt, quality
