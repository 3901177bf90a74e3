"""Save attempts and what a dead one leaves behind.

Every save to a checkpoint path ``CKPT`` (an *attempt*) writes into its own staging
directory beside it, ``.CKPT.tenfold-<attempt id>`` (a fresh UUID per attempt). The
coordinator creates it before any rank writes, and in it the attempt's record
:data:`RECORD_NAME` (JSON: attempt id, host, pid, start time) on which it holds an
exclusive advisory ``flock`` for as long as the attempt can still commit: until its commit
is done, the writer is reset for the next save or collected, or its process ends (however it
ends). The commit removes the record just before it renames the directory into place, so a
checkpoint never holds one.

A rank that dies mid-save leaves its attempt's staging directory behind (never read: it has
no document). :func:`leftovers` lists those of a path, each in one of these states:

``dead``
    Its record names this host, a process that is gone (or this very process), and nobody
    holds its lock: no rank of it can still commit. The commit of a later save to the same
    path removes it (:func:`remove_dead`).
``live``
    Its lock is held, or its process is alive: a save in progress. Never touched.
``unknown``
    No record (written by an older tenfold, or an attempt in its first or last instant), a
    record of another host (whose locks may not reach this one: some shared file systems keep
    ``flock`` per machine), or one whose writer could not take its lock. Never touched:
    reported, to be removed by hand once that save is known to have ended.
``old``
    A previous checkpoint moved aside by an ``overwrite`` commit that did not finish
    deleting it (``.CKPT.tenfold-old-<id>``): nothing writes there; removed like a dead one.

So a cleanup removes only what no live process can be writing, as far as the host's
``flock`` and process table tell; where they cannot tell, it keeps and reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
import weakref
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from ...core.atomic import lock_free, pid_alive

#: The attempt's record, inside its staging directory (removed by the commit).
RECORD_NAME = ".tenfold-attempt.json"
#: The largest record read.
MAX_RECORD = 4096

_OLD = "old-"


def staging_path(final: str, attempt_id: str) -> str:
    """The staging directory of attempt ``attempt_id`` to ``final``: beside it, hidden."""
    final = os.path.abspath(final)
    return os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tenfold-{attempt_id}")


def _pattern(final: str) -> re.Pattern[str]:
    base = re.escape(os.path.basename(os.path.abspath(final)))
    return re.compile(rf"\.{base}\.tenfold-([0-9a-f]{{32}}|{_OLD}[0-9a-f]{{12}})")


class Attempt:
    """The record and lock of one save attempt (see the module doc): created with its
    staging directory, the lock held until :meth:`release` (or the object is collected)."""

    def __init__(self, staging: str, attempt_id: str) -> None:
        self.staging, self.attempt_id = staging, attempt_id
        os.makedirs(staging, exist_ok=True)
        path = os.path.join(staging, RECORD_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._close = weakref.finalize(self, os.close, fd)
        locked = False
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a file system without flock: "unknown"
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
        record = {
            "attempt": attempt_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.time(),
            "locked": locked,
        }
        os.write(fd, json.dumps(record, sort_keys=True).encode())

    def release(self) -> None:
        """Let go of the lock (the attempt can no longer commit)."""
        self._close()


def read_record(staging: str) -> dict[str, Any] | None:
    """The record of the attempt writing into ``staging``, or None (none, or unreadable)."""
    try:
        with open(os.path.join(staging, RECORD_NAME), "rb") as f:
            rec = json.loads(f.read(MAX_RECORD))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _pid_alive(pid: Any) -> bool:
    if type(pid) is not int or pid <= 0:
        return True  # not a pid we wrote: leave it alone
    if pid == os.getpid():
        return False  # this process: only the lock tells
    return pid_alive(pid)


def _lock_free(staging: str) -> bool:
    """Whether nobody holds the lock on ``staging``'s record (False when it cannot be told)."""
    return lock_free(os.path.join(staging, RECORD_NAME), without_flock=False)


def state_of(staging: str, record: dict[str, Any] | None) -> str:
    """``dead``, ``live`` or ``unknown`` (see the module doc) for an attempt's directory."""
    if record is None or not record.get("locked") or record.get("host") != socket.gethostname():
        return "unknown"
    if _pid_alive(record.get("pid")) or not _lock_free(staging):
        return "live"
    return "dead"


def leftovers(final: str) -> list[dict[str, Any]]:
    """The staging directories beside checkpoint path ``final`` (the attempts that did not
    commit, and unfinished removals): ``{"path", "attempt", "state", "record"}`` each."""
    final = os.path.abspath(final)
    parent, pattern = os.path.dirname(final), _pattern(final)
    try:
        names = sorted(e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    out = []
    for name in names:
        m = pattern.fullmatch(name)
        if m is None:
            continue
        path, attempt = os.path.join(parent, name), m.group(1)
        record = None if attempt.startswith(_OLD) else read_record(path)
        state = "old" if attempt.startswith(_OLD) else state_of(path, record)
        out.append({"path": path, "attempt": attempt, "state": state, "record": record})
    return out


def remove_dead(final: str) -> list[str]:
    """Remove the dead attempts' and unfinished removals' directories beside ``final``
    (never a live or unknown one); return their paths."""
    removed = []
    for left in leftovers(final):
        if left["state"] in ("dead", "old"):
            shutil.rmtree(left["path"], ignore_errors=True)
            if not os.path.lexists(left["path"]):
                removed.append(left["path"])
    return removed


def describe_leftover(left: dict[str, Any]) -> str:
    """One line about a leftover, for ``verify`` and error messages."""
    rec = left["record"] or {}
    who = ""
    if rec:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.get("started") or 0))
        who = f" (host {rec.get('host')!r}, pid {rec.get('pid')}, started {started})"
    name = os.path.basename(left["path"])
    return {
        "dead": f"staging directory {name!r} of a save that died{who}: never read; the next "
        "save to this path removes it",
        "live": f"staging directory {name!r} of a save in progress{who}",
        "unknown": f"staging directory {name!r} of an unfinished save{who}: whether it is "
        "still running cannot be told from here; remove it once it is known to have ended",
        "old": f"previous checkpoint {name!r} moved aside by an overwrite and not yet "
        "deleted: the next save to this path removes it",
    }[left["state"]]
