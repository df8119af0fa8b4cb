"""The config's source checks list and read files exactly as the build does."""

import gzip

import pytest

from recordforge.pipelines.config import config_from_dict
from recordforge.pipelines.config.source import source_columns
from recordforge.schemas.errors import ConfigError
from recordforge.transforms.readers import listing, tables


def test_config_columns_come_from_exactly_the_files_the_build_reads(table_dir, monkeypatch):
    root, _ = table_dir
    monkeypatch.chdir(root.parent)
    data = {"name": "t", "version": "1", "source": {"type": "csv", "path": "t"},
            "features": {"id": {"type": "int64"}}, "output": {"path": "out"}}
    config = config_from_dict(data)
    fs, files = listing.list_files(config.source.path, config.source.extensions)
    read = {}
    for fs_path in files:
        for row in tables.iter_table(fs_path, "csv", fs=fs):
            read.update(dict.fromkeys(row.values))
    assert source_columns(config.source) == tuple(read) == ("id", "a", "c", "b")
    # A column only a skipped file holds is not a column of the source.
    data["features"]["underscore"] = {"type": "string"}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.key == "features.underscore.from"


def test_config_checks_list_like_the_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "only_hidden").mkdir()
    (tmp_path / "only_hidden" / "_x.csv").write_text("id\n1\n")
    data = {"name": "t", "version": "1", "source": {"type": "csv", "path": "only_hidden"},
            "features": {"id": {"type": "int64"}}, "output": {"path": "out"}}
    with pytest.raises(ConfigError, match="no files ending in .csv"):
        config_from_dict(data)
    assert listing.list_files("only_hidden", (".csv",))[1] == []
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "t.csv.gz").write_bytes(gzip.compress(b"id,x\n1,2\n"))
    data["source"]["path"] = "gz"
    data["key"] = "x"
    assert config_from_dict(data).key == "x"


@pytest.mark.parametrize("folders, error", [(["Cat", "cat"], True), (["Cat", "dog"], False),
                                            (["cat", "CAT/"], False)])
def test_class_folders_apart_only_by_case_are_refused_from_the_listing(tmp_path, folders,
                                                                        error):
    """Checked on the images the build would list (`list_images`): a folder
    ("CAT/" here) holding no image the build reads is not a class."""
    for folder in folders:
        (tmp_path / folder.rstrip("/")).mkdir()
        name = "notes.txt" if folder.endswith("/") else "a.jpg"
        (tmp_path / folder.rstrip("/") / name).write_bytes(b"\xff\xd8\xff")
    data = {"name": "t", "version": "1", "source": {"type": "images", "path": str(tmp_path)},
            "features": {"image": {"type": "bytes"}}, "output": {"path": str(tmp_path / "out")}}
    if error:
        with pytest.raises(ConfigError, match="differ only by case") as info:
            config_from_dict(data)
        assert info.value.key == "source.path"
    else:
        assert config_from_dict(data).source.labels == "directory"
