"""The safetensors-style API over every tensor format tenfold reads.

:class:`safe_open` opens any file :func:`tenfold.open` opens that holds tensors (zTensor of
every generation, OINF, FOLD ``STEN``/``NPZ0`` chunks, WTXT, safetensors, npz, and a sharded
checkpoint's index) and hands out its tensors as NumPy arrays, PyTorch tensors or JAX arrays::

    with safe_open("model.zt", framework="pt") as f:
        f.keys(), f.metadata()
        w = f.get_tensor("w")
        rows = f.get_slice("w")[0:128, ::2]

The conversion to a framework lives in :mod:`tenfold.interop._torch` (PyTorch) and
:mod:`tenfold.jax`; this module knows no framework. :class:`Tensors` adapts a reader of any
format to one view of names, dtypes, shapes and arrays; :func:`normalize_index` checks a
basic index against a shape and safetensors' slicing rules (a refused index is a
:class:`~tenfold.errors.SliceError` naming the shape).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.dtypes import canonical
from ..core.reader import Span
from ..core.source import is_remote
from ..errors import (
    ClosedError,
    MissingTensorError,
    UnsupportedError,
    factory,
)
from ._handout import Handout
from ._indexing import bounded_index, normalize_index

__all__ = [
    "safe_open",
    "Slice",
    "Tensors",
    "normalize_index",
    "bounded_index",
    "FRAMEWORKS",
    "dtype_tag",
    "backend_options",
    "owned_arrays",
    "open_or_closed",
]

#: the errors of the framework adapter (its objects: a framework, a device, an entry)
E = factory("tenfold")

#: Accepted ``framework`` names and the one each means.
FRAMEWORKS = {
    "pt": "pt",
    "torch": "pt",
    "pytorch": "pt",
    "np": "np",
    "numpy": "np",
    "jax": "jax",
    "flax": "jax",
}


def framework_of(framework: str) -> str:
    try:
        return FRAMEWORKS[framework]
    except (KeyError, TypeError):
        raise E.unsupported(
            f"framework {framework!r}",
            detail="unknown",
            expected=f"one of {', '.join(FRAMEWORKS)}",
            got=framework,
        ) from None


def dtype_tag(dtype: np.dtype) -> str:
    """The safetensors name of a NumPy dtype (``"F32"``, ``"BF16"``...), as ``get_dtype()``
    gives it; the canonical tenfold name when safetensors has none."""
    from ..formats.safetensors.writer import TAG_OF_DTYPE

    name = canonical(dtype)
    return TAG_OF_DTYPE.get(name, name)


class _NumpyResults:
    """The ``framework="np"`` converter: arrays as they are, except a writable array whose
    memory was already given out, which is copied (see :class:`Handout`)."""

    def __init__(self) -> None:
        self.handout = Handout()
        self.copies = 0

    def __call__(self, a: Any) -> Any:
        if isinstance(a, np.ndarray) and a.flags.writeable and not self.handout.claim_array(a):
            self.copies += 1
            return np.array(a)
        return a


# -- a reader of any format as one set of tensors ---------------------------------------------
class Tensors:
    """The tensors of a file, whatever its format, over the reader protocol
    (:mod:`tenfold.core.reader`): ``names``, ``spec(name)`` -> (dtype, shape),
    ``array(name)`` (a view of the map where the format stores the tensor raw),
    ``span(name)`` / ``spans()``, ``sliced(name, index)``, ``metadata`` and ``close``.

    It knows no format: what a reader gives is what it holds (a FOLD file's reader gives the
    arrays of its tensor chunks, as :func:`tenfold.load` does).
    """

    def __init__(self, reader: Any, fmt: str) -> None:
        self.reader = reader
        self.fmt = fmt  # for messages
        self.names: list[str] = list(reader.keys())
        self._read_index = takes_index(reader)

    @property
    def metadata(self) -> dict[str, Any]:
        md = self.reader.metadata
        return dict(md) if md is not None else {}

    def check(self, name: str) -> None:
        """A :class:`~tenfold.errors.MissingTensorError` (a ``KeyError``) when the file holds
        no tensor ``name``."""
        if name not in self.reader:
            raise factory(self.fmt)(
                MissingTensorError,
                f"tensor {name!r}",
                detail="the file holds no tensor of that name",
            )

    def spec(self, name: str) -> tuple[np.dtype, tuple[int, ...]]:
        """The dtype and shape ``array(name)`` has, without decoding it where the format's
        index says them (``info(name).np_dtype``)."""
        self.check(name)
        info = self.reader.info(name)
        dt = getattr(info, "np_dtype", None)
        if isinstance(dt, np.dtype):
            return dt, tuple(int(d) for d in info.shape)
        a = self.array(name)
        return np.dtype(a.dtype), tuple(int(d) for d in a.shape)

    def array(self, name: str) -> Any:
        """The tensor as a NumPy array (sparse zTensor tensors made dense)."""
        self.check(name)
        return _dense(self.reader[name], name)

    def span(self, name: str) -> Span | None:
        """The reader's :meth:`~tenfold.core.reader.BaseReader.span`: ``(file offset, dtype,
        shape)`` when tensor ``name`` lies raw, little-endian, C-ordered at that offset of the
        reader's file and reading it needs no check first; then a framework may build the
        tensor straight over the file's bytes. None otherwise (use :meth:`array`)."""
        span = getattr(self.reader, "span", None)
        return None if span is None else span(name)  # type: ignore[no-any-return]

    def spans(self) -> list[Span | None]:
        """:meth:`span` of every name, in ``names`` order (read from the index in one pass
        where the format allows)."""
        spans = getattr(self.reader, "spans", None)
        if spans is None:
            return [None] * len(self.names)
        return spans(self.names)  # type: ignore[no-any-return]

    def sliced(self, name: str, index: tuple[Any, ...]) -> np.ndarray:
        """``array(name)[index]`` (``index`` from :func:`normalize_index`); a reader that
        reads slices itself (``read(name, index)``) is asked to."""
        if self._read_index:
            self.check(name)
            return np.asarray(_dense(self.reader.read(name, index), name))
        return np.asarray(self.array(name)[index])

    def close(self) -> None:
        self.reader.close()


_TAKES_INDEX: dict[Any, bool] = {}


def takes_index(reader: Any) -> bool:
    """Whether ``reader.read`` takes a second positional ``index`` (a reader that reads only
    the byte ranges a slice needs); remembered per reader class."""
    read = getattr(reader, "read", None)
    key = getattr(read, "__func__", None) or type(reader)
    got = _TAKES_INDEX.get(key)
    if got is None:
        try:
            p = inspect.signature(read).parameters.get("index")  # type: ignore[arg-type]
        except (TypeError, ValueError):
            p = None
        got = p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        _TAKES_INDEX[key] = got
    return got


def info_dtype(info: Any) -> np.dtype | None:
    """The NumPy dtype of the array ``read`` gives, from an ``info`` record (its
    ``np_dtype``: :class:`tenfold.core.reader.TensorInfo`), or None."""
    dt = getattr(info, "np_dtype", None)
    return dt if isinstance(dt, np.dtype) else None


def _dense(v: Any, name: str) -> Any:
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, np.generic):
        return np.asarray(v)
    from ..core.alloc import dense

    out = dense(v, name)
    if not isinstance(out, np.ndarray):
        raise E.unsupported(f"entry {name!r}", detail=f"not a tensor ({type(v).__name__})")
    return out


def open_tensors(source: Any, **options: Any) -> Tensors:
    """:class:`Tensors` over ``source`` (a path, or a buffer holding a whole file)."""
    from .. import registry

    if isinstance(source, (str, os.PathLike)) or is_remote(source):
        from .._dispatch import open_any

        reader = open_any(source, dict(options))  # a local file is opened and mapped once
        fmt = _format_of(reader)
    else:
        fmt = registry.detect_bytes(bytes(memoryview(source)[: registry.SNIFF_BYTES]))
        if fmt is None:
            raise E.format("<buffer>", detail="unknown format")
        if not fmt.tensors:  # refused before it is opened
            raise _not_tensors(fmt)
        reader = fmt.open_reader(source, **options)
    try:
        if not fmt.tensors:
            raise _not_tensors(fmt)
        return Tensors(reader, fmt.name)
    except BaseException:
        reader.close()
        raise


def owned_arrays(source: Any, **options: Any) -> dict[str, np.ndarray]:
    """Every tensor of ``source`` (what :func:`open_tensors` takes) as a writable NumPy array
    no other array shares, in the file's order (``safetensors.numpy.load_file``): a read-only
    view of the file is copied, an array the reader decoded is kept."""
    t = open_tensors(source, **options)
    try:
        keep = _NumpyResults()  # copies a writable array whose memory was given out already
        out = {}
        for name in t.names:
            a = np.asarray(keep(t.array(name)))
            out[name] = a if a.flags.writeable else np.array(a)
        return out
    finally:
        t.close()


def _not_tensors(fmt: Any) -> UnsupportedError:
    return E.unsupported(fmt.name, detail=f"not a tensor file; {fmt.holds}")


def _format_of(reader: Any) -> Any:
    """The registered format whose package defines ``reader``'s class (the sharded index's
    when none does)."""
    from .. import registry

    mod = type(reader).__module__
    for f in registry.formats():
        if mod == f.module or mod.startswith(f.module + "."):
            return f
    return next(f for f in registry.formats() if f.opens_path)  # a multi-file checkpoint


# -- the safetensors API ---------------------------------------------------------------------------
class safe_open:  # noqa: N801 - the name safetensors users know
    """Open a tensor file of any format tenfold reads, as ``safetensors.safe_open`` does.

    Parameters
    ----------
    filename
        Path of the file (format detected by content), or of a sharded checkpoint's index.
    framework
        ``"pt"`` (PyTorch tensors), ``"np"``/``"numpy"`` (NumPy arrays) or ``"jax"``.
    device
        Where tensors go: ``"cpu"`` (default), ``"cuda"``, ``"cuda:1"`` ... (PyTorch), or a
        JAX device / platform name for ``"jax"``. NumPy accepts only ``"cpu"``.
    backend
        ``"mmap"`` (default: the file is mapped) or ``"pread"`` (tensors are read into owned
        memory; the spelling of tenfold's ``mmap=False``), as safetensors takes it.
    options
        Passed to the format's reader (e.g. ``limits``).

    A handle used after :meth:`close` (or its ``with`` block) raises
    :class:`~tenfold.errors.ClosedError`, a ``SafetensorError``, as safetensors does; so does
    a :class:`Slice` taken from it (safetensors' slices outlive their handle).

    NumPy arrays are read-only views of the file where the format stores the tensor raw.
    PyTorch tensors of such views share the file's pages through a private copy-on-write map
    (writing into a tensor never reaches the file); see :mod:`tenfold.torch`.
    """

    def __init__(
        self,
        filename: Any,
        framework: str = "np",
        device: Any = "cpu",
        *,
        backend: str | None = None,
        **options: Any,
    ) -> None:
        options = backend_options(backend, options)
        self._framework = framework_of(framework)
        self._device = device
        if self._framework == "np" and device not in ("cpu", None):
            raise E.unsupported(
                "framework 'np'",
                field="device",
                detail="NumPy arrays live on the CPU",
                expected="cpu",
                got=device,
            )
        _converter(self._framework, None, device)  # a missing extra fails before opening
        self._t = open_tensors(filename, **options)
        try:
            self._convert = _converter(self._framework, self._t.reader, device)
        except BaseException:
            self._t.close()
            raise

    # -- lifetime
    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        release = getattr(self._convert, "release", None)
        if release is not None:  # a device's staging buffers
            release()
        self._t.close()

    @property
    def closed(self) -> bool:
        return bool(self._t.reader.closed)

    def _open(self) -> Tensors:
        """The tensors, or :class:`~tenfold.errors.ClosedError` once the handle is closed."""
        return open_or_closed(self._t)

    # -- the safetensors surface
    def keys(self) -> list[str]:
        """Tensor names, sorted (as safetensors gives them; :meth:`offset_keys` gives them in
        the file's order)."""
        return sorted(self._open().names)

    def offset_keys(self) -> list[str]:
        """Tensor names in the file's order (by offset where the format has one)."""
        return list(self._open().names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, as a ``dict`` in :meth:`offset_keys` order (safetensors 0.8's
        ``get_tensors``): :meth:`get_tensor` of each name."""
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def __contains__(self, name: object) -> bool:
        self._open()
        try:
            self._t.check(name)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return isinstance(name, str)

    def metadata(self) -> dict[str, Any] | None:
        """File-level metadata, as ``safetensors.safe_open(...).metadata()`` gives it for a
        ``.safetensors`` file: its ``__metadata__`` (a ``dict`` of strings), or None when the
        header has none (or it is ``null``).

        Other formats give a ``dict``, never None (``{}`` when there is nothing): zTensor
        the user metadata ``tenfold.save(metadata=)`` stored (nothing else), OINF
        and FOLD their metadata maps (FOLD without its index bookkeeping), WTXT its header
        fields, npz ``{"comment": ...}`` when the zip has one, a sharded index its
        ``metadata`` object (``total_size``...). Values are what the format stores: strings,
        and for WTXT/OINF/zTensor/FOLD/sharded also numbers, lists, objects or null.
        """
        if not getattr(self._open().reader, "has_metadata", True):  # safetensors: none at all
            return None
        return self._t.metadata

    def get_tensor(self, name: str) -> Any:
        """Tensor ``name`` in the framework chosen at open."""
        self._open()
        if getattr(self._convert, "staged", False):  # CUDA: through the staging ring
            return self._convert.get(self._t, name)
        at = getattr(self._convert, "at", None)
        if at is not None:
            try:
                span = self._t.span(name)
            except KeyError:
                self._t.check(name)  # raises the KeyError that names the format
                raise
            if span is not None:
                got = at(*span)
                if got is not None:
                    return got
        return self._convert(self._t.array(name))

    def get_slice(self, name: str) -> Slice:
        """A lazy handle on tensor ``name``: ``get_shape()``, ``get_dtype()``, and
        ``[...]`` with basic indexing (integers, slices with steps, ``...``), by safetensors'
        rules (see :class:`Slice`)."""
        self._open().check(name)
        # safetensors slices PyTorch tensors with torch's rules (bounds clipped), the other
        # frameworks with its own (bounds outside an axis refused)
        return Slice(self._t, self._convert, name, strict=self._framework != "pt")


class Slice:
    """What :meth:`safe_open.get_slice` returns; reading happens in ``__getitem__``.

    Indexing follows safetensors' rules where they differ from Python's and NumPy's; each
    refusal is a :class:`~tenfold.errors.SliceError` (``IndexError``, ``ValueError`` and
    ``SafetensorError``):

    * a step must be positive (``[::-1]`` and ``[::0]`` are refused);
    * ``[]`` (an empty list) selects no row of the first axis; other lists, arrays, ``None``,
      booleans, floats and strings are refused (only basic indexes are read lazily);
    * with every framework but PyTorch (safetensors slices those itself), a slice bound
      outside its axis is refused, not clipped: ``[:20]`` or ``[10:]`` of 10 rows (a start
      must lie inside the axis, a stop at most at its end; a negative bound counts from the
      end, and one still below 0 is refused). For PyTorch, safetensors indexes a torch
      tensor, which clips as Python does, and so does tenfold.

    Where safetensors 0.8.0 fails by accident (NumPy, JAX), Python's rule holds: ``[3:1]``
    is empty (safetensors raises ``SystemError``), negative slice bounds count from the end
    (``OverflowError`` there), and omitted bounds on an axis of length 0 select nothing
    (safetensors refuses ``[:]`` of a tensor with 0 rows).
    """

    def __init__(self, tensors: Tensors, convert: Any, name: str, strict: bool = True) -> None:
        self._t = tensors  # the owner's (a safe_open): the file stays open while it is
        self._convert = convert
        self._name = name
        self._strict = strict  # bounds outside an axis refused (safetensors' own slicing)
        self._spec: tuple[np.dtype, tuple[int, ...]] | None = None

    def _get_spec(self) -> tuple[np.dtype, tuple[int, ...]]:
        open_or_closed(self._t)
        if self._spec is None:
            self._spec = self._t.spec(self._name)
        return self._spec

    def get_shape(self) -> list[int]:
        return list(self._get_spec()[1])

    def get_dtype(self) -> str:
        """The element type in safetensors' words (``"F32"``, ``"BF16"``, ``"F8_E4M3"``...)."""
        return dtype_tag(self._get_spec()[0])

    @property
    def shape(self) -> tuple[int, ...]:
        return self._get_spec()[1]

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __getitem__(self, index: Any) -> Any:
        convert = self._convert
        at = getattr(convert, "at", None)
        fmt = open_or_closed(self._t).fmt
        span = self._t.span(self._name) if at is not None else None
        if span is not None:  # stored raw in a mapped file: index a view of the private map
            idx = normalize_index(
                index, span[2], what=f"tensor {self._name!r}", fmt=fmt, strict=self._strict
            )
            if all(type(i) is not slice or i.step is None or i.step > 0 for i in idx):
                whole = at(*span, claim=False)  # type: ignore[misc]
                if whole is not None:
                    # bounds within each axis: torch truncates (or misreads) huge ones
                    part = whole[bounded_index(idx, span[2])]
                    if convert.claim(part):  # else its bytes were handed out: a copy
                        return part
        shape = self.shape
        idx = normalize_index(
            index, shape, what=f"tensor {self._name!r}", fmt=fmt, strict=self._strict
        )
        arr = self._t.sliced(self._name, idx)
        return convert(arr)

    def __repr__(self) -> str:
        return f"<tenfold slice {self._name!r} {self.get_dtype()} {self.get_shape()}>"


def open_or_closed(t: Tensors) -> Tensors:
    """``t``, or a :class:`~tenfold.errors.ClosedError` when its reader was closed."""
    if getattr(t.reader, "closed", False):
        raise factory(t.fmt)(ClosedError, "file", detail="the handle was closed")
    return t


#: safetensors' ``backend`` names and the ``mmap`` option each means
BACKENDS = {"mmap": True, "pread": False}


def backend_options(backend: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the ``mmap`` option safetensors' ``backend`` (``"mmap"``, ``"pread"``,
    or None: as given) stands for; an ``mmap`` option also given must agree."""
    if backend is None:
        return options
    if backend not in BACKENDS:
        raise factory("tenfold")(
            UnsupportedError,
            f"backend {backend!r}",
            detail="unknown",
            expected=" or ".join(repr(b) for b in BACKENDS),
            got=backend,
        )
    mmap = options.get("mmap")
    if mmap is not None and bool(mmap) != BACKENDS[backend]:
        raise TypeError(f"backend={backend!r} and mmap={mmap!r} disagree; give one of them")
    return {**options, "mmap": BACKENDS[backend]}


def _converter(framework: str, reader: Any, device: Any) -> Any:
    if framework == "np":
        return _NumpyResults()
    if framework == "pt":
        from ._torch import Converter

        return Converter(reader, device)
    from ._jax import jax_module, to_jax

    jax_module()
    return lambda a: to_jax(a, device)
