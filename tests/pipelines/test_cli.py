"""The `recordforge` command line: dispatch, usage and exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from recordforge.pipelines import cli
from recordforge.pipelines.version import __version__

RECORDFORGE = os.path.join(os.path.dirname(sys.executable), "recordforge")


def test_no_arguments_prints_usage_and_exits_2(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: recordforge COMMAND")
    for command in ("build", "verify", "inspect", "runner-args"):
        assert command in err


def test_help_and_version(capsys):
    assert cli.main(["--help"]) == 0
    assert "usage: recordforge" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"recordforge {__version__}"


def test_unknown_command_suggests_one(capsys):
    assert cli.main(["biuld", "x.yaml"]) == 2
    assert "did you mean `build`" in capsys.readouterr().err


def test_version_does_not_import_beam():
    code = ("import sys; from recordforge.pipelines import cli; cli.main(['--version']); "
            "print('apache_beam' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["recordforge", __version__, "False"]


def test_the_console_script_freezes_what_the_command_imported():
    """main() without argv is the console script, whose process ends with the
    command: the objects its import of Beam made are frozen (walked by no
    collection, none at exit), and the collector, paused while it imported,
    is on again."""
    code = ("import gc, sys; from recordforge.pipelines import cli; "
            "sys.argv = ['recordforge', 'build', 'no-such-config.yaml']; status = cli.main(); "
            "print(status, 'apache_beam' in sys.modules, gc.isenabled(), gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:3] == ["2", "True", "True"]
    assert int(out[3]) > 100_000  # Beam alone makes ~170,000 tracked objects


@pytest.mark.parametrize("user_set,expected", [
    ({}, "1"),
    ({"OPENBLAS_NUM_THREADS": "4"}, "4"),
    ({"OMP_NUM_THREADS": "3"}, "None"),
])
def test_the_console_script_asks_openblas_for_one_thread(user_set, expected):
    """The console script's process asks numpy's OpenBLAS for one thread
    before the command imports numpy, unless the user set a count OpenBLAS
    reads; a caller's own process (`main(argv)`) is left as it is."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    code = ("import os, sys; from recordforge.pipelines import cli; cli.main(['--version']); "
            "print(os.environ.get('OPENBLAS_NUM_THREADS')); "
            "sys.argv = ['recordforge', '--version']; cli.main(); "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**env, **user_set}).stdout.splitlines()
    # each --version line, then the variable as the process then has it
    assert out[1::2] == [user_set.get("OPENBLAS_NUM_THREADS", "None"), expected]


def test_a_callers_process_keeps_its_collector():
    """main(argv) runs in a caller's process (tests, a scheduler): it neither
    freezes objects nor leaves the collector changed."""
    import gc

    frozen, enabled = gc.get_freeze_count(), gc.isenabled()
    assert cli.main(["build", "no-such-config.yaml"]) == 2
    assert (gc.get_freeze_count(), gc.isenabled()) == (frozen, enabled)


@pytest.mark.parametrize("mutation,key", [
    ({"output": {"path": "out/x", "shard_size": "256XB"}}, "output.shard_size"),
    ({"splits": {"train": 0.5, "test": 0.4}}, "splits"),
    ({"dead_letters": {}}, "dead_letters"),
])
def test_build_with_an_invalid_config_exits_2_naming_the_key(tmp_path, monkeypatch, capsys,
                                                              mutation, key):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("id\n1\n")
    config = {"name": "t", "version": "1", "source": {"type": "csv", "path": "t.csv"},
              "features": {"id": {"type": "int64"}}, "output": {"path": "out/x"}}
    config.update(mutation)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli.main(["build", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{key}: " in err and str(path) in err
    assert not (tmp_path / "out").exists()  # nothing started


def test_console_script_exit_status_for_a_bad_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: t\nversion: '1'\nsource: {type: images, path: nowhere}\n")
    proc = subprocess.run([RECORDFORGE, "build", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "source.path: nowhere does not exist" in proc.stderr


@pytest.mark.slow
def test_the_console_script_build_ends_without_a_leak_report(tmp_path):
    """The console script collects what the build made before its last
    freeze: frozen garbage holding statistics sketches would outlive the
    teardown of their extension module, whose binding then reports each as
    leaked on stderr as the process exits."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = "import sys; from recordforge.pipelines import cli; sys.exit(cli.main())"
    proc = subprocess.run([sys.executable, "-c", code, "build", "configs/examples/flights.yaml",
                           "--output", str(tmp_path / "out"), "--",
                           "--direct_running_mode=in_memory", "--direct_num_workers=1"],
                          capture_output=True, text=True, cwd=repo, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "dead letters: 4" in proc.stderr and "leaked" not in proc.stderr


def test_verify_of_a_missing_dataset_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["verify", str(tmp_path / "nothing")]) == 2


def test_subcommand_help_exits_0(capsys):
    assert cli.main(["verify", "--help"]) == 0
    assert "usage" in capsys.readouterr().out


def test_runner_args_prints_one_option_per_line(capsys, monkeypatch):
    monkeypatch.setenv("FLINK_MASTER", "jm:8081")
    assert cli.main(["runner-args", "flink"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "--runner=FlinkRunner" and "--flink_master=jm:8081" in lines
    monkeypatch.delenv("FLINK_MASTER")
    assert cli.main(["runner-args", "flink"]) == 2
    assert "FLINK_MASTER is not set" in capsys.readouterr().err
    assert cli.main(["runner-args"]) == 2
    assert "dataflow" in capsys.readouterr().err


@pytest.mark.slow
def test_bundled_flights_example_builds_with_its_dead_letters(tmp_path, monkeypatch, capsys):
    """The shipped sample data and config build from the repository root, and
    the deliberately bad rows show up as dead letters, one reason each."""
    from tfrecord import example_pb2, reader

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.chdir(repo)
    out = tmp_path / "flights"
    status = cli.main(["build", "configs/examples/flights.yaml", "--output", str(out), "--",
                       "--direct_running_mode=in_memory", "--direct_num_workers=1"])
    assert status == 0, capsys.readouterr().err
    version = (out / "LATEST").read_text().strip()
    manifest = json.loads((out / version / "manifest.json").read_text())
    assert manifest["num_input_rows"] == 300
    assert manifest["dead_letter"]["by_reason"] == {
        "csv_ragged_row": 1, "out_of_range": 1, "type_mismatch": 1, "unknown_label": 1}
    assert set(manifest["splits"]) == {"train", "test"}
    ids = set()
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            for record in reader.tfrecord_iterator(str(out / version / shard["file"])):
                example = example_pb2.Example()
                example.ParseFromString(bytes(record))
                ids.add(example.features.feature["flight_id"].int64_list.value[0])
    assert len(ids) == 296 and 100041 not in ids and 100233 not in ids
    assert (out / version / "report.html").exists()
    assert "dead letters: 4" in capsys.readouterr().err
