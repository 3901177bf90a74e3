"""JSON from untrusted bytes: every failure becomes a :class:`~tenfold.errors.FormatError`.

:func:`json.loads` can fail in more ways than ``JSONDecodeError``: invalid UTF-8, an integer of
more than 4300 digits (``ValueError``), nesting deep enough to exhaust the stack
(``RecursionError``). :func:`loads` maps them all to one error naming the format, object and
offset, and bounds the input size first.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import FormatError
from .bounds import check_limit

__all__ = ["loads"]


def loads(
    data: bytes | bytearray | memoryview | str,
    *,
    fmt: str,
    what: str,
    offset: int = 0,
    limit: int = 256 << 20,
) -> Any:
    """Parse JSON ``data`` (UTF-8 bytes or text) of at most ``limit`` bytes.

    >>> loads(b'{"a": [1, 2]}', fmt="demo", what="index")
    {'a': [1, 2]}
    >>> loads(b"[" * 100000, fmt="demo", what="index")
    Traceback (most recent call last):
    ...
    tenfold.errors.FormatError: demo: index at offset 0x0: invalid JSON: nested too deeply
    """
    size = len(data) if not isinstance(data, memoryview) else data.nbytes
    check_limit(fmt, what, size, limit, offset=offset)
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        return json.loads(text)
    except RecursionError:
        raise FormatError(
            fmt=fmt, obj=what, offset=offset, detail="invalid JSON: nested too deeply"
        ) from None
    except UnicodeDecodeError as exc:
        raise FormatError(
            fmt=fmt,
            obj=what,
            offset=offset + exc.start,
            detail=f"invalid UTF-8 in JSON: {exc.reason}",
        ) from None
    except ValueError as exc:  # JSONDecodeError, and int() past the digit limit
        raise FormatError(fmt=fmt, obj=what, offset=offset, detail=f"invalid JSON: {exc}") from None
