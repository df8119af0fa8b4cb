"""docs/reading.md: every snippet runs against the flights sample as the
page says (TensorFlow's and DALI's only where they import), and prints
what the page promises."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import pathlib
import re

import pytest

import recordforge

REPO = pathlib.Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "reading.md"
_BLOCK = re.compile(r"^```python( [a-z]+)?\n(.*?)^```", re.S | re.M)
# A block tagged with a package runs only where that package imports.
_NEEDS = {"tensorflow": "tensorflow", "dali": "nvidia.dali"}


def _blocks() -> list[tuple[str, str]]:
    return [((tag or "").strip(), code) for tag, code in _BLOCK.findall(PAGE.read_text())]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


@pytest.fixture(scope="module")
def flights_dir(tmp_path_factory) -> pathlib.Path:
    """A directory holding out/flights, as `recordforge build` publishes it,
    and out/flights_array_record, the same with ``output.format: array_record``."""
    work = tmp_path_factory.mktemp("reading")
    for name, file_format in (("flights", "tfrecord"), ("flights_array_record", "array_record")):
        recordforge.build(str(REPO / "configs" / "examples" / "flights.yaml"),
                          overrides={"output.path": str(work / "out" / name),
                                     "output.format": file_format,
                                     "source.path": str(REPO / "examples" / "tables" /
                                                        "flights.csv")},
                          beam_args=["--direct_running_mode=in_memory"])
    return work


def test_the_page_has_a_snippet_for_every_reader():
    tags = [tag for tag, _ in _blocks()]
    assert tags.count("tensorflow") == 1 and tags.count("dali") == 1
    code = "\n".join(code for _, code in _blocks())
    for name in ("ReadDataset", "RecordDataset", "RecordMapDataset", "DistributedSampler",
                 "recordforge.grain", "fn.readers.tfrecord", "TFRecordDataset(",
                 "world_size=2", "num_workers=2", "state_dict", "flights_array_record"):
        assert name in code


@pytest.mark.parametrize("position", range(len(_blocks())))
def test_snippet_runs(position, flights_dir, monkeypatch):
    tag, code = _blocks()[position]
    if tag and not _importable(_NEEDS[tag]):
        pytest.skip(f"{_NEEDS[tag]} is not installed")
    monkeypatch.chdir(flights_dir)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"{PAGE.name} block {position}", "exec"), {"__name__": "snippet"})
    manifest = json.loads((flights_dir / "out/flights/1.0.0/manifest.json").read_text())
    train = manifest["splits"]["train"]["num_examples"]
    text = printed.getvalue()
    if "rows left in epoch 1" in text:
        assert f"rows left in epoch 1: {train - 4 * 32}" in text
    if "reads" in text:
        assert text.count(f"reads {-(-train // 2)} rows") == 2
    if "rows on host 0 of 2" in text:
        assert f"{train // 2} rows on host 0 of 2" in text
    if "rows:" in text:
        assert f"rows: {train}" in text
