"""Runs nights of examples/airflow_dag.py under Airflow, one process for all of them.

    python airflow_nights.py PLAN.json SNAPSHOTS.json

Each night is what ``airflow dags test recordforge_flights <date>`` does
(`DAG.test`: a DAG run for that logical date, its task run by Airflow's
task runner against the metadata database of ``$AIRFLOW_HOME``, retried
after ``retry_delay`` until it succeeds or runs out of tries), without
importing Airflow and Beam again for every night.

PLAN: ``{"dag_file", "input", "output", "nights": [{"date": "2024-03-01",
"inputs": DIR, "env": {...}, "conf": {...}, "stall_read": N,
"command": bool}]}``. A night with ``command`` runs as the command itself,
``airflow dags test recordforge_flights <date>``, in a process of its own,
and its exit status is recorded.
Before a night the input directory is made to hold exactly the files of
its ``inputs`` (a file whose bytes are unchanged is left alone); ``env`` is
set while the DAG file is parsed and the night runs (the task's retries and
timeout are read at parse time). ``stall_read``: the N-th input file the
night's pipeline converts stalls (a hung read), in its first try only, until
Airflow's ``execution_timeout`` stops the try. After each night the output is
recorded: LATEST, the published versions, ``.failed/`` and ``.staging/``.
"""

from __future__ import annotations

import datetime
import filecmp
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DAG_ID = "recordforge_flights"


def _sync_inputs(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    wanted = {path.name for path in source.iterdir()}
    for path in target.iterdir():
        if path.name not in wanted:
            path.unlink()
    for name in sorted(wanted):
        if not (target / name).exists() or not filecmp.cmp(source / name, target / name,
                                                           shallow=False):
            shutil.copyfile(source / name, target / name)


def _load_dag(dag_file: str, night: int):
    spec = importlib.util.spec_from_file_location(f"airflow_dag_night_{night}", dag_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.recordforge_flights()


def _stall_read(on_call: int) -> callable:
    """Makes the `on_call`-th input file the pipeline converts stall (a hung
    network read) until Airflow's timeout stops the try, once; returns the
    function that undoes it."""
    from recordforge.transforms import unit_conversion

    original, calls = unit_conversion.read_range, []

    def stalling(*args, **kwargs):
        calls.append(None)
        if len(calls) == on_call:
            time.sleep(3600)  # AirflowTaskTimeout is raised in here
        return original(*args, **kwargs)

    unit_conversion.read_range = stalling
    return lambda: setattr(unit_conversion, "read_range", original)


def _names(path: Path) -> list[str]:
    return sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []


def _run_in_process(dag_file: str, index: int, night: dict) -> str:
    """Runs the night as `airflow dags test` does; the DAG run's state."""
    dag = _load_dag(dag_file, index)
    logical_date = datetime.datetime.fromisoformat(night["date"]).replace(
        tzinfo=datetime.timezone.utc)
    return str(dag.test(logical_date=logical_date, run_conf=night.get("conf")).state)


def _run_command(night: dict) -> dict:
    """Runs ``airflow dags test`` for the night; its exit status and output."""
    airflow = Path(sys.executable).with_name("airflow")
    conf = ["--conf", json.dumps(night["conf"])] if night.get("conf") else []
    done = subprocess.run([str(airflow), "dags", "test", DAG_ID, night["date"], *conf],
                          capture_output=True, text=True, timeout=600)
    print(done.stdout, done.stderr, sep="\n", flush=True)
    return {"exit_status": done.returncode}


def _snapshot(output: Path) -> dict:
    latest = output / "LATEST"
    return {"latest": latest.read_text().strip() if latest.exists() else None,
            "versions": [name for name in _names(output)
                         if (output / name / "manifest.json").is_file()],
            "failed": _names(output / ".failed"), "staging": _names(output / ".staging")}


def main(plan_file: str, snapshots_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    output, snapshots = Path(plan["output"]), []
    for index, night in enumerate(plan["nights"]):
        _sync_inputs(Path(night["inputs"]), Path(plan["input"]))
        saved = {key: os.environ.get(key) for key in night.get("env", {})}
        os.environ.update(night.get("env", {}))
        undo = _stall_read(night["stall_read"]) if night.get("stall_read") else None
        try:
            snapshot = _run_command(night) if night.get("command") \
                else {"dag_run_state": _run_in_process(plan["dag_file"], index, night)}
        finally:
            if undo is not None:
                undo()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        snapshots.append({**snapshot, **_snapshot(output)})
        Path(snapshots_file).write_text(json.dumps(snapshots, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
