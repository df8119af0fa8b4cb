"""The build report: gathered from the shards, escaped, rendered by a real browser."""

from __future__ import annotations

import html.parser
import io
import json
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest
from PIL import Image

from recordforge.pipelines.publish import report, report_html
from recordforge.schemas.example import encode_example
from recordforge.transforms.tfrecord import TFRecordWriter

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = '</pre><script>alert("x")</script><img src=x onerror=alert(1)>'
VOCAB = ["cat", "dog", EVIL]


def _png(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(buf, format="PNG")
    return buf.getvalue()


def _write_shard(path, records, gzip=True):
    with open(path, "wb") as f, TFRecordWriter(f, "gzip" if gzip else "none") as writer:
        for record in records:
            writer.write(record)


@pytest.fixture()
def staged(tmp_path):
    """A staged version: train in 3 shards, test in 1, labels from a vocabulary
    (one label is hostile HTML), a dead-letter file with hostile rows."""
    root = tmp_path / "v1"
    root.mkdir()
    colors = {0: (220, 30, 30), 1: (30, 30, 220), 2: (30, 200, 30)}
    layout = {"train": [[0, 0, 1, 2, 0], [1, 1, 0], [2, 0, 0, 0]], "test": [[1, 2]]}
    splits, expected = {}, {}
    for split, shards in layout.items():
        entries = []
        for i, labels in enumerate(shards):
            name = f"{split}-{i:05d}-of-{len(shards):05d}.tfrecord.gz"
            records = [encode_example({"image/encoded": _png(colors[label]), "label": label,
                                       "label/text": VOCAB[label]}) for label in labels]
            _write_shard(root / name, records)
            entries.append({"file": name, "num_examples": len(labels),
                            "num_bytes": os.path.getsize(root / name), "sha256": "0" * 64})
            for label in labels:
                counts = expected.setdefault(split, {})
                counts[VOCAB[label]] = counts.get(VOCAB[label], 0) + 1
        splits[split] = {"num_examples": sum(e["num_examples"] for e in entries),
                         "num_bytes": sum(e["num_bytes"] for e in entries), "shards": entries}
    (root / "dead_letter").mkdir()
    dead = [
        {"source": "x.csv", "row": 3, "key": None, "stage": "check", "reason": "out_of_range",
         "feature": "label", "message": EVIL, "input": {"label": EVIL}},
        {"source": "x.csv", "row": 9, "key": None, "stage": "check", "reason": "out_of_range",
         "feature": "label", "message": "second", "input": {}},
        {"source": "y.jpg", "row": None, "key": None, "stage": "decode",
         "reason": "image_corrupt", "feature": None, "message": "not an image",
         "input": {"path": "y.jpg"}},
    ]
    with open(root / "dead_letter" / "part-00000.jsonl", "w") as f:
        f.write("".join(json.dumps(d) + "\n" for d in dead))
    num_examples = sum(s["num_examples"] for s in splits.values())
    manifest = {
        "format": "recordforge.manifest/1", "name": "pets<b>", "version": "1.0.0",
        "created": "2026-11-22T03:00:00Z", "compression": "GZIP",
        "features": {"image/encoded": {"type": "bytes", "shape": []},
                     "label": {"type": "int64", "shape": []},
                     "label/text": {"type": "bytes", "shape": [], "text": True}},
        "vocabularies": {"label": VOCAB},
        "splits": splits,
        "num_input_rows": num_examples + 3,
        "dead_letter": {"num_rows": 3, "by_reason": {"out_of_range": 2, "image_corrupt": 1},
                        "files": ["dead_letter/part-00000.jsonl"]},
        "config": {"output": {"shard_size": 1_000_000}},
        "tool": {"name": "recordforge", "version": "0.1.0", "runner": "DirectRunner"},
    }
    return root, manifest, expected


def test_gather_samples_counts_every_label_and_caps_thumbnails(staged):
    root, manifest, expected = staged
    counts, thumbs = report.gather_samples(str(root), manifest, thumbnails_per_class=2)
    assert counts == expected
    assert {label: len(v) for label, v in thumbs.items()} == {"cat": 2, "dog": 2, EVIL: 2}
    assert all(Image.open(io.BytesIO(data)).size == (40, 30) for v in thumbs.values() for data in v)
    # Thumbnails come only from the first records; counts still see all of them.
    counts, thumbs = report.gather_samples(str(root), manifest, max_thumbnail_records=3)
    assert counts == expected
    assert sum(len(v) for v in thumbs.values()) == 3


def test_gather_samples_stops_reading_once_every_class_has_its_thumbnails(staged, monkeypatch):
    root, manifest, _ = staged
    read = []
    original = report.read_records

    def counting_reader(path):
        for record in original(path):
            read.append(path)
            yield record

    monkeypatch.setattr(report, "read_records", counting_reader)
    # train: [0, 0, 1, 2, 0] | [1, 1, 0] | [2, 0, 0, 0]; 0 cat, 1 dog, 2 EVIL.
    # One per class: the 4th record completes them.
    _, thumbs = report.gather_samples(str(root), manifest, thumbnails_per_class=1,
                                      count_labels=False)
    assert {label: len(v) for label, v in thumbs.items()} == {"cat": 1, "dog": 1, EVIL: 1}
    assert len(read) == 4
    # Two per class: the second EVIL is the first record of the third shard.
    read.clear()
    _, thumbs = report.gather_samples(str(root), manifest, thumbnails_per_class=2,
                                      count_labels=False)
    assert {label: len(v) for label, v in thumbs.items()} == {"cat": 2, "dog": 2, EVIL: 2}
    assert len(read) == 9
    # Counting labels reads every record.
    read.clear()
    report.gather_samples(str(root), manifest, thumbnails_per_class=1)
    assert len(read) == 14


def test_gather_samples_without_labels_or_images(staged):
    root, manifest, _ = staged
    plain = dict(manifest, features={"x": {"type": "float", "shape": []}}, vocabularies={})
    assert report.gather_samples(str(root), plain) == (None, None)


def test_dead_letter_samples_take_the_first_row_per_reason(staged):
    root, manifest, _ = staged
    samples = report.dead_letter_samples(str(root), manifest)
    assert set(samples) == {"out_of_range", "image_corrupt"}
    assert samples["out_of_range"]["row"] == 3


def test_thumbnails_are_reencoded_and_hostile_images_dropped():
    uri = report_html.thumbnail_data_uri(_png((1, 2, 3)))
    assert uri.startswith("data:image/jpeg;base64,")
    assert report_html.thumbnail_data_uri(b"<svg onload=alert(1)>") is None
    assert report_html.thumbnail_data_uri(b"") is None
    # A PNG header claiming 20000 x 20000 pixels is refused before decoding.
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    bomb = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)))
    assert report_html.thumbnail_data_uri(bomb) is None


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _write(staged_fixture, **extra):
    root, manifest, _ = staged_fixture
    counts, thumbs = report.gather_samples(str(root), manifest)
    path = report.write_report(str(root), manifest, thumbnails=thumbs, label_counts=counts,
                               throughput={"wall_seconds": 12.5, "examples_per_second": 1.2},
                               **extra)
    return path


def test_report_html_is_escaped_and_self_contained(staged):
    path = _write(staged)
    assert path == f"{staged[0]}/report.html"
    page = open(path, encoding="utf-8").read()
    parser = _Tags()
    parser.feed(page)
    tags = [tag for tag, _ in parser.tags]
    assert "script" not in tags and "iframe" not in tags and "link" not in tags
    images = [attrs for tag, attrs in parser.tags if tag == "img"]
    assert len(images) == 11  # every example: under 4 per class
    assert all(attrs["src"].startswith("data:image/") for attrs in images)
    assert not any(k.startswith("on") for _, attrs in parser.tags for k in attrs)
    assert "&lt;script&gt;" in page and "pets&lt;b&gt;" in page
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page)
    assert not list(staged[0].glob("report.html.*"))  # no temporary left behind


def _dump_dom(path, tmp_path) -> str:
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
         "--dump-dom", f"file://{path}"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                    "(apt-get install -y chromium); the CI script installs it")
def test_report_renders_charts_in_chromium(staged, tmp_path):
    dom = _dump_dom(_write(staged), tmp_path)
    parser = _Tags()
    parser.feed(dom)
    charts = {attrs.get("data-chart") for tag, attrs in parser.tags if tag == "svg"}
    assert {"examples-per-split", "bytes-per-split", "shard-sizes-train", "shard-sizes-test",
            "labels-train", "labels-test", "dead-letter-reasons"} <= charts
    # The shard chart of train has one bar per shard.
    chart = dom.split('data-chart="shard-sizes-train"', 1)[1].split("</svg>", 1)[0]
    assert chart.count('class="bar"') == 3
    # The browser built no script element from the hostile label or row.
    assert "script" not in [tag for tag, _ in parser.tags]
    assert "&lt;script&gt;alert" in dom
    assert len([1 for tag, attrs in parser.tags
                if tag == "img" and attrs.get("src", "").startswith("data:image/")]) == 11


def test_write_staged_report_adds_throughput(staged):
    root, manifest, _ = staged
    path = report.write_staged_report(str(root), manifest, wall_seconds=4.0)
    page = open(path, encoding="utf-8").read()
    rows = dict(re.findall(r"<tr><th>([a-zA-Z ]+)</th><td class='n'>([0-9.,]+)</td></tr>", page))
    # 14 examples and 17 input rows in 4 seconds.
    assert rows["examples per second"] == "3.5"
    assert rows["input rows per second"] == "4.2"
    assert rows["wall seconds"] == "4.0"


@pytest.mark.parametrize("config, overrides", [
    ("configs/examples/flights.yaml", []),  # keyed table, vocabulary label
    ("configs/examples/flights.yaml", ["--set", "key=null"]),  # rows split by content
    ("configs/examples/flowers.yaml", []),  # images, three splits
])
def test_the_pipelines_label_counts_match_the_published_shards(config, overrides, tmp_path,
                                                               monkeypatch):
    # The report takes its label counts from the build's pipeline; reading
    # the published shards back (an independent count) must agree exactly.
    from recordforge.pipelines import build

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.chdir(repo)
    passed = {}
    original = report.write_report

    def recording_write_report(staging_url, manifest, **kwargs):
        passed["label_counts"] = kwargs["label_counts"]
        return original(staging_url, manifest, **kwargs)

    monkeypatch.setattr(report, "write_report", recording_write_report)
    out = tmp_path / "out"
    assert build.run([config, *overrides, "--output", str(out), "--",
                      "--direct_running_mode=in_memory"]) == 0
    version_dir = out / (out / "LATEST").read_text().strip()
    manifest = json.loads((version_dir / "manifest.json").read_text())
    from_shards, _ = report.gather_samples(str(version_dir), manifest)
    assert passed["label_counts"] == from_shards
    assert set(from_shards) == set(manifest["splits"])
    for split, counts in from_shards.items():
        assert sum(counts.values()) == manifest["splits"][split]["num_examples"]
