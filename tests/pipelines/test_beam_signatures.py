"""Beam's parameter look-up of DoFn methods, made once per function (`pipelines.beam_signatures`)."""

from __future__ import annotations


import apache_beam as beam
from apache_beam.transforms import core, userstate
from apache_beam.coders import VarIntCoder

from recordforge.pipelines.beam_signatures import per_function

ORIGINAL = core.get_function_args_defaults


class _Counted:
    """Beam's look-up, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, f):
        self.calls += 1
        return ORIGINAL(f)


class _Stateful(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT),
                timestamp=beam.DoFn.TimestampParam):
        yield element


def test_a_bound_methods_answer_is_beams_and_is_looked_up_once_per_function():
    counted = _Counted()
    look_up = per_function(counted)
    first, second = _Stateful(), _Stateful()
    answers = [look_up(dofn.process) for dofn in (first, second, first)]
    assert answers == [ORIGINAL(first.process)] * 3
    assert answers[0][0] == ["element", "count", "timestamp"]
    assert counted.calls == 1
    for method in ("start_bundle", "default_label", "process"):
        assert look_up(getattr(second, method)) == ORIGINAL(getattr(second, method))


def test_each_caller_gets_lists_of_its_own():
    look_up = per_function(ORIGINAL)
    args, defaults = look_up(_Stateful().process)
    args.append("mutated"), defaults.clear()
    assert look_up(_Stateful().process) == ORIGINAL(_Stateful().process)


def test_anything_but_a_bound_method_of_a_function_is_looked_up_each_time():
    counted = _Counted()
    look_up = per_function(counted)

    class Callable:
        def __call__(self, a, b=2):
            return a

    for f in (lambda x, y=1: x, Callable(), len, str.strip):
        assert look_up(f) == ORIGINAL(f)
        assert look_up(f) == ORIGINAL(f)
    assert counted.calls == 8


def test_beams_state_and_timer_look_up_finds_the_same_specs_through_it():
    memoized = per_function(ORIGINAL)
    plain = userstate.get_dofn_specs(_Stateful())
    core.get_function_args_defaults = memoized
    try:
        for _ in range(2):
            assert userstate.get_dofn_specs(_Stateful()) == plain
            assert userstate.is_stateful_dofn(_Stateful())
            assert not userstate.is_stateful_dofn(beam.Map(len).dofn)
    finally:
        core.get_function_args_defaults = ORIGINAL
    assert plain[0] == {_Stateful.COUNT}


MEMOIZED = ("from apache_beam.transforms import core; "
            "print(getattr(core.get_function_args_defaults, 'memoized_per_function', False))")


def test_installed_once_per_process(run_python):
    code = ("from recordforge.pipelines.beam_signatures import memoize_method_signatures; "
            "from apache_beam.transforms import core; before = core.get_function_args_defaults; "
            "memoize_method_signatures(); once = core.get_function_args_defaults; "
            "memoize_method_signatures(); "
            "print(once is not before, core.get_function_args_defaults is once)")
    assert run_python(code) == ["True", "True"]


def test_a_console_build_installs_it(small_table, run_python):
    tmp_path = small_table(20)
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            f"atexit.register(lambda: exec({MEMOIZED!r})); sys.exit(cli.main())")
    assert run_python(code, "build", "c.yaml", "--", "--direct_running_mode=in_memory",
                "--direct_num_workers=1", cwd=tmp_path) == ["True"]
    assert (tmp_path / "out" / "LATEST").exists()


def test_a_local_worker_installs_it_before_beams_worker_starts(run_python):
    code = ("from apache_beam.runners.worker import sdk_worker_main; "
            f"sdk_worker_main.main = lambda argv: exec({MEMOIZED!r}); "
            "from recordforge.pipelines import sdk_worker; sdk_worker.main()")
    assert run_python(code) == ["True"]
