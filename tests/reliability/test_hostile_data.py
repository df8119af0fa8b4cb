"""Hostile data through the real sources and full builds: every file or row
is either converted as documented or a dead letter with its reason.

Unit-level cases live beside the modules and are not repeated here:
decompression bombs, animated images, colour modes and channels, EXIF, bad
images (tests/transforms/test_images.py); huge CSV fields, NUL bytes,
duplicate columns, deep JSON, unterminated quotes (test_table_readers.py);
vanished image files, symlinks in listings (test_sources.py).
"""

from __future__ import annotations

import io
import json
import os
import struct
import textwrap
import zlib
from pathlib import Path

from PIL import Image

from recordforge.schemas.example import decode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.readers import image_items, jsonl, listing, tables
from recordforge.transforms.readers.images import ImageOptions
from recordforge.transforms.readers.rows import SourceRow, each_row


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def patch_png_size(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its IHDR claiming width x height (CRC fixed)."""
    ihdr = bytearray(png[12:29])
    ihdr[4:12] = struct.pack(">II", width, height)
    return png[:12] + bytes(ihdr) + struct.pack(">I", zlib.crc32(bytes(ihdr))) + png[33:]


def hostile_images(root: Path) -> dict[str, object]:
    """Writes the image tree; returns rel path -> expected channels (int) or
    dead-letter reason (str). Files that are never listed are not included."""
    (root / "cats").mkdir(parents=True)
    (root / "dogs").mkdir()
    rgb = Image.radial_gradient("L").resize((40, 20)).convert("RGB")
    png = encode(rgb, "PNG")
    palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    sixteen = Image.new("I;16", (40, 20))
    sixteen.putpixel((3, 3), 65000)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    frames = [Image.new("RGB", (40, 20), c) for c in ("red", "blue")]
    files = {
        "cats/plain.jpg": (encode(rgb, "JPEG"), 3),
        "cats/bomb.png": (patch_png_size(png, 100_000, 100_000), "image_too_large"),
        "cats/huge_declared.png": (patch_png_size(png, 20_000, 20_000), "image_too_large"),
        "cats/animated.png": (encode(frames[0], "PNG", save_all=True,
                                     append_images=frames[1:]), 3),
        "cats/animated.gif": (encode(frames[0], "GIF", save_all=True,
                                     append_images=frames[1:]), "image_format_not_allowed"),
        "cats/sixteen.png": (encode(sixteen, "PNG"), 1),
        "cats/palette_alpha.png": (encode(palette, "PNG", transparency=0), 4),
        "cats/cmyk.jpg": (encode(rgb.convert("CMYK"), "JPEG"), 4),
        "cats/gray.jpg": (encode(rgb.convert("L"), "JPEG"), 1),
        "cats/rotated.jpg": (encode(rgb, "JPEG", exif=exif), 3),
        "cats/truncated.png": (png[:60], "image_truncated"),
        "dogs/ünï cödé name with spaces.jpg": (encode(rgb, "JPEG"), 3),
        "dogs/empty.jpg": (b"", "empty_file"),
    }
    for rel, (data, _) in files.items():
        (root / rel).write_bytes(data)
    (root / "dogs" / "loop").symlink_to(root / "dogs", target_is_directory=True)
    (root / "dogs" / "ping.jpg").symlink_to(root / "dogs" / "pong.jpg")
    (root / "dogs" / "pong.jpg").symlink_to(root / "dogs" / "ping.jpg")
    expected = {rel: outcome for rel, (_, outcome) in files.items()}
    expected["dogs/ping.jpg"] = expected["dogs/pong.jpg"] = "read_error"  # a link loop
    return expected


IMAGE_CONFIG = textwrap.dedent("""\
    name: hostile
    version: "1.0.0"
    source:
      type: images
      path: {root}
      extensions: [.jpg, .png, .gif]
      image: {{max_size: [30000, 30000], decode: full{transforms}}}
    features:
      image: {{type: bytes}}
      path: {{type: string}}
      channels: {{type: int64}}
      width: {{type: int64}}
      height: {{type: int64}}
    output: {{path: {output}, shard_size: 1MB}}
    dead_letter: {{max_error_rate: 0.9}}
    """)


def build_images(tmp_path: Path, run_build, root: Path, transforms: str = "") -> tuple[dict, dict]:
    output = tmp_path / f"out{len(transforms)}"
    config = tmp_path / f"images{len(transforms)}.yaml"
    config.write_text(IMAGE_CONFIG.format(root=root, output=output, transforms=transforms))
    status, _, err = run_build(config)
    assert status == 0, err
    version = output / "1.0.0"
    rows = {}
    for shard in (p for p in version.glob("*.tfrecord*") if p.suffix != ".index"):
        for record in tfrecord.read_records(str(shard)):
            features = {name: values[0] for name, (_, values) in decode_example(record).items()}
            rows[features["path"].decode("utf-8")] = features
    letters = {}
    for path in (version / "dead_letter").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            letter = json.loads(line)
            letters[letter["input"]["path"]] = letter["reason"]
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["num_input_rows"] == len(rows) + len(letters)
    return rows, letters


def test_hostile_image_tree_builds_with_every_file_accounted_for(tmp_path, run_build):
    root = tmp_path / "images"
    expected = hostile_images(root)
    rows, letters = build_images(tmp_path, run_build, root)
    assert {rel: row["channels"] for rel, row in rows.items()} == \
        {rel: outcome for rel, outcome in expected.items() if isinstance(outcome, int)}
    assert letters == {rel: outcome for rel, outcome in expected.items()
                       if isinstance(outcome, str)}
    # Original bytes are kept (all frames of an animation), and EXIF
    # orientation is not applied, as TensorFlow's decoders do not apply it.
    assert rows["cats/animated.png"]["image"] == (root / "cats/animated.png").read_bytes()
    assert (rows["cats/rotated.jpg"]["width"], rows["cats/rotated.jpg"]["height"]) == (40, 20)


def test_hostile_images_with_resize_and_reencode_become_plain_rgb_jpegs(tmp_path, run_build):
    root = tmp_path / "images"
    expected = hostile_images(root)
    rows, letters = build_images(tmp_path, run_build, root,
                                 ", resize: {max_side: 16}, encode: {format: JPEG}")
    assert set(rows) == {rel for rel, outcome in expected.items() if isinstance(outcome, int)}
    assert set(letters) == {rel for rel, outcome in expected.items() if isinstance(outcome, str)}
    for rel, row in rows.items():
        image = Image.open(io.BytesIO(row["image"]))
        assert (image.format, image.mode, row["channels"]) == ("JPEG", "RGB", 3), rel
        assert image.size == (row["width"], row["height"]), rel
        expected_size = (8, 16) if rel == "cats/rotated.jpg" else (16, 8)  # EXIF applied
        assert image.size == expected_size, rel


def test_images_that_change_or_vanish_after_listing(tmp_path):
    root = tmp_path / "images"
    (root / "cats").mkdir(parents=True)
    good = encode(Image.radial_gradient("L").convert("RGB"), "PNG")
    for name in ("stays", "replaced", "vanishes", "shrinks"):
        (root / "cats" / f"{name}.png").write_bytes(good)
    batches, problems = image_items.plan_images(str(root), [".png"], "directory")
    assert problems == []
    (root / "cats" / "replaced.png").write_bytes(b"not an image any more")
    (root / "cats" / "vanishes.png").unlink()
    (root / "cats" / "shrinks.png").write_bytes(good[:len(good) // 2])
    fs, _ = listing.list_files(str(root))
    items = [item for batch in batches for item in batch]
    read = list(image_items.read_image_items(fs, items, ImageOptions(decode="full")))
    outcome = {(item.values["path"] if isinstance(item, SourceRow) else item["input"]["path"]):
               ("row" if isinstance(item, SourceRow) else item["reason"]) for item in read}
    assert outcome == {"cats/stays.png": "row", "cats/replaced.png": "image_corrupt",
                       "cats/vanishes.png": "read_error", "cats/shrinks.png": "image_truncated"}


def test_unreadable_files_are_read_errors(tmp_path, faults, run_build):
    # Tests run as root, where chmod 000 does not stop reads: FaultyFileSystem
    # refuses to open the chosen files with EACCES instead.
    root = tmp_path / "images"
    (root / "cats").mkdir(parents=True)
    png = encode(Image.new("RGB", (8, 8), "red"), "PNG")
    (root / "cats" / "open.png").write_bytes(png)
    (root / "cats" / "locked.png").write_bytes(png)
    faults.denied = {"locked.png", "locked.csv"}
    batches, _ = image_items.plan_images(f"faulty://{root}", [".png"], "directory")
    fs, _ = listing.list_files(f"faulty://{root}")
    read = list(image_items.read_image_items(fs, batches[0], ImageOptions()))
    (letter,) = [item for item in read if isinstance(item, dict)]
    assert letter["reason"] == "read_error" and "PermissionError" in letter["message"]
    assert letter["source"] == f"faulty://{root}/cats/locked.png"

    # Through a whole build: the locked table file is one dead letter
    # standing for its unknown rows, which fails the budget by itself
    # (docs/configuration.md); a budget admitting any failure publishes the
    # other file.
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "open.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(200)))
    (tables / "locked.csv").write_text("id\n1\n")
    config = tmp_path / "tables.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: hostile
        version: "1.0.0"
        source: {{type: csv, path: "faulty://{tables}"}}
        features: {{id: {{type: int64}}}}
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        """))
    status, _, err = run_build(config)
    assert status == 1 and "locked.csv" in err and "PermissionError" in err
    config.write_text(config.read_text() + "dead_letter: {max_error_rate: 1.0}\n")
    status, _, err = run_build(config)
    assert status == 0, err
    manifest = json.loads((tmp_path / "out" / "1.0.0" / "manifest.json").read_text())
    assert manifest["dead_letter"]["by_reason"] == {"read_error": 1}
    assert manifest["dead_letter"]["uncounted"] == 1
    assert manifest["splits"]["train"]["num_examples"] == 200


def test_table_rewritten_between_planning_and_reading(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("id,text\n" + "".join(f"{i},row {i}\n" for i in range(20000)))
    fs, (fs_path,) = listing.list_files(str(path))
    units = tables.plan_table_ranges(fs, fs_path, "csv", range_bytes=20_000)
    assert len(units) > 5
    path.write_text('id,text\n1,"an unterminated quote\n2,x\n')  # shorter, different
    items = [item for unit in units for item in each_row(tables.read_range(fs, unit, "csv"))]
    assert all(isinstance(item, SourceRow) or item["stage"] == "read" for item in items)
    assert len(items) <= 2


def test_hostile_tables_build(tmp_path, run_build):
    tables = tmp_path / "tables"
    tables.mkdir()
    huge = "h" * 300_000                   # above csv's default field limit
    long_line = "l" * (12 << 20)           # a 12 MB unquoted field
    (tables / "a.csv").write_bytes(
        b"id,text\n"
        + f'1,"{huge}"\n'.encode()
        + b"2,nul\x00inside\n"
        + f"3,{long_line}\n".encode()
        + b"4,too,many\n")
    (tables / "b.csv").write_bytes(b"id,text,id\n5,x,6\n")  # duplicate column names
    config = tmp_path / "tables.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: hostile
        version: "1.0.0"
        source: {{type: csv, path: {tables}}}
        features:
          id: {{type: int64}}
          text: {{type: string}}
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        dead_letter: {{max_error_rate: 0.5}}
        """))
    status, _, err = run_build(config)
    assert status == 0, err
    version = tmp_path / "out" / "1.0.0"
    manifest = json.loads((version / "manifest.json").read_text())
    # b.csv's header is unusable, its one row counted (docs/reasons.md)
    assert manifest["dead_letter"]["by_reason"] == {"csv_bad_header": 1, "csv_ragged_row": 1}
    assert "uncounted" not in manifest["dead_letter"]
    texts = {}
    for shard in (p for p in version.glob("*.tfrecord*") if p.suffix != ".index"):
        for record in tfrecord.read_records(str(shard)):
            example = decode_example(record)
            texts[example["id"][1][0]] = example["text"][1][0]
    assert texts == {1: huge.encode(), 2: b"nul\x00inside", 3: long_line.encode()}
    letters = (version / "dead_letter" / "part-00000.jsonl").read_text()
    assert len(letters) < 8192


def test_hostile_jsonl_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    long_value = "v" * (8 << 20)
    path.write_text(
        json.dumps({"id": 1, "text": long_value}) + "\n"
        + '{"id": 2, "deep": ' + "[" * 5000 + "]" * 5000 + "}\n"
        + '{"id": 3, "text": "fine"}\n'
        + '{"id": 4, "broken": ' + "x" * (4 << 20) + "\n")
    items = list(jsonl.iter_jsonl(str(path)))
    assert [item.row if isinstance(item, SourceRow) else item["reason"] for item in items] == \
        [1, "json_invalid", 3, "json_invalid"]
    assert items[0].values["text"] == long_value
    assert all(len(json.dumps(item)) < 8192 for item in items if isinstance(item, dict))
    assert os.path.getsize(path) > 12 << 20
