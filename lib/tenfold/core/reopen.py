"""Readers across processes: a reader pickles as "open the same file again, with the same
options", and unpickles into an open reader of that file (PyTorch ``DataLoader`` workers under
the ``spawn`` or ``forkserver`` start method, ``multiprocessing``, ``copy.copy``).

What a reader pickles as, for every format, recorded once here:

* what it was opened with: :class:`~tenfold.core.reader.BaseReader` wraps the ``__init__`` of
  every reader class (:func:`recording`) to keep the arguments of the outermost call (the
  source and the options); a reader built another way says so itself (:func:`record`);
* where its file is: the path of the file it has open (made absolute), a remote URL with the
  storage options it was fetched with, never the bytes;
* which file that is (:func:`identity`): its size when opened and its modification time in
  nanoseconds (``fstat`` of the open descriptor) for a local file, its size and validators
  (ETag, generation, modification time) for a remote object.

Unpickling (:func:`reopen`) checks the file at that path first and opens it only if it is the
same; then the opened file is checked again (it could be replaced in between). A file that
changed is an :class:`~tenfold.errors.IntegrityError` naming the path, what changed, and the
values expected and found: never a different file read silently.

Refused with a :class:`TypeError` that says why and what to do instead: a reader opened on a
buffer (``bytes``, a ``memoryview``...) or a file object, which another process cannot open
again, and a closed reader. Arrays already read are NumPy arrays and pickle as such.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import factory

__all__ = ["recording", "record", "reduce", "reopen", "identity"]

#: the instance attribute that keeps ``(source, args, kwargs)`` of the outermost ``__init__``
_OPENED = "_tenfold_opened_as"
#: the instance attribute that keeps the absolute path of a local source when it was opened
_AT = "_tenfold_opened_at"


def recording(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (a reader's ``__init__``), keeping the arguments of the outermost call on the
    instance first (a subclass's ``super().__init__(...)`` records nothing more)."""
    if getattr(init, "tenfold_records_open", False):
        return init
    params = list(inspect.signature(init).parameters)
    first = params[1] if len(params) > 1 else None

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if any(isinstance(v, Iterator) for v in kwargs.values()):
            # an iterator (hmac_keys=iter(keys)) is used up by the open: kept as a list, the
            # same values reach this open and the one after unpickling
            kwargs = {k: list(v) if isinstance(v, Iterator) else v for k, v in kwargs.items()}
        if _OPENED not in self.__dict__:
            if args:
                record(self, args[0], args[1:], kwargs)
            elif first is not None and first in kwargs:
                rest = {k: v for k, v in kwargs.items() if k != first}
                record(self, kwargs[first], (), rest)
        init(self, *args, **kwargs)

    __init__.tenfold_records_open = True  # type: ignore[attr-defined]
    return __init__


def record(reader: Any, source: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Keep what ``reader`` was opened with: ``type(reader)(source, *args, **kwargs)`` opens it
    again (a reader built without its ``__init__``, a lean open, calls this itself), and the
    absolute path of a local file as it is now (a relative path is the working directory's
    of this moment: a later ``os.chdir`` does not move the file)."""
    reader.__dict__[_OPENED] = (source, tuple(args), dict(kwargs))
    reader.__dict__[_AT] = _absolute(source)


def _absolute(source: Any) -> str | None:
    """The absolute path of a local ``source`` (a path, or a MappedFile of one), else None."""
    from .mapped import MappedFile
    from .source import is_remote

    path = source.path if isinstance(source, MappedFile) else source
    if not isinstance(path, (str, os.PathLike)) or is_remote(path):
        return None
    return os.path.abspath(os.fspath(path))


def _label(reader: Any) -> str:
    from .._aliases import public_name

    cls = type(reader)
    return f"{public_name(cls.__module__)}.{cls.__qualname__}"


def _where(source: Any) -> str:
    from .mapped import MappedFile

    if isinstance(source, MappedFile):  # tenfold.open wraps a buffer before the reader sees it
        return "a buffer in memory (bytes, bytearray, memoryview...)"
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"a {type(source).__name__} buffer"
    if hasattr(source, "read") or hasattr(source, "fileno"):
        return f"a file object ({type(source).__name__})"
    try:
        memoryview(source)
    except TypeError:
        return f"a {type(source).__name__}"
    return f"a buffer ({type(source).__name__})"


def _spec(reader: Any, source: Any) -> tuple[Any, ...] | None:
    """Where the file is, as :func:`reopen` takes it: ``("path", abspath)`` (given to the
    reader as it was: a path), ``("file", abspath, mmap)`` (the reader was given the file
    opened: it is opened again, mapped or read with ``pread``), ``("url", url)`` (the reader
    takes the URL and its options itself), ``("remote", url, storage_options)`` (the reader
    was given the remote file opened), or None (a buffer, a file object)."""
    from .mapped import MappedFile
    from .source import is_remote

    at = reader.__dict__.get(_AT)  # where the file was when opened (not the cwd's now)
    mf = getattr(reader, "file", None)
    if mf is not None:
        spec = mf.reopen_spec()
        if spec is None or spec[0] != "path":
            if spec is not None and isinstance(source, str) and source == spec[1]:
                return ("url", source)  # the reader was given the URL: its options have the rest
            return spec
        if isinstance(source, MappedFile):
            return ("file", at or os.path.abspath(spec[1]), spec[2])
        return ("path", at or os.path.abspath(spec[1]))
    if isinstance(source, (str, os.PathLike)):
        if is_remote(source):
            return ("url", source)
        return ("path", at or os.path.abspath(os.fspath(source)))
    return None


def identity(reader: Any, spec: tuple[Any, ...]) -> dict[str, Any] | None:
    """What tells the file ``reader`` has open from another at the same place: its opened
    file's :meth:`~tenfold.core.mapped.MappedFile.identity`, else (a reader of a path that
    keeps nothing open: an index it has read, a directory) the path's size and modification
    time now; None for a remote source the reader fetches itself (it checks what it fetches)."""
    mf = getattr(reader, "file", None)
    if mf is not None:
        got = mf.identity()
        return None if got is None else dict(got)
    if spec[0] not in ("path", "file"):
        return None
    st = os.stat(spec[1])
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def reduce(reader: Any) -> tuple[Any, ...]:
    """``reader.__reduce_ex__``: ``(reopen, (class, where, args, options, identity))``, or a
    :class:`TypeError` saying why it cannot be pickled and what to do instead."""
    label = _label(reader)
    if reader.closed:
        raise TypeError(
            f"cannot pickle {label} {getattr(reader, 'path', None)!r}: it is closed; pickle "
            "it while it is open (the other process opens the same file again)"
        )
    opened = reader.__dict__.get(_OPENED)
    if opened is None:
        raise TypeError(
            f"cannot pickle {label}: it does not record what it was opened with; open it "
            "with tenfold.open(path) to pickle it"
        )
    source, args, kwargs = opened
    spec = _spec(reader, source)
    if spec is None:
        raise TypeError(
            f"cannot pickle {label}: it was opened on {_where(source)}, which another "
            "process cannot open again; open it by path (tenfold.open(path)) to pickle it, "
            "or send the path (or the bytes) to the other process and open them there"
        )
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}  # private: one call's
    return (reopen, (type(reader), spec, args, kwargs, identity(reader, spec)))


def _check(cls: type, spec: tuple[Any, ...], expected: dict[str, Any], got: Any) -> None:
    if got is None:
        got = {}
    for key, want in expected.items():
        if got.get(key) != want:
            raise factory(getattr(cls, "fmt", "tenfold")).integrity(
                repr(spec[1]),
                field=key,
                detail="the file is not the one the reader was pickled with (changed or "
                "replaced since); open it again to read it as it is now",
                expected=want,
                got=got.get(key),
            )


def reopen(
    cls: type,
    spec: tuple[Any, ...],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    expected: dict[str, Any] | None,
) -> Any:
    """A pickled reader opened again (see the module doc): ``cls`` over the file at ``spec``,
    refused when it is not the file that was pickled."""
    local = spec[0] in ("path", "file")
    if expected is not None and local:
        st = os.stat(spec[1])  # before opening: a different file may not even parse
        _check(cls, spec, expected, {"size": st.st_size, "mtime_ns": st.st_mtime_ns})
    opened = spec[0] in ("file", "remote")
    if opened:  # the reader was given its file opened: so it is again
        from .source import open_file

        fmt = getattr(cls, "fmt", "tenfold")
        if spec[0] == "file":
            source: Any = open_file(spec[1], fmt=fmt, mmap=spec[2])
        else:
            source = open_file(spec[1], fmt=fmt, storage_options=spec[2])
    else:
        source = spec[1]
    try:
        reader = cls(source, *args, **kwargs)
    except BaseException:
        if opened:
            source.close()
        raise
    if expected is not None:
        try:
            _check(cls, spec, expected, identity(reader, spec))
        except BaseException:
            reader.close()
            raise
    return reader
