"""Beam's state sampler with a short longest period (`pipelines.beam_sampler`)."""

from __future__ import annotations


from recordforge.pipelines.beam_sampler import SAMPLING_PERIOD_MS


def test_installed_once_per_process_for_the_samplers_beam_makes(run_python):
    code = ("from recordforge.pipelines.beam_sampler import sample_promptly; "
            "from apache_beam.runners.worker import statesampler; "
            "from apache_beam.utils.counters import CounterFactory; "
            "before = statesampler.StateSampler; sample_promptly(); once = statesampler.StateSampler; "
            "sample_promptly(); "
            "made = statesampler.StateSampler('fnapi-step-1', CounterFactory()); "
            "own = statesampler.StateSampler('fnapi-step-2', CounterFactory(), 50); "
            "print(once is not before, statesampler.StateSampler is once, "
            "issubclass(once, before), made.sampling_period_ms, own.sampling_period_ms)")
    assert run_python(code) == ["True", "True", "True", str(SAMPLING_PERIOD_MS), "50"]


def test_beams_own_sampler_is_left_alone_in_a_callers_process(run_python):
    code = ("import recordforge.pipelines.beam_sampler; "
            "from apache_beam.runners.worker import statesampler; "
            "from apache_beam.utils.counters import CounterFactory; "
            "print(statesampler.StateSampler('p', CounterFactory()).sampling_period_ms)")
    assert run_python(code) == ["200"]


def test_a_sampler_stops_and_counts_as_beams_does(run_python):
    code = ("import time; from recordforge.pipelines.beam_sampler import PromptStateSampler; "
            "from apache_beam.utils.counters import CounterFactory; "
            "sampler = PromptStateSampler('p', CounterFactory()); sampler.start(); "
            "state = sampler.scoped_state('step', 'process'); "
            "state.__enter__(); time.sleep(0.3); state.__exit__(None, None, None); "
            "sampler.stop(); print(sampler.finished, 100 <= state.sampled_msecs_int() <= 2000)")
    assert run_python(code) == ["True", "True"]


def test_every_bundle_of_a_console_build_uses_it(small_table, run_python):
    tmp_path = small_table(20)
    code = ("import atexit, sys; from apache_beam.runners.worker import bundle_processor; "
            "made = set(); init = bundle_processor.BundleProcessor.__init__\n"
            "def recording(self, *args, **kwargs):\n"
            "    init(self, *args, **kwargs)\n"
            "    made.add((type(self.state_sampler).__name__, self.state_sampler.sampling_period_ms))\n"
            "bundle_processor.BundleProcessor.__init__ = recording\n"
            "atexit.register(lambda: print(*sorted(made)))\n"
            "from recordforge.pipelines import cli; sys.exit(cli.main())")
    printed = run_python(code, "build", "c.yaml", "--", "--direct_running_mode=in_memory",
                   "--direct_num_workers=1", cwd=tmp_path)
    assert printed == ["('PromptStateSampler',", f"{SAMPLING_PERIOD_MS})"]
    assert (tmp_path / "out" / "LATEST").exists()


def test_a_local_worker_installs_it_before_beams_worker_starts(run_python):
    code = ("from apache_beam.runners.worker import sdk_worker_main; "
            "sdk_worker_main.main = lambda argv: print("
            "__import__('apache_beam.runners.worker.statesampler', fromlist=['x'])"
            ".StateSampler.__name__); "
            "from recordforge.pipelines import sdk_worker; sdk_worker.main()")
    assert run_python(code) == ["PromptStateSampler"]
