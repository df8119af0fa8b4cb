"""A lazily run module is run once, by one thread, and every thread sees it whole (`pipelines.lazy_modules`)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.pipelines.lazy_modules import LazyLoader

# The body sleeps while half run, so that threads arriving together find it
# running: the window in which the unlocked loader hands out the half-run module.
BODY = """
import time
runs.append(1)
first = 1
time.sleep({pause})
{names}
def own_names():
    return sorted(name for name in globals() if name.startswith("name_"))
"""
_names = itertools.count()


def _lazy_module(tmp_path, loader, names, pause=0.05):
    """A new module of `names` (each = its index) whose body runs lazily;
    its ``runs`` list gets an item each time the body runs."""
    name = f"lazy_probe_{next(_names)}"
    path = tmp_path / f"{name}.py"
    path.write_text(BODY.format(pause=pause, names="\n".join(
        f"{attr} = {i}" for i, attr in enumerate(names))))
    spec = importlib.util.spec_from_file_location(name, path)
    spec.loader = loader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    module.runs = []  # set before it runs: kept, as an eager import would keep it
    return module


def _race(module, names, threads):
    """Every thread looks up every name (some by importing the module
    again) at the same moment; returns what failed."""
    start = threading.Barrier(threads)
    failures = []

    def use(index):
        start.wait()
        try:
            target = module if index % 2 else importlib.import_module(module.__name__)
            for i, attr in enumerate(names):
                assert getattr(target, attr) == i
        except Exception as error:  # collected: the test asserts there were none
            failures.append(repr(error))

    workers = [threading.Thread(target=use, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures


@pytest.fixture
def cleanup_modules():
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@settings(max_examples=8, deadline=None)
@given(names=st.lists(st.from_regex(r"name_[a-z]{1,6}", fullmatch=True), min_size=1,
                      max_size=6, unique=True),
       threads=st.integers(2, 8))
def test_threads_that_race_to_a_lazy_module_all_find_it_whole(tmp_path_factory, names, threads):
    tmp_path = tmp_path_factory.mktemp("lazy")
    module = _lazy_module(tmp_path, LazyLoader, names)
    try:
        assert _race(module, names, threads) == []
        assert module.runs == [1]  # run once, and the list set before it ran kept
        assert module.own_names() == sorted(names)
        assert type(module).__name__ == "module"
    finally:
        del sys.modules[module.__name__]


@pytest.mark.skipif(sys.version_info >= (3, 12, 3), reason="the standard loader locks there")
def test_the_standard_loader_hands_out_the_half_run_module_here(tmp_path, cleanup_modules):
    """What the race above catches: the loader of this Python, unlocked."""
    names = ["name_a", "name_b"]
    module = _lazy_module(tmp_path, importlib.util.LazyLoader, names, pause=0.2)
    assert any("AttributeError" in failure for failure in _race(module, names, 8))


def test_a_lazy_module_runs_at_its_first_lookup_not_before(tmp_path, cleanup_modules):
    module = _lazy_module(tmp_path, LazyLoader, ["name_a"], pause=0)
    assert type(module).__name__ == "_LazyModule"
    assert object.__getattribute__(module, "runs") == []
    assert module.name_a == 0
    assert module.runs == [1] and type(module).__name__ == "module"


def test_deleting_a_name_runs_the_module_first_and_a_missing_name_raises(tmp_path,
                                                                         cleanup_modules):
    module = _lazy_module(tmp_path, LazyLoader, ["name_a", "name_b"], pause=0)
    del module.name_a
    assert module.runs == [1] and not hasattr(module, "name_a") and module.name_b == 1
    other = _lazy_module(tmp_path, LazyLoader, ["name_a"], pause=0)
    with pytest.raises(AttributeError):
        del other.name_missing
    assert other.runs == [1]


def test_a_body_that_looks_itself_up_while_running_sees_what_it_has_defined(tmp_path,
                                                                           cleanup_modules):
    """Its own lookups, made by the thread running it, go through without
    waiting for the lock it holds."""
    path = tmp_path / "lazy_self_probe.py"
    path.write_text("import sys\nfirst = 1\nsecond = sys.modules[__name__].first + 1\n")
    spec = importlib.util.spec_from_file_location("lazy_self_probe", path)
    spec.loader = LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["lazy_self_probe"] = module
    spec.loader.exec_module(module)
    assert module.second == 2
