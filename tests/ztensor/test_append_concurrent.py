"""Concurrent appends to one zTensor v2 file: every append that returns is in the file.

Appends hold an exclusive lock (:mod:`tenfold.core.locking`) from before the footer is read
until the new footer is durable, so appenders that start together run one after the other.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.core.locking import FileLock
from tenfold.errors import EncodeError, FormatError, LockedError
from tenfold.ztensor import _append

LIB = str(Path(zt.__file__).resolve().parents[3])  # lib/, above tenfold/formats/ztensor

# A child appends, on each "go" line of its stdin, N tensors one append at a time, and answers
# with one JSON line: the names whose append returned, and the errors of those that raised.
_APPENDER = """
import json, sys
sys.path.insert(0, {lib!r})
import numpy as np, tenfold.ztensor as zt
{value}
path, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
for line in sys.stdin:
    rnd = int(line.split()[1])
    ok, failed = [], []
    for i in range(n):
        name = f"w{{wid}}_r{{rnd}}_{{i}}"
        try:
            zt.append(path, {{name: value(wid, rnd, i)}}, fsync=False)
        except Exception as exc:
            failed.append(f"{{name}}: {{type(exc).__name__}}: {{exc}}")
        else:
            ok.append(name)
    print(json.dumps({{"ok": ok, "failed": failed}}), flush=True)
"""

# The tensor each append adds, known to the children and to the test.
_VALUE = """
def value(wid, rnd, i):
    return np.arange(3 + i % 5, dtype=np.int64) + (wid * 1_000_000 + rnd * 1_000 + i)
"""
_ns: dict[str, object] = {"np": np}
exec(_VALUE, _ns)
value = _ns["value"]


def _run_appenders(path: Path, workers: int, rounds: int, n: int) -> tuple[list[str], list[str]]:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _APPENDER.format(lib=LIB, value=_VALUE),
                str(path),
                str(w),
                str(n),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    ok: list[str] = []
    failed: list[str] = []
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for rnd in range(rounds):
            for p in procs:  # every child is blocked on its stdin: they start together
                assert p.stdin is not None
                p.stdin.write(f"go {rnd}\n")
                p.stdin.flush()
            for p in procs:
                assert p.stdout is not None
                out = json.loads(p.stdout.readline())
                ok += out["ok"]
                failed += out["failed"]
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            p.wait(timeout=60)
            assert p.stdout is not None
            p.stdout.close()
    return ok, failed


def test_two_processes_appending_lose_nothing(tmp_path):
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.arange(4, dtype=np.float32)}, generation=2)
    ok, failed = _run_appenders(p, workers=2, rounds=4, n=25)
    got = zt.load(p)
    lost = [name for name in ok if name not in got]
    assert not lost, f"{len(lost)} of {len(ok)} successful appends missing: {lost[:5]}"
    for name in ok:
        wid, rnd, i = (int(x.lstrip("wr")) for x in name.split("_"))
        np.testing.assert_array_equal(got[name], value(wid, rnd, i), err_msg=name)
    report = zt.verify(p)
    assert report.ok, report
    # The default is to wait for the lock: nobody is turned away.
    assert not failed, failed[:5]
    assert len(ok) == 2 * 4 * 25
    assert set(got) == {"base", *ok}


def test_threads_appending_lose_nothing(tmp_path):
    """Two threads of one process exclude each other too (an flock per open, not per process)."""
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.zeros(2)}, generation=2)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(wid: int) -> None:
        start.wait()
        try:
            for i in range(20):
                zt.append(p, {f"w{wid}_r0_{i}": value(wid, 0, i)}, fsync=False)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    got = zt.load(p)
    assert len(got) == 41
    for w in range(2):
        for i in range(20):
            np.testing.assert_array_equal(got[f"w{w}_r0_{i}"], value(w, 0, i))
    assert zt.verify(p).ok


# A child that opens an appender (taking the lock), says so, and closes it on the next line.
_HOLDER = """
import sys
sys.path.insert(0, {lib!r})
import numpy as np, tenfold.ztensor as zt
with zt.Writer(sys.argv[1], generation=2, append=True, fsync=False) as w:
    w.add("held", np.arange(3))
    print("holding", flush=True)
    sys.stdin.readline()
print("closed", flush=True)
"""


def test_second_appender_fails_clearly_when_told_not_to_wait(tmp_path):
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.zeros(2)}, generation=2)
    before = p.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER.format(lib=LIB), str(p)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "holding"
        with pytest.raises(LockedError, match="locked by another writer") as info:
            zt.append(p, {"mine": np.ones(2)}, lock_timeout=0)
        assert isinstance(info.value, TimeoutError) and info.value.fmt == "zt"
        with pytest.raises(LockedError, match=r"waited 0\.2 s"):
            zt.Writer(p, generation=2, append=True, lock_timeout=0.2)
        assert p.read_bytes() == before  # the holder has not written yet, and neither have we
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0
        child.stdout.close()
    zt.append(p, {"mine": np.ones(2)}, lock_timeout=0)  # free again
    assert set(zt.load(p)) == {"base", "held", "mine"}


def _locked_elsewhere(path: Path) -> bool:
    """Whether another thread (another open of the file) finds it locked."""
    out: list[bool] = []

    def probe() -> None:
        try:
            FileLock(path, timeout=0).release()
        except LockedError:
            out.append(True)
        else:
            out.append(False)

    t = threading.Thread(target=probe)
    t.start()
    t.join(30)
    return out[0]


def test_lock_held_from_open_until_the_footer_is_durable(tmp_path, monkeypatch):
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.zeros(2)}, generation=2)
    steps: dict[str, bool] = {}
    monkeypatch.setattr(_append, "_hook", lambda step: steps.setdefault(step, _locked_elsewhere(p)))
    assert not _locked_elsewhere(p)
    w = zt.Writer(p, generation=2, append=True)
    assert _locked_elsewhere(p)  # before the footer is read
    w.add("x", np.arange(3))
    assert _locked_elsewhere(p)
    w.close()
    assert steps == dict.fromkeys(["start", "grown", "blob", "written", "done"], True)
    assert not _locked_elsewhere(p)
    np.testing.assert_array_equal(zt.load(p)["x"], np.arange(3))


def test_same_thread_appending_twice_fails_instead_of_waiting_forever(tmp_path):
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.zeros(2)}, generation=2)
    with zt.Writer(p, generation=2, append=True) as w:
        w.add("outer", np.ones(2))
        with pytest.raises(LockedError, match="locked by this thread already"):
            zt.append(p, {"inner": np.ones(2)})
    assert set(zt.load(p)) == {"base", "outer"}


def test_lock_released_when_the_append_fails(tmp_path, monkeypatch):
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.zeros(2)}, generation=2)
    # refused in add(): the with block aborts
    with pytest.raises(EncodeError, match="already in the file"):
        zt.append(p, {"new": np.ones(2), "base": np.ones(2)})
    assert not _locked_elsewhere(p)
    # refused while opening: a 0.1.0 file cannot be appended to
    v1 = tmp_path / "old.zt"
    zt.save(v1, {"a": np.zeros(2)})
    with pytest.raises(FormatError, match="magic mismatch"):
        zt.append(v1, {"b": np.ones(2)})
    assert not _locked_elsewhere(v1)

    # failing half way through the commit: the file keeps its old generation
    def fail(step: str) -> None:
        if step == "grown":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(_append, "_hook", fail)
    with pytest.raises(OSError, match="No space"):
        zt.append(p, {"lost": np.ones(2)})
    monkeypatch.undo()
    assert not _locked_elsewhere(p)
    zt.append(p, {"after": np.ones(2)}, lock_timeout=0)
    assert set(zt.load(p)) == {"base", "after"}
    assert zt.verify(p).ok
    # an appender dropped without close() gives the lock back when collected
    w = zt.Writer(p, generation=2, append=True)
    del w
    gc.collect()
    zt.append(p, {"later": np.ones(2)}, lock_timeout=0)


def test_forked_child_neither_uses_nor_breaks_the_parents_lock(tmp_path):
    p = tmp_path / "m.zt"
    zt.save(p, {"base": np.zeros(2)}, generation=2)
    w = zt.Writer(p, generation=2, append=True)
    w.add("parent", np.ones(2))
    r, wr = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # the child: report, then stay alive until told to go
        code = 0
        try:
            os.close(r)
            try:
                w.close()  # must not write: the parent holds the lock
            except LockedError as exc:
                code |= 0 if "forked" in str(exc) else 1
            else:
                code |= 2
            try:
                zt.append(p, {"child": np.ones(2)}, lock_timeout=0)
            except LockedError:
                pass
            else:
                code |= 4
            os.write(wr, bytes([code]))
            time.sleep(2)  # still alive, with its copy of the descriptor, while the parent ends
        finally:
            os._exit(0)
    os.close(wr)
    try:
        code = os.read(r, 1)
        assert code == b"\x00", code
        assert _locked_elsewhere(p)  # the child ended nothing of the parent's lock
        w.close()
        assert not _locked_elsewhere(p)  # released although the child still runs
    finally:
        os.close(r)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert set(zt.load(p)) == {"base", "parent"}
    assert zt.verify(p).ok


def test_locked_error_pickles():
    exc = LockedError(fmt="zt", obj="m.zt", detail="locked by another writer")
    for clone in (pickle.loads(pickle.dumps(exc)), copy.deepcopy(exc)):
        assert type(clone) is LockedError and str(clone) == "zt: m.zt: locked by another writer"
        assert clone.fields() == exc.fields()
