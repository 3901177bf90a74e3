"""core.release: drops resident pages of read-only shared mappings only."""

from __future__ import annotations

import mmap

import numpy as np

from tenfold.core.release import release


def _rss_pages(a: np.ndarray) -> int:
    """This process's resident set in kB (``a`` names what the caller measures)."""
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))


def test_read_only_map_released_and_still_readable(tmp_path):
    p = tmp_path / "d.bin"
    data = np.arange(4 << 20, dtype=np.uint8)
    p.write_bytes(data.tobytes())
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(mm, np.uint8)
    before = _rss_pages(view)
    assert int(view.sum(dtype=np.uint64)) == int(data.sum(dtype=np.uint64))  # fault it in
    touched = _rss_pages(view)
    release(view)
    after = _rss_pages(view)
    assert touched - before > 3000 and touched - after > 3000  # kB: most of 4 MiB went back
    assert view.tobytes() == data.tobytes()  # faulted in again from the page cache


def test_views_of_the_fmap_kernels_map_are_released(tmp_path):
    # Before: release() knew only mmap.mmap, and MappedFile (every reader's map) and the v2
    # reader map files with the fmap kernel's Map, so a conversion kept every page it read.
    from tenfold.core.mapped import MappedFile

    p = tmp_path / "d.bin"
    data = np.arange(4 << 20, dtype=np.uint8)
    p.write_bytes(data.tobytes())
    mf = MappedFile(p)
    try:
        view = mf.buffer()
        before = _rss_pages(view)
        assert int(view.sum(dtype=np.uint64)) == int(data.sum(dtype=np.uint64))
        touched = _rss_pages(view)
        release(view)
        after = _rss_pages(view)
        assert touched - before > 3000 and touched - after > 3000
        assert view.tobytes() == data.tobytes()
    finally:
        mf.close()


def test_private_copy_on_write_map_is_left_alone(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(bytes(1 << 20))
    with open(p, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    w = np.frombuffer(mm, np.uint8)
    w[:] = 7  # private changes, only in memory
    ro = w.view()
    ro.flags.writeable = False
    release(ro)
    assert int(w.min()) == 7  # not thrown away


def test_owned_arrays_are_ignored():
    a = np.ones(1 << 20, np.uint8)
    a.flags.writeable = False
    release(a)
    assert int(a.sum()) == 1 << 20
