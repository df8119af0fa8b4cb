"""Sandbox: what a config or the data can make recordforge do.

* configs cannot execute code (YAML python tags: test_fuzz_inputs.py and
  tests/pipelines/test_config.py); no module of the package unpickles, evals
  or unsafely loads anything;
* paths taken from the data never read outside ``source.path``: labels-table
  entries that are absolute, URLs or escape with ``..``, and symbolic links
  (to files or directories) leading out are dead letters, and the bytes they
  point at appear nowhere in the output; table columns holding paths are
  stored as text, never opened;
* dead letters never embed image bytes or a huge field;
* credentials in URLs never appear in build, verify or inspect output.
"""

from __future__ import annotations

import io
import json
import random
import re
import textwrap
import uuid
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from PIL import Image

from recordforge.pipelines import cli
from recordforge.schemas.dead_letters import MAX_INLINE_CHARS
from recordforge.schemas.example import decode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.readers import csv as csv_reader

PACKAGE = Path(__file__).resolve().parents[2]
SECRET = "VerySecretKey"


def test_no_module_unpickles_evals_or_loads_yaml_unsafely():
    pattern = re.compile(r"\b(pickle\.loads?|marshal\.loads?|eval|exec|yaml\.unsafe_load|"
                         r"yaml\.full_load|FullLoader|UnsafeLoader|shelve\.open|dill)\s*\(")
    sources = [p for package in ("pipelines", "transforms", "schemas")
               for p in (PACKAGE / package).glob("*.py")]
    assert len(sources) > 10
    offenders = [f"{p.name}: {m.group(0)}" for p in sources
                 for m in pattern.finditer(p.read_text())]
    assert offenders == []
    # Every yaml.load names the safe loader.
    for p in sources:
        for call in re.findall(r"yaml\.load\([^)]*\)", p.read_text()):
            assert "SafeLoader" in call, (p.name, call)


def jpeg(color, size=(24, 20), noise: bool = False) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", size, color)
    if noise:  # unique entropy-coded bytes, to look for in the output
        image = Image.frombytes("RGB", size, random.Random(7).randbytes(size[0] * size[1] * 3))
    image.save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def image_config(tmp_path: Path, root: Path, labels: str, output: Path, **extra) -> Path:
    config = tmp_path / f"images-{uuid.uuid4().hex[:6]}.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: sandbox
        version: "1.0.0"
        source: {{type: images, path: {root}, labels: {labels}}}
        features:
          image: {{type: bytes}}
          label: {{type: string}}
          path: {{type: string}}
        output: {{path: {output}, shard_size: 1MB}}
        dead_letter: {{max_error_rate: 0.9}}
        """))
    return config


def all_records(version_dir: Path) -> list[dict]:
    shards = sorted(p for p in version_dir.glob("*.tfrecord*") if p.suffix != ".index")
    return [decode_example(record) for shard in shards
            for record in tfrecord.read_records(str(shard))]


def dead_letters(version_dir: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((version_dir / "dead_letter").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def test_paths_from_the_data_never_leave_the_root(tmp_path, run_build):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret_image = jpeg((250, 0, 0), size=(31, 17), noise=True)
    (outside / "secret.jpg").write_bytes(secret_image)
    (outside / "cls").mkdir()
    (outside / "cls" / "also_secret.jpg").write_bytes(secret_image)
    root = tmp_path / "root"
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "ok.jpg").write_bytes(jpeg((0, 0, 250)))
    (root / "cats" / "link.jpg").symlink_to(outside / "secret.jpg")
    (root / "outdir").symlink_to(outside / "cls", target_is_directory=True)
    labels = tmp_path / "labels.csv"
    labels.write_text("file,label\n"
                      "cats/ok.jpg,cat\n"
                      "../outside/secret.jpg,cat\n"
                      f"{outside}/secret.jpg,cat\n"
                      "cats/../../outside/secret.jpg,cat\n"
                      f"file://{outside}/secret.jpg,cat\n"
                      "cats/link.jpg,cat\n"
                      "outdir/also_secret.jpg,cat\n")
    out = tmp_path / "out"
    status, _, err = run_build(image_config(tmp_path, root, labels, out))
    assert status == 0, err
    records = all_records(out / "1.0.0")
    assert [r["path"] for r in records] == [("bytes", [b"cats/ok.jpg"])]
    letters = dead_letters(out / "1.0.0")
    # Four labels rows leave the root by name, two links point out (the file
    # link, and the directory link reported once for everything below it);
    # the labels row naming a file below that directory link finds no image.
    assert sorted(d["reason"] for d in letters) == ["path_outside_root"] * 6 + ["read_error"], \
        [(d["reason"], d["message"]) for d in letters]
    (missing,) = [d for d in letters if d["reason"] == "read_error"]
    assert "no image file 'outdir/also_secret.jpg'" in missing["message"]
    everything = b"".join(p.read_bytes() for p in (out / "1.0.0").rglob("*") if p.is_file())
    assert secret_image[-80:-16] not in everything

    # The same root labelled by directory: links out are dead letters too.
    out = tmp_path / "out-directory"
    status, _, err = run_build(image_config(tmp_path, root, "directory", out))
    assert status == 0, err
    assert len(all_records(out / "1.0.0")) == 1
    assert sorted(d["reason"] for d in dead_letters(out / "1.0.0")) == ["path_outside_root"] * 2


def test_path_columns_of_tables_are_text_never_opened(tmp_path, run_build):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    table = tmp_path / "rows.csv"
    table.write_text(f"id,file\n1,{secret}\n2,../secret.txt\n")
    config = tmp_path / "table.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: sandbox
        version: "1.0.0"
        source: {{type: csv, path: {table}}}
        features:
          id: {{type: int64}}
          file: {{type: bytes}}
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        """))
    status, _, err = run_build(config)
    assert status == 0, err
    stored = sorted(r["file"][1][0] for r in all_records(tmp_path / "out" / "1.0.0"))
    assert stored == sorted([str(secret).encode(), b"../secret.txt"])


def test_dead_letters_never_embed_image_bytes_or_huge_fields(tmp_path, run_build):
    root = tmp_path / "root"
    (root / "cats").mkdir(parents=True)
    big = jpeg((9, 9, 9), size=(640, 480))
    (root / "cats" / "big.jpg").write_bytes(big)             # fails max_size
    small = jpeg((9, 9, 9), size=(200, 150))
    (root / "cats" / "cut.jpg").write_bytes(small[:len(small) // 2])  # truncated
    (root / "dogs").mkdir()
    (root / "dogs" / "fine.jpg").write_bytes(jpeg((1, 2, 3)))   # unknown_label below
    config = tmp_path / "images.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: sandbox
        version: "1.0.0"
        source:
          type: images
          path: {root}
          image: {{max_size: [320, 320], decode: full}}
        features:
          image: {{type: bytes}}
          label: {{type: int64, vocabulary: [cats]}}
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        dead_letter: {{max_error_rate: 1.0}}
        """))
    status, _, err = run_build(config)
    # Every row failed, so the one split is empty and nothing is published;
    # the dead letters are kept under .failed/.
    assert status == 1, err
    kept = list((tmp_path / "out" / ".failed").rglob("*.jsonl"))
    letters = [json.loads(line) for path in kept for line in path.read_text().splitlines()]
    assert sorted(d["reason"] for d in letters) == ["image_too_large", "image_truncated",
                                                    "unknown_label"]
    text = "".join(path.read_text() for path in kept)
    assert len(text) < 4096
    assert big[300:340].hex() not in text and big[300:340] not in text.encode("latin-1")

    # A ragged CSV row with a 20 MB field: the dead letter is summarised.
    field = "x" * (20 << 20)
    table = tmp_path / "ragged.csv"
    table.write_text(f"a,b\n1,2\n3,4,{field}\n")
    (letter,) = [item for item in csv_reader.iter_csv(str(table)) if isinstance(item, dict)]
    assert letter["reason"] == "csv_ragged_row"
    assert letter["input"][2] == {"chars": len(field), "head": field[:256]}
    assert len(json.dumps(letter)) < 2 * MAX_INLINE_CHARS


class _InProcessStore(MemoryFileSystem):
    """An object store held by this test process: memory:// under another
    name, because `recordforge build` refuses memory:// itself (its data
    would not outlive the command)."""

    protocol = "inproc"

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("inproc://"):
            path = "memory://" + path[len("inproc://"):]
        return super()._strip_protocol(path)


@pytest.fixture
def secret_root():
    fsspec.register_implementation("inproc", _InProcessStore, clobber=True)
    bucket = f"bucket{uuid.uuid4().hex[:8]}"
    root = f"inproc://AKIAEXAMPLE:{SECRET}@{bucket}"
    yield root
    fs = fsspec.filesystem("inproc")
    for path in list(fs.store):
        if bucket in path:
            fs.store.pop(path, None)


def test_credentials_in_urls_never_reach_the_output(tmp_path, secret_root, run_build, capsys):
    fs = fsspec.filesystem("inproc")
    with fs.open(f"{secret_root}/data/rows.csv", "wb") as handle:
        handle.write(b"id,name\n1,a\n2,b\n3,not-an-int-below\nx,c\n")
    config = tmp_path / "secret.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: sandbox
        version: "1.0.0"
        source: {{type: csv, path: "{secret_root}/data/rows.csv"}}
        features:
          id: {{type: int64}}
          name: {{type: string}}
        output: {{path: "{secret_root}/out", shard_size: 1MB}}
        dead_letter: {{max_error_rate: 0.5}}
        """))
    seen = []
    status, out, err = run_build(config)
    assert status == 0, err
    seen += [out, err]
    # A failing build (budget exceeded) prints reasons with sample rows.
    status, out, err = run_build(config, "--set", "dead_letter.max_error_rate=0",
                                 "--set", "version=2.0.0")
    assert status == 1 and "error budget" in err, err
    seen += [out, err]
    # An output URL whose filesystem is not installed is a usage error.
    status, out, err = run_build(config, "--output", f"abfs://AKIAEXAMPLE:{SECRET}@bucket/out")
    assert status == 2 and "adlfs" in err, err
    seen += [out, err]
    for argv in (["verify", f"{secret_root}/out", "--deep"],
                 ["inspect", f"{secret_root}/out", "--limit", "1"],
                 ["inspect", f"{secret_root}/out/1.0.0/dead_letter/part-00000.jsonl"],
                 ["inspect", f"{secret_root}/missing.tfrecord"],
                 ["verify", f"{secret_root}/missing"],
                 ["verify", f"abfs://AKIAEXAMPLE:{SECRET}@bucket/out"],
                 ["inspect", f"abfs://bucket/x.tfrecord?token={SECRET}"]):
        status = cli.main(argv)
        captured = capsys.readouterr()
        assert status in (0, 2), (argv, captured.err)
        seen += [captured.out, captured.err]
    for path in fs.find(secret_root):
        seen.append(fs.cat_file(path).decode("utf-8", "replace"))
    leaks = [text[max(0, text.find(SECRET) - 150):text.find(SECRET) + 60]
             for text in seen if SECRET in text]
    assert leaks == [], "\n---\n".join(leaks)
    assert any("dead letters: 1" in text for text in seen)  # the output was really checked
