"""A build's own temporary directory: gone when the build ends, but for a job server's root, which goes when the process exits."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

from recordforge.pipelines import scratch


def test_the_directory_goes_when_the_block_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    with scratch.private_tempdir() as path:
        assert os.environ["TMPDIR"] == path and os.path.dirname(path) == str(tmp_path)
        os.makedirs(os.path.join(path, "beam-pipeline-temp1", "x"))
        with open(os.path.join(path, "spill.run"), "wb") as handle:
            handle.write(b"rows")
    assert not os.path.exists(path)


def test_a_job_servers_root_is_left_for_its_exit_hook_then_removed(tmp_path):
    """Beam's PrismRunner keeps its job server for the life of the process
    and deletes the server's root (``beam-temp*``) in an exit hook before it
    stops the server; the root must still be there then."""
    program = textwrap.dedent(f"""
        import atexit, os, tempfile
        from recordforge.pipelines import scratch
        tempfile.tempdir = {str(tmp_path)!r}
        with scratch.private_tempdir() as path:
            root = tempfile.mkdtemp(prefix="beam-temp")  # as SubprocessJobServer.start does
            os.makedirs(os.path.join(path, "beam-pipeline-temp1"))

            def stop_server():  # registered after private_tempdir's, so it runs first
                os.rmdir(root)  # raises if the root is gone, as the server's stop does
                print("server stopped", flush=True)
            atexit.register(stop_server)
        print(sorted(os.listdir(path)), flush=True)
        """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and "Exception" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    left = ast.literal_eval(lines[0])
    assert len(left) == 1 and left[0].startswith("beam-temp"), lines
    assert lines[1] == "server stopped"
    assert os.listdir(tmp_path) == []
