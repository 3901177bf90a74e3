"""``tenfold.core.blocks.BlockReader``: a file's byte ranges in blocks read into one reused
buffer (the loop ``tenfold convert``'s raw copies and FOLD's chunk check share)."""

from __future__ import annotations

import os

import pytest

from tenfold.core.blocks import BlockReader
from tenfold.errors import TruncatedError


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def test_a_range_comes_in_blocks_of_the_size_asked(tmp_path):
    p = tmp_path / "f.bin"
    data = bytes(range(256)) * 40
    p.write_bytes(data)
    with BlockReader(p, "zt", block=1000) as f:
        sizes, got = [], b""
        for b in f.blocks(5, 2500):
            sizes.append(len(b))
            got += bytes(b)
        assert sizes == [1000, 1000, 500] and got == data[5:2505]
        assert b"".join(bytes(b) for b in f.blocks(len(data), 0)) == b""


def test_a_file_that_ends_early_is_a_named_truncated_error(tmp_path):
    p = tmp_path / "short.bin"
    p.write_bytes(b"x" * 10)
    with BlockReader(p, "fold", block=4) as f:
        with pytest.raises(TruncatedError, match="ends at offset 10; expected 6 more") as info:
            list(f.blocks(2, 14))
    e = info.value
    assert (e.fmt, e.obj, e.offset, e.expected) == ("fold", str(p), 10, 6)


def test_close_gives_the_descriptor_back_and_a_later_read_opens_another(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abcdef")
    before = _fds()
    f = BlockReader(p, "zt")
    assert not f.opened
    assert bytes(next(f.blocks(1, 2))) == b"bc" and f.opened
    f.close()
    assert not f.opened and _fds() == before
    assert bytes(next(f.blocks(0, 1))) == b"a"
    f.close()
    f.close()  # twice is harmless
    assert _fds() == before
