"""A nightly Airflow 3 DAG that builds the flights table with `recordforge.build`.

Each run builds the version named after its logical date (``20240227``)
into the output and moves LATEST to it. Nothing is shelled out: the build
runs inside the task (Beam's local runner, or the runner RECORDFORGE_BEAM_ARGS
names) and returns a small summary (pushed to XCom) or raises:

* a failed build (a crossed validation gate, the error budget, a failed
  pipeline) raises `recordforge.BuildFailed`: the task fails, Airflow
  retries it, nothing is published and LATEST keeps the last good version;
* a try stopped by ``execution_timeout`` (Airflow raises AirflowTaskTimeout
  inside the build) publishes nothing and leaves no staging directory; the
  next try resumes from the build cache;
* a try of a run whose version is already published (a retry after the
  publish, a re-run of a successful task) succeeds without building.

Environment (read by the task when it runs): RECORDFORGE_CONFIG (default
the repository's ``configs/examples/flights.yaml``), RECORDFORGE_OUTPUT
(e.g. ``gs://bucket/datasets/flights``; default the config's
``output.path``), RECORDFORGE_BEAM_ARGS (``--runner=DataflowRunner
--project=... --region=...``). When the DAG file is parsed:
RECORDFORGE_RETRIES, RECORDFORGE_RETRY_DELAY and RECORDFORGE_TIMEOUT
(seconds) set the task's retries, the delay between tries and its
``execution_timeout``. A run triggered with ``{"update_latest": false}``
(a backfill of an old date) publishes without moving LATEST.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import shlex

from airflow.sdk import Param, dag, get_current_context, task

CONFIG = pathlib.Path(__file__).resolve().parents[1] / "configs" / "examples" / "flights.yaml"


def _seconds(name: str, default: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=float(os.environ.get(name, default)))


def build_nightly(ds_nodash: str, *, config: str | None = None, output: str | None = None,
                  beam_args: str | None = None, update_latest: bool = True) -> dict:
    """Builds version `ds_nodash` of the dataset; returns a small summary.
    A version already published (an earlier try of this run) is success."""
    # Imported when the task runs, not when the scheduler parses the file.
    import recordforge

    config = config or os.environ.get("RECORDFORGE_CONFIG", str(CONFIG))
    output = output or os.environ.get("RECORDFORGE_OUTPUT")
    args = shlex.split(beam_args if beam_args is not None
                       else os.environ.get("RECORDFORGE_BEAM_ARGS", ""))
    try:
        result = recordforge.build(config, overrides={"version": ds_nodash}, output=output,
                                   beam_args=args, update_latest=update_latest)
    except recordforge.VersionExistsError:
        return {"version": ds_nodash, "already_published": True}
    return {"version": result.version, "path": result.path, "splits": dict(result.splits),
            "dead_letter_rows": result.dead_letter_rows,
            "latest_updated": result.latest_updated}


@dag(schedule="0 3 * * *",
     start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
     catchup=False, max_active_runs=1, tags=["recordforge"],
     params={"update_latest": Param(True, type="boolean")})
def recordforge_flights():
    @task(retries=int(os.environ.get("RECORDFORGE_RETRIES", 2)),
          retry_delay=_seconds("RECORDFORGE_RETRY_DELAY", 600),
          execution_timeout=_seconds("RECORDFORGE_TIMEOUT", 4 * 3600))
    def build(ds_nodash=None) -> dict:
        params = get_current_context()["params"]
        return build_nightly(ds_nodash, update_latest=params["update_latest"])

    build()


recordforge_flights()
