"""GGUF (llama.cpp's model files, versions 2 and 3): a zero-copy ``Mapping`` reader.

The header (:mod:`._spec`) is parsed and every tensor's byte range checked at open
(:mod:`._parse`). Then:

* unquantised tensors (F32, F16, BF16, F64, I8, I16, I32, I64) are read-only NumPy views of the
  file, in NumPy order: the shape is GGUF's ``ne`` reversed, as the ``gguf`` package gives it;
* block-quantised tensors (Q4_0 ... Q8_K, IQ*, TQ*, MXFP4 ...) are their raw blocks, one record
  per block, of a dtype that names the type (``dtype([('Q4_0', 'u1', (18,))])``, shape
  ``(..., ne[0] // 32)``); ``info(name).dtype`` is the GGML type name and
  ``info(name).extras["shape"]`` the element shape. ``.view(np.uint8)`` gives the bytes;
* ``dequantize=True`` reads Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 tensors as float32 arrays of their
  element shape (any other quantised type then raises :class:`~tenfold.errors.UnsupportedError`
  when read); ``dequantize=f`` calls ``f(type_name, blocks, shape)`` for every quantised tensor
  (``blocks``: a read-only ``uint8`` array of its bytes, ``shape`` its element shape) and gives
  what it returns.

The key/values are :attr:`Reader.metadata` (JSON values: numbers, bools, strings and nested
lists), their GGUF types :meth:`Reader.metadata_type`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.cli_support import inspect_row
from ...core.reader import MappedReader, Span, TensorInfo, load_all, verify_file
from ...core.report import ERROR, OK, Report
from ...core.slicing import plan
from ...errors import MissingTensorError, TenfoldError, factory
from ._parse import Header, Tensor, parse

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "FMT"]

FMT = "gguf"
E = factory(FMT)

Dequantizer = Callable[[str, np.ndarray, tuple[int, ...]], Any]


def _dequantizer(value: Any) -> Dequantizer | None:
    if value is None or value is False:
        return None
    if value is True:
        from ._dequant import dequantize

        return dequantize
    if callable(value):
        return value  # type: ignore[no-any-return]
    raise TypeError(f"gguf: dequantize must be a bool or a callable, got {type(value).__name__}")


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """A GGUF file: ``Mapping`` of tensor name to array (see the module doc).

    Examples
    --------
    A file with one F32 tensor of ``ne = (3,)``, built byte by byte:

    >>> import struct
    >>> def s(b): return struct.pack("<Q", len(b)) + b
    >>> head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + s(b"general.name") + struct.pack("<I", 8)
    >>> head += s(b"demo") + s(b"w") + struct.pack("<IQIQ", 1, 3, 0, 0)
    >>> data = head + bytes(-len(head) % 32) + struct.pack("<3f", 1, 2, 3)
    >>> with Reader(data) as r:
    ...     r["w"].tolist(), r.info("w").dtype, r.metadata
    ([1.0, 2.0, 3.0], 'F32', {'general.name': 'demo'})
    """

    fmt = FMT

    def __init__(
        self,
        source: Any,
        *,
        copy: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
        dequantize: Any = False,
    ) -> None:
        self.copy = copy
        self.limits = limits
        self._deq = _dequantizer(dequantize)
        self._h: Header = self._map_and_parse(source, lambda mf: parse(mf, limits), FMT, mmap=mmap)

    # -- the file ---------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The GGUF version (2 or 3)."""
        return self._h.version

    @property
    def alignment(self) -> int:
        """The data alignment (``general.alignment``, 32 when absent)."""
        return self._h.alignment

    @property
    def data_offset(self) -> int:
        """Where the data section starts."""
        return self._h.data_start

    @property
    def metadata(self) -> dict[str, Any]:
        """The key/values, in file order, as JSON values (arrays as lists, nested as
        stored)."""
        return dict(self._h.metadata)

    def metadata_type(self, key: str) -> str:
        """The GGUF type of key ``key``: ``"uint32"``, ``"string"``, ``"array[float32]"``,
        ``"array[array[int32]]"`` ... (``"array[array]"`` for an empty array of arrays)."""
        return self._h.types[key]

    # -- Mapping ----------------------------------------------------------------------------
    def _keys(self) -> Mapping[str, Tensor]:
        return self._h.tensors

    def tensor(self, name: str) -> Tensor:
        """The tensor info of ``name`` as stored (``ne``, GGML type, absolute offset)."""
        try:
            return self._h.tensors[name]
        except KeyError:
            raise E(MissingTensorError, repr(name), detail="no such tensor") from None

    def _decoded(self, t: Tensor) -> bool:
        return t.type.quantized and self._deq is not None

    def info(self, name: str) -> TensorInfo:
        t = self.tensor(name)
        gt = t.type
        extras = {
            "ggml_type": gt.name,
            "ggml_type_id": gt.code,
            "ne": t.ne,
            "shape": t.shape,
            "block_size": gt.block,
            "type_size": gt.size,
            "quantized": gt.quantized,
        }
        if self._decoded(t):
            from ._dequant import SUPPORTED

            builtin = self._deq is _builtin() and gt.name in SUPPORTED
            np_dtype, shape = (np.dtype("<f4") if builtin else None), t.shape
        else:
            np_dtype, shape = gt.block_dtype, t.block_shape
        encoding = gt.name if gt.quantized else "raw"
        return TensorInfo(
            name, gt.name, shape, (t.offset, t.offset + t.nbytes), encoding, None, extras, np_dtype
        )

    def span(self, name: str) -> Span | None:
        """Where an unquantised tensor lies in the file (see :mod:`tenfold.core.reader`);
        None for a block-quantised one."""
        t = self.tensor(name)
        if t.type.quantized:
            return None
        return Span(t.offset, t.type.block_dtype, t.shape)

    def read(self, name: str, index: Any = None, *, copy: bool | None = None) -> Any:
        """Tensor ``name``: a read-only view of the file (``copy=True``: an owned array);
        with ``index`` (a basic slice) only the rows it touches are read (a quantised
        tensor is sliced over its blocks, or when dequantised over its elements)."""
        t = self.tensor(name)
        copy = self.copy if copy is None else copy
        where = f"tensor {name!r}"
        if self._decoded(t):
            out = self._dequantized(t, where)
            return out if index is None else plan(FMT, where, t.shape, index).apply(out)
        dt, shape = t.type.block_dtype, t.block_shape
        if index is not None and shape:
            pl = plan(FMT, where, shape, index)
            row = dt.itemsize * math.prod(shape[1:])
            rows = self._mf.array(t.offset + pl.lo * row, dt, (pl.hi - pl.lo, *shape[1:]), where)
            result = pl.finish(rows)
            return np.array(result) if copy or not isinstance(result, np.ndarray) else result
        arr = self._mf.array(t.offset, dt, shape, where)
        if arr.flags.writeable:  # an empty array is a fresh one: keep the read-only rule
            arr.flags.writeable = False
        if index is not None:
            return plan(FMT, where, shape, index).apply(np.array(arr) if copy else arr)
        return np.array(arr) if copy else arr

    def _dequantized(self, t: Tensor, where: str) -> Any:
        assert self._deq is not None
        blocks = self._mf.u8(t.offset, t.nbytes, where)
        if self._deq is _builtin():
            self.limits.budget().take(math.prod(t.shape) * 4, FMT, where, offset=t.offset)
        return self._deq(t.type.name, blocks, t.shape)

    def get_tensor(self, name: str) -> Any:
        """``safe_open``'s name for :meth:`read`."""
        return self.read(name)

    # -- checks -----------------------------------------------------------------------------
    def verify(self) -> Report:
        """The layout (checked at open: every count, length, type, alignment and byte range)
        and every tensor's range once more. GGUF has no checksums: nothing more to check."""
        report = Report(FMT, self.path or "<buffer>")
        h = self._h
        report.add(
            "header",
            OK,
            f"GGUF v{h.version}, {len(h.metadata)} key/values, {len(h.tensors)} tensors, "
            f"alignment {h.alignment}, data at {h.data_start}",
        )
        for name, t in h.tensors.items():
            try:
                self._mf.check(t.offset, t.nbytes, f"tensor {name!r}")
                report.add(f"tensor {name!r}", OK, t.type.name, offset=t.offset)
            except TenfoldError as exc:  # pragma: no cover - the layout was checked at open
                report.add(f"tensor {name!r}", ERROR, str(exc))
        return report


def _builtin() -> Any:
    from ._dequant import dequantize

    return dequantize


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open a GGUF file (path, buffer or opened file); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, Any]:
    """Every tensor (read-only views of the file unless ``copy=True``)."""
    return load_all(Reader, source, copy, **kw)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """tenfold reads GGUF but does not write it: always an
    :class:`~tenfold.errors.UnsupportedError`."""
    raise E.unsupported(
        os.fspath(path),
        detail="tenfold reads GGUF but does not write it; write .safetensors or .zt, or use "
        "the gguf package's GGUFWriter",
    )


def inspect(source: Any) -> list[dict]:
    """One row per tensor: its GGML type, element shape (NumPy order), bytes and offset."""
    with Reader(source) as r:
        rows = []
        for name in r:
            t = r.tensor(name)
            rows.append(
                inspect_row(
                    name,
                    t.type.name,
                    t.shape,
                    t.nbytes,
                    t.type.name if t.type.quantized else "raw",
                    layout="blocks" if t.type.quantized else "dense",
                    offset=t.offset,
                )
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Check every layout rule and every tensor's range; never raises on a damaged file."""
    out: Report = verify_file(FMT, Reader, source, **kw)
    return out
