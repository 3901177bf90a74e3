"""tenfold: read, write and verify zTensor, OINF, FOLD, WTXT and TARIDX containers, and
safetensors and npz files.

The top level is small and imports nothing heavy:

* :func:`open` opens any supported file, choosing the reader by its content; every reader has
  one shape (:class:`tenfold.core.reader.TensorReader`): a context manager and a read-only
  ``Mapping[str, value]`` with ``read``, ``info``, ``metadata``, ``verify`` and ``close``;
* :func:`load` reads every tensor of a file into a ``dict`` of NumPy arrays;
* :func:`save` writes a ``dict`` of arrays, in the format its suffix names;
* :func:`detect` names a file's format;
* :func:`safe_open` is the ``safetensors`` API (NumPy, PyTorch, JAX) over every format;
* :func:`diff` compares two checkpoints tensor by tensor (:mod:`tenfold.diff`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import _aliases, errors
from .errors import (
    EncodeError,
    FormatError,
    IntegrityError,
    LimitError,
    LockedError,
    SafetensorError,
    TenfoldError,
    TruncatedError,
    UncorrectableError,
    UnsupportedError,
    UnverifiedRemoteWarning,
)

if TYPE_CHECKING:  # the package imports nothing heavy at run time
    from .core.reader import TensorReader

__version__ = "0.1.0"

_aliases.install()  # tenfold.ztensor ... are the packages under tenfold.formats

# the function shadows its module as an attribute (``from tenfold.diff import DiffResult`` still
# reaches the module); the module is light to import (NumPy is imported by its first call)
from .diff import diff  # noqa: E402

__all__ = [
    "__version__",
    "open",
    "load",
    "save",
    "detect",
    "safe_open",
    "diff",
    "errors",
    "TenfoldError",
    "FormatError",
    "TruncatedError",
    "UnsupportedError",
    "LimitError",
    "IntegrityError",
    "UncorrectableError",
    "EncodeError",
    "LockedError",
    "SafetensorError",
    "UnverifiedRemoteWarning",
]

_builtin_open = open


if not TYPE_CHECKING:  # type checkers keep reporting a misspelt attribute of tenfold

    def __getattr__(name: str) -> Any:
        """``tenfold.oinf``, ``tenfold.torch`` ...: a public submodule, imported on first use (as
        ``numpy.linalg`` is reachable after ``import numpy``); the top level stays light."""
        if not name.startswith("_"):
            import importlib
            import importlib.util

            try:
                spec = importlib.util.find_spec(f"{__name__}.{name}")
            except (ImportError, ValueError):
                spec = None
            if spec is not None:
                return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        import pkgutil

        subs = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
        subs |= {p.split(".")[1] for p in _aliases.ALIASES if p.count(".") == 1}
        return sorted(set(globals()) | subs)


def detect(path: str | os.PathLike[str]) -> str:
    """Name of the format of ``path``, from its content (e.g. ``"ztensor"``)."""
    from .registry import detect as _detect

    return _detect(path)


def open(path: str | os.PathLike[str], **options: Any) -> TensorReader:  # noqa: A001
    """Open ``path`` with the reader of its format (chosen by content, not suffix).

    The reader is a context manager and a ``Mapping`` of the file's tensors, following
    :class:`tenfold.core.reader.TensorReader` (see :mod:`tenfold.core.reader`); a FOLD file
    gives the arrays of its tensor chunks, as :func:`load` does (its chunks:
    :func:`tenfold.fold.open`).
    ``path`` may also be an fsspec URL (``s3://``, ``https://``, ``gs://``, ``memory://``,
    ``simplecache::s3://...``; ``storage_options=`` go to fsspec) or an open fsspec file:
    the index is fetched with a few range requests and each tensor with one (see
    :mod:`tenfold.core.source`). ``mmap=False`` reads a local file with ``pread`` into owned
    memory instead of mapping it. ``trust_links=True`` lets a file that names other files (a
    sharded index, a sharded zTensor v2 file) follow symbolic links out of its folder
    (:mod:`tenfold.core.links`); it is accepted, and has nothing to do, for every other file.
    """
    from ._dispatch import open_any

    return open_any(path, options)  # type: ignore[no-any-return]


def load(path: str | os.PathLike[str], copy: bool = False, **options: Any) -> dict[str, Any]:
    """Read every tensor of ``path`` into a ``dict``.

    With ``copy=False`` arrays that can be are read-only zero-copy views of the file's memory
    map (they keep it alive); ``copy=True`` gives owned, writable arrays.
    """
    from ._dispatch import open_any

    return open_any(path, options, load=True, copy=copy)  # type: ignore[no-any-return]


def safe_open(filename: Any, framework: str = "np", device: Any = "cpu", **options: Any) -> Any:
    """Open a tensor file of any format as ``safetensors.safe_open`` does: ``keys()``,
    ``metadata()``, ``get_tensor(name)``, ``get_slice(name)[...]``, with ``framework``
    ``"np"``, ``"pt"`` or ``"jax"`` (see :mod:`tenfold.interop.frameworks`)."""
    from .interop.frameworks import safe_open as _safe_open

    return _safe_open(filename, framework=framework, device=device, **options)


from ._dispatch import DEFAULT_CHECKSUM as _DEFAULT  # noqa: E402


def _check_save_args(path: Any, tensors: Any) -> None:
    """Name what is wrong before any writer runs: the safetensors argument order
    (``save_file(tensors, path)``), or a folder to write into that does not exist."""
    if isinstance(path, Mapping) and isinstance(tensors, (str, bytes, os.PathLike)):
        raise TypeError(
            "tenfold.save(path, tensors): the path comes first, then the tensors "
            "(safetensors' save_file takes them the other way round); got a "
            f"{type(path).__name__} and then {os.fsdecode(tensors)!r}"
        )
    if not isinstance(path, (str, os.PathLike)):
        return
    from .core.source import is_remote

    if is_remote(path):
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            errno.ENOENT,
            f"no such directory to write {os.fspath(path)!r} in",
            folder,
        )


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    format: str | None = None,  # noqa: A002
    *,
    checksum: str | None = _DEFAULT,
    max_shard_size: int | str | None = None,
    zt_generation: Any = None,
    **options: Any,
) -> None:
    """Write ``tensors`` to ``path`` atomically, in ``format`` or the one its suffix names.

    ``checksum`` (default ``"crc32c"``; or ``"sha256"``, or ``None``) is the per-tensor
    checksum of formats that have one: zTensor writes it into every tensor's entry
    (``checksum=None`` gives output byte-identical to ztensor 0.1.4). FOLD and WTXT always
    checksum every chunk; OINF has no checksum field, so asking for one explicitly there is
    an :class:`EncodeError` (the default is simply not applicable).

    ``compress`` (keyword): ``"zstd"`` (zTensor tensors, FOLD chunks), ``"deflate"`` (npz
    members) or ``None``; a value the format does not write is an :class:`EncodeError` before
    anything is written (safetensors, OINF and WTXT are never compressed).

    ``max_shard_size`` (bytes, or ``"5GB"``, ``"500MB"``, ``"1GiB"`` as Hugging Face takes
    it) splits the tensors into ``name-00001-of-0000N.<ext>`` shards plus the index
    ``<path>.index.json`` in the Hugging Face layout; a model that fits in one shard is one
    file at ``path`` (see :mod:`tenfold.sharded`; :func:`open` opens the index).

    ``zt_generation`` chooses the generation of a ``.zt`` file (each shard's, with
    ``max_shard_size``): ``0``/``"0.1.0"`` (the default) or ``2``/``"v2"`` (canonical
    zTensor v2, what ztensor 2.x opens; every part has an xxh3 digest, so giving ``checksum``
    is an :class:`EncodeError`). Any other value, or ``2`` for another format, is refused.
    """
    _check_save_args(path, tensors)
    if zt_generation is not None:
        options["zt_generation"] = zt_generation
    if max_shard_size is not None:
        from .sharded import save as save_sharded

        save_sharded(path, tensors, max_shard_size, format, checksum=checksum, **options)
        return
    from ._dispatch import save_one
    from .sharded import replace_layout

    save_one(path, tensors, format, checksum=checksum, **options)
    if isinstance(path, (str, os.PathLike)):
        replace_layout(path, [os.fspath(path)])  # an earlier sharded save to path: gone
