"""Set-up shared by the whole suite.

Pipelines that tests run on Beam's default runner (`beam.Pipeline()`,
`TestPipeline()`, ``runner="DirectRunner"``) run on the engine that a local
`recordforge build` pins (`runners.local_runner`: the FnApiRunner, in_memory
or multi_processing as the options say). Beam 2.77's DirectRunner would try
Prism first: offline, each try leaves an empty /tmp/beam-temp* directory
behind; online, the tests would run on an engine that builds never use.
Tests that name another runner (Dask) are not affected.

A pipeline that is built but never run (tests of the graph) keeps the
empty /tmp/beam-pipeline-temp* directory Beam made for it; the suite
removes those it made when it ends.

`table_dir` is a CSV directory that the listing tests of the readers and
of the config checks share: both must list it by one rule.
"""

from __future__ import annotations

import gzip
import os

import apache_beam as beam
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


@pytest.fixture(autouse=True, scope="session")
def unrun_pipelines_leave_no_temp_dirs():
    made = []
    init = beam.Pipeline.__init__

    def remembering_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self.local_tempdir)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(beam.Pipeline, "__init__", remembering_init)
        yield
    for path in made:
        try:
            os.rmdir(path)  # gone already when the pipeline ran; kept if not empty
        except OSError:
            continue


@pytest.fixture
def table_dir(tmp_path):
    """A CSV directory where every listing question comes up: hidden and
    underscore names (files and folders), another extension, a compressed
    table, a link leading out of the root. Returns (root, names listed)."""
    root = tmp_path / "t"
    (root / "sub").mkdir(parents=True)
    (root / "a.csv").write_text("id,a\n1,x\n")
    (root / "sub" / "B.CSV").write_text("id,b\n2,y\n")
    (root / "c.csv.gz").write_bytes(gzip.compress(b"id,c\n3,z\n"))
    (root / "_part.csv").write_text("id,underscore\n4,u\n")
    (root / ".hidden.csv").write_text("id,dot\n5,d\n")
    (root / "_tmp").mkdir()
    (root / "_tmp" / "d.csv").write_text("id,tmpdir\n6,t\n")
    (root / "notes.txt").write_text("id,notes\n7,n\n")
    (tmp_path / "outside.csv").write_text("id,outside\n8,o\n")
    os.symlink(tmp_path / "outside.csv", root / "link.csv")
    return root, ["a.csv", "c.csv.gz", "sub/B.CSV"]
