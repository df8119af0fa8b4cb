"""Generates the bundled sample data (checked in; run again only to change it).

    python examples/make_samples.py [--out examples]

writes
  flowers/<class>/*.jpg|png   four classes of small synthetic "flower" pictures,
                              each class drawn differently (so a model could tell
                              them apart), plus two broken files for the
                              dead-letter output;
  tables/flights.csv          a few hundred flights with mixed column types and a
                              handful of deliberately bad rows.

Everything comes from fixed seeds, so the same Pillow build writes the same bytes.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import random

from PIL import Image, ImageDraw

__all__ = ["CLASSES", "make_flowers", "make_flights", "main"]

IMAGES_PER_CLASS = 24
CLASSES = ("daisy", "roses", "sunflowers", "tulips")
CARRIERS = ("AF", "BA", "DL", "KL", "LH", "UA")
AIRPORTS = ("AMS", "ATL", "CDG", "FRA", "JFK", "LHR", "MUC", "ORD", "SFO", "ZRH")


def _sky(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    top = (rng.randint(90, 140), rng.randint(150, 200), rng.randint(210, 255))
    bottom = (rng.randint(60, 110), rng.randint(140, 190), rng.randint(60, 100))
    im = Image.new("RGB", size)
    draw = ImageDraw.Draw(im)
    w, h = size
    for y in range(h):
        t = y / max(1, h - 1)
        draw.line([(0, y), (w, y)], fill=tuple(int(a + (b - a) * t) for a, b in zip(top, bottom)))
    return im


def _petals(draw, cx, cy, r, n, color, petal_r):
    for i in range(n):
        a = 2 * math.pi * i / n
        px, py = cx + r * math.cos(a), cy + r * math.sin(a)
        draw.ellipse([px - petal_r, py - petal_r, px + petal_r, py + petal_r], fill=color)


def _draw_daisy(draw, rng, w, h):
    cx, cy, r = w / 2 + rng.uniform(-6, 6), h / 2 + rng.uniform(-6, 6), min(w, h) * 0.28
    _petals(draw, cx, cy, r, rng.randint(10, 14), (250, 250, 245), r * 0.38)
    c = r * 0.45
    draw.ellipse([cx - c, cy - c, cx + c, cy + c], fill=(245, 200, 30))


def _draw_rose(draw, rng, w, h):
    cx, cy = w / 2 + rng.uniform(-5, 5), h / 2 + rng.uniform(-5, 5)
    red = (rng.randint(170, 230), rng.randint(0, 30), rng.randint(30, 60))
    for k, r in enumerate(range(int(min(w, h) * 0.38), 2, -5)):
        shade = tuple(max(0, v - 25 * (k % 2)) for v in red)
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=shade, outline=(90, 0, 20))


def _draw_sunflower(draw, rng, w, h):
    cx, cy, r = w / 2 + rng.uniform(-4, 4), h / 2 + rng.uniform(-4, 4), min(w, h) * 0.32
    _petals(draw, cx, cy, r, rng.randint(16, 20), (255, rng.randint(190, 225), 0), r * 0.3)
    c = r * 0.62
    draw.ellipse([cx - c, cy - c, cx + c, cy + c], fill=(90, 50, 15))
    for _ in range(25):
        x, y = cx + rng.uniform(-c, c) * 0.7, cy + rng.uniform(-c, c) * 0.7
        draw.point((x, y), fill=(40, 20, 5))


def _draw_tulip(draw, rng, w, h):
    cx = w / 2 + rng.uniform(-6, 6)
    draw.line([(cx, h * 0.45), (cx, h)], fill=(30, 120, 40), width=4)
    color = rng.choice([(230, 60, 140), (250, 120, 20), (200, 30, 60), (240, 220, 40)])
    top, bottom = h * 0.15, h * 0.55
    half = w * rng.uniform(0.16, 0.22)
    draw.polygon([(cx - half, top), (cx - half / 3, top + h * 0.12), (cx, top),
                  (cx + half / 3, top + h * 0.12), (cx + half, top),
                  (cx + half * 0.8, bottom), (cx - half * 0.8, bottom)], fill=color)


_DRAW = {"daisy": _draw_daisy, "roses": _draw_rose, "sunflowers": _draw_sunflower,
         "tulips": _draw_tulip}


def make_flowers(root: str) -> int:
    """Writes the image samples under `root`; returns the number of files."""
    count = 0
    for class_index, name in enumerate(CLASSES):
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        rng = random.Random(1000 + class_index)
        for i in range(IMAGES_PER_CLASS):
            size = (rng.choice([64, 80, 96]), rng.choice([64, 80, 96]))
            im = _sky(rng, size)
            _DRAW[name](ImageDraw.Draw(im), rng, *size)
            # One in four is a PNG, so both formats flow through the build.
            if i % 4 == 3:
                im.save(os.path.join(folder, f"{name}_{i:03d}.png"), format="PNG", optimize=True)
            else:
                im.save(os.path.join(folder, f"{name}_{i:03d}.jpg"), format="JPEG", quality=85)
            count += 1
    # Deliberately broken files: they become dead letters (image_truncated and
    # image_corrupt) and stay within the sample config's 5% error budget.
    buf = io.BytesIO()
    _sky(random.Random(7), (64, 64)).save(buf, format="JPEG", quality=85)
    with open(os.path.join(root, "roses", "roses_broken_truncated.jpg"), "wb") as f:
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
    with open(os.path.join(root, "tulips", "tulips_not_an_image.jpg"), "wb") as f:
        f.write(b"this file has a .jpg name but holds text, not an image\n")
    return count + 2


FLIGHT_COLUMNS = ("flight_id", "date", "carrier", "origin", "dest", "distance_km",
                  "dep_delay_min", "cancelled")


def make_flights(path: str, rows: int = 300) -> int:
    """Writes the flights table at `path`; returns the number of data rows."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    rng = random.Random(42)
    records = []
    for i in range(rows):
        origin, dest = rng.sample(AIRPORTS, 2)
        cancelled = 1 if rng.random() < 0.04 else 0
        delay = "" if cancelled else f"{max(-15.0, rng.gauss(8, 25)):.1f}"
        records.append([str(100000 + i), f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                        rng.choice(CARRIERS), origin, dest, str(rng.randint(250, 9500)), delay,
                        str(cancelled)])
    # Deliberately bad rows (each becomes one dead letter with its own reason).
    records[41][5] = "n/a"          # distance_km is not an integer      -> type_mismatch
    records[97][2] = "ZZ"           # carrier outside the vocabulary     -> unknown_label
    records[150][6] = "99999.0"     # delay above max                    -> out_of_range
    records[233] = records[233][:5]  # fields missing                    -> csv_ragged_row
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(FLIGHT_COLUMNS)
        writer.writerows(records)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="directory to write flowers/ and tables/ into (default: examples/)")
    args = parser.parse_args(argv)
    images = make_flowers(os.path.join(args.out, "flowers"))
    rows = make_flights(os.path.join(args.out, "tables", "flights.csv"))
    print(f"wrote {images} image files and {rows} table rows under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
