"""The `recordforge` command: dispatches to one subcommand module.

    recordforge build CONFIG.yaml [--set KEY=VALUE ...] [--output URL] [--overwrite] [-- BEAM_OPTIONS ...]
    recordforge verify DATASET_DIR [--deep]
    recordforge inspect PATH [--limit N]
    recordforge runner-args PROFILE
    recordforge install-prism [--go GO] [--cache-dir DIR]

Each subcommand module owns its flags and returns its exit status; this module
only picks the module, imported lazily so `recordforge --help` and a bad
command answer without importing Beam. Exit status: 0 success; 1 the command
failed (build: nothing published; verify: damage found); 2 bad usage or an
invalid config.
"""

from __future__ import annotations

# Before anything else: Ctrl-C while the command starts (importing Beam takes
# seconds) then prints one line, not a traceback.
from . import signals

signals.install_first()

import contextlib  # noqa: E402 (after the signal handler, on purpose)
import gc  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Sequence  # noqa: E402

__all__ = ["COMMANDS", "main"]

# command -> (module, function taking argv and returning the exit status, summary)
COMMANDS = {
    "build": ("recordforge.pipelines.build", "run",
              "build and publish a dataset version from a config"),
    "verify": ("recordforge.pipelines.publish.verify", "main",
               "re-read a published dataset and check sizes, checksums and records"),
    "inspect": ("recordforge.pipelines.publish.inspect", "main",
                "print records of a shard, dataset or dead-letter file as JSON lines"),
    "init": ("recordforge.pipelines.init", "main",
             "infer a dataset config from a table or an image directory"),
    "runner-args": ("recordforge.pipelines.cli", "runner_args",
                    "print the Beam options of a runner profile (configs/runners/)"),
    "install-prism": ("recordforge.pipelines.prism", "main",
                      "build Beam's Prism runner into the cache (for `runner-args prism`)"),
}

USAGE = """\
usage: recordforge COMMAND [ARGS ...]
       recordforge --version

commands:
{commands}

Run `recordforge COMMAND --help` for a command's options. Exit status: 0 success;
1 the command failed (build: nothing was published); 2 bad usage or invalid config.
"""


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {summary}" for name, (_, _, summary) in COMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def runner_args(argv: Sequence[str]) -> int:
    """``recordforge runner-args PROFILE``: prints a runner profile's Beam
    options one per line, for ``recordforge build CONFIG -- $(recordforge runner-args dataflow)``."""
    from .config import load_runner_profile, runner_profile_names
    from ..schemas.errors import ConfigError

    argv = list(argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        names = ", ".join(runner_profile_names())
        stream = sys.stdout if argv in (["-h"], ["--help"]) else sys.stderr
        print("usage: recordforge runner-args PROFILE\n\nPROFILE: a name from configs/runners/ "
              f"({names}) or the path of a YAML file with an `args:` list.", file=stream)
        return 0 if stream is sys.stdout else 2
    try:
        args = load_runner_profile(argv[0])
    except ConfigError as error:
        print(f"recordforge runner-args: {error}", file=sys.stderr)
        return 2
    print("\n".join(args))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `recordforge` console script; returns the exit status.

    Without `argv` (the console script: the process ends when this returns)
    the objects the command imported are kept out of the garbage collector's
    passes (`_freeze_heap`); with `argv` (a caller's own process) nothing is."""
    console = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if console:
        _one_blas_thread()
    with signals.commanding():
        try:
            status = _dispatch(argv, console)
            signals.raise_swallowed()  # a signal whose exception Python ignored
            return status
        except KeyboardInterrupt as interrupt:  # while a subcommand was imported or ran
            return _interrupted(argv, interrupt)
        except Exception as error:
            # Python 3.11 passes an exception raised inside `__set_name__`
            # (a dataclass's fields, as a module the command imports makes
            # one) on as a RuntimeError raised from it: a signal's there too.
            interrupt = _interrupt_behind(error)
            if interrupt is None:
                raise
            return _interrupted(argv, interrupt)
        finally:
            _freeze_heap(console, collect_first=True)


def _interrupted(argv: Sequence[str], interrupt: KeyboardInterrupt) -> int:
    """Says the command was interrupted; its exit status (128 + signal)."""
    command = argv[0] if argv else ""
    print(f"recordforge {command}: interrupted", file=sys.stderr)
    return getattr(interrupt, "exit_status", 130)


def _interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt `error` was raised from (``raise ... from``,
    followed through its causes), or None."""
    seen = set()
    cause = error.__cause__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def _one_blas_thread() -> None:
    """Numpy's OpenBLAS starts a thread per core as numpy is imported (Beam
    imports it), and each spins for a while before it sleeps: ~0.02 s of
    CPU per process on another core, for nothing: a build calls no BLAS
    routine large enough to split across threads (the image hash's 32x32
    products run on one thread either way). The console
    script's process (and the workers it starts, which inherit it) asks
    for one, unless the user set a count OpenBLAS reads."""
    if not {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"} & set(os.environ):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


@contextlib.contextmanager
def _imports_frozen(console: bool):
    """Around importing the command's module in the console script's
    process: the collector paused while it imports (three full collections
    otherwise), then everything alive frozen (`_freeze_heap`), the little
    garbage the imports left included: collecting it first would walk all
    ~290,000 objects once more (~0.15 s of CPU) to free ~2,000 (~1 MB)."""
    paused = console and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        _freeze_heap(console)
        if paused:
            gc.enable()


def _freeze_heap(console: bool, collect_first: bool = False) -> None:
    """Moves every object alive now out of the cyclic garbage collector's
    reach (`gc.freeze`), in the console script's process only.

    Importing Beam leaves some 170,000 tracked objects (modules, classes,
    functions, protobuf descriptors) that live as long as the process. The
    collector walks them all in every full collection: three while they
    are imported (~0.15 s of CPU) and a last one as the interpreter exits,
    which then tears down whatever it found (on a small build the process
    spent ~0.3 s more CPU after its last `atexit` hook than with them
    frozen). Frozen once the command's module is imported and again when
    the command has returned, they are walked by no collection but one:
    `collect_first`, when the command has returned, walks only what the
    command made (~10 ms on a small build) and frees its garbage cycles,
    some holding statistics sketches, which frozen would outlive the
    interpreter's teardown of their extension module (which reports each
    on stderr as leaked). Nothing is lost: frozen objects are still freed
    when their last reference goes, and every file a command writes is
    closed (and synced) before it returns. A caller's own process
    (`main(argv)`: tests, a scheduler) keeps the collector as it set it."""
    if console:
        if collect_first:
            gc.collect()
        gc.freeze()


def _dispatch(argv: list[str], console: bool = False) -> int:
    if not argv:
        sys.stderr.write(_usage())
        return 2
    command, rest = argv[0], argv[1:]
    if command in ("-h", "--help", "help"):
        sys.stdout.write(_usage())
        return 0
    if command == "--version":
        from .version import __version__
        print(f"recordforge {__version__}")
        return 0
    if command not in COMMANDS:
        import difflib
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        sys.stderr.write(f"recordforge: unknown command {command!r}{hint}\n\n{_usage()}")
        return 2
    module_name, function_name, _ = COMMANDS[command]
    ours = rest[:rest.index("--")] if "--" in rest else rest
    if command == "build" and not {"-v", "--verbose"} & set(ours):
        # Beam logs warnings while it is imported, before `build` can quiet it.
        from .progress import hide_beam_noise
        hide_beam_noise(False)
    with _imports_frozen(console):
        if console and command == "build":
            # Most of a small build's CPU (`beam_import`); the other
            # commands import Beam late or not at all.
            from .beam_import import import_beam_lean
            import_beam_lean()
            # ~8% of a small build: Beam inspects each DoFn method ~8 times.
            from .beam_signatures import memoize_method_signatures
            memoize_method_signatures()
            # Each stage's bundle otherwise ends up to 200 ms late.
            from .beam_sampler import sample_promptly
            sample_promptly()
        function = getattr(importlib.import_module(module_name), function_name)
        from ..schemas.errors import ConfigError
    try:
        status = function(rest)
    except ConfigError as error:  # a subcommand that lets one escape still exits 2
        print(f"recordforge {command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `recordforge inspect ... | head`
        # Point stdout at /dev/null so the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except SystemExit as exit_:  # argparse inside a subcommand
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
