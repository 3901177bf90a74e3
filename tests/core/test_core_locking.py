"""tenfold.core.locking: the exclusive lock of files changed in place."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from tenfold.core.locking import FileLock
from tenfold.errors import LockedError, UnsupportedError


def _waiter(path, out: list, **kw) -> threading.Thread:
    def run() -> None:
        try:
            out.append(FileLock(path, **kw))
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_waits_for_the_holder_then_takes_it(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    first = FileLock(p)
    out: list = []
    t = _waiter(p, out)
    t.join(0.2)
    assert t.is_alive() and not out  # still waiting (no time limit given)
    first.release()
    t.join(30)
    assert isinstance(out[0], FileLock) and out[0].held
    out[0].release()
    with pytest.raises(LockedError, match="the lock was released"):
        _ = out[0].fd


def test_timeout(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    with FileLock(p, fmt="zt"):
        out: list = []
        _waiter(p, out, timeout=0.1, fmt="zt").join(30)
        assert isinstance(out[0], LockedError)
        assert str(out[0]) == f"zt: {p}: locked by another writer (waited 0.1 s)"
    with pytest.raises(ValueError, match="timeout"):
        FileLock(p, timeout=-1)


def test_file_replaced_while_waiting_locks_the_new_file(tmp_path, monkeypatch):
    p = tmp_path / "f"
    p.write_bytes(b"old")
    checks: list[bool] = []
    same = FileLock._same_file

    def spy(self, st):
        checks.append(same(self, st))
        return checks[-1]

    monkeypatch.setattr(FileLock, "_same_file", spy)
    first = FileLock(p)
    out: list = []
    t = _waiter(p, out, write=True)
    while not t.is_alive():  # pragma: no cover - started above
        time.sleep(0.01)
    time.sleep(0.2)  # let it reach flock(); if it does not, it simply opens the new file
    (tmp_path / "new").write_bytes(b"new")
    os.replace(tmp_path / "new", p)  # what an atomic writer does
    first.release()
    t.join(30)
    lock = out[0]
    assert isinstance(lock, FileLock)
    assert os.fstat(lock.fd).st_ino == os.stat(p).st_ino
    assert os.pread(lock.fd, 3, 0) == b"new"
    assert checks[-1] is True and checks.count(False) <= 1
    lock.release()


def test_file_removed_while_waiting(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    first = FileLock(p)
    out: list = []
    t = _waiter(p, out)
    time.sleep(0.2)
    os.unlink(p)
    first.release()
    t.join(30)
    assert isinstance(out[0], FileNotFoundError) and out[0].filename == str(p)


def _fold_repair_in_place(tmp_path):
    from tenfold import fold

    d = fold.demo(tmp_path)
    return d, lambda: fold.repair(d, d)


def _wtxt_sign_in_place(tmp_path):
    pytest.importorskip("cryptography", reason="WTXT signing needs cryptography")
    from tenfold import wtxt
    from tenfold.wtxt.signing import sign_file

    p = tmp_path / "a.wtxt"
    wtxt.write(
        p,
        {"b": np.arange(7, dtype=np.int16)},
        schema="s/1",
        gen=1,
        ts="2025-01-01T00:00:00Z",
        build="b",
    )
    return p, lambda: sign_file(p, bytes(range(32)))


@pytest.mark.parametrize("make", [_fold_repair_in_place, _wtxt_sign_in_place])
def test_in_place_rewrites_wait_for_the_lock(tmp_path, make):
    """A read-modify-write that replaces its own file holds the file's lock from the read to
    the rename: while someone else holds it, it does not start."""
    path, rewrite = make(tmp_path)
    before = path.read_bytes()
    holder = FileLock(path)
    out: list = []

    def run() -> None:
        try:
            out.append(rewrite())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not out  # waiting for the lock, the file as it was
    assert path.read_bytes() == before
    holder.release()
    t.join(60)
    assert not t.is_alive() and not isinstance(out[0], BaseException), out
    with FileLock(path, timeout=0):  # and released afterwards
        pass


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_is_refused_without_blocking(tmp_path):
    import tenfold.ztensor as zt

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UnsupportedError, match="not a regular file"):
        FileLock(fifo)
    with pytest.raises(UnsupportedError, match="not a regular file"):
        zt.append(fifo, {"a": np.zeros(2)})


def test_a_save_waits_for_an_in_place_change_before_replacing(tmp_path):
    """An append holds the file's lock while it writes in place: a save over the same path
    renames only after the lock is released, so the append never writes on, and reports success
    for, a file already renamed over (before: the save replaced the file at once)."""
    import tenfold

    p = tmp_path / "m.safetensors"
    tenfold.save(p, {"a": np.zeros(3, np.float32)})
    before = p.read_bytes()
    holder = FileLock(p)  # stands for an append in progress
    out: list = []

    def run() -> None:
        try:
            tenfold.save(p, {"b": np.ones(5, np.float32)})
            out.append("saved")
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not out and p.read_bytes() == before
    holder.release()
    t.join(60)
    assert out == ["saved"]
    assert list(tenfold.load(p)) == ["b"]
    # and nothing else is left in the folder (the temporary file was renamed)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.safetensors"]


def test_a_replace_inside_the_callers_own_lock_does_not_wait(tmp_path):
    from tenfold.core.atomic import atomic_write

    p = tmp_path / "f"
    p.write_bytes(b"old")
    with FileLock(p):
        with atomic_write(p) as f:
            f.write(b"new")
    assert p.read_bytes() == b"new"


def test_a_replace_of_a_link_or_an_unreadable_file_takes_no_lock(tmp_path):
    from tenfold.core.atomic import atomic_write

    target = tmp_path / "target"
    target.write_bytes(b"t")
    link = tmp_path / "link"
    link.symlink_to(target)
    with FileLock(target):  # the link's target is locked: the link itself is replaced anyway
        with atomic_write(link) as f:
            f.write(b"new")
    assert not link.is_symlink() and link.read_bytes() == b"new" and target.read_bytes() == b"t"
    if os.geteuid() != 0:
        locked = tmp_path / "wo"
        locked.write_bytes(b"x")
        locked.chmod(0o200)
        with atomic_write(locked) as f:
            f.write(b"y")
        assert locked.stat().st_mode & 0o777 == 0o200
