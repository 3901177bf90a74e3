"""Shared by the DCP tests: the module-level skip, ``torchrun`` on 127.0.0.1, and loads in
one process without a process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LIB = HERE.parents[1] / "lib"


def skip_without_distributed() -> None:
    """Skip the calling module (with its reason) without torch, torch.distributed or gloo."""
    try:
        import torch.distributed as dist
    except ImportError as exc:
        pytest.skip(f"torch is not installed: {exc}", allow_module_level=True)
    if not dist.is_available():
        pytest.skip(
            "torch.distributed is not available in this torch build", allow_module_level=True
        )
    if not dist.is_gloo_available():
        pytest.skip("torch.distributed has no gloo backend", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(nproc: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``_worker.py`` under ``torchrun`` (``nproc`` CPU ranks, gloo, rendezvous on
    127.0.0.1 at a free port); the whole process group is killed if it outlives
    ``timeout``."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(LIB), str(HERE)]),
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        PYTHONWARNINGS="ignore",
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--node-rank=0",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(HERE / "_worker.py"),
        *args,
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        tail = out.decode(errors="replace")[-4000:]
        raise AssertionError(f"torchrun timed out after {timeout} s:\n{tail}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out.decode(errors="replace"))


@contextlib.contextmanager
def single_process() -> object:
    """DCP's warning that it assumes one process (no process group) silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield
