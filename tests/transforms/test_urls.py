"""Credentials are removed from every URL that is shown or written."""

import pytest

from recordforge.transforms.urls import redact_url


@pytest.mark.parametrize("text, expected", [
    ("s3://AKIA:s3cr3t@bucket/data/x.csv", "s3://***@bucket/data/x.csv"),
    ("simplecache::ftp://u:p@host/d", "simplecache::ftp://***@host/d"),
    ("memory:///key:secret@bucket/x", "memory://***@bucket/x"),
    ("https://user:pw@host/a.csv?sig=abc&x=1", "https://***@host/a.csv?sig=***&x=1"),
    ("https://h/x?X-Goog-Signature=abc&b=1", "https://h/x?X-Goog-Signature=***&b=1"),
    ("error at s3://k:s@b/x and ftp://u:p@h/y", "error at s3://***@b/x and ftp://***@h/y"),
    ("gs://bucket/a@b.csv", "gs://bucket/a@b.csv"),
    ("gs://bucket/out", "gs://bucket/out"),
    ("/data/user@host/x.csv", "/data/user@host/x.csv"),
])
def test_redact_url(text, expected):
    assert redact_url(text) == expected
