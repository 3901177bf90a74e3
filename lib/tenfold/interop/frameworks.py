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
basic index against a shape (an out-of-range integer is an :class:`IndexError` naming the
shape).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.dtypes import canonical, numpy_dtype
from ..core.source import is_remote
from ..errors import FormatError, TenfoldError, UnsupportedError, describe
from ._handout import Handout

__all__ = [
    "safe_open",
    "Slice",
    "Tensors",
    "normalize_index",
    "bounded_index",
    "FRAMEWORKS",
    "dtype_tag",
]

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

_FOLD_TENSOR_CTYPES = ("STEN", "NPZ0")
_PACKED_TAGS = ("F4",)


def framework_of(framework: str) -> str:
    try:
        return FRAMEWORKS[framework]
    except (KeyError, TypeError):
        raise UnsupportedError(
            f"tenfold: framework {framework!r}: unknown; expected one of {', '.join(FRAMEWORKS)}"
        ) from None


def dtype_tag(dtype: np.dtype) -> str:
    """The safetensors name of a NumPy dtype (``"F32"``, ``"BF16"``...), as ``get_dtype()``
    gives it; the canonical tenfold name when safetensors has none."""
    from ..formats.safetensors.writer import TAG_OF_DTYPE

    name = canonical(dtype)
    return TAG_OF_DTYPE.get(name, name)


# -- index checks --------------------------------------------------------------------------------
def normalize_index(index: Any, shape: tuple[int, ...], what: str = "tensor") -> tuple[Any, ...]:
    """``index`` as a tuple of ``int`` and ``slice``, one per leading axis, checked against
    ``shape``: ``Ellipsis`` expanded, negative integers made positive. Slices are kept as
    given (NumPy clips them, as Python does for lists). An integer outside its axis, or more
    indices than axes, is an :class:`IndexError` naming the shape.

    >>> normalize_index((-1, ..., slice(None, None, 2)), (4, 5, 6))
    (3, slice(None, None, None), slice(None, None, 2))
    >>> normalize_index(7, (4, 5))
    Traceback (most recent call last):
    ...
    IndexError: tensor of shape (4, 5): index 7 is out of range for axis 0 of size 4
    """
    items = index if isinstance(index, tuple) else (index,)
    n_ell = sum(1 for i in items if i is Ellipsis)
    if n_ell > 1:
        raise IndexError(f"{what} of shape {shape}: an index can only have one ellipsis")
    n_axes = len(items) - n_ell
    if n_axes > len(shape):
        raise IndexError(
            f"{what} of shape {shape}: too many indices; {len(shape)} axes, {n_axes} indexed"
        )
    if n_ell:
        k = items.index(Ellipsis)
        items = items[:k] + (slice(None),) * (len(shape) - n_axes) + items[k + 1 :]
    out: list[Any] = []
    for axis, item in enumerate(items):
        size = shape[axis]
        if isinstance(item, slice):
            for part in (item.start, item.stop, item.step):
                if part is not None and not _is_int(part):
                    raise TypeError(
                        f"{what} of shape {shape}: slice bounds must be integers, got {part!r}"
                    )
            if item.step is not None and int(item.step) == 0:
                raise ValueError(f"{what} of shape {shape}: slice step cannot be zero")
            out.append(item)
        elif _is_int(item):
            i = int(item)
            if not -size <= i < size:
                raise IndexError(
                    f"{what} of shape {shape}: index {i} is out of range for axis {axis} "
                    f"of size {size}"
                )
            out.append(i + size if i < 0 else i)
        else:
            raise TypeError(
                f"{what} of shape {shape}: only integers, slices and ... are supported "
                f"(basic indexing), got {type(item).__name__}"
            )
    return tuple(out)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def bounded_index(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...]:
    """``index`` (from :func:`normalize_index`) with every slice's start, stop and step
    within its axis, selecting the same elements as NumPy does with the slice as given.

    A framework that stores bounds in 64 bits (torch truncates larger ones, and treats a step
    of ``2**63`` as negative) then slices as NumPy does: a step at least the axis length
    selects one element, so it becomes the length itself.

    >>> bounded_index((slice(None, None, 2**64 + 2), 1), (6, 3))
    (slice(0, 6, 6), 1)
    >>> bounded_index((slice(-2**70, 2**70, 3),), (10,))
    (slice(0, 10, 3),)
    """
    out: list[Any] = []
    for item, size in zip(index, shape, strict=False):
        if type(item) is slice:
            start, stop, step = item.indices(size)
            if step > 0:
                step = min(step, max(size, 1))
            else:
                step = max(step, -max(size, 1))
            item = slice(start, stop if stop >= 0 else None, step)
        out.append(item)
    return tuple(out)


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
    """The tensors of a file, whatever its format: ``names``, ``spec(name)`` -> (dtype,
    shape), ``array(name)`` (a view of the map where the format stores the tensor raw),
    ``sliced(name, index)``, ``metadata`` and ``close``.

    FOLD files give the tensors of their ``STEN``/``NPZ0`` chunks, named as
    :func:`tenfold.fold.load` names them (``"<chunk>/<array>"`` with several chunks).
    TARIDX indexes hold samples, not tensors, and are refused.
    """

    def __init__(self, reader: Any, fmt: str) -> None:
        self.reader = reader
        self.fmt = fmt
        self._lock = threading.Lock()
        self._fold: dict[str, dict[str, np.ndarray]] = {}
        self._fold_names: dict[str, tuple[str, str]] = {}
        self._sten: dict[str, dict[str, tuple[str, tuple[int, ...], int, int]]] = {}
        if fmt == "taridx":
            raise UnsupportedError(
                "tenfold: a TARIDX index holds tar samples, not tensors; use tenfold.taridx.Dataset"
            )
        if fmt == "fold":
            chunks = [c.name for c in reader.chunks if c.ctype in _FOLD_TENSOR_CTYPES]
            if not chunks:
                raise UnsupportedError(
                    f"fold: {reader.path or '<buffer>'}: no tensor chunk (STEN or NPZ0)"
                )
            self._chunks = chunks
            self.names = []
            # uncompressed STEN chunks: their tables from the header alone (slices read rows)
            for c in chunks:
                try:
                    table = reader.sten_entries(c)
                except TenfoldError:  # a damaged header: the checked (repairing) read decides
                    table = None
                if table is not None:
                    self._sten[c] = table
            for c in chunks:
                for k in self._sten[c] if c in self._sten else self._chunk(c):
                    key = k if len(chunks) == 1 else f"{c}/{k}"
                    if key in self._fold_names:  # chunk 'x' array 'y/z', chunk 'x/y' array 'z'
                        c0, k0 = self._fold_names[key]
                        raise UnsupportedError(
                            describe(
                                "fold",
                                f"chunk {c!r} array {k!r}",
                                detail=f"named {key!r}, as chunk {c0!r} array {k0!r} is; read "
                                "one chunk at a time (tenfold.fold.load(path, chunk=...))",
                            )
                        )
                    self._fold_names[key] = (c, k)
                    self.names.append(key)
        else:
            self.names = list(reader.keys())
        self._read_index = takes_index(reader)

    def _chunk(self, chunk: str) -> dict[str, np.ndarray]:
        with self._lock:
            got = self._fold.get(chunk)
            if got is None:
                got = self.reader.read_state_dict(chunk)
                for a in got.values():  # cached and handed out again: never written into
                    if isinstance(a, np.ndarray):
                        a.flags.writeable = False
                self._fold[chunk] = got
            return got

    @property
    def metadata(self) -> dict[str, Any]:
        md = self.reader.metadata
        out = dict(md) if md is not None else {}
        if self.fmt == "fold":  # the index's own bookkeeping, as convert leaves it out
            from ..formats.fold._spec import INTERNAL_METADATA

            for k in INTERNAL_METADATA:
                out.pop(k, None)
        return out

    def check(self, name: str) -> None:
        if self.fmt == "fold":
            if name not in self._fold_names:
                raise KeyError(f"{self.fmt}: no tensor named {name!r}")
        elif name not in self.reader:
            raise KeyError(f"{self.fmt}: no tensor named {name!r}")

    def spec(self, name: str) -> tuple[np.dtype, tuple[int, ...]]:
        """The dtype and shape ``array(name)`` has, without decoding it where the format's
        index says them."""
        self.check(name)
        if self.fmt == "fold":
            c, k = self._fold_names[name]
            if c in self._sten and c not in self._fold:
                from ..formats.safetensors.writer import DTYPES, PACKED_BITS

                tag, shape = self._sten[c][k][:2]
                if tag not in PACKED_BITS:
                    return np.dtype(DTYPES[tag]), tuple(int(d) for d in shape)
        else:
            info = self.reader.info(name)
            dt = info_dtype(info)
            if dt is not None:
                return dt, tuple(int(d) for d in info.shape)
        a = self.array(name)
        return np.dtype(a.dtype), tuple(int(d) for d in a.shape)

    def array(self, name: str) -> Any:
        """The tensor as a NumPy array (sparse zTensor tensors made dense)."""
        self.check(name)
        if self.fmt == "fold":
            c, k = self._fold_names[name]
            return self._chunk(c)[k]
        return _dense(self.reader[name], name)

    def span(self, name: str) -> tuple[int, np.dtype, tuple[int, ...]] | None:
        """``(file offset, dtype, shape)`` when tensor ``name`` is stored raw, little-endian,
        C-ordered at that offset of the reader's file and reading it needs no check the reader
        would make first (a zTensor checksum not yet verified): then a framework may build the
        tensor straight over the file's bytes. None otherwise (use :meth:`array`)."""
        r = self.reader
        if self.fmt == "safetensors":
            entries, start0 = getattr(r, "_entries", None), getattr(r, "data_start", None)
            if isinstance(entries, dict) and isinstance(start0, int):  # fast: no record per call
                from ..formats.safetensors.writer import DTYPES

                tag, shape, begin, end = entries[name]
                if tag in _PACKED_TAGS or tag not in DTYPES:
                    return None
                tdt = DTYPES[tag]
                n = tdt.itemsize
                for d in shape:
                    n *= d
                return (start0 + begin, tdt, tuple(shape)) if end - begin == n else None
            info = r.info(name)
            dt = info_dtype(info)
            if dt is None or info.byte_range is None or info.dtype in _PACKED_TAGS:
                return None
            start, end = info.byte_range
            shape = tuple(info.shape)
            if end - start != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
                return None
            return start, dt, shape
        if self.fmt == "ztensor" and type(r).__name__ == "Reader":
            info = r.info(name)
            if info.layout != "dense" or info.encoding != "raw" or not info.zero_copy:
                return None
            if r.verify_checksums and info.checksum_algo and name not in r._verified:
                return None
            return info.offset, info.np_dtype, tuple(info.shape)
        return None

    def spans(self) -> list[tuple[int, np.dtype, tuple[int, ...]] | None]:
        """:meth:`span` of every name, in ``names`` order, read from the index in one pass
        where the format allows (zTensor 0.1.0, safetensors)."""
        r = self.reader
        if self.fmt == "ztensor" and type(r).__name__ == "Reader":
            infos = r._infos
            check = r.verify_checksums
            verified = r._verified
            compact_span = getattr(infos, "compact_span", None)
            out: list[tuple[int, np.dtype, tuple[int, ...]] | None] = []
            for n in self.names:
                if compact_span is not None:  # from the index kernel's record, none built
                    known, span = compact_span(n)
                    if known:
                        out.append(span)
                        continue
                i = infos[n]
                if (
                    i.layout != "dense"
                    or i.encoding != "raw"
                    or not i.zero_copy
                    or (check and i.checksum_algo and n not in verified)
                ):
                    out.append(None)
                else:
                    out.append((i.offset, i.np_dtype, i.shape))
            return out
        return [self.span(n) for n in self.names]

    def sliced(self, name: str, index: tuple[Any, ...]) -> np.ndarray:
        """``array(name)[index]`` (``index`` from :func:`normalize_index`); a reader that
        reads slices itself (``read(name, index)``) is asked to."""
        if self._read_index and self.fmt != "fold":
            self.check(name)
            return np.asarray(_dense(self.reader.read(name, index), name))
        if self.fmt == "fold":
            self.check(name)
            c, k = self._fold_names[name]
            if c in self._sten and c not in self._fold:  # rows only, as zTensor's slices
                return self.reader.read_tensor(c, k, index, verify=False)  # type: ignore[no-any-return]
        return np.asarray(self.array(name)[index])

    def close(self) -> None:
        self._fold.clear()
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
    for attr in ("np_dtype", "numpy_dtype"):
        dt = getattr(info, attr, None)
        if isinstance(dt, np.dtype):
            return dt
    extras = getattr(info, "extras", None) or {}
    text = extras.get("numpy_dtype") if isinstance(extras, dict) else None
    for cand in (text, getattr(info, "dtype", None)):
        if not isinstance(cand, str):
            continue
        try:
            return numpy_dtype(cand)
        except KeyError:
            pass
        if cand.isascii() and cand[:1] in "<>|=fiubc":
            try:
                return np.dtype(cand)
            except TypeError:
                pass
        from ..formats.safetensors.writer import DTYPES

        if cand in DTYPES:
            return DTYPES[cand]
    return None


def _dense(v: Any, name: str) -> Any:
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, np.generic):
        return np.asarray(v)
    from ..core.alloc import dense

    out = dense(v, name)
    if not isinstance(out, np.ndarray):
        raise UnsupportedError(f"tenfold: entry {name!r} is not a tensor ({type(v).__name__})")
    return out


def open_tensors(source: Any, **options: Any) -> Tensors:
    """:class:`Tensors` over ``source`` (a path, or a buffer holding a whole file)."""
    from .. import registry as formats

    if isinstance(source, (str, os.PathLike)) or is_remote(source):
        from .._dispatch import open_any

        reader = open_any(source, dict(options))  # a local file is opened and mapped once
        fmt = _format_of(reader)
    else:
        info = formats.detect_bytes(bytes(memoryview(source)[: formats.SNIFF_BYTES]))
        if info is None:
            raise FormatError("tenfold: <buffer>: unknown format")
        fmt = info.name
        reader = formats.module_for(fmt).open(source, **options)
    try:
        return Tensors(reader, fmt)
    except BaseException:
        reader.close()
        raise


def _format_of(reader: Any) -> str:
    """The name of the format whose module defines ``reader``'s class."""
    from .. import registry as formats

    mod = type(reader).__module__
    for info in formats.FORMATS:
        if mod == info.module or mod.startswith(info.module + "."):
            return info.name
    return formats.SHARDED


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
    options
        Passed to the format's reader (e.g. ``limits``).

    NumPy arrays are read-only views of the file where the format stores the tensor raw.
    PyTorch tensors of such views share the file's pages through a private copy-on-write map
    (writing into a tensor never reaches the file); see :mod:`tenfold.torch`.
    """

    def __init__(
        self, filename: Any, framework: str = "np", device: Any = "cpu", **options: Any
    ) -> None:
        self._framework = framework_of(framework)
        self._device = device
        if self._framework == "np" and device not in ("cpu", None):
            raise UnsupportedError(f"tenfold: framework 'np': device {device!r}; expected 'cpu'")
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

    # -- the safetensors surface
    def keys(self) -> list[str]:
        """Tensor names, in the file's order."""
        return list(self._t.names)

    def offset_keys(self) -> list[str]:
        return self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._t.names)

    def __contains__(self, name: object) -> bool:
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
        ``{"version": ...}`` plus the user metadata ``tenfold.save(metadata=)`` stored, OINF
        and FOLD their metadata maps (FOLD without its index bookkeeping), WTXT its header
        fields, npz ``{"comment": ...}`` when the zip has one, a sharded index its
        ``metadata`` object (``total_size``...). Values are what the format stores: strings,
        and for WTXT/OINF/zTensor/FOLD/sharded also numbers, lists, objects or null.
        """
        if self._t.fmt == "safetensors" and not getattr(self._t.reader, "has_metadata", True):
            return None
        return self._t.metadata

    def get_tensor(self, name: str) -> Any:
        """Tensor ``name`` in the framework chosen at open."""
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
        ``[...]`` with basic indexing (integers, slices with steps, ``...``)."""
        self._t.check(name)
        return Slice(self, name)


class Slice:
    """What :meth:`safe_open.get_slice` returns; reading happens in ``__getitem__``."""

    def __init__(self, owner: safe_open, name: str) -> None:
        self._owner = owner
        self._name = name
        self._spec: tuple[np.dtype, tuple[int, ...]] | None = None

    def _get_spec(self) -> tuple[np.dtype, tuple[int, ...]]:
        if self._spec is None:
            self._spec = self._owner._t.spec(self._name)
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
        owner = self._owner
        at = getattr(owner._convert, "at", None)
        span = owner._t.span(self._name) if at is not None else None
        if span is not None:  # stored raw in a mapped file: index a view of the private map
            idx = normalize_index(index, span[2], what=f"tensor {self._name!r}")
            if all(type(i) is not slice or i.step is None or i.step > 0 for i in idx):
                whole = at(*span, claim=False)  # type: ignore[misc]
                if whole is not None:
                    # bounds within each axis: torch truncates (or misreads) huge ones
                    part = whole[bounded_index(idx, span[2])]
                    if owner._convert.claim(part):  # else its bytes were handed out: a copy
                        return part
        shape = self.shape
        idx = normalize_index(index, shape, what=f"tensor {self._name!r}")
        arr = owner._t.sliced(self._name, idx)
        return owner._convert(arr)

    def __repr__(self) -> str:
        return f"<tenfold slice {self._name!r} {self.get_dtype()} {self.get_shape()}>"


def _converter(framework: str, reader: Any, device: Any) -> Any:
    if framework == "np":
        return _NumpyResults()
    if framework == "pt":
        from ._torch import Converter

        return Converter(reader, device)
    from ._jax import jax_module, to_jax

    jax_module()
    return lambda a: to_jax(a, device)
