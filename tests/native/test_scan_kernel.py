"""The byte scans of the readers: native against bytes.count, split points of both paths
against a byte-at-a-time reading of the boundary rule, CRLF files read alike on both."""

from __future__ import annotations

import io

import pytest
from hypothesis import example, given, settings, strategies as st

from recordforge.transforms.readers import csv as tr
from recordforge.transforms.readers import ranges
from recordforge.transforms.readers.rows import each_row

# Bytes that matter to the scan, often, among any others.
_hostile = st.lists(st.one_of(st.sampled_from([b"\n", b'"', b"\r", b"\r\n", b'""', b",", b"a"]),
                              st.binary(max_size=3)), max_size=300).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(_hostile, st.binary(max_size=20_000)),
       start=st.integers(min_value=0, max_value=25_000),
       end=st.integers(min_value=0, max_value=25_000))
@example(data=b'"\n' * 4096, start=0, end=8192)  # every byte counted, past a chunk of 8160
def test_counts_equal_bytes_count(native, data, start, end):
    expected = (data.count(b"\n", start, end), data.count(b'"', start, end))
    assert native.count_newlines_quotes(data, start, end) == expected
    # The scan reads into any buffer: a bytearray and a memoryview count the same.
    assert native.count_newlines_quotes(bytearray(data), start, end) == expected
    assert native.count_newlines_quotes(memoryview(data), start, end) == expected


def test_bad_arguments_are_python_errors_never_a_crash(native):
    with pytest.raises(OverflowError):
        native.count_newlines_quotes(b"a\n", -1, 2)
    with pytest.raises(TypeError):
        native.count_newlines_quotes("text", 0, 2)
    assert native.count_newlines_quotes(b"a\n", 2**63, 2**64 - 1) == (0, 0)
    # A strided view is not one run of bytes: refused, not misread.
    with pytest.raises(ValueError):
        native.count_newlines_quotes(memoryview(b"a\n\n\n")[::2], 0, 2)


def reference_points(data: bytes, step: int, quote_aware: bool) -> list[tuple[int, int]]:
    """Split points by the rule of `scan_split_points`, read a byte at a
    time: boundaries are 0 and each offset after a newline (with an even
    number of quotes before it, when `quote_aware`); from 0, each point is
    the first boundary at or after the previous one + `step`; none at the
    end of the file."""
    boundaries, quotes = [0], 0
    for at, byte in enumerate(data):
        quotes += byte == ord('"')
        if byte == ord("\n") and (not quote_aware or quotes % 2 == 0):
            boundaries.append(at + 1)
    points = [0]
    for boundary in boundaries:
        if boundary >= points[-1] + step and boundary < len(data):
            points.append(boundary)
    return [(offset, data.count(b"\n", 0, offset) + 1) for offset in points]


@settings(max_examples=200, deadline=None)
@given(data=_hostile, step=st.integers(min_value=1, max_value=120),
       block=st.integers(min_value=1, max_value=64), quote_aware=st.booleans())
@example(data=b'a\n"b\n"\n\r\n\n', step=1, block=2, quote_aware=True)  # boundary at a block's edge
def test_split_points_native_and_python_equal_the_rule(native, tmp_path_factory,
                                                       data, step, block, quote_aware):
    # Small blocks put block edges everywhere: mid-line, mid-quote, between CR and LF.
    path = tmp_path_factory.mktemp("scan") / "t.csv"
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranges, "BLOCK", block)
        native_points = ranges.scan_split_points(str(path), step, quote_aware=quote_aware)
        patch.setattr(ranges, "kernels", lambda: None)
        python_points = ranges.scan_split_points(str(path), step, quote_aware=quote_aware)
    assert native_points == python_points == reference_points(data, step, quote_aware)


@settings(max_examples=60, deadline=None)
@given(data=_hostile, block=st.integers(min_value=1, max_value=64))
def test_line_blocks_count_lines_the_same_on_both_paths(native, data, block):
    def blocks():
        return list(ranges.iter_line_blocks(io.BytesIO(data), ranges.Cursor(0, 1), block))

    native_blocks = blocks()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranges, "kernels", lambda: None)
        assert blocks() == native_blocks
    # Each block starts on the line its offset is on, counted here on its own.
    for offset, line_no, _ in native_blocks:
        assert line_no == data.count(b"\n", 0, offset) + 1
    assert b"".join(block for _, _, block in native_blocks) == data


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(_hostile, st.binary(max_size=10_000)))
@example(data=b"a" * 4095 + b"\r\n")  # a CRLF across the kernel's 4096-byte windows
@example(data=b"a" * 4095 + b"\rx")
def test_lone_carriage_return_equals_the_counts(native, data):
    expected = data.count(b"\r") != data.count(b"\r\n")
    assert native.lone_carriage_return(data) is expected
    assert native.lone_carriage_return(bytearray(data)) is expected


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(st.sampled_from([b"1,a", b"2,b\r", b"3,\rc", b"", b"\r", b"4,d"]),
                      max_size=60),
       block=st.integers(min_value=1, max_value=64))
def test_crlf_files_read_the_same_on_both_paths(native, tmp_path_factory, lines, block):
    # CRLF, bare CRs and blank lines, blocks ending anywhere: which blocks
    # are plain runs decides how they are read, never what is read.
    path = str(tmp_path_factory.mktemp("crlf") / "t.csv")
    with open(path, "wb") as f:
        f.write(b"n,t\r\n" + b"\n".join(lines))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tr, "_BLOCK", block)
        native_rows = list(each_row(tr.iter_csv(path, columns=True)))
        patch.setattr(tr, "kernels", lambda: None)
        python_rows = list(each_row(tr.iter_csv(path, columns=True)))
    assert native_rows == python_rows
