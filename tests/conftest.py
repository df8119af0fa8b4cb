"""Set-up shared by the whole suite.

Pipelines that tests run on Beam's default runner (`beam.Pipeline()`,
`TestPipeline()`, ``runner="DirectRunner"``) run on the engine that a local
`recordforge build` pins (`runners.local_runner`: the FnApiRunner, in_memory
or multi_processing as the options say). Beam 2.77's DirectRunner would try
Prism first: offline, each try leaves an empty /tmp/beam-temp* directory
behind; online, the tests would run on an engine that builds never use.
Tests that name another runner (Dask) are not affected.
"""

from __future__ import annotations

import pytest
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner

from recordforge.pipelines.runners import local_runner


@pytest.fixture(autouse=True, scope="session")
def direct_runner_is_the_build_engine():
    def run_pipeline(self, pipeline, options):
        return local_runner(options).run_pipeline(pipeline, options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SwitchingDirectRunner, "run_pipeline", run_pipeline)
        yield
