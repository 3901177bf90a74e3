"""NumPy arrays from tenfold readers -> PyTorch tensors, without copying where possible.

Rules (:mod:`tenfold.torch` documents them for users):

* bfloat16, float8 (e4m3fn, e5m2, e8m0fnu, e4m3fnuz, e5m2fnuz), uint16/32/64 and every
  NumPy-native type map to the torch dtype of the same bits: the bytes are viewed as an
  unsigned integer array, handed to :func:`torch.from_numpy` and reinterpreted with
  :meth:`torch.Tensor.view` (no ml_dtypes hop, no copy).
* A read-only view of a file's memory map is not given to torch as is (torch cannot honour
  read-only memory, and a write through the tensor would fault). The converter maps the same
  file a second time *copy-on-write* (``MAP_PRIVATE``, :data:`mmap.ACCESS_COPY`) and builds
  the tensor over that map at the same offset: the tensor shares the page cache with the file
  until it is written to; a write copies the touched page privately and never reaches the file.
  (``safetensors`` maps with ``MAP_PRIVATE`` too, through ``torch.UntypedStorage.from_file``.)
* Copied instead, as documented: arrays that are not views of a file map (read-only buffers
  given to ``open`` in memory), big-endian data (made native), negative strides, data not
  aligned to its element size, and FP4 (``float4_e2m1fn``, one element per byte in NumPy),
  which becomes torch's packed ``float4_e2m1fn_x2`` (two per byte, last axis halved).
  Owned, writable arrays (decoded zstd / base64 / packed OINF tensors) are wrapped, not copied.
* No two writable tensors share a byte (:class:`~tenfold.interop._handout.Handout`):
  the byte ranges of the private map handed out are recorded, and a tensor whose bytes were
  handed out before (a zTensor v2 part stored once for two tensors, a second
  ``get_tensor`` of one name, an overlapping slice) is copied from the reader's read-only
  view, i.e. from the file's bytes, never from a tensor that may have been written. Only
  those duplicates are copied. An owned array the reader gives twice is copied the second
  time too.
* ``device`` other than CPU: for CUDA through a ring of reused pinned buffers filled by worker
  threads (:mod:`tenfold.interop._device`), sent with ``non_blocking=True``;
  :meth:`Converter.synchronize` waits for the copies. Other devices: ``Tensor.to(device)``.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.dtypes import canonical
from ..core.optional import require
from ..errors import factory
from ._handout import Handout, extent

__all__ = ["Converter", "torch_module", "to_torch", "from_torch", "TORCH_NAMES"]

E = factory("tenfold.torch")

#: Canonical tenfold dtype names that are viewed as an unsigned integer of their size and
#: reinterpreted as the torch dtype of the same name.
_VIEWED = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu", "float8_e4m3fnuz",
           "float8_e5m2fnuz")  # fmt: skip
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: torch dtype name -> canonical tenfold name, for every dtype both know.
TORCH_NAMES = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float8_e5m2": "float8_e5m2",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e8m0fnu": "float8_e8m0fnu",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
    "complex64": "complex64",
    "int64": "int64",
    "int32": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint64": "uint64",
    "uint32": "uint32",
    "uint16": "uint16",
    "uint8": "uint8",
    "bool": "bool",
}


def torch_module(what: str = "tenfold.torch") -> Any:
    return require("torch", extra="torch", what=what)


class _PrivateMap:
    """The reader's file mapped again, copy-on-write, and where the reader's map starts."""

    def __init__(self, reader: Any) -> None:
        mf: Any = getattr(reader, "file", None)  # what the reader's spans are offsets of
        self.u8: np.ndarray | None = None
        if not getattr(mf, "mapped", False):
            return  # not a mapped file (a buffer, or a reader that reads without a map)
        base = mf.buffer()
        self.start = int(base.__array_interface__["data"][0])
        self.size = int(base.size)
        fd = getattr(mf, "fd", None)
        if fd is None or self.size == 0:
            return
        # the descriptor the reader opened (and mapped): the same file, whatever its name
        # points to now; a file that changed size since is copied instead
        if os.fstat(fd).st_size != self.size:
            return
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
        self.u8 = np.frombuffer(mm, dtype=np.uint8)  # writable, private

    def translate(self, a: np.ndarray) -> np.ndarray | None:
        """The same array over the private map, or None when ``a`` is not in the map."""
        if self.u8 is None or a.size == 0:
            return None
        addr = int(a.__array_interface__["data"][0])
        off = addr - self.start
        if not 0 <= off < self.size or any(s < 0 for s in a.strides):
            return None
        try:
            return np.ndarray(a.shape, dtype=a.dtype, buffer=self.u8, offset=off, strides=a.strides)
        except (TypeError, ValueError):
            return None


class Converter:
    """Turns the arrays of one reader into torch tensors on ``device`` (see module doc)."""

    def __init__(self, reader: Any, device: Any = "cpu") -> None:
        self.torch = torch_module()
        self.device = self.torch.device(device if device is not None else "cpu")
        self._reader = reader
        self._maps: dict[int, _PrivateMap] = {}
        self._typed: dict[str, Any] = {}  # the private map viewed as each torch dtype (at())
        # by NumPy dtype, with numel and address
        self._typed_of: dict[np.dtype, tuple[Any, int, int]] = {}
        self._cpu = self.device.type == "cpu"
        self._lock = threading.Lock()
        self.handout = Handout()  # the memory given out writable (CPU tensors)
        self.copies = 0  # arrays that had to be copied (tests check zero-copy with this)

    def _private_maps(self) -> list[_PrivateMap]:
        """Private maps of the reader's file (of each opened shard for a sharded reader)."""
        opened = getattr(self._reader, "open_shard_readers", None)  # a sharded reader's
        shards = opened() if callable(opened) else None
        readers = list(shards.values()) if isinstance(shards, dict) else [self._reader]
        with self._lock:
            if isinstance(shards, dict):  # shards the sharded reader closed: their maps go
                live = {id(r): r for r in readers}  # (each held till then: no id reused)
                for k in [k for k in self._maps if k not in live]:
                    del self._maps[k]
                self._held = live
            for r in readers:
                if id(r) not in self._maps:
                    try:
                        self._maps[id(r)] = _PrivateMap(r)
                    except (AttributeError, ValueError, OSError):
                        m = _PrivateMap.__new__(_PrivateMap)
                        m.u8 = None  # nothing to share: copy
                        self._maps[id(r)] = m
            return [self._maps[id(r)] for r in readers]

    def _shared(self, a: np.ndarray) -> np.ndarray | None:
        for m in self._private_maps():
            got = m.translate(a)
            if got is not None:
                return got
        return None

    def at(self, offset: int, dtype: np.dtype, shape: tuple[int, ...], claim: bool = True) -> Any:
        """The tensor of ``dtype`` and ``shape`` stored raw at ``offset`` of the reader's file,
        built in torch over the private map (no NumPy array per tensor), or None when it
        cannot be (no map, a dtype needing conversion, unaligned, a non-CPU device) or when
        its bytes were handed out before (the caller copies). ``claim=False`` leaves the
        claim to the caller (:meth:`claim`, for a view of part of the tensor)."""
        if not self._cpu or offset % dtype.itemsize:
            return None
        got_t = self._typed_of.get(dtype)
        if got_t is None:
            t = self._typed_view(dtype)
            got_t = self._typed_of[dtype] = (
                (t, t.numel(), t.data_ptr()) if t is not None else (None, 0, 0)
            )
        typed, total, addr = got_t
        if typed is None:
            return None
        n = 1
        for d in shape:
            n *= d
        first = offset // dtype.itemsize
        if n == 0 or first + n > total:
            return None
        if claim and not self.handout.claim(addr + offset, addr + offset + n * dtype.itemsize):
            return None
        strides = []
        step = 1
        for d in reversed(shape):
            strides.append(step)
            step *= d
        return typed.as_strided(shape, strides[::-1], first)

    def claim(self, t: Any) -> bool:
        """Whether the bytes of ``t`` (a view of the private map from ``at(claim=False)``)
        were not handed out before; they are recorded as handed out when so."""
        if not t.numel():
            return True
        k = t.element_size()
        lo, hi = extent(t.data_ptr(), t.shape, [s * k for s in t.stride()], k)
        return self.handout.claim(lo, hi)

    def many(self, spans: Sequence[tuple[int, np.dtype, tuple[int, ...]] | None]) -> list[Any]:
        """:meth:`at` for many spans at once (the per-tensor work of a whole file's load):
        the torch dtype, the typed view of the private map and the strides of each shape are
        worked out once per distinct value. ``None`` in, or a span :meth:`at` refuses, gives
        ``None`` out."""
        out: list[Any] = [None] * len(spans)
        if self.device.type != "cpu" or not spans:
            return out
        maps = self._private_maps()
        if len(maps) != 1 or maps[0].u8 is None:
            return out
        typed_of: dict[np.dtype, tuple[Any, int]] = {}
        strides_of: dict[tuple[int, ...], tuple[int, list[int]]] = {}
        addr = int(maps[0].u8.__array_interface__["data"][0])
        los: list[int] = []  # the bytes of each tensor made, for the claims
        his: list[int] = []
        made: list[int] = []
        for i, span in enumerate(spans):
            if span is None:
                continue
            offset, dtype, shape = span
            got_t = typed_of.get(dtype)
            if got_t is None:
                t = self._typed_view(dtype)
                got_t = typed_of[dtype] = (t, t.numel() if t is not None else 0)
            typed, total = got_t
            k = dtype.itemsize
            if typed is None or offset % k:
                continue
            got = strides_of.get(shape)
            if got is None:
                step, st = 1, []
                for d in reversed(shape):
                    st.append(step)
                    step *= d
                got = strides_of[shape] = (step, st[::-1])
            n, strides = got
            first = offset // k
            if n and first + n <= total:
                out[i] = typed.as_strided(shape, strides, first)
                los.append(addr + offset)
                his.append(addr + offset + n * k)
                made.append(i)
        # no two tensors over the same bytes: those whose bytes another one has are left to
        # the caller (None), which copies them from the reader's view of the file
        for i, ok in zip(made, self.handout.claim_many(los, his), strict=True):
            if not ok:
                out[i] = None
        return out

    def _typed_view(self, dtype: np.dtype) -> Any:
        """The private map as one torch tensor of ``dtype`` (cached), or None."""
        if dtype.byteorder == ">":
            return None
        tname = TORCH_NAMES.get(canonical(dtype))
        if tname is None:
            return None
        typed = self._typed.get(tname)
        if typed is None:
            maps = self._private_maps()
            if len(maps) != 1 or maps[0].u8 is None:
                return None
            u8 = maps[0].u8
            raw = self.torch.from_numpy(u8[: u8.size - u8.size % dtype.itemsize])
            typed = self._typed[tname] = raw.view(getattr(self.torch, tname))
        return typed

    def __call__(self, a: Any) -> Any:
        t = self.to_cpu(np.asarray(a))
        if self.device.type == "cpu":
            return t
        return self._send(t)

    def to_cpu(self, a: np.ndarray) -> Any:
        torch = self.torch
        name = canonical(a.dtype) if a.dtype.kind != "O" else "object"
        if name == "float4_e2m1fn":
            self.copies += 1
            return _fp4_to_torch(torch, a)
        if name not in TORCH_NAMES or not hasattr(torch, name):
            raise E.unsupported(f"dtype {a.dtype}", detail="no torch equivalent")
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and np.little_endian is False):
            a = a.astype(a.dtype.newbyteorder("<"))
        wrappable = not (
            any(s < 0 for s in a.strides)
            or (a.size and a.__array_interface__["data"][0] % a.dtype.itemsize)
        )
        if not wrappable:
            pass
        elif not a.flags.writeable:
            shared = self._shared(a) if self._reader is not None else None
            # bytes of the private map already handed out: copied from the reader's view
            if shared is not None and (not self._cpu or self.handout.claim_array(shared, True)):
                a = shared
        elif self._cpu and not self.handout.claim_array(a):
            a = np.array(a)  # an owned array the reader gave before (and may give again)
            self.copies += 1
        if not a.flags.writeable or not wrappable:
            self.copies += 1
            a = np.array(a, order="C")
        return _wrap(torch, a, name)

    def _send(self, t: Any) -> Any:
        if self.staged:  # through the staging ring: no pinned allocation per tensor
            return self.stager().send(t)
        return t.to(self.device)

    @property
    def staged(self) -> bool:
        """Whether tensors reach the device through the staging ring (CUDA)."""
        from ._device import stages

        return stages(self.device)

    def stager(self) -> Any:
        """The :class:`~tenfold.interop._device.DeviceStager` of this converter."""
        got = getattr(self, "_stager", None)
        if got is None:
            from ._device import DeviceStager

            with self._lock:
                got = getattr(self, "_stager", None)
                if got is None:
                    got = self._stager = DeviceStager(self, TORCH_NAMES)
        return got

    def get(self, t: Any, name: str) -> Any:
        """Tensor ``name`` of ``t`` (:class:`~tenfold.interop.frameworks.Tensors`) on the
        device, read from the file by the staging workers where it is stored raw."""
        return self.stager().get(t, name)

    def release(self) -> None:
        """Wait for the copies in flight and free the staging buffers."""
        got = getattr(self, "_stager", None)
        if got is not None:
            got.release()

    def synchronize(self) -> None:
        """Wait for the asynchronous copies to the device."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def _wrap(torch: Any, a: np.ndarray, name: str) -> Any:
    if name in _VIEWED:
        return torch.from_numpy(a.view(_UINT[a.dtype.itemsize])).view(getattr(torch, name))
    if a.dtype.byteorder not in "=|":
        a = a.view(a.dtype.newbyteorder("="))
    return torch.from_numpy(a)


def _fp4_to_torch(torch: Any, a: np.ndarray) -> Any:
    from ..formats.safetensors.writer import pack_f4

    if not hasattr(torch, "float4_e2m1fn_x2"):
        raise E.unsupported("dtype float4_e2m1fn", detail="needs torch>=2.8 (float4_e2m1fn_x2)")
    if a.ndim == 0 or a.shape[-1] % 2:
        raise E.unsupported(
            f"float4_e2m1fn tensor of shape {a.shape}",
            detail="torch packs two per byte (float4_e2m1fn_x2); the last axis must have an even "
            "length",
        )
    packed = pack_f4(a).reshape(a.shape[:-1] + (a.shape[-1] // 2,))
    return torch.from_numpy(packed).view(torch.float4_e2m1fn_x2)


def to_torch(a: np.ndarray, device: Any = "cpu") -> Any:
    """One array -> a torch tensor (a copy when ``a`` is read-only; see module doc)."""
    return Converter(None, device)(a)


def from_torch(t: Any, name: str = "tensor") -> np.ndarray:
    """A CPU torch tensor -> a NumPy array of the same bits (bfloat16 / float8 as ml_dtypes
    types; ``float4_e2m1fn_x2`` unpacked to one ``float4_e2m1fn`` per element). No copy for a
    contiguous CPU tensor."""
    from ..core.dtypes import numpy_dtype

    torch = torch_module()
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    if t.layout != torch.strided:  # sparse (COO, CSR...): torch's own error names no tensor
        raise E.encode(
            f"tensor {name!r}",
            detail=f"is a sparse tensor ({t.layout}); only dense tensors can be stored: "
            "make it dense with .to_dense() first",
        )
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    tname = str(t.dtype).removeprefix("torch.")
    if tname == "float4_e2m1fn_x2":
        from ..formats.safetensors.writer import unpack_f4

        raw = t.view(torch.uint8).numpy().reshape(-1)
        shape = tuple(t.shape[:-1]) + (t.shape[-1] * 2,) if t.dim() else (2,)
        return unpack_f4(raw, raw.size * 2).reshape(shape)
    canon = TORCH_NAMES.get(tname)
    if canon is None:
        raise E.encode(
            f"tensor {name!r}",
            detail=f"dtype {t.dtype} cannot be stored; tenfold stores "
            + ", ".join(sorted(TORCH_NAMES))
            + ", float4_e2m1fn_x2",
        )
    if canon in _VIEWED:
        return (
            t.view(getattr(torch, f"uint{8 * t.element_size()}")).numpy().view(numpy_dtype(canon))
        )
    return t.numpy()
