"""Portable runners, really run: the same build on Beam's Prism runner and
through Beam's FlinkRunner client against a portable job service gives the
DirectRunner's bytes, shard for shard.

Prism is the binary `recordforge install-prism` builds; the Prism build uses
`recordforge runner-args prism` as a user would. For Flink, the client part
of a Flink build runs for real (`runner-args flink`, then `--job_endpoint`
and `--environment_type=LOOPBACK`) against Prism started as a standalone job
server: Beam's Flink job server itself is a Java jar that is not published
to the package registries these machines reach (configs/runners/README.md).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]

FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"
TABLE_ROWS = 50_000


@pytest.fixture(scope="module")
def table_config(tmp_path_factory, support):
    return support.write_table(tmp_path_factory.mktemp("table"), TABLE_ROWS)


@pytest.fixture(scope="module")
def key_order_config(tmp_path_factory, support):
    """The table in key order: on Prism, its rows go to buckets whose
    bounds the build sampled from the CSV before the run."""
    return support.write_table(tmp_path_factory.mktemp("ordered"), TABLE_ROWS, shuffle=False)


@pytest.fixture(scope="module")
def direct(tmp_path_factory, table_config, key_order_config, support):
    """The DirectRunner's (recordforge's local default) digests of the builds."""
    import fsspec
    out = tmp_path_factory.mktemp("direct")
    found = {}
    for name, config in (("flowers", FLOWERS), ("table", table_config),
                         ("key-order", key_order_config)):
        support.run_recordforge("build", config, "--output", out / name, env=support.base_env())
        found[name] = support.digests(fsspec.filesystem("file"), str(out / name / "1.0.0"))
    return found


def _built(support, output) -> tuple[dict, dict]:
    """(digests, manifest) of the version LATEST names, after `verify --deep`."""
    import fsspec
    support.run_recordforge("verify", output, "--deep", env=support.base_env())
    version = (output / "LATEST").read_text().strip()
    manifest = json.loads((output / version / "manifest.json").read_text())
    return support.digests(fsspec.filesystem("file"), str(output / version)), manifest


def test_prism_builds_the_same_bytes_as_the_direct_runner(prism_binary, direct, table_config,
                                                           key_order_config, tmp_path, support):
    env = support.base_env()
    profile = support.run_recordforge("runner-args", "prism", env=env).stdout.split()
    assert profile[:2] == ["--runner=PrismRunner", f"--prism_location={prism_binary}"]
    running = _processes_of(prism_binary)
    for name, config in (("flowers", FLOWERS), ("table", table_config),
                         ("key-order", key_order_config)):
        built = support.run_recordforge("build", config, "--output", tmp_path / name, "--",
                                        *profile, env=env)
        # The Prism server Beam started for the build stopped with it, cleanly.
        assert _processes_of(prism_binary) <= running
        assert "Exception ignored" not in built.stderr, built.stderr
        got, manifest = _built(support, tmp_path / name)
        assert manifest["tool"]["runner"] == "PrismRunner"
        assert got == direct[name], f"{name}: Prism's shards differ from the DirectRunner's"
    table = json.loads((tmp_path / "table" / "1.0.0" / "manifest.json").read_text())
    assert table["num_input_rows"] == TABLE_ROWS
    assert sum(len(split["shards"]) for split in table["splits"].values()) > 3


def _processes_of(binary) -> set[int]:
    """The pids of the processes running `binary`."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if cmdline.read().split(b"\0")[0] == os.fsencode(str(binary)):
                        found.add(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
def prism_job_server(prism_binary, tmp_path, support):
    """Prism as a standalone portable job service on loopback: HOST:PORT."""
    port = support.free_port()
    log = tmp_path / "prism-job-server.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen([prism_binary, f"--job_port={port}", "--serve_http=false"],
                                   stdout=handle, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        support.wait_for_port(port, process, log)
        yield f"localhost:{port}", log
    finally:
        support.stop(process)


def test_flink_runner_client_against_a_job_service_gives_the_same_bytes(
        prism_job_server, direct, table_config, tmp_path, support):
    endpoint, log = prism_job_server
    # The profile needs FLINK_MASTER; with --job_endpoint the client submits
    # to that job service and never contacts a JobManager.
    env = support.base_env(FLINK_MASTER="localhost:8081")
    profile = support.run_recordforge("runner-args", "flink", env=env).stdout.split()
    assert "--runner=FlinkRunner" in profile
    beam_args = [*profile, f"--job_endpoint={endpoint}", "--environment_type=LOOPBACK"]
    for name, config in (("flowers", FLOWERS), ("table", table_config)):
        # From the repository root: the profile's --setup_file=./setup.py is
        # staged to the job service as an sdist, as for a real cluster.
        support.run_recordforge("build", config, "--output", tmp_path / name, "--", *beam_args,
                                env=env, cwd=REPO)
        got, manifest = _built(support, tmp_path / name)
        assert manifest["tool"]["runner"] == "FlinkRunner"
        assert got == direct[name], f"{name}: the FlinkRunner build's shards differ"
    # Both jobs went through the job service.
    assert log.read_text(errors="replace").count("pipeline done") >= 2
