"""Run one kernel call in a forked child, so that a crash or a hang is a test failure.

A kernel that reads or writes outside its buffers may kill the process (SIGSEGV) or spin with
the GIL released; run in-process, either would take pytest down with it instead of failing one
test. ``outcome(fn, *args)`` forks, makes the call in the child and reports what happened:
``"ok"``, the name of the exception class raised, ``"signal N"`` or ``"timeout"``.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable

from _child import wait_child

_CODES = {0: "ok", 3: "ValueError", 4: "OverflowError", 5: "TypeError", 6: "MemoryError"}


def outcome(fn: Callable[..., object], *args: object, timeout: float = 20.0) -> str:
    """What ``fn(*args)`` does in a forked child: ``ok``, an exception name, a signal, a hang."""
    if not hasattr(os, "fork"):  # no fork (Windows): the call runs here
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the class is the answer
            return type(exc).__name__
        return "ok"
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        # Python 3.12+ warns when forking a process with threads; the child only makes one
        # kernel call and exits with os._exit
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            fn(*args)
            code = 0
        except ValueError:
            code = 3
        except OverflowError:
            code = 4
        except TypeError:
            code = 5
        except MemoryError:
            code = 6
        except BaseException:  # noqa: BLE001
            code = 7
        os._exit(code)
    status = wait_child(pid, timeout)
    if status is None:
        return "timeout"
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return _CODES.get(os.WEXITSTATUS(status), f"exit {os.WEXITSTATUS(status)}")


#: Exceptions a kernel may raise for a bad argument: ValueError from the checks in its body,
#: OverflowError / TypeError from the conversion of an argument to a C type.
REFUSALS = (ValueError, OverflowError, TypeError)


def differential(family: str, call: Callable[[object], object]) -> object:
    """``call(module)`` on every implementation of ``family`` that is available: each must
    return the same value, or each must refuse with the same exception class (one of
    :data:`REFUSALS`; anything else propagates). Returns the common value (or class name)."""
    from tenfold import _kernels

    impls = ["reference"] if _kernels.pure_python() else ["compiled", "reference"]
    got = []
    for impl in impls:
        try:
            got.append(("ok", call(_kernels.load(family, impl))))
        except REFUSALS as exc:
            got.append((type(exc).__name__, None))
    assert all(g == got[0] for g in got), f"{family}: {dict(zip(impls, got, strict=True))}"
    return got[0][1] if got[0][0] == "ok" else got[0][0]
