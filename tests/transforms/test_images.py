"""Image checks: good images report their columns, bad ones raise RowError with a reason."""

import io
import struct
import warnings
import zlib

import pytest
from PIL import Image, ImageFile

from recordforge.schemas.dead_letters import RowError
from recordforge.transforms.readers.images import ImageOptions, image_columns


def encode(im, fmt, **params):
    buffer = io.BytesIO()
    im.save(buffer, fmt, **params)
    return buffer.getvalue()


def noise(size=(300, 200), mode="RGB"):
    return Image.effect_noise(size, 60).convert(mode)


def patch_png_size(png, width, height):
    """A PNG whose IHDR declares width x height (CRC fixed, pixels not)."""
    data = bytearray(png)
    struct.pack_into(">II", data, 16, width, height)
    struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def break_idat_crc(png):
    start = png.index(b"IDAT") - 4
    length = struct.unpack(">I", png[start:start + 4])[0]
    crc_at = start + 8 + length
    return png[:crc_at] + bytes([png[crc_at] ^ 0xFF]) + png[crc_at + 1:]


def exif_rotated_jpeg():
    im = noise((300, 200))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    return encode(im, "JPEG", exif=exif.tobytes())


def animated(fmt):
    frames = [Image.new("RGB", (40, 30), color) for color in ("red", "green", "blue")]
    return encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=50, loop=0)


@pytest.fixture(scope="module")
def jpeg():
    return encode(noise(), "JPEG", quality=90)


@pytest.fixture(scope="module")
def png():
    return encode(noise(), "PNG")


def columns(data, **options):
    return image_columns(data, "img/x", ImageOptions(**options))


def reason_of(data, **options):
    with pytest.raises(RowError) as info:
        columns(data, **options)
    assert info.value.stage == "decode"
    assert "img/x" in info.value.message
    return info.value.reason


@pytest.mark.parametrize("decode", ["header", "full"])
def test_good_images_keep_their_bytes(jpeg, png, decode):
    for data, fmt in ((jpeg, "JPEG"), (png, "PNG")):
        got = columns(data, decode=decode)
        assert got == {"image": data, "height": 200, "width": 300, "channels": 3, "format": fmt}


def test_modes_and_channels(jpeg):
    palette = noise((64, 48)).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    palette.info["transparency"] = 0
    sixteen = Image.new("I;16", (64, 48))
    sixteen.putpixel((1, 1), 60000)
    cases = {
        "gray": (encode(noise(mode="L"), "JPEG"), 1),
        "cmyk": (encode(noise(mode="CMYK"), "JPEG"), 4),
        "palette_transparent": (encode(palette, "PNG", transparency=0), 4),
        "palette": (encode(noise((64, 48)).convert("P"), "PNG"), 3),
        "rgba": (encode(noise(mode="RGBA"), "PNG"), 4),
        "sixteen_bit": (encode(sixteen, "PNG"), 1),
    }
    for name, (data, channels) in cases.items():
        got = columns(data, decode="full")
        assert got["channels"] == channels, name
        assert got["image"] == data


def test_modes_option_restricts_color_modes():
    cmyk = encode(noise(mode="CMYK"), "JPEG")
    assert reason_of(cmyk, modes=("RGB", "L")) == "image_format_not_allowed"
    assert columns(encode(noise(mode="L"), "JPEG"), modes=("RGB", "L"))["channels"] == 1


def test_bad_images(jpeg, png):
    assert reason_of(b"") == "empty_file"
    assert reason_of(b"this is a text file, not a JPEG\n" * 4) == "image_corrupt"
    assert reason_of(encode(noise(), "GIF")) == "image_format_not_allowed"
    assert reason_of(jpeg[: len(jpeg) // 2], decode="full") == "image_truncated"
    assert reason_of(png[: len(png) // 2], decode="full") == "image_truncated"
    assert reason_of(jpeg[:300]) == "image_truncated"  # header itself cut short
    assert reason_of(break_idat_crc(png), decode="full") == "image_corrupt"
    header_crc = bytearray(png)
    header_crc[29] ^= 0xFF  # IHDR CRC
    assert reason_of(bytes(header_crc)) == "image_corrupt"
    assert reason_of(jpeg, min_size=(301, 1)) == "image_too_small"
    assert reason_of(jpeg, max_size=(300, 199)) == "image_too_large"


def test_header_mode_does_not_decode_pixels(jpeg):
    # Header mode is fast because it never decodes; damage after the header
    # passes there and is caught by full mode.
    assert columns(jpeg[: len(jpeg) // 2])["width"] == 300


def test_decompression_bombs_are_rejected_without_decoding(png):
    bomb = patch_png_size(png, 100_000, 100_000)
    assert reason_of(bomb) == "image_too_large"
    assert reason_of(bomb, max_size=(200_000, 200_000)) == "image_too_large"
    # Between Pillow's warning and error thresholds: its warning becomes our error.
    side = int((Image.MAX_IMAGE_PIXELS * 1.5) ** 0.5)
    filters_before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert reason_of(patch_png_size(png, side, side),
                         max_size=(side, side)) == "image_too_large"
    assert not [w for w in seen if issubclass(w.category, Image.DecompressionBombWarning)]
    assert warnings.filters == filters_before
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    # Within max_size but declared larger than the pixels present: full decode fails.
    assert reason_of(patch_png_size(png, 4000, 4000), decode="full") in (
        "image_truncated", "image_corrupt")


def test_animated_images_report_the_first_frame():
    gif = animated("GIF")
    got = columns(gif, formats=("GIF",), decode="full")
    assert (got["width"], got["height"], got["format"], got["image"]) == (40, 30, "GIF", gif)
    apng = animated("PNG")
    got = columns(apng, decode="full", encode_format="PNG")
    out = Image.open(io.BytesIO(got["image"]))
    assert getattr(out, "n_frames", 1) == 1
    assert out.convert("RGB").getpixel((0, 0)) == (255, 0, 0)


def test_resize_max_side_keeps_aspect_and_never_upscales(jpeg):
    got = columns(jpeg, resize_max_side=150)
    assert (got["width"], got["height"], got["format"]) == (150, 100, "JPEG")
    out = Image.open(io.BytesIO(got["image"]))
    assert out.size == (150, 100) and out.format == "JPEG"
    small = columns(jpeg, resize_max_side=1000)
    assert (small["width"], small["height"]) == (300, 200)
    assert small["image"] != jpeg  # re-encoded (orientation applied, EXIF dropped)
    exact = columns(jpeg, resize_size=(64, 64))
    assert Image.open(io.BytesIO(exact["image"])).size == (64, 64)


def test_exif_orientation(jpeg):
    rotated = exif_rotated_jpeg()
    header = columns(rotated)
    assert (header["width"], header["height"]) == (300, 200)  # stored, as TF decodes it
    turned = columns(rotated, resize_max_side=150)
    assert (turned["width"], turned["height"]) == (100, 150)
    out = Image.open(io.BytesIO(turned["image"]))
    assert out.size == (100, 150)
    assert out.getexif().get(0x0112) is None


def test_reencode_converts_modes(png):
    rgba = encode(Image.new("RGBA", (20, 10), (255, 0, 0, 0)), "PNG")
    got = columns(rgba, encode_format="JPEG", encode_quality=95)
    out = Image.open(io.BytesIO(got["image"]))
    assert (out.format, out.mode, got["channels"]) == ("JPEG", "RGB", 3)
    assert all(v > 240 for v in out.getpixel((5, 5)))  # transparent -> white
    cmyk = columns(encode(noise(mode="CMYK"), "JPEG"), encode_format="JPEG")
    assert Image.open(io.BytesIO(cmyk["image"])).mode == "RGB" and cmyk["channels"] == 3
    sixteen = Image.new("I;16", (8, 8))
    sixteen.putpixel((0, 0), 65535)
    as_png = columns(encode(sixteen, "PNG"), resize_max_side=4)
    assert Image.open(io.BytesIO(as_png["image"])).mode == "I;16"
    as_jpeg = columns(encode(sixteen, "PNG"), encode_format="JPEG")
    assert Image.open(io.BytesIO(as_jpeg["image"])).getpixel((0, 0))[0] > 200
    to_png = columns(encode(noise(), "JPEG"), encode_format="png")
    assert Image.open(io.BytesIO(to_png["image"])).format == "PNG"
    assert to_png["format"] == "PNG"
    # deterministic bytes
    assert columns(png, resize_max_side=99)["image"] == columns(png, resize_max_side=99)["image"]


@pytest.mark.parametrize("kwargs,match", [
    ({"decode": "pixels"}, "decode"),
    ({"min_size": (0, 1)}, "min_size"),
    ({"min_size": (10, 10), "max_size": (5, 5)}, "exceeds"),
    ({"resize_max_side": 10, "resize_size": (5, 5)}, "either"),
    ({"encode_format": "TIFF"}, "encode.format"),
    ({"encode_quality": 0}, "quality"),
    ({"formats": ()}, "formats"),
])
def test_options_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ImageOptions(**kwargs)


def test_options_normalise_and_pickle():
    import pickle
    options = ImageOptions(formats=["jpeg", "png"], min_size=[2, 3], encode_format="jpeg")
    assert options.formats == ("JPEG", "PNG") and options.min_size == (2, 3)
    assert pickle.loads(pickle.dumps(options)) == options
