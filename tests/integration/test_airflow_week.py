"""A week of nightly builds of examples/airflow_dag.py under a real Apache Airflow 3.

Airflow runs the DAG (`airflow_nights.py`: ``airflow dags test`` for
nights 1 and 3, the function behind it in one process for the others,
against a SQLite metadata database in a temporary AIRFLOW_HOME that
``airflow db migrate`` created), one logical date after another, into one
output. Every outcome is read twice: from Airflow's metadata (the task
instance's state and try number, the earlier tries in its history, the
value it returned) and from the output (LATEST, the versions, ``.failed/``,
``.staging/``, the shards' sha256 against an uninterrupted build):

1. night 1 publishes (``airflow dags test`` exits 0);
2. night 2, two input files changed, is incremental (the manifest's cache block);
3. night 3 crosses a drift gate: the try fails, Airflow retries it, it fails
   again, the run fails (``airflow dags test`` exits 1); LATEST still names
   night 2, each try's report is kept under ``.failed/``;
4. night 4 (two new files) is stopped by the task's ``execution_timeout``
   while its pipeline reads the second new file (a hung read): Airflow raises
   AirflowTaskTimeout inside ``recordforge.build`` (no process exits, so
   there is no exit status), the try is marked failed and retried; nothing
   was published, nothing is left staged, and the retry reuses the pieces
   the stopped try cached for the first new file and publishes the bytes of
   an uninterrupted build;
5. night 5 runs twice: the second run finds the version published and
   succeeds without building;
6. backfills of earlier dates: with ``{"update_latest": false}`` LATEST stays
   on night 5; without, LATEST names the backfilled version, as
   docs/scheduling.md says.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import recordforge

# Looked up, not imported: importing Airflow configures logging for the whole
# test process; the nights run in processes of their own.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("airflow") is None,
                                reason="the airflow extra (in the test extra) is not installed")

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "examples" / "airflow_dag.py"
DRIVER = Path(__file__).with_name("airflow_nights.py")
IN_MEMORY = "--direct_running_mode=in_memory --direct_num_workers=1"
NIGHTS = ["2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04", "2024-03-05", "2024-03-05",
          "2024-02-19", "2024-02-20"]
TIMEOUT = 20  # night 4's execution_timeout, seconds: longer than any try of it needs


def _write_table(path: Path, seed: int, rows: int, labels: str = "abc") -> None:
    rng = random.Random(seed)
    lines = ["id,price,label"] + [f"{seed * 100_000 + row},{rng.uniform(0, 100):.2f},"
                                  f"{rng.choice(labels)}" for row in range(rows)]
    path.write_text("\n".join(lines) + "\n")


def _inputs(root: Path) -> dict[str, Path]:
    """Each night's input files, in a directory of its own."""
    nights = {name: root / name for name in ("n1", "n2", "n3", "n4")}
    for directory in nights.values():
        directory.mkdir(parents=True)
    for index in range(5):
        _write_table(nights["n1"] / f"part-{index}.csv", index, 300)
        seed = 10 + index if index in (1, 2) else index  # night 2 changes two files
        _write_table(nights["n2"] / f"part-{index}.csv", seed, 300)
        # Night 3: every label is 'c', far past the gate on its frequencies.
        _write_table(nights["n3"] / f"part-{index}.csv", seed, 300, labels="c")
        shutil.copyfile(nights["n2"] / f"part-{index}.csv", nights["n4"] / f"part-{index}.csv")
    for index in (5, 6):  # night 4: two new files, the second read stalls
        _write_table(nights["n4"] / f"part-{index}.csv", index, 300)
    return nights


def _config(path: Path, source: Path, output: Path) -> Path:
    path.write_text(json.dumps({
        "name": "nightly",
        "version": "0",
        "source": {"type": "csv", "path": str(source)},
        "features": {"id": {"type": "int64"}, "price": {"type": "float"},
                     "label": {"type": "int64", "vocabulary": ["a", "b", "c"]}},
        "splits": {"train": 0.8, "test": 0.2},
        "key": "id",
        "output": {"path": str(output), "shard_size": "1MB"},
        "validation": {"features": {"label": {"max_linf": 0.3}}},
    }))  # JSON is YAML
    return path


def _airflow_env(home: Path, config: Path) -> dict:
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
            "RECORDFORGE_CONFIG": str(config), "RECORDFORGE_BEAM_ARGS": IN_MEMORY,
            "RECORDFORGE_RETRIES": "1", "RECORDFORGE_RETRY_DELAY": "0"}


def _tries(database: Path) -> dict[str, list[tuple]]:
    """logical date -> [(try number, state, returned value)], earlier tries
    (Airflow's task-instance history) first, as Airflow recorded them."""
    with sqlite3.connect(database) as db:
        runs = dict(db.execute("SELECT run_id, substr(logical_date, 1, 10) FROM dag_run"))
        tries: dict[str, list[tuple]] = {}
        for run_id, try_number, state in db.execute(
                "SELECT run_id, try_number, state FROM task_instance_history "
                "WHERE task_id = 'build' ORDER BY try_number"):
            tries.setdefault(runs[run_id], []).append((try_number, state, None))
        for run_id, try_number, state in db.execute(
                "SELECT run_id, try_number, state FROM task_instance WHERE task_id = 'build'"):
            value = db.execute("SELECT value FROM xcom WHERE run_id = ? AND task_id = 'build' "
                               "AND key = 'return_value'", (run_id,)).fetchone()
            tries.setdefault(runs[run_id], []).append(
                (try_number, state, json.loads(value[0]) if value else None))
    return tries


def _manifest(output: Path, version: str) -> dict:
    return json.loads((output / version / "manifest.json").read_text())


def _shards(version_dir: Path) -> dict[str, str]:
    files = sorted(p for p in version_dir.glob("*.tfrecord*") if p.suffix != ".index")
    assert files, f"no shards in {version_dir}"
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


@pytest.mark.slow
def test_a_week_of_nightly_builds_under_airflow(tmp_path):
    nights = _inputs(tmp_path / "nights")
    source, output = tmp_path / "in", tmp_path / "out"
    config = _config(tmp_path / "nightly.yaml", source, output)
    env = _airflow_env(tmp_path / "airflow", config)
    airflow = Path(sys.executable).with_name("airflow")
    migrate = subprocess.run([str(airflow), "db", "migrate"], env=env, capture_output=True,
                             text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    order = ["n1", "n2", "n3", "n4", "n4", "n4", "n4", "n4"]
    plan = {"dag_file": str(DAG_FILE), "input": str(source), "output": str(output),
            "nights": [{"date": date, "inputs": str(nights[inputs])}
                       for date, inputs in zip(NIGHTS, order)]}
    for night in (0, 2):  # a success and a failure as the command reports them
        plan["nights"][night]["command"] = True
    plan["nights"][3].update(env={"RECORDFORGE_TIMEOUT": str(TIMEOUT)}, stall_read=2)
    plan["nights"][6].update(conf={"update_latest": False})
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    run = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "plan.json"),
                          str(tmp_path / "snapshots.json")], env=env, capture_output=True,
                         text=True, timeout=600)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    after = json.loads((tmp_path / "snapshots.json").read_text())
    tries = _tries(tmp_path / "airflow" / "airflow.db")
    # Nothing is ever left staged, whatever stopped a try.
    assert [night["staging"] for night in after] == [[]] * len(after), after
    n1, n2, n3, n4, n5, n5_again, backfill_kept, backfill = after

    # Night 1 publishes.
    assert tries["2024-03-01"] == [(1, "success", tries["2024-03-01"][0][2])]
    assert tries["2024-03-01"][0][2]["version"] == "20240301"
    assert n1["exit_status"] == 0 and n1["latest"] == "20240301"

    # Night 2: two of five files converted, three reused.
    assert [state for _, state, _ in tries["2024-03-02"]] == ["success"]
    assert n2["latest"] == "20240302"
    cache = _manifest(output, "20240302")["cache"]
    assert (cache["files_converted"], cache["files_reused"]) == (2, 3), cache

    # Night 3: the gate fails both tries; LATEST stays; both reports kept.
    assert [(number, state) for number, state, _ in tries["2024-03-03"]] == [
        (1, "failed"), (2, "failed")], tries["2024-03-03"]
    assert n3["exit_status"] == 1 and n3["latest"] == "20240302"
    assert "DagRun failed" in log
    assert "20240303" not in n3["versions"]
    kept = [name for name in n3["failed"] if name.startswith("20240303.")]
    assert len(kept) == 2 and all((output / ".failed" / name / "report.html").is_file()
                                  for name in kept), n3["failed"]
    assert "validation.features.label.max_linf" in log

    # Night 4: try 1 stopped by the timeout, try 2 resumes and publishes.
    assert [(number, state) for number, state, _ in tries["2024-03-04"]] == [
        (1, "failed"), (2, "success")], tries["2024-03-04"]
    assert "AirflowTaskTimeout" in log
    assert n4["latest"] == "20240304"
    cache = _manifest(output, "20240304")["cache"]
    # Five files of night 2 and the new file the stopped try converted.
    assert (cache["files_converted"], cache["files_reused"]) == (1, 6), cache
    uninterrupted = recordforge.build(
        config, overrides={"version": "20240304", "cache.enabled": False},
        output=str(tmp_path / "uninterrupted"), beam_args=IN_MEMORY.split())
    assert _shards(output / "20240304") == _shards(Path(uninterrupted.path))

    # Night 5, run twice: the second run succeeds without building.
    night5 = tries["2024-03-05"]
    assert [state for _, state, _ in night5][-1] == "success", night5
    assert night5[-1][2] == {"version": "20240305", "already_published": True}, night5
    assert n5["latest"] == n5_again["latest"] == "20240305"
    assert n5_again["versions"] == n5["versions"]

    # Backfills: LATEST moves to an older version unless the run says not to.
    assert tries["2024-02-19"][-1][1:] == ("success", tries["2024-02-19"][-1][2])
    assert tries["2024-02-19"][-1][2]["latest_updated"] is False
    assert backfill_kept["latest"] == "20240305" and "20240219" in backfill_kept["versions"]
    assert tries["2024-02-20"][-1][2]["latest_updated"] is True
    assert backfill["latest"] == "20240220"
