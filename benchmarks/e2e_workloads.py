"""Inputs and configs of the end-to-end benchmark (`run_e2e.py`).

Every input is generated into a scratch directory from a fixed seed, so two
runs on two machines read the same bytes. Four kinds of workload:

* table: rows of ``id`` (int), ``count`` (int), ``score`` (float), ``text``
  (20-120 characters of words) and ``label`` (one of 10 classes), written as
  CSV and as Parquet (row groups of 64k rows);
* images: JPEGs of varied sizes (about 10-200 KB) in 10 class folders;
  distinct pictures are rendered once and written under many names (the
  decoder only reads headers, so repeated pixels cost the same as new ones);
* numbers: the table the native row path's issue measures (issue 37): rows of
  ``id`` (int), ``int_col`` (int in ±10^9), ``float_col`` (a double, as
  Python writes it: up to 17 digits), ``str_col`` (20-120 random letters)
  and ``label`` (an int 0-9), as CSV and Parquet; ~417 MB of CSV at 3.8M
  rows (the issue's 419 MB); only `bench_native.py` builds it;
* large: CSV rows of ``id``, ``label`` and a ``payload`` text column of ~64 KB,
  to show how memory behaves as the dataset grows; written in one streaming
  pass and deleted after use.

A `Workload` describes one input and `config_yaml` gives the recordforge
config that builds it; the hand-written baselines (`e2e_baselines.py`) read
the same description and encode the same features.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random
from typing import Callable
from pathlib import Path

import yaml

__all__ = [
    "IMAGE_FEATURES",
    "LABELS",
    "LARGE_FEATURES",
    "NUMBERS_FEATURES",
    "TABLE_FEATURES",
    "Workload",
    "config_yaml",
    "make_images",
    "make_large",
    "make_numbers_table",
    "make_table",
]

LABELS = tuple(f"class_{i}" for i in range(10))

# The schemas recordforge checks; the baselines encode the same features by hand.
TABLE_FEATURES = {
    "id": {"type": "int64", "min": 0},
    "count": {"type": "int64"},
    "score": {"type": "float"},
    "text": {"type": "string", "max_bytes": 200},
    "label": {"type": "int64", "vocabulary": list(LABELS)},
}
IMAGE_FEATURES = {
    "image/encoded": {"type": "bytes", "from": "image"},
    "image/height": {"type": "int64", "from": "height"},
    "image/width": {"type": "int64", "from": "width"},
    "image/format": {"type": "string", "from": "format"},
    "image/filename": {"type": "string", "from": "path"},
    "label": {"type": "int64", "from": "label", "vocabulary": list(LABELS)},
}
NUMBERS_FEATURES = {
    "id": {"type": "int64", "min": 0},
    "int_col": {"type": "int64"},
    "float_col": {"type": "float"},
    "str_col": {"type": "string", "max_bytes": 200},
    "label": {"type": "int64", "min": 0, "max": 9},
}
LARGE_FEATURES = {
    "id": {"type": "int64", "min": 0},
    "label": {"type": "int64", "vocabulary": list(LABELS)},
    "payload": {"type": "bytes"},
}

_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima "
          "mike november oscar papa quebec romeo sierra tango uniform victor whiskey "
          "xray yankee zulu data record shard beam tensor example feature label").split()


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark input.

    name: short id ("table-csv"); kind: "table" | "images" | "large";
    source_type: recordforge's source.type; path: the file or directory;
    rows: input rows (all good); input_bytes: size on disk; shard_size: the
    recordforge target shard size, chosen so every build writes `num_shards`
    shards (the hand-written Beam pipeline is given that count).
    """

    name: str
    kind: str
    source_type: str
    path: str
    rows: int
    input_bytes: int
    shard_size: int
    num_shards: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Workload":
        return cls(**json.loads(text))

    @property
    def features(self) -> dict:
        return {"table": TABLE_FEATURES, "numbers": NUMBERS_FEATURES,
                "images": IMAGE_FEATURES, "large": LARGE_FEATURES}[self.kind]


def _shard_plan(estimated_output_bytes: int, target_shards: int) -> tuple[int, int]:
    """(shard_size, shards): a size that cuts the output into `target_shards`,
    never below recordforge's 1 MB minimum."""
    size = max(1 << 20, math.ceil(estimated_output_bytes / max(1, target_shards) * 1.02))
    return size, max(1, math.ceil(estimated_output_bytes / size))


def _text(rng: random.Random) -> str:
    """20-120 characters of words: no commas, quotes or newlines (plain CSV)."""
    target = rng.randint(20, 120)
    words = []
    size = -1
    while size < target:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:target].rstrip() or "x" * target


def make_table(directory: Path, rows: int, *, seed: int = 7) -> list[Workload]:
    """Writes the table as ``table.csv`` and ``table.parquet``; returns both
    workloads. Each label is stored as its name; ids are a shuffled range."""
    def row(rng: random.Random) -> tuple:
        return (rng.randint(-1000, 100_000), round(rng.uniform(-100.0, 100.0), 4), _text(rng),
                rng.choice(LABELS))

    return _write_table(directory, rows, seed, "table", row, {
        "id": "int64", "count": "int64", "score": "float64", "text": "string",
        "label": "string"})


def make_numbers_table(directory: Path, rows: int, *, seed: int = 37) -> list[Workload]:
    """Writes the numbers table as ``table.csv`` and ``table.parquet``;
    returns both workloads. ids are a shuffled range; each float is written
    as ``repr`` writes it (its shortest round-trip form) and stored as
    float32 by the build, as the schema says."""
    import string

    def row(rng: random.Random) -> tuple:
        return (rng.randint(-10**9, 10**9), rng.uniform(-1e6, 1e6),
                "".join(rng.choices(string.ascii_letters, k=rng.randint(20, 120))),
                rng.randint(0, 9))

    return _write_table(directory, rows, seed, "numbers", row, {
        "id": "int64", "int_col": "int64", "float_col": "float64", "str_col": "string",
        "label": "int64"})


def _write_table(directory: Path, rows: int, seed: int, kind: str,
                 row: Callable[[random.Random], tuple], types: dict[str, str]
                 ) -> list[Workload]:
    """Writes `rows` rows as ``table.csv`` and ``table.parquet`` (row groups
    of 64k rows) under `directory`: a shuffled range of ids, then the rest of
    each row from `row(rng)`; `types` names each column's Arrow type.
    Returns the CSV and the Parquet workload of `kind`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    ids = list(range(rows))
    rng.shuffle(ids)
    csv_path = directory / "table.csv"
    columns: dict[str, list] = {name: [] for name in types}
    with open(csv_path, "w", encoding="utf-8", newline="") as out:
        out.write(",".join(types) + "\n")
        lines = []
        for i in range(rows):
            values = (ids[i], *row(rng))
            for name, value in zip(columns, values):
                columns[name].append(value)
            lines.append(",".join(repr(v) if isinstance(v, float) else str(v)
                                  for v in values) + "\n")
            if len(lines) >= 10_000:
                out.writelines(lines)
                lines = []
        out.writelines(lines)
    parquet_path = directory / "table.parquet"
    table = pa.table({name: pa.array(columns[name], getattr(pa, types[name])())
                      for name in types})
    pq.write_table(table, parquet_path, row_group_size=65_536)
    csv_bytes = csv_path.stat().st_size
    # A serialized row is about its CSV line plus ~45 bytes of feature names
    # and framing.
    shard_size, shards = _shard_plan(csv_bytes + rows * 45, max(1, rows // 250_000))
    return [Workload(f"{kind}-csv", kind, "csv", str(csv_path), rows, csv_bytes,
                     shard_size, shards),
            Workload(f"{kind}-parquet", kind, "parquet", str(parquet_path), rows,
                     parquet_path.stat().st_size, shard_size, shards)]


def _render_jpegs(rng: random.Random, distinct: int) -> list[bytes]:
    """`distinct` JPEGs from ~100x80 to ~700x520 of noisy gradients; their
    sizes spread over roughly 10-200 KB."""
    from PIL import Image, ImageFilter

    rendered = []
    for i in range(distinct):
        width = rng.randint(100, 700)
        height = int(width * rng.uniform(0.6, 0.8))
        noise = Image.effect_noise((width, height), rng.randint(20, 60)).convert("RGB")
        picture = noise.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
        buffer = io.BytesIO()
        picture.save(buffer, "JPEG", quality=rng.choice((75, 85, 92)))
        rendered.append(buffer.getvalue())
    return rendered


def make_images(directory: Path, count: int, *, seed: int = 11,
                distinct: int = 200) -> Workload:
    """Writes `count` JPEGs as ``<class>/img_<i>.jpg`` under `directory`."""
    rng = random.Random(seed)
    rendered = _render_jpegs(rng, min(distinct, count))
    total = 0
    for label in LABELS:
        (directory / label).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        data = rendered[rng.randrange(len(rendered))]
        (directory / LABELS[i % len(LABELS)] / f"img_{i:06d}.jpg").write_bytes(data)
        total += len(data)
    shard_size, shards = _shard_plan(total + count * 80, max(1, total // (256 << 20)))
    return Workload("images", "images", "images", str(directory), count, total,
                    shard_size, shards)


def make_large(directory: Path, gigabytes: float, *, seed: int = 13,
               payload_bytes: int = 64 << 10) -> Workload:
    """Writes ``large-<GB>.csv`` of ~`gigabytes` GB: rows of id, label and a
    `payload_bytes` text column cut from a 4 MB pool of words at varying
    offsets (so rows differ), streaming, without holding the file in memory."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pool_words = []
    size = 0
    while size < (4 << 20) + payload_bytes:
        word = rng.choice(_WORDS)
        pool_words.append(word)
        size += len(word) + 1
    pool = " ".join(pool_words)
    rows = max(1, int(gigabytes * (1 << 30)) // (payload_bytes + 24))
    path = directory / f"large-{gigabytes:g}gb.csv"
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write("id,label,payload\n")
        for i in range(rows):
            start = rng.randrange(len(pool) - payload_bytes)
            out.write(f"{i},{LABELS[i % len(LABELS)]},{pool[start:start + payload_bytes]}\n")
    input_bytes = path.stat().st_size
    shard_size, shards = _shard_plan(input_bytes, max(1, input_bytes // (512 << 20)))
    return Workload(f"large-{gigabytes:g}gb", "large", "csv", str(path), rows, input_bytes,
                    shard_size, shards)


def config_yaml(workload: Workload, output: str, compression: str) -> str:
    """The recordforge config that builds `workload` into `output`."""
    config = {
        "name": f"bench_{workload.kind}",
        "version": "bench",
        "source": {"type": workload.source_type, "path": workload.path},
        "features": workload.features,
        "output": {"path": output, "compression": compression,
                   "shard_size": workload.shard_size, "shuffle": True},
        "dead_letter": {"max_error_rate": 0.0},
    }
    if workload.kind == "images":
        config["source"].update({"labels": "directory", "extensions": [".jpg"],
                                 "image": {"formats": ["JPEG"], "decode": "header"}})
        config["key"] = "path"
    else:
        config["key"] = "id"
    return yaml.safe_dump(config, sort_keys=False)

