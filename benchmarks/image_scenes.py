"""Natural-looking test images and their planted near-copies, for the
perceptual-hash tests (tests/schemas/test_image_hash.py,
tests/transforms/test_near_duplicates.py) and `bench_image_hash.py`.

`scene(seed)` renders one picture (shapes over a gradient or a plain
colour, a cloud texture, or an off-centre crop of a bundled sample photo);
`COPIES` are the edits a near-duplicate finder must see through: JPEG
re-encoded at quality 30-95, resized by up to 10%, cropped by up to 5% of
the area, brightness changed by up to 10%.
Everything is a function of its seed, so a failing example can be replayed.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

__all__ = ["COPIES", "KINDS", "crop_box", "encode", "kind_of", "scene", "source_of", "write_scenes"]

_PHOTOS = sorted(p for p in (Path(__file__).resolve().parents[1] / "examples" / "flowers")
                 .glob("*/*_0[0-9][0-9].*"))
KINDS = ("gradient", "shapes", "texture", "photo")


def _colour(rng: random.Random) -> tuple[int, int, int]:
    return tuple(rng.randrange(256) for _ in range(3))


def _gradient(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """A linear blend between two colours along a random direction."""
    angle = rng.uniform(0, 2 * np.pi)
    ys, xs = np.mgrid[0:size[1], 0:size[0]]
    along = xs * np.cos(angle) + ys * np.sin(angle)
    weight = (along - along.min()) / max(1e-9, float(along.max() - along.min()))
    start, end = np.array(_colour(rng)), np.array(_colour(rng))
    pixels = start + weight[..., None] * (end - start)
    return Image.fromarray(pixels.round().astype(np.uint8), "RGB")


def _shapes(rng: random.Random, im: Image.Image, count: int) -> Image.Image:
    draw = ImageDraw.Draw(im)
    width, height = im.size
    for _ in range(count):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1 = min(width, x0 + rng.randint(width // 8, width // 2))
        y1 = min(height, y0 + rng.randint(height // 8, height // 2))
        shape = rng.choice((draw.ellipse, draw.rectangle))
        shape((x0, y0, x1, y1), fill=_colour(rng))
    return im.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 2.0)))


def _noise(rng: random.Random, size: tuple[int, int], sigma: int) -> Image.Image:
    """Gaussian grey noise around 128, drawn from `rng` (Pillow's
    Image.effect_noise draws from the C library's rand(), whose state
    depends on every earlier call in the process: the same seed gave other
    pictures in another test order)."""
    values = np.random.default_rng(rng.getrandbits(64)).normal(128, sigma, (size[1], size[0]))
    return Image.fromarray(np.clip(values, 0, 255).round().astype(np.uint8), "L")


def _texture(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """Clouds: coarse noise enlarged (structure at every scale down to a
    few pixels) over fine grain, each channel on its own contrast."""
    coarse = (max(2, size[0] // rng.randint(6, 24)), max(2, size[1] // rng.randint(6, 24)))
    clouds = _noise(rng, coarse, rng.randint(40, 90)).resize(size, Image.Resampling.BICUBIC)
    grain = _noise(rng, size, rng.randint(10, 40))
    base = Image.blend(clouds, grain, rng.uniform(0.1, 0.4))
    return Image.merge("RGB", [base.point(lambda v, a=rng.uniform(0.6, 1.5), b=rng.randint(-60, 60):
                                          max(0, min(255, int((v - 128) * a + 128 + b))))
                               for _ in range(3)])


def _photo(rng: random.Random, size: tuple[int, int], source: Path) -> Image.Image:
    with Image.open(source) as photo:
        photo = photo.convert("RGB")
        width, height = photo.size
        # The bundled samples are drawn symmetric flowers: an off-centre
        # crop under a light gradient makes a picture without the exact
        # symmetry that leaves DCT coefficients at zero (module docstring of
        # schemas/image_hash.py: such bits tie with the median).
        crop_w, crop_h = int(width * rng.uniform(0.4, 0.8)), int(height * rng.uniform(0.4, 0.8))
        x, y = rng.randint(0, width - crop_w), rng.randint(0, height - crop_h)
        picture = photo.crop((x, y, x + crop_w, y + crop_h)).resize(size, Image.Resampling.BICUBIC)
    return Image.blend(picture, _gradient(rng, size), rng.uniform(0.1, 0.3))


def kind_of(seed: int) -> str:
    """The kind `scene(seed)` draws."""
    return random.Random(seed).choice(KINDS)


def source_of(seed: int) -> int:
    """Which bundled sample photo a photo scene crops: two scenes of one
    source may overlap, so they are not distinct pictures."""
    return seed % len(_PHOTOS)


def scene(seed: int, kind: str | None = None) -> Image.Image:
    """One RGB picture of 96-320 pixels a side, a function of `seed`."""
    rng = random.Random(seed)
    kind = kind or rng.choice(KINDS)
    size = (rng.randint(96, 320), rng.randint(96, 320))
    if kind == "gradient":
        return _shapes(rng, _gradient(rng, size), rng.randint(3, 8))
    if kind == "shapes":
        return _shapes(rng, Image.new("RGB", size, _colour(rng)), rng.randint(3, 12))
    if kind == "texture":
        return Image.blend(_texture(rng, size), _gradient(rng, size), rng.uniform(0, 0.3))
    return _photo(rng, size, _PHOTOS[source_of(seed)])


def write_scenes(directory: Path, count: int, folders: tuple[str, ...]) -> int:
    """Writes the JPEGs of scenes 0..count-1 other than photo crops (crops of
    one sample photo can overlap: not distinct pictures) as
    ``<folder>/scene_<seed>.jpg``, folders in turn; returns their bytes."""
    total = 0
    for folder in folders:
        (directory / folder).mkdir(parents=True, exist_ok=True)
    for seed in range(count):
        if kind_of(seed) != "photo":
            data = encode(scene(seed))
            (directory / folders[seed % len(folders)] / f"scene_{seed:05d}.jpg").write_bytes(data)
            total += len(data)
    return total


def encode(im: Image.Image, fmt: str = "JPEG", quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    im.save(buffer, fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def _requality(im: Image.Image, rng: random.Random) -> bytes:
    return encode(im, "JPEG", rng.randint(30, 95))


def _resized(im: Image.Image, rng: random.Random) -> bytes:
    factor = rng.uniform(0.9, 1.1)
    size = (max(1, round(im.width * factor)), max(1, round(im.height * factor)))
    return encode(im.resize(size, Image.Resampling.LANCZOS), "PNG")


def crop_box(size: tuple[int, int], rng: random.Random, most: float = 0.05
             ) -> tuple[int, int, int, int]:
    """The (left, top, right, bottom) box `COPIES["cropped"]` keeps of a
    picture of `size`: at most `most` of the area removed, the kept width
    and height each at least sqrt(1 - most) of the original, the cut split
    between sides (bench_image_hash.py reports the geometry of misses)."""
    width, height = size
    keep = (1 - most) ** 0.5
    cut_w = int(width * rng.uniform(0, 1 - keep))
    cut_h = int(height * rng.uniform(0, 1 - keep))
    left, top = rng.randint(0, cut_w), rng.randint(0, cut_h)
    return left, top, width - (cut_w - left), height - (cut_h - top)


def _cropped(im: Image.Image, rng: random.Random, most: float = 0.05) -> bytes:
    return encode(im.crop(crop_box(im.size, rng, most)), "PNG")


def _brightened(im: Image.Image, rng: random.Random) -> bytes:
    return encode(ImageEnhance.Brightness(im).enhance(rng.uniform(0.9, 1.1)), "PNG")


# name -> (picture, rng) -> the copy's encoded bytes
COPIES: dict[str, Callable[[Image.Image, random.Random], bytes]] = {
    "jpeg_quality": _requality, "resized": _resized, "cropped": _cropped,
    "brightness": _brightened}
