"""``tenfold.core.blocks.BlockReader``: an opened file's byte ranges in blocks read into one
reused buffer (the loop ``tenfold convert``'s raw copies and FOLD's chunk check share)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tenfold.core.blocks import BlockReader
from tenfold.core.mapped import MappedFile
from tenfold.errors import TruncatedError


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def test_a_range_comes_in_blocks_of_the_size_asked(tmp_path):
    p = tmp_path / "f.bin"
    data = bytes(range(256)) * 40
    p.write_bytes(data)
    with MappedFile(p, fmt="zt") as mf, BlockReader(block=1000) as f:
        sizes, got = [], b""
        for b in f.blocks(mf, 5, 2500):
            sizes.append(len(b))
            got += bytes(b)
        assert sizes == [1000, 1000, 500] and got == data[5:2505]
        assert b"".join(bytes(b) for b in f.blocks(mf, len(data), 0)) == b""


def test_a_buffer_is_read_in_blocks_too():
    data = np.arange(2500, dtype=np.uint8)
    with MappedFile(data, fmt="zt") as mf, BlockReader(block=1000) as f:
        got = [bytes(b) for b in f.blocks(mf, 10, 2400)]
    assert [len(b) for b in got] == [1000, 1000, 400] and b"".join(got) == data[10:2410].tobytes()


def test_a_range_past_the_end_is_a_named_truncated_error(tmp_path):
    p = tmp_path / "short.bin"
    p.write_bytes(b"x" * 10)
    with MappedFile(p, fmt="fold") as mf, BlockReader(block=4) as f:
        with pytest.raises(TruncatedError, match="ends at offset 10; expected 6 more") as info:
            list(f.blocks(mf, 2, 14))
    e = info.value
    assert (e.fmt, e.obj, e.offset, e.expected) == ("fold", str(p), 10, 6)


def test_a_file_cut_short_after_it_was_opened_is_a_truncated_error(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"y" * 100)
    with MappedFile(p, fmt="zt") as mf, BlockReader(block=8) as f:
        os.truncate(p, 20)
        with pytest.raises(TruncatedError, match="ends at offset 20; expected 80 more"):
            list(f.blocks(mf, 0, 100))


def test_the_file_it_reads_is_the_one_opened_not_what_the_path_names_now(tmp_path):
    # Before: the reader opened its path again for the copies, so a file replaced under that
    # name (an atomic rename) after the source was opened was read instead.
    p = tmp_path / "f.bin"
    p.write_bytes(b"old!" * 8)
    with MappedFile(p, fmt="zt") as mf, BlockReader(block=8) as f:
        (tmp_path / "new.bin").write_bytes(b"NEW?" * 8)
        os.replace(tmp_path / "new.bin", p)
        assert b"".join(bytes(b) for b in f.blocks(mf, 0, 32)) == b"old!" * 8


def test_a_closed_file_is_refused_and_nothing_is_opened(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abcdef" * 4)
    mf = MappedFile(p, fmt="zt")
    before = _fds()
    f = BlockReader(block=4)
    it = f.blocks(mf, 0, 24)
    assert bytes(next(it)) == b"abcd" and _fds() == before
    mf.close()
    with pytest.raises(ValueError, match="closed file"):
        next(it)
    with pytest.raises(ValueError, match="closed file"):
        list(f.blocks(mf, 0, 4))
    f.close()
    f.close()  # twice is harmless
