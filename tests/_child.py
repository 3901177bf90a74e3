"""Waiting for a forked child with a bound: a child that hangs is killed, so a test of fork
safety fails instead of hanging the whole run."""

from __future__ import annotations

import os
import signal
import time


def wait_child(pid: int, timeout: float, poll: float = 0.005) -> int | None:
    """The raw wait status of child ``pid``, or None when it was still running after
    ``timeout`` seconds (it is then killed and reaped)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(poll)
