"""`recordforge build` end to end: the same bytes on every runner, and from
the package installed out of an sdist (how Dataflow and Flink workers get it)."""

import hashlib
import os
import pathlib
import subprocess
import sys
import venv

import pytest

from recordforge.pipelines import build
from recordforge.pipelines.publish import verify

REPO = pathlib.Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "configs" / "examples" / "flights.yaml"
FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"


def _digests(version_dir: pathlib.Path) -> dict[str, str]:
    """sha256 of every published data file: shards, dead letters and
    stats.json (the manifest and report carry timestamps and are left out)."""
    files = sorted(p for p in version_dir.rglob("*")
                   if p.is_file() and (".tfrecord" in p.name or p.suffix == ".jsonl"
                                       or p.name == "stats.json"))
    assert files, f"nothing published under {version_dir}"
    return {str(p.relative_to(version_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def _build(config, output, *beam_args, settings=()):
    sets = [arg for setting in settings for arg in ("--set", setting)]
    code = build.run([str(config), "--output", str(output), *sets, "--", *beam_args])
    assert code == 0
    version = (output / "LATEST").read_text().strip()
    assert verify.verify_dataset(str(output / version), deep=True).ok
    return _digests(output / version)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    return {"flights": _build(FLIGHTS, out / "flights", "--direct_running_mode=in_memory"),
            "flowers": _build(FLOWERS, out / "flowers", "--direct_running_mode=in_memory")}


def test_the_bundled_samples_build_with_their_dead_letters(reference):
    assert any(name.startswith("dead_letter/") for name in reference["flights"])
    assert any(name.startswith("dead_letter/") for name in reference["flowers"])
    assert any(name.startswith("train-") for name in reference["flowers"])


@pytest.mark.parametrize("sample", ["flights", "flowers"])
def test_multi_processing_gives_the_same_bytes(reference, tmp_path, sample):
    config = FLIGHTS if sample == "flights" else FLOWERS
    got = _build(config, tmp_path / sample, "--direct_running_mode=multi_processing",
                 "--direct_num_workers=2")
    assert got == reference[sample]


def test_dask_runner_gives_the_same_bytes(reference, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        got = _build(FLIGHTS, tmp_path / "flights",
                     "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                     f"--dask_client_address={cluster.scheduler_address}")
        # The runner's client is closed with the build, not left to reconnect.
        with pytest.raises(ValueError):
            distributed.default_client()
    assert got == reference["flights"]


def test_dask_runner_gives_the_same_bytes_for_images_ordered_by_their_examples(tmp_path):
    """Key-ordered plain images without a key: the Dask build's bucket
    bounds come from a few images read before the run, the local build's
    from its own runs; the bytes are the same."""
    distributed = pytest.importorskip("dask.distributed")
    settings = ("key=null", "output.shuffle=false", "output.compression=none")
    local = _build(FLOWERS, tmp_path / "local", "--direct_running_mode=in_memory",
                   settings=settings)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        got = _build(FLOWERS, tmp_path / "dask",
                     "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                     f"--dask_client_address={cluster.scheduler_address}", settings=settings)
    assert got == local and any(name.startswith("train-") for name in got)


@pytest.mark.slow
def test_build_from_an_installed_sdist_gives_the_same_bytes(reference, tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(dist)], cwd=REPO,
                   check=True, capture_output=True)
    [sdist] = dist.glob("recordforge-*.tar.gz")
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(sdist)], check=True,
                   capture_output=True)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": ""}
    # The config's source path is relative to the repository; the console
    # script's imports come from the new environment's site-packages.
    built = subprocess.run([str(env_dir / "bin" / "recordforge"), "build", str(FLIGHTS),
                            "--output", str(out), "--", "--direct_running_mode=in_memory"],
                           cwd=REPO, capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr
    probe = subprocess.run([str(python), "-c",
                            "import recordforge.pipelines.build as b; print(b.__file__)"],
                           cwd=tmp_path, check=True, capture_output=True, text=True, env=env)
    assert str(env_dir) in probe.stdout and str(REPO) not in probe.stdout
    # The runner profiles ship in the sdist as package data: a worker or a
    # scheduler with only the installed package can expand every one.
    for profile in ("direct", "dask", "flink", "dataflow", "prism"):
        expanded = subprocess.run(
            [str(env_dir / "bin" / "recordforge"), "runner-args", profile], cwd=tmp_path,
            capture_output=True, text=True,
            env={**env, "FLINK_MASTER": "jm:8081", "GCP_PROJECT": "p", "GCP_REGION": "r",
                 "GCS_TEMP": "gs://b/t", "RECORDFORGE_PRISM": "/opt/prism"})
        assert expanded.returncode == 0, expanded.stderr
        assert expanded.stdout.startswith("--runner="), expanded.stdout
    version = (out / "LATEST").read_text().strip()
    assert _digests(out / version) == reference["flights"]
