"""A nightly Airflow DAG that builds the flights table with `recordforge.build`.

Each run builds the version named after its logical date (``20240227``)
into OUTPUT and moves LATEST to it. The task fails, and Airflow retries it,
when the build fails; a retry after a published run finds the version
published and succeeds without building it again. Nothing is shelled out:
`recordforge.build` returns the result (pushed to XCom) or raises.

Set RECORDFORGE_OUTPUT (e.g. ``gs://bucket/datasets/flights``) and, for a
runner other than Beam's local one, RECORDFORGE_BEAM_ARGS
(``--runner=DataflowRunner --project=... --region=...``).
"""

from __future__ import annotations

import datetime
import os
import pathlib
import shlex

from airflow.decorators import dag, task

CONFIG = pathlib.Path(__file__).resolve().parents[1] / "configs" / "examples" / "flights.yaml"


def build_nightly(ds_nodash: str, *, config: str = str(CONFIG), output: str | None = None,
                  beam_args: str | None = None) -> dict:
    """Builds version `ds_nodash` of the dataset; returns a small summary.
    A version already published (an earlier try of this run) is success."""
    import recordforge

    output = output or os.environ.get("RECORDFORGE_OUTPUT", "out/flights")
    args = shlex.split(beam_args if beam_args is not None
                       else os.environ.get("RECORDFORGE_BEAM_ARGS", ""))
    try:
        result = recordforge.build(config, overrides={"version": ds_nodash},
                                   output=output, beam_args=args)
    except recordforge.VersionExistsError:
        return {"version": ds_nodash, "already_published": True}
    return {"version": result.version, "path": result.path, "splits": dict(result.splits),
            "dead_letter_rows": result.dead_letter_rows}


@dag(schedule="@daily", start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
     catchup=False, tags=["recordforge"])
def recordforge_flights():
    @task(retries=2)
    def build(ds_nodash=None) -> dict:
        return build_nightly(ds_nodash)

    build()


recordforge_flights()
