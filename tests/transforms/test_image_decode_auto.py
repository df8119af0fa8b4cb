"""`decode: auto`: rejects every truncated or damaged image the full decode
(Pillow's decoder, with libpng's chunk CRC rule) rejects, on JPEG and PNG
variants cut at many points, and accepts every intact one."""

import io

import pytest
from PIL import Image

from recordforge.schemas.dead_letters import RowError
from recordforge.transforms.readers.images import ImageOptions, image_columns

AUTO, FULL = ImageOptions(decode="auto"), ImageOptions(decode="full")


def _variants() -> dict[str, bytes]:
    base = Image.effect_noise((48, 40), 60).convert("RGB")
    out = {}
    for name, image, kwargs in [
            ("jpeg", base, {"format": "JPEG", "quality": 90}),
            ("jpeg-progressive", base, {"format": "JPEG", "progressive": True}),
            ("jpeg-restart", base, {"format": "JPEG", "restart_marker_blocks": 2}),
            ("jpeg-gray", base.convert("L"), {"format": "JPEG"}),
            ("png", base, {"format": "PNG"}),
            ("png-palette", base.convert("P"), {"format": "PNG"}),
            ("png-interlaced", base, {"format": "PNG", "interlace": 1}),
            ("png-16bit", base.convert("I;16"), {"format": "PNG"}),
            ("png-rgba", base.convert("RGBA"), {"format": "PNG", "compress_level": 1})]:
        buffer = io.BytesIO()
        try:
            image.save(buffer, **kwargs)
        except (OSError, ValueError, TypeError):
            continue
        out[name] = buffer.getvalue()
    return out


VARIANTS = _variants()


def _passes(data: bytes, options: ImageOptions) -> bool:
    try:
        image_columns(data, "x", options)
        return True
    except RowError:
        return False


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_intact_images_pass(name):
    assert _passes(VARIANTS[name], AUTO)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_cut_the_full_decode_rejects_auto_rejects(name):
    data = VARIANTS[name]
    cuts = sorted(set(range(len(data) - 1, len(data) - 40, -1))
                  | set(range(8, len(data), max(1, len(data) // 60))))
    for cut in cuts:
        piece = data[:cut]
        if not _passes(piece, FULL):
            assert not _passes(piece, AUTO), (name, cut, len(data))


@pytest.mark.parametrize("name", [n for n in sorted(VARIANTS) if n.startswith("png")])
def test_png_bit_flips_in_image_data_are_rejected(name):
    data = bytearray(VARIANTS[name])
    idat = data.find(b"IDAT")
    for offset in range(idat + 8, min(len(data) - 12, idat + 200), 17):
        damaged = bytearray(data)
        damaged[offset] ^= 0x10
        assert not _passes(bytes(damaged), AUTO), offset


def test_auto_is_the_default():
    assert ImageOptions().decode == "auto"
