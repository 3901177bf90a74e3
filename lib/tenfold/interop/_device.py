"""PyTorch tensors on a CUDA device through the staging ring (:mod:`._staging`).

``tenfold.torch.load_file(path, device="cuda")``, ``safe_open(..., device="cuda")`` and every
tensor :class:`~tenfold.interop._torch.Converter` sends to CUDA come here. Each tensor gets its
own device tensor (``torch.empty``: tensors never share storage) and one staging job:

* a tensor the file stores raw (safetensors; zTensor 0.1.0 raw dense little-endian; a plain
  dense zTensor v2 object) is read by the staging workers straight from the reader's memory
  map (``read = "pread"`` reads it with ``pread`` instead), and its checksum, when the reader
  would check one (``verify_checksums``, not yet verified), is computed by the workers on the
  way: the same :class:`~tenfold.errors.IntegrityError` as a CPU read is raised on a mismatch,
  and a match marks the tensor verified in the reader, as a CPU read does;
* any other tensor (compressed, big-endian, packed, sparse, from a sharded checkpoint or a
  remote file) is read by the reader on the CPU first, checks included, then staged.

Only CUDA is staged; other devices (``"meta"``...) get ``Tensor.to(device)``. The tests run the
same path on the CPU with ``FORCE_CPU`` set (unpinned buffers, synchronous copies).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.dtypes import canonical
from ..core.mapped import MappedFile
from . import _staging
from ._staging import Check, Job, Ring, array_reader

__all__ = ["stages", "DeviceStager", "TorchBackend", "FORCE_CPU"]

#: Stage ``device="cpu"`` too (tests only: the CUDA path's logic, without a GPU).
FORCE_CPU = False
#: How staging workers read a file: ``"map"`` (copy from the reader's memory map) or
#: ``"pread"`` (``pread`` into the buffer); ``scripts/gpu_bench.py`` measures both.
READ = "map"


def stages(device: Any) -> bool:
    """Whether tensors for ``device`` (a ``torch.device``) go through the staging ring."""
    return device.type == "cuda" or (FORCE_CPU and device.type == "cpu")


class TorchBackend:
    """The staging backend for a torch device: pinned buffers (for CUDA), ``copy_`` with
    ``non_blocking=True`` on the current stream, CUDA events."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def alloc(self, nbytes: int) -> tuple[np.ndarray, Any]:
        # pinned only for CUDA: without a GPU torch cannot pin (the CPU tests)
        t = self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=self.cuda)
        return t.numpy(), t

    def copy(self, dst: Any, dst_start: int, handle: Any, start: int, nbytes: int) -> None:
        dst[dst_start : dst_start + nbytes].copy_(
            handle[start : start + nbytes], non_blocking=self.cuda
        )

    def record(self) -> Any:
        if not self.cuda:
            return None
        ev = self.torch.cuda.Event()
        ev.record(self.torch.cuda.current_stream(self.device))
        return ev

    def wait(self, event: Any) -> None:
        if event is not None:
            event.synchronize()

    def synchronize(self) -> None:
        if self.cuda:
            self.torch.cuda.current_stream(self.device).synchronize()


class DeviceStager:
    """The staging ring of one :class:`~tenfold.interop._torch.Converter` (created on its
    first device tensor, kept for the next ones: ``safe_open`` reuses it tensor after
    tensor)."""

    def __init__(self, conv: Any, torch_names: Mapping[str, str]) -> None:
        self.conv = conv
        self.torch = conv.torch
        self.torch_names = torch_names  # canonical tenfold dtype -> torch dtype name
        self.ring = Ring(
            TorchBackend(conv.torch, conv.device),
            _staging.BUFFERS,
            _staging.BUFFER_BYTES,
            _staging.PIECE,
        )

    # -- what the converter asks
    def load(self, t: Any) -> dict[str, Any]:
        """Every tensor of ``t`` (a :class:`~tenfold.interop.frameworks.Tensors`) on the
        device, all copies done."""
        out: dict[str, Any] = {}
        jobs: list[Job] = []
        for name in t.names:
            out[name], job = self._prepare(t, name, lazy=True)
            if job is not None:
                jobs.append(job)
        self.ring.run(jobs, sync=True)
        for name, dst in out.items():
            if callable(dst):  # allocated during the run (see Job.dst)
                out[name] = dst()
        return out

    def get(self, t: Any, name: str) -> Any:
        """Tensor ``name`` of ``t`` on the device (its copy may still be in flight on the
        current stream, as with ``Tensor.to(non_blocking=True)``)."""
        t.check(name)  # the KeyError naming the format
        dst, job = self._prepare(t, name)
        if job is not None:
            self.ring.run([job], sync=False)
        return dst

    def send(self, cpu: Any) -> Any:
        """A CPU tensor's copy on the device (in flight, as :meth:`get`)."""
        dst, job = self._from_cpu(cpu)
        if job is not None:
            self.ring.run([job], sync=False)
        return dst

    def release(self) -> None:
        self.ring.release()

    # -- jobs
    def _prepare(self, t: Any, name: str, lazy: bool = False) -> tuple[Any, Job | None]:
        """The device tensor of ``name`` and its job; with ``lazy``, for a tensor the workers
        read from the file, a callable giving the tensor, made during the run instead."""
        got = file_source(t, name)
        if got is not None:
            mf, offset, dtype, shape, check = got
            tdt = self._torch_dtype(dtype)
            if tdt is not None:
                nbytes = int(np.prod(shape, dtype=np.int64)) * tdt.itemsize
                if not nbytes:
                    dst = self.torch.empty(shape, dtype=tdt, device=self.conv.device)
                    return dst, Job(0, _nothing, None, check)
                src = mf.u8(offset, nbytes, f"tensor {name!r}")
                read = _file_reader(mf, offset, src, name)
                made = _Made(self.torch, shape, tdt, self.conv.device)
                # with pread, an in-order checksum reads the buffer (not the map) too
                job = Job(nbytes, read, made.flat, check, src if READ == "map" else None)
                if not lazy:
                    job.dst, job.lazy = made.flat(), False
                    return made(), job
                return made, job
        cpu = self.conv.to_cpu(np.asarray(t.array(name)))  # the reader reads, checks, decodes
        return self._from_cpu(cpu)

    def _torch_dtype(self, dtype: np.dtype) -> Any:
        if dtype.byteorder == ">":
            return None
        name = self.torch_names.get(canonical(dtype))
        return getattr(self.torch, name, None) if name is not None else None

    def _from_cpu(self, cpu: Any) -> tuple[Any, Job | None]:
        dst = self.torch.empty(cpu.shape, dtype=cpu.dtype, device=self.conv.device)
        if not dst.numel():
            return dst, None
        src = _bytes(cpu.contiguous()).numpy()
        return dst, Job(src.size, array_reader(src), _bytes(dst))


class _Made:
    """A device tensor made on first use: ``flat()`` makes it and gives its bytes (what a
    lazy :class:`Job` is given), ``()`` gives the tensor."""

    __slots__ = ("torch", "shape", "dtype", "device", "tensor")

    def __init__(self, torch: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> None:
        self.torch, self.shape, self.dtype, self.device = torch, shape, dtype, device
        self.tensor: Any = None

    def flat(self) -> Any:
        if self.tensor is None:
            self.tensor = self.torch.empty(self.shape, dtype=self.dtype, device=self.device)
        return _bytes(self.tensor)

    def __call__(self) -> Any:
        self.flat()
        return self.tensor


def _bytes(t: Any) -> Any:
    """A contiguous tensor's bytes as a flat ``uint8`` tensor (a view)."""
    import torch

    return t.reshape(-1).view(torch.uint8)


def _nothing(out: np.ndarray, start: int) -> None:
    raise AssertionError("staging: an empty job has nothing to read")  # pragma: no cover


def _file_reader(mf: MappedFile, offset: int, src: np.ndarray, name: str) -> Any:
    """Reads ``src`` (``mf``'s bytes at ``offset``) from the map, or with ``pread``."""
    if READ == "pread":
        what = f"tensor {name!r}"

        def pread(out: np.ndarray, start: int) -> None:
            mf.pread_into(offset + start, out, what)

        return pread
    return array_reader(src)


# -- where a reader stores a tensor raw, and what checksum it would check -----------------------
def file_source(
    t: Any, name: str
) -> tuple[MappedFile, int, np.dtype, tuple[int, ...], Check | None] | None:
    """``(mapped file, offset, dtype, shape, check)`` when tensor ``name`` of ``t`` lies raw,
    little-endian and C-ordered at ``offset`` of a local map (or in-memory buffer) of the
    reader, with the checksum the reader would check before giving it (None: none to
    check); None when the reader must read it (any other storage). The reader says which
    (:meth:`tenfold.core.reader.BaseReader.checked_span`)."""
    r = t.reader
    mf = getattr(r, "file", None)
    checked_span = getattr(r, "checked_span", None)
    if type(mf) is not MappedFile or mf.closed or checked_span is None:
        return None
    got = checked_span(name)
    if got is None:
        return None
    span = got.span
    check = None
    if got.algo is not None:
        if got.algo not in _staging.ALGORITHMS or got.expected is None or got.error is None:
            return None  # one the ring cannot compute: the reader reads and checks it
        check = Check(got.algo, got.expected, got.error, got.done)
    return mf, span.offset, span.dtype, tuple(span.shape), check
