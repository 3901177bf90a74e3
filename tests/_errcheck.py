"""Every tenfold error names its format and object (issue #22): the session-wide check.

:func:`install` wraps ``TenfoldError.__init__`` for the whole test session. Each error that
tenfold's own code (``lib/tenfold``) builds is checked once built; one that lacks ``fmt`` or
``obj`` (``lines`` stands for the object in WTXT's line-based errors) is recorded with the place
that built it, and ``tests/conftest.py`` fails the test during which it happened (at teardown).

Not checked: errors built by the tests themselves, by scripts or by other libraries, and copies
or unpickled errors (copy and pickle rebuild those, not tenfold). Every module of the library
raises through the error factories: there is no list of exceptions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

from tenfold import errors

LIB = Path(errors.__file__).resolve().parent


#: ``"module:line: Class(fmt=..., obj=...): message"`` for each error built without its names.
UNNAMED: list[str] = []

_ERRORS_PY = errors.__file__
_installed: list = []


def construction_site(exc: BaseException, frame: FrameType | None) -> str | None:
    """``module:line`` (relative to ``lib/tenfold``) where tenfold code built ``exc``, starting
    the search at ``frame`` (the caller of ``__init__``); None when it was built elsewhere."""
    while frame is not None and (
        frame.f_code.co_filename == _ERRORS_PY
        or (frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is exc)
        or (
            frame.f_code.co_name == "evolve"
            and isinstance(frame.f_locals.get("self"), errors.TenfoldError)
        )
    ):
        # the error factory, a subclass's own __init__, evolve() (whose caller asked for the
        # parts it changes, e.g. no fmt to print a message without its prefix)
        frame = frame.f_back
    if frame is None:
        return None
    path = Path(frame.f_code.co_filename)
    if not path.is_relative_to(LIB):
        return None
    return f"{path.relative_to(LIB).as_posix()}:{frame.f_lineno}"


def names_its_object(exc: errors.TenfoldError) -> bool:
    """Whether ``exc`` carries its format and its object (or lines)."""
    return exc.fmt is not None and (exc.obj is not None or exc.lines is not None)


def install() -> None:
    """Wrap ``TenfoldError.__init__`` (once) so that errors built without names are recorded."""
    if _installed:
        return
    init = errors.TenfoldError.__init__

    def checked_init(self: errors.TenfoldError, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        if names_its_object(self):
            return
        site = construction_site(self, sys._getframe(1))
        if site is not None:
            UNNAMED.append(
                f"{site}: {type(self).__name__}(fmt={self.fmt!r}, obj={self.obj!r}): "
                f"{str(self)[:200]}"
            )

    errors.TenfoldError.__init__ = checked_init  # type: ignore[method-assign]
    _installed.append(init)


def take() -> list[str]:
    """The records so far (sorted, without repeats); clears them."""
    found = sorted(set(UNNAMED))
    del UNNAMED[:]
    return found
