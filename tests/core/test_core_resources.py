"""Issue 15, memory and resources: one decode budget per call, FIFOs and other non-files
refused without blocking, temp files of SIGKILLed writers removed by the next write."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tenfold
import tenfold.ztensor as zt
from tenfold.cli import main
from tenfold.core import Limits
from tenfold.core.alloc import empty
from tenfold.core.atomic import atomic_write, remove_stale_temps, temp_pattern
from tenfold.core.bounds import MAX_ARRAY_BYTES, Budget, checked_numel
from tenfold.core.mapped import MappedFile
from tenfold.errors import FormatError, LimitError, UnsupportedError

# -- shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "itemsize", "cls"),
    [
        ([0, 2**63], 1, FormatError),
        ([2**64], 1, FormatError),
        ([-1], 1, FormatError),
        ([True], 1, FormatError),
        ([1.0], 1, FormatError),
        ([0, 2**62], 2, LimitError),
        ([2**32, 2**32], 1, LimitError),
    ],
)
def test_core_shape_check_refuses_what_numpy_cannot_make(shape, itemsize, cls):
    with pytest.raises(cls, match="shape"):
        checked_numel("t", "x", shape, itemsize=itemsize)


def test_core_shape_check_accepts_every_shape_numpy_makes():
    for shape, itemsize in (([0, 2**62], 1), ([0, MAX_ARRAY_BYTES], 1), ([2**31, 2**31], 1)):
        n = checked_numel("t", "x", shape, itemsize=itemsize)
        assert n == int(np.prod(shape, dtype=object))
        if n == 0:
            assert np.empty(shape, np.uint8).size == 0  # NumPy agrees


# -- decode budget ----------------------------------------------------------------------------


def test_budget_is_charged_before_allocating_and_not_on_failure():
    b = Budget(100)
    empty(60, np.uint8, fmt="t", what="a", budget=b)
    with pytest.raises(LimitError, match="'b'|b: decoded bytes"):
        empty(50, np.uint8, fmt="t", what="b", budget=b)
    assert b.used == 60
    empty(40, np.uint8, fmt="t", what="c", budget=b)
    assert b.left == 0


def test_default_budget_is_bounded_and_documented():
    budget = Limits().decode_budget
    assert (1 << 30) <= budget <= (64 << 30)
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert budget <= max(1 << 30, ram // 2)
    assert "decode_budget" in Limits.__doc__


def test_ztensor_load_with_copy_shares_one_budget(tmp_path):
    p = tmp_path / "m.zt"
    zt.save(p, {"a": np.zeros(3000, np.uint8), "b": np.zeros(3000, np.uint8)})
    with zt.Reader(p, limits=Limits(decode_budget=5000)) as r:
        r.read("a", copy=True)
        r.read("b", copy=True)  # one call each: fine
    with pytest.raises(LimitError, match="decode budget"):
        zt.load(p, copy=True, limits=Limits(decode_budget=5000))
    assert len(zt.load(p, limits=Limits(decode_budget=5000))) == 2  # views cost nothing


def test_zstd_tensors_share_one_budget(tmp_path):
    p = tmp_path / "z.zt"
    with zt.Writer(p) as w:
        w.add("a", np.zeros(3000, np.uint8), encoding="zstd")
        w.add("b", np.zeros(3000, np.uint8), encoding="zstd")
    with pytest.raises(LimitError, match=r"tensor 'b'.*decode budget"):
        zt.load(p, limits=Limits(decode_budget=5000))


# -- FIFOs and other non-files ----------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "pipe.zt"
    os.mkfifo(p)
    return p


def test_reader_refuses_a_fifo_without_blocking(fifo):
    # opening a FIFO with no writer blocked forever
    start = time.monotonic()
    with pytest.raises(UnsupportedError, match="not a regular file.*a FIFO"):
        MappedFile(fifo)
    with pytest.raises(UnsupportedError, match="FIFO"):
        tenfold.detect(fifo)
    with pytest.raises(UnsupportedError, match="FIFO"):
        zt.Reader(fifo)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("command", ["verify", "inspect", "convert"])
def test_cli_on_a_fifo_is_a_usage_error_at_once(fifo, tmp_path, command):
    args = [sys.executable, "-m", "tenfold", command, str(fifo)]
    if command == "convert":
        args.append(str(tmp_path / "out.npz"))
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"tenfold {command} blocked on a FIFO")
    assert proc.returncode == 2  # like a directory: the argument is not a file (usage error)
    assert "not a regular file" in proc.stderr and "Traceback" not in proc.stderr


def test_directory_is_refused_by_the_reader(tmp_path):
    with pytest.raises(UnsupportedError, match="a directory"):
        MappedFile(tmp_path)


# -- stale temp files -------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys, time
    from tenfold.core.atomic import atomic_write
    with atomic_write(sys.argv[1]) as f:
        f.write(b"x" * (1 << 20))
        f.flush()
        print("ready", flush=True)
        time.sleep(120)
    """
)


def _start_writer(dest):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(dest)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _temps(dest):
    pattern = temp_pattern(dest.name)
    return sorted(p.name for p in dest.parent.iterdir() if pattern.fullmatch(p.name))


def test_temp_file_of_a_sigkilled_writer_is_removed_by_the_next_write(tmp_path):
    dest = tmp_path / "model.zt"
    dest.write_bytes(b"old")
    victim = _start_writer(dest)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    victim.stdout.close()
    left = _temps(dest)
    assert len(left) == 1 and f".{victim.pid}." in left[0]  # the owner's pid is in the name
    assert dest.read_bytes() == b"old"  # the previous file is intact
    with atomic_write(dest) as f:
        f.write(b"new")
    assert _temps(dest) == [] and dest.read_bytes() == b"new"


def test_live_writers_and_other_files_are_left_alone(tmp_path):
    dest = tmp_path / "model.zt"
    other = tmp_path / "other.zt"
    live = _start_writer(dest)
    dead = _start_writer(other)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        dead.stdout.close()
        unrelated = [
            tmp_path / ".model.zt.tmp",
            tmp_path / ".model.zt.1.x.tmp.bak",
            tmp_path / "model.zt.99999999.abc.tmp",
        ]
        for u in unrelated:
            u.write_bytes(b"keep")
        live_temps = _temps(dest)
        assert len(live_temps) == 1
        assert remove_stale_temps(dest) == []  # the live writer's file stays
        zt.save(dest, {"a": np.ones(2)})
        assert _temps(dest) == live_temps
        assert len(_temps(other)) == 1  # another destination's leftovers are not ours to take
        assert all(u.exists() for u in unrelated)
        zt.save(other, {"a": np.ones(2)})
        assert _temps(other) == []
    finally:
        live.kill()
        live.wait()
        live.stdout.close()


def test_temp_names_carry_the_writer_pid(tmp_path):
    dest = tmp_path / "a.bin"
    with atomic_write(dest) as f:
        names = [p.name for p in tmp_path.iterdir()]
        f.write(b"1")
    (name,) = names
    assert re.fullmatch(rf"\.a\.bin\.{os.getpid()}\.[a-z0-9_]+\.tmp", name)


def test_cli_verify_on_a_fifo_in_process(fifo, capsys):
    assert main(["verify", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
