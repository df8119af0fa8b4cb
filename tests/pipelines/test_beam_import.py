"""The console script imports Beam without what a build does not use (`pipelines.beam_import`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

LEAN = "from recordforge.pipelines.beam_import import import_beam_lean; import_beam_lean(); "
BEAM_S3 = "apache_beam.io.aws.s3filesystem"
BEAM_GCS = "apache_beam.io.gcp.gcsfilesystem"


def test_a_console_build_of_a_small_table_imports_no_pandas_nor_beams_s3_or_gcs(small_table, run_python):
    """A small build spends most of its CPU importing; pandas (Beam imports
    it only for pandas batch types, which no step has) and Beam's S3 and
    GCS filesystems (boto3, google-cloud-storage) are no part of it."""
    tmp_path = small_table(50, "{path: out, shuffle: true}")
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            "atexit.register(lambda: print(*(name in sys.modules for name in "
            f"('pandas', 'boto3', '{BEAM_S3}', 'google.cloud.storage', '{BEAM_GCS}', "
            "'apache_beam')))); sys.exit(cli.main())")
    out = run_python(code, "build", "c.yaml", "--", "--direct_running_mode=in_memory",
               "--direct_num_workers=1", cwd=tmp_path)
    assert out == ["False"] * 5 + ["True"]
    assert (tmp_path / "out" / "LATEST").exists()


def test_what_it_left_out_can_be_imported_after_beam_and_registers_as_usual(run_python):
    code = ("import sys; " + LEAN +
            "print('apache_beam' in sys.modules, 'pandas' in sys.modules); "
            "from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY as known; "
            "from apache_beam.io.filesystems import FileSystems; "
            "print('pandas' in known); import apache_beam.dataframe.schemas; "
            "import pandas; print('pandas' in known, pandas.DataFrame({'a': [1, 2]})['a'].sum()); "
            f"import {BEAM_S3}; print(type(FileSystems.get_filesystem('s3://b/k')).__name__); "
            f"import {BEAM_GCS}; print(type(FileSystems.get_filesystem('gs://b/k')).__name__)")
    assert run_python(code) == ["True", "False", "False", "True", "3", "S3FileSystem", "GCSFileSystem"]


def test_beams_io_names_are_the_ones_a_plain_import_gives_and_its_gcs_client_runs_when_used(run_python):
    """`apache_beam.io` imports the GCS client in the try block that also
    imports the cross-language IO wrappers: deferred, not left out, so
    none of those names goes missing."""
    names = "import apache_beam.io as io; print(len(dir(io)), 'gcsio' in dir(io)); "
    plain = run_python(names)
    code = ("import sys; " + LEAN + names + "gcsio = sys.modules['apache_beam.io.gcp.gcsio']; "
            "print('google.cloud.storage' in sys.modules); gcsio.GcsIO; "
            "print('google.cloud.storage' in sys.modules, type(gcsio).__name__)")
    assert run_python(code) == plain + ["False", "True", "module"]


def test_httplib2_and_requests_run_only_when_first_used(run_python):
    """Beam imports them for its stager's downloads and its BigQuery IO's
    metadata look-up, which a local build never reaches: a console build
    leaves them unrun, and whatever uses them later finds them whole."""
    lazy = ("print(*(type(sys.modules[name]).__name__ == '_LazyModule' "
            "for name in ('httplib2', 'requests'))); ")
    code = ("import sys; " + LEAN + lazy +
            "print('pyparsing' in sys.modules, 'urllib3' in sys.modules); "
            "from apache_beam.internal.http_client import get_new_http; "
            "print(type(get_new_http()).__name__, 'pyparsing' in sys.modules); "
            "from apache_beam.io.gcp import gce_metadata_util; import requests; "
            "print(requests.Session.__name__, gce_metadata_util.requests is requests); "
            + lazy)
    assert run_python(code) == ["True", "True", "False", "False", "Http", "True", "Session", "True",
                          "False", "False"]


def test_threads_that_first_import_httplib2_and_requests_together_all_find_them_whole(run_python):
    """Libraries such as google-auth import them from whatever thread needs
    them first: every thread waits for the one running the module (with
    the standard library's loader on Python 3.11 most of these threads
    got ``AttributeError``)."""
    code = ("import sys, threading; " + LEAN +
            "start = threading.Barrier(8); failures = []\n"
            "def use(i):\n"
            "    start.wait()\n"
            "    try:\n"
            "        if i % 2:\n"
            "            import requests; requests.Session\n"
            "        else:\n"
            "            import httplib2; httplib2.Http\n"
            "    except Exception as error:\n"
            "        failures.append(repr(error))\n"
            "threads = [threading.Thread(target=use, args=(i,)) for i in range(8)]\n"
            "[t.start() for t in threads]; [t.join() for t in threads]\n"
            "print(len(failures), *failures)")
    assert run_python(code) == ["0"]


def test_beams_mongodb_io_takes_its_fallback_quietly_and_pymongo_imports_after():
    """pymongo and bson are left out: Beam's MongoDB IO, which no build
    uses, takes the fallback Beam has for an incompatible bson package,
    without its warning about that package; both import as usual after."""
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO); " + LEAN +
            "import apache_beam.io.mongodbio as mongodbio; "
            "print('pymongo' in sys.modules, 'bson' in sys.modules, "
            "mongodbio.MongoClient is None, hasattr(mongodbio, 'ReadFromMongoDB')); "
            "import pymongo, bson; print(pymongo.MongoClient.__name__, bson.ObjectId.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "True", "True", "MongoClient", "ObjectId"]
    assert "bson" not in proc.stderr


def test_a_console_build_of_a_small_table_imports_no_pymongo_and_runs_no_httplib2(small_table, run_python):
    tmp_path = small_table(20)
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            "atexit.register(lambda: print(*(name in sys.modules for name in "
            "('pyparsing', 'urllib3', 'pymongo', 'bson', 'httplib2', 'requests')))); "
            "sys.exit(cli.main())")
    out = run_python(code, "build", "c.yaml", "--", "--direct_running_mode=in_memory",
               "--direct_num_workers=1", cwd=tmp_path)
    assert out == ["False"] * 4 + ["True", "True"]  # the last two imported, never run


@pytest.mark.parametrize("args,s3,gcs", [
    (["--direct_num_workers=1", "--temp_location=/tmp/x"], False, False),
    (["--temp_location", "S3://bucket/tmp"], True, False),
    (["--staging_location=gs://bucket/staging"], False, True),
    (["--runner=DataflowRunner", "--project=p"], False, True),
])
def test_beams_object_store_filesystems_are_imported_when_an_option_can_reach_one(args, s3, gcs, run_python):
    code = ("import sys; " + LEAN + "from recordforge.pipelines.beam_import import "
            f"import_beam_filesystems; import_beam_filesystems({args!r}); "
            "from apache_beam.io.filesystem import FileSystem; "
            "schemes = {fs.scheme() for fs in FileSystem.get_all_subclasses()}; "
            "print('hdfs' in schemes, 's3' in schemes, 'gs' in schemes)")
    assert run_python(code) == ["True", str(s3), str(gcs)]


@pytest.mark.parametrize("command", [["verify", "no-such-dataset"], ["install-prism", "--help"]])
def test_the_console_scripts_other_commands_import_no_beam_for_it(command):
    code = ("import atexit, sys; from recordforge.pipelines import cli; "
            "atexit.register(lambda: print('apache_beam' in sys.modules)); cli.main()")
    proc = subprocess.run([sys.executable, "-c", code, *command], capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.split()[-1:] == ["False"], proc.stderr


@pytest.mark.parametrize("first", ["pandas", "apache_beam"])
def test_it_leaves_a_process_that_imported_either_already_as_it_is(first, run_python):
    code = (f"import sys, {first}; " + LEAN + "import apache_beam; "
            "from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY as known; "
            "print('pandas' in sys.modules, 'pandas' in known)")
    assert run_python(code) == ["True", "True"]
