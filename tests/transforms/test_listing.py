"""Listing: which files a source reads (one rule), and the headers read before a run."""

import gzip
import os

import pytest

from recordforge.transforms.readers import csv as csv_reader, listing


@pytest.fixture
def table_dir(tmp_path):
    """A CSV directory where every listing question comes up: hidden and
    underscore names (files and folders), another extension, a compressed
    table, a link leading out of the root. Returns (root, names listed)."""
    root = tmp_path / "t"
    (root / "sub").mkdir(parents=True)
    (root / "a.csv").write_text("id,a\n1,x\n")
    (root / "sub" / "B.CSV").write_text("id,b\n2,y\n")
    (root / "c.csv.gz").write_bytes(gzip.compress(b"id,c\n3,z\n"))
    (root / "_part.csv").write_text("id,underscore\n4,u\n")
    (root / ".hidden.csv").write_text("id,dot\n5,d\n")
    (root / "_tmp").mkdir()
    (root / "_tmp" / "d.csv").write_text("id,tmpdir\n6,t\n")
    (root / "notes.txt").write_text("id,notes\n7,n\n")
    (tmp_path / "outside.csv").write_text("id,outside\n8,o\n")
    os.symlink(tmp_path / "outside.csv", root / "link.csv")
    return root, ["a.csv", "c.csv.gz", "sub/B.CSV"]


def test_directories_list_their_extensions_and_skip_hidden_names(table_dir):
    root, names = table_dir
    _, files = listing.list_files(str(root), (".csv",))
    assert [os.path.relpath(f, root) for f in files] == names
    # Without extensions every visible file is listed.
    _, files = listing.list_files(str(root))
    assert [os.path.relpath(f, root) for f in files] == ["a.csv", "c.csv.gz", "notes.txt",
                                                         "sub/B.CSV"]


def test_csv_header_is_read_as_the_reader_reads_it(tmp_path):
    path = tmp_path / "h.csv"
    path.write_bytes(b'\xef\xbb\xbfid,"na,me"\r\n1,2\r\n')
    assert csv_reader.read_csv_header(str(path)) == ["id", "na,me"]
    path.write_bytes(b"id,id\n1,2\n")  # the reader makes this file a dead letter
    assert csv_reader.read_csv_header(str(path)) is None
    path.write_bytes(b"")
    assert csv_reader.read_csv_header(str(path)) is None
