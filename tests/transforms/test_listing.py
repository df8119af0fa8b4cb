"""Listing: which files a source reads (one rule), and the headers read before a run."""

import os

from recordforge.transforms.readers import csv as csv_reader, listing


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
