"""The perceptual hash and the near-duplicate search: cost, recall, false positives.

Prints, on one core:

* cost: microseconds per image of `image_fingerprint` (the hash and its
  signature, what a build computes) beside the image checks
  (`image_columns` in decode ``header``, ``auto`` (the default) and
  ``full``), a JPEG decode alone at 1/8 scale in grayscale (the least any
  hash of the pixels must pay: the entropy decoding) and
  ``imagehash.phash`` on the same images, the 3,000-image benchmark set of
  `e2e_workloads.make_images` and natural-looking JPEG scenes; rounds
  alternate the functions and the best round's CPU time counts;
* recall: the share of planted copies (`image_scenes.COPIES`: JPEG
  re-encoded, resized by up to 10%, cropped by up to 5% of the area,
  brightness by up to 10%) paired (`near_duplicates.pair_distance`: whole
  pictures or a whole picture and a window within the threshold, unsure
  bits left out, signatures agreeing), per kind of copy, the largest
  whole-picture distances and least whole-picture cosine similarities, and
  each copy missed at the default threshold (bits moved, cosine, for a
  crop the share cut from each side); also how far JPEG draft decoding
  moves a hash;
* false positives: pairs `FindNearDuplicates` reports between different
  pictures, and the share of images in any such pair, on the 3,000-image
  set (200 distinct renders, each repeated: copies of one render are true
  pairs) and on scenes (crops of one sample photo count as one picture),
  beside the pairs the hash alone would give; its pairs are checked against
  a brute-force comparison of all pairs;
* the search's time as the images grow (4x the fingerprints: ~4x the time);
* the search's CPU time over the 3,000-image set's fingerprints with and
  without views (`FindNearDuplicates` alone, alternating rounds, the
  best counts), and the pairs found.

    python benchmarks/bench_image_hash.py [--scenes 1000] [--thresholds 6,8,10,12,14]
        [--skip cost,recall,fp,growth,search] [--views]

``--views``: recall and false positives with each image's views (its
windows and unsure bits, `image_fingerprint(..., views=True)`), and the
cost of `image_fingerprint` with them beside it.
"""

from __future__ import annotations

import argparse
import functools
import io
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import apache_beam as beam
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import image_scenes  # noqa: E402
from e2e_workloads import make_images  # noqa: E402

from recordforge.schemas.image_hash import (  # noqa: E402
    hamming, hash_image, image_fingerprint, signature_array, split_fingerprint)
from recordforge.transforms.near_duplicates import (  # noqa: E402
    DEFAULT_THRESHOLD, FindNearDuplicates, ImageFingerprint, pair_distance)
from recordforge.transforms.readers.images import ImageOptions, image_columns  # noqa: E402


def per_image_us(functions: dict, images: list[bytes], rounds: int) -> dict[str, float]:
    """Best round's CPU microseconds per image of each function, rounds
    alternating (CPU time: the machine may be shared)."""
    best = {name: float("inf") for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.process_time()
            for data in images:
                function(data)
            best[name] = min(best[name], (time.process_time() - start) / len(images))
    return {name: seconds * 1e6 for name, seconds in best.items()}


def bench_cost(sets: dict[str, list[bytes]], rounds: int) -> None:
    import imagehash

    functions = {f"check {mode}": (lambda data, o=ImageOptions(decode=mode, formats=("JPEG",)):
                                   image_columns(data, "x.jpg", o))
                 for mode in ("header", "auto", "full")}
    functions["decode 1/8 gray"] = _decode_eighth
    functions["image_fingerprint"] = image_fingerprint
    functions["with views"] = functools.partial(image_fingerprint, views=True)
    functions["imagehash.phash"] = lambda data: imagehash.phash(Image.open(io.BytesIO(data)))
    print("\ncost, CPU µs per image (best of alternating rounds; ratio: "
          "image_fingerprint / this)")
    for label, images in sets.items():
        figures = per_image_us(functions, images, rounds)
        mean_kb = sum(map(len, images)) / len(images) / 1000
        print(f"  {label} ({len(images)} JPEGs, mean {mean_kb:.0f} KB)")
        for name, us in figures.items():
            print(f"    {name:<17} {us:>8.0f} µs  {figures['image_fingerprint'] / us:>6.2f}x")


def _decode_eighth(data: bytes) -> None:
    """A JPEG decoded at 1/8 scale in grayscale: its entropy-coded data read
    whole (no scale skips that), only the DC coefficient of each block
    transformed, no colour conversion."""
    with Image.open(io.BytesIO(data)) as im:
        im.draft("L", (1, 1))
        im.load()


def cosines(a: int, b: int) -> float:
    """The cosine similarity of two signatures (1.0 when either is missing)."""
    u, w = signature_array([a, b]).astype(np.float64)
    return 1.0 if u[0] == -128 or w[0] == -128 else float(
        u @ w / (np.linalg.norm(u) * np.linalg.norm(w)))


def _fingerprint(key: str, data: bytes, views: bool, split: str = "train") -> ImageFingerprint:
    return ImageFingerprint(split, key, key,
                            *split_fingerprint(image_fingerprint(data, key, views=views)))


def _cut(im: Image.Image, state: tuple) -> str:
    """The shares of each side `COPIES["cropped"]` cut, given the state of
    the random generator it was given."""
    rng = random.Random()
    rng.setstate(state)
    left, top, right, bottom = image_scenes.crop_box(im.size, rng)
    return (f"; cut left {left / im.width:.2%} right {1 - right / im.width:.2%} "
            f"top {top / im.height:.2%} bottom {1 - bottom / im.height:.2%}")


def bench_recall(scenes: int, thresholds: list[int], views: bool) -> None:
    # name -> (whole-picture bits moved, whole-picture cosine, pair distance
    # at the largest threshold or None)
    copies: dict[str, list[tuple[int, float, int | None]]] = {n: [] for n in image_scenes.COPIES}
    draft, missed = Counter(), []
    for seed in range(scenes):
        im = image_scenes.scene(seed)
        jpeg = image_scenes.encode(im)
        original = _fingerprint("original", jpeg, views)
        draft[hamming(original.hash, hash_image(Image.open(io.BytesIO(jpeg))))] += 1
        rng = random.Random(seed)
        for name, copy in image_scenes.COPIES.items():
            state = rng.getstate()
            edited = _fingerprint(name, copy(im, rng), views)
            found = pair_distance(original, edited, max(thresholds))
            moved = hamming(original.hash, edited.hash)
            cosine = cosines(original.signature, edited.signature)
            copies[name].append((moved, cosine, found))
            if found is None or found > DEFAULT_THRESHOLD:
                cut = _cut(im, state) if name == "cropped" else ""
                missed.append(f"scene {seed} ({image_scenes.kind_of(seed)}) {name}: whole "
                              f"picture moved {moved} bits, cosine {cosine:.3f}{cut}")
    print(f"\nrecall ({scenes} scenes, each kind of copy once{', views' if views else ''}): "
          f"paired at thresholds {thresholds}")
    for name, values in copies.items():
        moved = sorted(d for d, _, _ in values)
        found = "  ".join(f"{sum(f is not None and f <= t for *_, f in values) / len(values):>8.2%}"
                          for t in thresholds)
        print(f"  {name:<13} {found}  whole picture moved: p99 {moved[int(len(values) * .99)]:>2}"
              f" max {moved[-1]:>2} bits; cosine min {min(c for _, c, _ in values):.3f}")
    print(f"  missed at {DEFAULT_THRESHOLD} bits: {len(missed)}"
          + "".join(f"\n    {line}" for line in missed))
    print(f"  JPEG draft decoding vs full decode, bits: {dict(sorted(draft.items()))}")


def search(fingerprints: list[ImageFingerprint], threshold: int,
           bands_per_key: int = 1) -> tuple[list, float]:
    found: list = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, beam.Pipeline() as pipeline:
        out = f"{tmp}/pairs"
        _ = (pipeline | beam.Create(fingerprints)
             | FindNearDuplicates(threshold, bands_per_key=bands_per_key)
             | beam.Map(lambda pair: "\t".join(map(str, pair))) | beam.io.WriteToText(out))
        pipeline.run().wait_until_finish()
        for path in Path(tmp).glob("pairs*"):
            found += [line.split("\t") for line in path.read_text().splitlines()]
    return found, time.perf_counter() - start


def _views(fp: ImageFingerprint) -> list[tuple[int, int]]:
    whole = (fp.hash, fp.unsure)
    return [whole, *[(h, u) for h, u, _ in fp.windows]]


def brute_force(fingerprints: list[ImageFingerprint], threshold: int
                ) -> list[tuple[int, int, int, int | None]]:
    """(i, j, distance by the hashes alone, `pair_distance` or None) of
    every pair whose hashes alone are within the threshold (the least over
    a whole picture and the other's whole picture or windows, unsure bits
    left out), comparing all pairs."""
    views = [_views(fp) for fp in fingerprints]
    width = max(map(len, views))
    padded = np.array([v + [v[0]] * (width - len(v)) for v in views], dtype=np.uint64)
    hashes, unsure = padded[:, :, 0], padded[:, :, 1]
    pairs = [(0, 0), *((w, 0) for w in range(1, width)), *((0, w) for w in range(1, width))]
    found = []
    for i in range(len(fingerprints) - 1):
        distances = np.min([np.bitwise_count((hashes[i, a] ^ hashes[i + 1:, b])
                                             & ~(unsure[i, a] | unsure[i + 1:, b]))
                            for a, b in pairs], axis=0)
        for j in np.flatnonzero(distances <= threshold):
            found.append((i, i + 1 + int(j), int(distances[j]),
                          pair_distance(fingerprints[i], fingerprints[i + 1 + j], threshold)))
    return found


def bench_false_positives(label: str, items: list[tuple[str, bytes, str]],
                          thresholds: list[int], views: bool) -> None:
    """items: (key, bytes, the picture it shows); pairs of one picture are true."""
    fingerprints = [_fingerprint(key, data, views, "train" if i % 5 else "test")
                    for i, (key, data, _) in enumerate(items)]
    picture = [source for _, _, source in items]
    pairs, _ = search(fingerprints, max(thresholds))
    every = brute_force(fingerprints, max(thresholds))
    assert len(pairs) == sum(paired is not None for *_, paired in every)
    print(f"  {label}: {len(items)} images of {len(set(picture))} pictures")
    for threshold in thresholds:
        within = [p for p in every if p[2] <= threshold]
        false = [p for p in within if picture[p[0]] != picture[p[1]]]
        reported = [p for p in false if p[3] is not None and p[3] <= threshold]
        images = {p[0] for p in reported} | {p[1] for p in reported}
        hash_only = {p[0] for p in false} | {p[1] for p in false}
        true_pairs = sum(p[3] is not None and p[3] <= threshold for p in within)
        print(f"    threshold {threshold:>2}: {true_pairs - len(reported)} true "
              f"pairs, {len(reported)} false pairs; images in a false pair {len(images)} = "
              f"{len(images) / len(items):.3%} (by the hash alone {len(false)} pairs, "
              f"{len(hash_only) / len(items):.3%})"
              + "".join(f"\n      {items[i][0]} ~ {items[j][0]}: {d} bits"
                        for i, j, d, _ in reported[:6]))


def _create_only(fingerprints: list[ImageFingerprint]) -> float:
    """Seconds of a pipeline that only creates and counts the fingerprints."""
    start = time.perf_counter()
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(fingerprints) | beam.combiners.Count.Globally()
    return time.perf_counter() - start


def bench_growth(threshold: int) -> None:
    """Random hashes; the time of a pipeline that only creates the same
    fingerprints (Beam's Create is slow on the DirectRunner) is subtracted."""
    rng = random.Random(5)
    print("\nsearch time as the images grow (random hashes, DirectRunner, one process, "
          "less a pipeline creating the same input)")
    for bands_per_key in (1, 2):
        base = None
        for count in (5_000, 20_000, 80_000)[:2 + (bands_per_key == 1)]:
            fingerprints = [ImageFingerprint("train", f"{i:08d}", f"{i}.jpg",
                                             rng.getrandbits(64)) for i in range(count)]
            created = _create_only(fingerprints)
            _, seconds = search(fingerprints, threshold, bands_per_key)
            per_image = (seconds - created) / count
            base = base or per_image
            print(f"  bands per key {bands_per_key}: {count:>6} fingerprints {seconds:>6.1f} s "
                  f"(creating them {created:.1f} s), {per_image * 1e6:>5.0f} µs per image "
                  f"({per_image / base:.2f}x the smallest)")


def bench_search(workload: list[tuple[str, bytes]], rounds: int) -> None:
    """CPU seconds of the search over the same images' fingerprints with
    views and without, alternating which goes first (a pipeline's CPU is
    in this process: DirectRunner, one worker, in memory)."""
    sets = {views: [_fingerprint(key, data, views, "train" if i % 5 else "test")
                    for i, (key, data) in enumerate(workload)] for views in (False, True)}
    best: dict[bool, float] = {}
    found: dict[bool, int] = {}
    for round_ in range(rounds):
        for views in ((False, True) if round_ % 2 == 0 else (True, False)):
            start = time.process_time()
            pairs, _ = search(sets[views], DEFAULT_THRESHOLD)
            best[views] = min(best.get(views, float("inf")), time.process_time() - start)
            found[views] = len(pairs)
    print(f"\nsearch CPU over {len(workload):,} images' fingerprints (best of {rounds}): "
          f"without views {best[False]:.2f} s ({found[False]:,} pairs), with views "
          f"{best[True]:.2f} s ({found[True]:,} pairs), {best[True] / best[False]:.2f}x")


def _picture(seed: int) -> str:
    """Scenes cropped from one sample photo may overlap: one picture."""
    kind = image_scenes.kind_of(seed)
    return f"photo-source{image_scenes.source_of(seed)}" if kind == "photo" else f"{kind}{seed}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=int, default=1000)
    parser.add_argument("--thresholds", default=f"6,8,{DEFAULT_THRESHOLD},12,14")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated: cost,recall,fp,growth,search")
    parser.add_argument("--views", action="store_true",
                        help="recall and false positives with each image's views")
    args = parser.parse_args(argv)
    thresholds = sorted(int(t) for t in args.thresholds.split(","))
    skip = set(args.skip.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        make_images(Path(tmp), 3000)
        files = sorted(Path(tmp).rglob("*.jpg"))
        workload = [(str(p.relative_to(tmp)), p.read_bytes()) for p in files]
    scenes = [(f"{image_scenes.kind_of(seed)}{seed}",
               image_scenes.encode(image_scenes.scene(seed)), _picture(seed))
              for seed in range(args.scenes)]
    if "cost" not in skip:
        bench_cost({"3,000-image set": [data for _, data in workload[:600]],
                    "scenes": [data for _, data, _ in scenes]}, args.rounds)
    if "recall" not in skip:
        bench_recall(args.scenes, thresholds, args.views)
    if "fp" not in skip:
        print(f"\nfalse positives at thresholds {thresholds}{' (views)' if args.views else ''}")
        # The set repeats 200 renders; equal bytes are one picture.
        bench_false_positives("3,000-image set", [(k, d, d) for k, d in workload], thresholds,
                              args.views)
        # The bundled sample photos are drawings of four kinds of flower,
        # each kind drawn alike: crops of two of them can be one picture.
        bench_false_positives("scenes other than photo crops",
                              [s for s in scenes if not s[0].startswith("photo")], thresholds,
                              args.views)
        bench_false_positives("photo crops", [s for s in scenes if s[0].startswith("photo")],
                              thresholds, args.views)
    if "growth" not in skip:
        bench_growth(DEFAULT_THRESHOLD)
    if "search" not in skip:
        bench_search(workload, args.rounds)


if __name__ == "__main__":
    main()
