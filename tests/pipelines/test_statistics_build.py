"""Statistics, drift and gates through `recordforge build`: stats.json against hand-computed
values, two workers against one, a crossed gate failing the build, the report."""

from __future__ import annotations

import json
import random
import shutil
import statistics as pystats
import subprocess
from fractions import Fraction

import numpy as np
import pytest

from recordforge.pipelines import build
from recordforge.pipelines.config import config_from_dict
from recordforge.schemas.errors import ConfigError

# rows: id, price (float), city (string), label (vocabulary), tags (list of ints, may be empty)
ROWS = [(i, round(1.5 * i - 40.25, 2), ["oslo", "rome", "lima"][i % 3],
         ["cat", "dog"][i % 5 == 0], " ".join(str(i % 7) for _ in range(i % 3)))
        for i in range(1, 601)]


def _write_table(path, rows, price_scale=1.0, missing_price_every=0):
    lines = ["id,price,city,label,tags"]
    for i, price, city, label, tags in rows:
        shown = "" if missing_price_every and i % missing_price_every == 0 else \
            repr(price * price_scale)
        lines.append(f"{i},{shown},{city},{label},{tags}")
    path.write_text("\n".join(lines) + "\n")


def _config(table, out, **validation):
    config = {
        "name": "shop", "version": "v1",
        "source": {"type": "csv", "path": str(table)},
        "features": {"id": {"type": "int64"},
                     "price": {"type": "float", "required": False},
                     "city": {"type": "string"},
                     "label": {"type": "int64", "vocabulary": ["cat", "dog"]}},
        "splits": {"train": 0.7, "test": 0.3},
        "key": "id",
        "output": {"path": str(out), "shard_size": "1MB"},
    }
    if validation:
        config["validation"] = validation
    return config


def _write_config(tmp_path, config, name="shop.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def _run(config_path, *extra, workers=1):
    mode = "in_memory" if workers == 1 else "multi_processing"
    return build.run([str(config_path), *extra, "--",
                      f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"])


def _published(out):
    version = (out / "LATEST").read_text().strip()
    return out / version


def _split_of_ids(version_dir):
    """id -> split, read back from the published shards (an independent reader)."""
    from tfrecord import example_pb2
    from recordforge.transforms.tfrecord import read_records

    manifest = json.loads((version_dir / "manifest.json").read_text())
    found = {}
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            for record in read_records(str(version_dir / shard["file"])):
                example = example_pb2.Example.FromString(record)
                found[example.features.feature["id"].int64_list.value[0]] = split
    return found


def test_stats_json_matches_python_arithmetic(tmp_path):
    table = tmp_path / "shop.csv"
    _write_table(table, ROWS, missing_price_every=10)
    out = tmp_path / "out"
    assert _run(_write_config(tmp_path, _config(table, out))) == 0
    version_dir = _published(out)
    stats = json.loads((version_dir / "stats.json").read_text())
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert [entry["file"] for entry in manifest["files"]] == [
        "croissant.json", "dataset_info.json", "drift.json", "features.json", "report.html",
        "stats.json"]
    sums = dict(line.split("  ")[::-1] for line in
                (version_dir / "SHA256SUMS").read_text().splitlines())
    assert "stats.json" in sums and "drift.json" in sums
    split_of = _split_of_ids(version_dir)
    for split, info in stats["splits"].items():
        rows = [row for row in ROWS if split_of[row[0]] == split]
        assert info["num_examples"] == len(rows) == manifest["splits"][split]["num_examples"]
        ids = [row[0] for row in rows]
        numeric = info["features"]["id"]["numeric"]
        assert (numeric["count"], numeric["min"], numeric["max"], numeric["sum"]) == (
            len(ids), min(ids), max(ids), sum(ids))
        assert numeric["mean"] == float(Fraction(sum(ids), len(ids)))
        assert numeric["std"] == pytest.approx(pystats.pstdev(ids), rel=1e-14)
        assert numeric["distinct"] == len(ids)
        prices = [float(np.float32(row[1])) for row in rows if row[0] % 10]
        price = info["features"]["price"]
        assert price["missing"] == len(rows) - len(prices)
        assert price["missing_fraction"] == (len(rows) - len(prices)) / len(rows)
        assert price["numeric"]["min"] == min(prices) and price["numeric"]["max"] == max(prices)
        assert price["numeric"]["mean"] == float(sum(map(Fraction, prices)) / len(prices))
        cities = pystats.multimode([row[2] for row in rows])
        top = info["features"]["city"]["string"]["top_values"]
        assert top[0]["value"] in cities
        assert {item["value"]: item["count"] for item in top} == {
            city: sum(1 for row in rows if row[2] == city) for city in ("oslo", "rome", "lima")}
        counts = info["features"]["label"]["vocabulary"]["counts"]
        assert counts == {"cat": sum(1 for row in rows if row[3] == "cat"),
                          "dog": sum(1 for row in rows if row[3] == "dog")}
    page = (version_dir / "report.html").read_text()
    assert "id='statistics'" in page and 'data-chart="feature-train-price"' in page


@pytest.mark.slow
def test_two_workers_give_the_same_stats_json_as_one(tmp_path):
    # Three JSONL files of 2,000 rows: batches of up to 1,000 rows, merged in
    # whatever order the workers and bundles give. Prices take ~6,000
    # distinct values (the value histograms coarsen) and cities ~1,500 (the
    # frequent values purge): the merges that depend on their grouping are
    # exercised.
    rng = random.Random(17)
    tables = tmp_path / "tables"
    tables.mkdir()
    cities = [f"city{i}" for i in range(1500)]
    for part in range(3):
        with open(tables / f"part-{part}.jsonl", "w") as f:
            for i in range(part * 2000 + 1, part * 2000 + 2001):
                f.write(json.dumps({
                    "id": i, "price": round(rng.lognormvariate(3, 2), 4),
                    "city": rng.choice(cities) if rng.random() < 0.8 else "oslo",
                    "label": ["cat", "dog"][i % 3 == 0]}) + "\n")
    documents = []
    for workers, name in ((1, "one"), (2, "two")):
        out = tmp_path / name
        config = _config(tables, out)
        config["source"]["type"] = "jsonl"
        assert _run(_write_config(tmp_path, config, f"{name}.yaml"), workers=workers) == 0
        documents.append((_published(out) / "stats.json").read_bytes())
    assert documents[0] == documents[1]
    stats = json.loads(documents[0])
    train = stats["splits"]["train"]["features"]
    assert 0 < train["price"]["numeric"]["relative_error"] < 0.01
    assert train["city"]["string"]["exact"] is False
    assert train["city"]["string"]["top_values"][0]["value"] == "oslo"


def test_a_crossed_gate_fails_the_build_and_keeps_its_report(tmp_path, capsys):
    table = tmp_path / "shop.csv"
    _write_table(table, ROWS)
    out = tmp_path / "out"
    gates = {"max_row_change": 0.5, "features": {"price": {"max_js": 0.2},
                                                 "label": {"max_linf": 0.2}}}
    config_path = _write_config(tmp_path, _config(table, out, **gates))
    assert _run(config_path) == 0
    assert (out / "LATEST").read_text().strip() == "v1"
    assert json.loads((out / "v1" / "drift.json").read_text())["previous_version"] is None

    # The same data again as v2: no drift, every gate passes.
    assert _run(config_path, "--set", "version=v2") == 0
    drift = json.loads((out / "v2" / "drift.json").read_text())
    assert drift["previous_version"] == "v1"
    assert all(gate["passed"] and gate["value"] is not None for gate in drift["gates"])
    assert drift["splits"]["train"]["features"]["price"]["value"] < 0.05

    # Prices in cents: the price gate fails in both splits.
    _write_table(table, ROWS, price_scale=100)
    capsys.readouterr()
    assert _run(config_path, "--set", "version=v3") == 1
    error = capsys.readouterr().err
    assert "validation gate(s) crossed; nothing was published" in error
    assert ("validation.features.price.max_js: split 'train', feature 'price', against version "
            "'v2': js = ") in error
    assert "exceeds the limit 0.2" in error
    assert not (out / "v3").exists()
    assert (out / "LATEST").read_text().strip() == "v2"
    kept = list((out / ".failed").glob("v3.*/report.html"))
    assert len(kept) == 1 and f"the report of this build was kept at {kept[0]}" in error
    page = kept[0].read_text()
    assert "id='gates'" in page and "FAILED" in page
    failed_drift = json.loads((kept[0].parent / "drift.json").read_text())
    failed = [gate for gate in failed_drift["gates"] if not gate["passed"]]
    assert {gate["key"] for gate in failed} == {"validation.features.price.max_js"}
    assert all(gate["value"] > 0.2 for gate in failed)

    # An operator relaxes the gate for one run.
    assert _run(config_path, "--set", "version=v3",
                "--set", "validation.features.price.max_js=null") == 0
    assert (out / "LATEST").read_text().strip() == "v3"


def test_statistics_can_be_turned_off(tmp_path):
    table = tmp_path / "shop.csv"
    _write_table(table, ROWS[:50])
    out = tmp_path / "out"
    assert _run(_write_config(tmp_path, _config(table, out, statistics=False))) == 0
    version_dir = _published(out)
    assert not (version_dir / "stats.json").exists()
    assert [entry["file"] for entry in json.loads(
        (version_dir / "manifest.json").read_text())["files"]] == [
        "croissant.json", "dataset_info.json", "features.json", "report.html"]


@pytest.mark.parametrize("validation, key, words", [
    ({"features": {"nope": {"max_js": 0.1}}}, "validation.features.nope", "no feature"),
    ({"features": {"city": {"max_js": 0.1}}}, "validation.features.city.max_js",
     "use max_linf"),
    ({"features": {"price": {"max_linf": 0.1}}}, "validation.features.price.max_linf",
     "use max_js"),
    ({"features": {"price": {"max_jsd": 0.1}}}, "validation.features.price.max_jsd",
     "did you mean `max_js`"),
    ({"max_row_change": -1}, "validation.max_row_change", "0 or more"),
    ({"features": {"price": {"max_missing": 2}}}, "validation.features.price.max_missing",
     "between 0 and 1"),
    ({"max_row_change": "half"}, "validation.max_row_change", "must be a number"),
    ({"statistics": False, "max_row_change": 0.5}, "validation.statistics", "gates need"),
    ({"max_rows_change": 0.5}, "validation.max_rows_change", "did you mean `max_row_change`"),
])
def test_config_errors_name_the_key(tmp_path, validation, key, words):
    table = tmp_path / "shop.csv"
    _write_table(table, ROWS[:5])
    with pytest.raises(ConfigError) as caught:
        config_from_dict(_config(table, tmp_path / "out", **validation))
    assert caught.value.key == key
    assert key in str(caught.value) and words in str(caught.value)


def test_gates_relaxed_with_set_are_parsed(tmp_path):
    table = tmp_path / "shop.csv"
    _write_table(table, ROWS[:5])
    config = _config(table, tmp_path / "out", features={"price": {"max_js": 0.1}})
    assert len(config_from_dict(config).validation.gates) == 1
    relaxed = config_from_dict(config, overrides=["validation.features.price.max_js=null"])
    assert relaxed.validation.gates == ()
    looser = config_from_dict(config, overrides=["validation.features.price.max_js=0.5"])
    assert looser.validation.gates[0].limit == 0.5


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="chromium is not installed (apt-get install -y chromium); the CI "
                           "script installs it")
def test_statistics_sections_render_in_chromium(tmp_path):
    table = tmp_path / "shop.csv"
    _write_table(table, ROWS, missing_price_every=7)
    out = tmp_path / "out"
    config_path = _write_config(tmp_path, _config(table, out, max_row_change=0.5,
                                                  features={"price": {"max_missing": 0.5}}))
    assert _run(config_path) == 0
    page = _published(out) / "report.html"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", f"file://{page}"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    for chart in ("feature-train-price", "feature-train-id", "feature-test-city",
                  "feature-test-label"):
        assert f'data-chart="{chart}"' in dom, chart
    histogram = dom.split('data-chart="feature-train-price"', 1)[1].split("</svg>", 1)[0]
    assert histogram.count('class="bar"') == 10
    assert "Validation gates" in dom and "Drift" in dom and "<script" not in dom


@pytest.mark.slow
def test_a_pinned_or_last_n_baseline_replaces_the_version_latest_names(tmp_path, capsys):
    """v2 is published with its price gate relaxed (prices in cents); v3
    brings the prices back. Against LATEST (v2) the gate fails; pinned to
    v1 it passes; against the last 2 versions it fails, naming v2."""
    table = tmp_path / "shop.csv"
    out = tmp_path / "out"
    config_path = _write_config(tmp_path, _config(table, out, features={
        "price": {"max_js": 0.2}}))
    _write_table(table, ROWS)
    assert _run(config_path) == 0
    _write_table(table, ROWS, price_scale=100)
    assert _run(config_path, "--set", "version=v2",
                "--set", "validation.features.price.max_js=null") == 0
    _write_table(table, ROWS)
    capsys.readouterr()
    assert _run(config_path, "--set", "version=v3") == 1
    assert "against version 'v2'" in capsys.readouterr().err
    assert _run(config_path, "--set", "version=v3", "--set", "validation.baseline=v1") == 0
    drift = json.loads((out / "v3" / "drift.json").read_text())
    assert drift["previous_version"] == "v1"
    assert {gate["baseline"] for gate in drift["gates"]} == {"v1"}
    capsys.readouterr()
    assert _run(config_path, "--set", "version=v4",
                "--set", "validation.baseline={last: 2}") == 1
    error = capsys.readouterr().err
    assert "against version 'v2'" in error and "against version 'v3'" not in error
    assert (out / "LATEST").read_text().strip() == "v3"
