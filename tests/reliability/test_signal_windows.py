"""Signals that land where the build used to lose them or leave files (`pipelines.signals`).

A handler's `Interrupted` lands wherever the main thread is. Inside a
weakref callback (the import system's module-lock clean-up is one, and
Beam's import takes a second) Python ignores it and prints "Exception
ignored in": CI saw a SIGTERM lost that way, and the build published. Here
the signal is delivered inside a weakref callback, deterministically, at
each phase of a real console build. And one that landed after the staging
directory was made, before the build guarded it, left the directory behind.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="POSIX signals sent to this process")

# Sends `signum` to this process from inside a weakref callback: the
# handler runs, and raises, inside the callback.
SWALLOW = textwrap.dedent("""\
    import os, weakref

    def swallow(signum):
        class Thing:
            pass
        thing = Thing()
        ref = weakref.ref(thing, lambda _: (os.kill(os.getpid(), signum), sum(range(100))))
        del thing
        return ref
    """)

# Where the build is when its signal is swallowed: what is patched to swallow it.
PHASES = {
    # `_handle_first`'s exception, before the build's own handling starts.
    "starting": ("recordforge.pipelines.build", "run"),
    # `_handle`'s exception, with the pipeline still to run.
    "building": ("recordforge.pipelines.build", "load_config"),
    # `_handle`'s exception, the shards written, before verification and commit.
    "publishing": ("recordforge.pipelines.publish.finalizing", "_verify_staged"),
}

CONFIG = textwrap.dedent("""\
    name: swallowed
    version: "1.0.0"
    source: {{type: csv, path: {csv}}}
    features:
      id: {{type: int64}}
    key: id
    output: {{path: "{output}", compression: none}}
    """)


def _build_swallowing(tmp_path, phase: str, signum: int) -> subprocess.CompletedProcess:
    module, name = PHASES[phase]
    (tmp_path / "rows.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(50)))
    (tmp_path / "c.yaml").write_text(CONFIG.format(csv=tmp_path / "rows.csv",
                                                   output=tmp_path / "out"))
    code = SWALLOW + textwrap.dedent(f"""\
        import importlib, sys
        from recordforge.pipelines import cli
        target = importlib.import_module({module!r})
        original = getattr(target, {name!r})

        def swallowing(*args, **kwargs):
            swallow({int(signum)})
            print("swallowed", file=sys.stderr, flush=True)
            return original(*args, **kwargs)

        setattr(target, {name!r}, swallowing)
        sys.exit(cli.main())
        """)
    return subprocess.run([sys.executable, "-c", code, "build", "c.yaml", "--",
                           "--direct_running_mode=in_memory", "--direct_num_workers=1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_signal_python_ignored_stops_the_build_before_it_publishes(tmp_path, phase, signum):
    proc = _build_swallowing(tmp_path, phase, signum)
    stderr = proc.stderr
    assert "swallowed" in stderr, stderr[-3000:]  # the patched step ran
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
    assert proc.returncode == 128 + signum, stderr[-3000:]
    assert "interrupted" in stderr.splitlines()[-1], stderr[-3000:]
    assert not (tmp_path / "out" / "LATEST").exists()
    staged = tmp_path / "out" / ".staging"
    assert not staged.exists() or not any(staged.iterdir()), list(staged.iterdir())


def test_a_command_that_returns_after_its_signal_was_ignored_exits_with_its_status(tmp_path):
    """Not a build: the command's status says the interruption too."""
    code = SWALLOW + textwrap.dedent("""\
        import signal, sys
        from recordforge.pipelines import cli, signals
        with signals.commanding():
            swallow(signal.SIGTERM)
            print("ran on", flush=True)
            try:
                signals.raise_swallowed()
            except signals.Interrupted as interrupt:
                print("raised", interrupt.exit_status, flush=True)
            signals.raise_swallowed()  # once only
            print("once", flush=True)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran", "on", "raised", "143", "once"]
    assert proc.stderr == ""


def test_other_ignored_exceptions_still_print_and_the_hook_is_put_back(tmp_path):
    code = textwrap.dedent("""\
        import sys, weakref
        from recordforge.pipelines import signals

        def raise_in_callback():
            class Thing:
                pass
            thing = Thing()
            ref = weakref.ref(thing, lambda _: 1 / 0)
            del thing

        before = sys.unraisablehook
        with signals.commanding():
            raise_in_callback()
        print(sys.unraisablehook is before, flush=True)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]
    assert "Exception ignored" in proc.stderr and "ZeroDivisionError" in proc.stderr


def test_a_signal_while_the_staging_is_made_leaves_no_staging(tmp_path):
    """The signal arrives right after the staging directory is made (the
    handler runs before the call returns): the build stops, and deletes it."""
    (tmp_path / "rows.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(50)))
    (tmp_path / "c.yaml").write_text(CONFIG.format(csv=tmp_path / "rows.csv",
                                                   output=tmp_path / "out"))
    code = textwrap.dedent("""\
        import os, signal, sys
        from recordforge.pipelines import cli, publish
        original = publish.begin_build

        def begin_then_signal(*args, **kwargs):
            staging = original(*args, **kwargs)
            print("made", os.path.isdir(staging.directory), file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(100))  # the handler runs here, before the staging is returned
            return staging

        publish.begin_build = begin_then_signal
        sys.exit(cli.main())
        """)
    proc = subprocess.run([sys.executable, "-c", code, "build", "c.yaml", "--",
                           "--direct_running_mode=in_memory", "--direct_num_workers=1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "made True" in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    assert "interrupted" in proc.stderr.splitlines()[-1], proc.stderr[-3000:]
    staged = tmp_path / "out" / ".staging"
    assert not staged.exists() or not any(staged.iterdir()), list(staged.iterdir())


def test_a_staging_that_fails_half_made_is_removed(tmp_path, monkeypatch):
    """Its directory made, its scratch directory refused: neither the
    directory nor the owner file stays."""
    from fsspec.implementations.local import LocalFileSystem

    from recordforge.pipelines import publish
    from recordforge.transforms.layout import TMP_DIR

    makedirs = LocalFileSystem.makedirs

    def refusing(self, path, exist_ok=False):
        if str(path).rstrip("/").endswith("/" + TMP_DIR):
            raise PermissionError(13, "refused", path)
        return makedirs(self, path, exist_ok=exist_ok)

    monkeypatch.setattr(LocalFileSystem, "makedirs", refusing)
    with pytest.raises(PermissionError):
        publish.begin_build(str(tmp_path / "out"), "1.0.0")
    assert list((tmp_path / "out" / ".staging").iterdir()) == []
