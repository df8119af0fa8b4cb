"""The output keys of readers that share a split: output.index (index
files) and output.shard_count_multiple (shard counts that divide)."""

from __future__ import annotations

import pathlib

import pytest

from recordforge.pipelines.config import load_config
from recordforge.schemas.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[2]


def _config(**output):
    return {"name": "t", "version": "1", "source": {"type": "csv", "path": str(
        REPO / "examples" / "tables" / "flights.csv")},
        "features": {"flight_id": {"type": "int64"}}, "splits": {"train": 1.0},
        "output": {"path": "/tmp/unused", **output}}


def test_output_index_defaults_to_uncompressed_output_only():
    assert load_config(_config()).output.index is True
    assert load_config(_config(compression="gzip")).output.index is False
    assert load_config(_config(index=False)).output.index is False
    assert load_config(_config()).resolved["output"]["index"] is True


def test_output_index_refuses_gzip_and_non_booleans():
    with pytest.raises(ConfigError, match="output.index: gzip shards have no index: a gzip "
                                          "file has no random access"):
        load_config(_config(compression="gzip", index=True))
    with pytest.raises(ConfigError, match="output.index: must be true or false"):
        load_config(_config(index="yes"))


def test_shard_count_multiple_defaults_to_one_and_takes_whole_numbers():
    assert load_config(_config()).output.shard_count_multiple == 1
    assert load_config(_config(shard_count_multiple=8)).output.shard_count_multiple == 8
    assert load_config(_config(shard_count_multiple=8)).resolved["output"][
        "shard_count_multiple"] == 8
    for bad in (0, -1, 1.5, "8", True, 100_001):
        with pytest.raises(ConfigError, match="output.shard_count_multiple: must be a whole "
                                              "number from 1 to 100,000"):
            load_config(_config(shard_count_multiple=bad))


def test_output_format_defaults_to_tfrecord_and_takes_array_record():
    assert load_config(_config()).output.file_format == "tfrecord"
    assert load_config(_config()).resolved["output"]["format"] == "tfrecord"
    chosen = load_config(_config(format="array_record"))
    assert (chosen.output.file_format, chosen.output.index) == ("array_record", False)
    assert chosen.resolved["output"]["format"] == "array_record"


@pytest.mark.parametrize("output,message", [
    (dict(format="array_record", compression="gzip"),
     "output.compression: 'gzip' does not apply to format array_record: an ArrayRecord file "
     "compresses each of its chunks itself"),
    (dict(format="array_record", index=True),
     "output.index: format array_record has no index files: an ArrayRecord file keeps the "
     "index of its records in its own footer"),
    (dict(format="riegeli"), "output.format: must be one of tfrecord, array_record, not "
                             "'riegeli'"),
    (dict(format=None), "output.format: must be one of"),
])
def test_output_format_errors_say_why(output, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(_config(**output))


def test_array_record_without_its_package_is_a_config_error(monkeypatch):
    from recordforge.transforms.array_record import module
    monkeypatch.setattr(module, "_MODULE", "array_record_not_installed_here")
    with pytest.raises(ConfigError, match=r"output.format: ArrayRecord files need the "
                                          r"array_record package, which is not installed .*"
                                          r"pip install 'recordforge\[array_record\]'"):
        load_config(_config(format="array_record"))
    assert load_config(_config()).output.file_format == "tfrecord"  # TFRecord needs none
