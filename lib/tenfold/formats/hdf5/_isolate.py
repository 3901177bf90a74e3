"""libhdf5 first meets a file in another process.

HDF5 is parsed by libhdf5, C code tenfold does not control: a damaged or hostile file can make
it crash (a signal that ends the process), loop, or allocate without bound. Unless the file is
opened with ``trusted=True``, :func:`check` runs :mod:`._child` (a fresh interpreter started
with :mod:`subprocess`, importing only NumPy and h5py) which makes every libhdf5 call the
reader will make, decoding included, under a time limit and an address-space cap
(``RLIMIT_AS``). If that process dies from a signal, runs out of time or memory, or gives no
answer, the file is refused, named, with a :mod:`tenfold.errors` exception, and the calling
process never hands it to libhdf5. A file the check passes is then opened in this process; a
local one only if it is still the file the check read (device, inode, size, modification time).

The check starts a process (no ``fork`` of this one, so threads and forked workers are safe)
and costs about what ``python -c "import h5py"`` costs, plus decoding the file's compressed or
chunked datasets once more: see ``docs/formats/hdf5.md``. A local file is checked once per
process (and its forks) while it stays unchanged (device, inode, size, modification and
change times, and the same decoding limits).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ...core.bounds import Limits
from ...errors import factory

FMT = "hdf5"
E = factory(FMT)
#: seconds the check may take (``check_seconds=``)
CHECK_SECONDS = 120.0
#: bytes of address space the check may add to what the interpreter and h5py map at start
CHECK_MEMORY = 2 << 30
#: local files this process has checked, by what identifies their content (device, inode, size,
#: modification and change times) and the largest dataset the check decoded; oldest first
_PASSED: dict[tuple[int, ...], None] = {}
_PASSED_MAX = 1024
_PASSED_LOCK = threading.Lock()
#: the environment of the checking process: one thread per numeric library
_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _command(cap: int, max_bytes: int, where: str) -> list[str]:
    source = Path(__file__).with_name("_child.py").read_text(encoding="utf-8")
    return [sys.executable, "-P", "-c", source + "\nmain()\n", str(cap), str(max_bytes), where]


def _run(cmd: list[str], data: bytes | None, seconds: float, what: str) -> tuple[int, bytes]:
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **_ENV},
            close_fds=True,
        )
    except OSError as exc:
        raise E.unsupported(
            what,
            detail=f"cannot start the process that checks it with libhdf5 ({exc}); open a "
            "file you trust with trusted=True",
        ) from None
    try:
        out, _ = proc.communicate(data, timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise E.limit(
            what,
            field="check time",
            detail="libhdf5 did not finish reading it in a checking process (a damaged or "
            "hostile file, or one too large to check: open it with trusted=True or a larger "
            "check_seconds)",
            expected=f"<= {seconds:g} s",
            got=f"> {seconds:g} s",
        ) from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc.returncode, out


def check(mf: Any, limits: Limits, seconds: float = CHECK_SECONDS) -> list[int] | None:
    """Run the check on the file ``mf`` maps (by its path when it has one, else its bytes);
    return the ``[dev, ino, size, mtime_ns]`` the process read (None for bytes), or raise."""
    what = mf.path or "<buffer>"
    local = mf.path is not None and mf.fd is not None and not getattr(mf, "remote", False)
    max_bytes = min(limits.max_decoded_bytes, limits.decode_budget)
    key = None
    if local:
        st = os.fstat(mf.fd)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, max_bytes)
        if key in _PASSED:  # checked before, unchanged since (utime changes st_ctime too)
            return list(key[:4])
    data = None if local else bytes(memoryview(mf.buffer()))
    cap = CHECK_MEMORY
    cmd = _command(cap, max_bytes, mf.path if local else "-")
    code, out = _run(cmd, data, seconds, what)
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        raise E.format(
            what,
            detail=f"libhdf5 crashed reading it in a checking process ({name}): the file is "
            "damaged or hostile",
        )
    if isinstance(result, dict) and result.get("memory"):
        raise E.limit(
            what,
            field="check memory",
            detail="libhdf5 ran out of memory reading it in a checking process",
            expected=f"<= {cap >> 20} MiB",
            got=f"> {cap >> 20} MiB",
        )
    if code != 0 or not isinstance(result, dict) or "stat" not in result:
        raise E.format(
            what, detail=f"the process that checks it with libhdf5 failed (exit status {code})"
        )
    stat = result["stat"]
    if key is not None:
        st = os.fstat(mf.fd)
        now = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
        if stat is not None and (stat != now or st.st_ctime_ns != key[4]):
            raise E.format(
                what, detail="the file changed while it was checked", expected=now, got=stat
            )
        if stat is not None:  # opened by the check: later opens of it need none
            with _PASSED_LOCK:
                while len(_PASSED) >= _PASSED_MAX:
                    del _PASSED[next(iter(_PASSED))]
                _PASSED[key] = None
    return stat if isinstance(stat, list) else None
