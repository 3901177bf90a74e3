"""Read FOLD / MIND files: the :class:`Reader` (a ``Mapping`` of chunk name to decoded chunk).

The header and the JSON index are parsed by :mod:`tenfold.fold._index`; each chunk goes through
the pipeline of :mod:`tenfold.fold._chunks` (binary header, CRC-32C, Reed-Solomon correction only
on a mismatch, SHA-256, decompression). ``ChunkInfo``, ``ChunkStatus``, ``FoldWarning`` and
``strict_or_warn`` stay importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Budget, Limits
from ...core.reader import MappedReader, TensorInfo
from ...errors import (
    FormatError,
)
from . import _digest, _index, _payloads
from ._chunks import ChunkReading, ChunkStatus
from ._index import ChunkInfo, FoldWarning, strict_or_warn
from ._spec import (
    FMT,
    MIND_CHUNKS,
)

__all__ = ["Reader", "ChunkInfo", "ChunkStatus", "FoldWarning", "strict_or_warn"]


#: Chunk types whose value (``reader[name]``) is a ``dict`` of arrays: the payload kinds of
#: DECISIONS.md that hold tensors (safetensors, ``np.savez``, a ``torch.save`` of a dict).
ARRAY_CTYPES = ("STEN", "NPZ0", "TSAV")
#: The chunk types whose arrays are the file's tensors: what :func:`tenfold.fold.load`,
#: :func:`tenfold.open` (:class:`~tenfold.fold.tensors.TensorView`) and ``tenfold convert``
#: read, with no torch. A ``TSAV`` chunk stays the chunk API's (:meth:`Reader.read_state_dict`).
TENSOR_CTYPES = ("STEN", "NPZ0")
#: Chunk types whose value is the decoded JSON.
JSON_CTYPES = ("JSON",)


class Reader(ChunkReading, MappedReader, Mapping[str, Any]):
    """A FOLD / MIND file opened for reading: a ``Mapping`` of chunk name to decoded chunk.

    ``reader[name]`` decodes by chunk type: ``JSON`` gives the JSON value; ``STEN``, ``NPZ0``
    and ``TSAV`` give a ``dict`` of NumPy arrays (:meth:`read_state_dict`); every other type
    gives the payload as a read-only ``uint8`` array (:meth:`read`, which returns the payload
    array for every chunk type).

    Parameters
    ----------
    source
        Path or buffer of the file. The file is memory-mapped read-only.
    strict
        Raise :class:`~tenfold.errors.IntegrityError` on a ``manifest_hash`` mismatch (default:
        a :class:`FoldWarning`), and :class:`~tenfold.errors.UnsupportedError` for an
        unknown ``1.x`` version (default: a warning).
    hmac_key
        Key of ``hmac-sha256:`` digests (str or bytes). Without it such digests cannot be
        checked and :meth:`read` with ``verify=True`` refuses the chunk.
    mmap
        ``False`` reads a local file with ``pread`` into owned memory instead of mapping it
        (an fsspec URL or file is read in range requests: :mod:`tenfold.core.source`).
    limits
        Bounds on decoded sizes: each call (:meth:`read`, :meth:`read_arrays`,
        :meth:`read_state_dict`, :func:`~tenfold.fold.load`) may allocate at most
        ``limits.decode_budget`` bytes in total.

    Examples
    --------
    >>> import tempfile, pathlib, tenfold.fold as fold
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.fold"
    >>> with fold.Writer(p, ecc="rs(32)") as w:
    ...     _ = w.add_json("meta", {"a": 1})
    >>> with fold.Reader(p) as r:
    ...     r.read_json("meta"), r.chunks[0].ecc_algo
    ({'a': 1}, 'rs(32)')
    """

    def __init__(
        self,
        source: Any,
        *,
        strict: bool = False,
        hmac_key: str | bytes | None = None,
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
    ) -> None:
        self.strict = strict
        self.limits = limits
        self._key = _digest.key_bytes(hmac_key)
        self._sten: dict[str, dict[str, tuple[str, tuple[int, ...], int, int]]] = {}
        self._map_and_parse(source, lambda mf: self._parse(), FMT, mmap=mmap)

    def _parse(self) -> None:
        p = _index.parse(self._mf, strict=self.strict, key=self._key)
        self.header: dict[str, int] = p.header
        self.index: dict[str, Any] = p.index
        self.version: str = p.version
        self.created_at_unix = p.index.get("created_at_unix")
        self.metadata: dict[str, Any] = p.metadata
        self._chunk_hashes = p.chunk_hashes
        self.chunks: list[ChunkInfo] = p.chunks
        self._by_name = p.by_name
        self._bound = p.bound
        self.manifest_ok = p.manifest_ok

    # -- chunk table ------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [c.name for c in self.chunks]

    def _keys(self) -> Mapping[str, ChunkInfo]:
        return self._by_name

    def __getitem__(self, name: str) -> Any:
        """The decoded chunk: JSON value, ``dict`` of arrays, or the payload (class doc)."""
        ctype = self.chunk(name).ctype
        if ctype in JSON_CTYPES:
            return self.read_json(name)
        if ctype in ARRAY_CTYPES:
            return self.read_state_dict(name)
        return self.read(name)

    def info(self, name: str) -> TensorInfo:
        """The chunk's index entry in the common record (``extras`` has the FOLD fields)."""
        c = self.chunk(name)
        return TensorInfo(
            name=c.name,
            dtype="uint8",
            shape=(c.uncomp_len,),
            byte_range=(c.payload_offset, c.payload_offset + c.comp_len),
            encoding=c.compression,
            checksum=f"crc32c:{c.crc32c:08x}",
            extras={
                "ctype": c.ctype,
                "sha256": c.sha256,
                "ecc_algo": c.ecc_algo,
                "ecc_len": c.ecc_len,
                "offset": c.offset,
                "stored": c.comp_len,
            },
        )

    def chunk(self, name: str) -> ChunkInfo:
        """The index entry of chunk ``name`` (KeyError when absent)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{FMT}: no chunk named {name!r}; chunks are {self.names}") from None

    @property
    def is_mind(self) -> bool:
        """True when the file has a chunk named ``ai_graph`` or ``ai_vectors`` (a ``.mind``)."""
        return any(n in self._by_name for n in MIND_CHUNKS)

    @property
    def hmac_key(self) -> bytes | None:
        """The HMAC key the reader checks signed digests with, as bytes (None: no key)."""
        return self._key

    # -- reading ----------------------------------------------------------------------------
    def read(
        self, name: str, verify: bool | str = True, *, budget: Budget | None = None
    ) -> np.ndarray:
        """The payload of chunk ``name`` as a read-only ``uint8`` array.

        Uncompressed chunks whose CRC-32C holds are zero-copy views of the file's mapping.
        With ``verify`` (default) the CRC-32C, SHA-256 (or HMAC) and ``chunk_hashes`` entry
        are checked (``verify="crc"``: CRC-32C only, the fastest check that still triggers
        repair), and a CRC failure is repaired with the chunk's Reed-Solomon parity when
        it has some. Raises a :mod:`tenfold.errors` exception naming the chunk and offset.
        """
        c = self.chunk(name)
        st = self.load_comp(name, verify)
        return self.decode(c, st.comp, budget)

    def read_bytes(self, name: str, verify: bool = True) -> bytes:
        """The payload of chunk ``name`` as ``bytes`` (a copy)."""
        return self.read(name, verify).tobytes()

    def read_json(self, name: str, verify: bool = True) -> Any:
        """The decoded JSON value of chunk ``name``."""
        return _payloads.json_load(self.read(name, verify), self.chunk(name).what)

    def read_arrays(
        self, name: str, verify: bool = True, *, budget: Budget | None = None
    ) -> dict[str, np.ndarray]:
        """The arrays of an ``NPZ0`` chunk (no pickle); the decoded chunk and every array
        count against one budget (default: a fresh one from ``limits``)."""
        budget = self.limits.budget() if budget is None else budget
        return _payloads.npz_load(
            self.read(name, verify, budget=budget),
            self.chunk(name).what,
            limits=self.limits,
            budget=budget,
        )

    def read_state_dict(
        self,
        name: str = "torch_state",
        verify: bool = True,
        *,
        framework: str = "numpy",
        budget: Budget | None = None,
    ) -> dict[str, Any]:
        """The tensors of a ``STEN`` (safetensors) or ``TSAV`` (torch.save) chunk.

        ``STEN`` needs no torch and gives read-only NumPy views. ``TSAV`` needs torch and is
        loaded with ``weights_only=True``; a pyfolds payload ``{"state_dict": ...}`` gives its
        state dict. ``framework="torch"`` returns torch tensors instead of NumPy arrays.
        """
        c = self.chunk(name)
        budget = self.limits.budget() if budget is None else budget
        buf = self.read(name, verify, budget=budget)
        if c.ctype == "TSAV":
            obj = _payloads.torch_load(buf, c.what)
            if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
                obj = obj["state_dict"]
            if not isinstance(obj, dict):
                raise FormatError(fmt=FMT, obj=c.what, detail="torch payload is not a dict")
            if framework == "torch":
                return dict(obj)
            return {k: _payloads.torch_to_numpy(v) for k, v in obj.items()}
        if c.ctype == "NPZ0":
            tensors: dict[str, Any] = _payloads.npz_load(
                buf, c.what, limits=self.limits, budget=budget
            )
        else:
            tensors = _payloads.safetensors_load(buf, c.what)
        if framework == "torch":
            return {k: _payloads.numpy_to_torch(v) for k, v in tensors.items()}
        return tensors

    def sten_entries(self, name: str) -> dict[str, tuple[str, tuple[int, ...], int, int]] | None:
        """The tensor table of chunk ``name`` when it is an uncompressed ``STEN`` chunk, read
        from its safetensors header alone (no payload, no digest check): tensor name ->
        ``(dtype tag, shape, begin, end)``, ``begin``/``end`` being offsets in the file. None
        for any other chunk. The header is checked as a safetensors file's is."""
        c = self.chunk(name)
        if c.ctype != "STEN" or c.compression != "none":
            return None
        table = self._sten.get(name)
        if table is not None:
            return table
        from ..safetensors.writer import header_length, parse_header

        base, size, what = c.payload_offset, c.comp_len, c.what
        first8 = self._mf.u8(base, min(8, size), what)
        limit = self.limits.max_index_bytes
        n = header_length(first8, size, fmt=FMT, what=what, offset=base, limit=limit)
        entries, _meta = parse_header(
            self._mf.bytes(base + 8, n, what),
            size - 8 - n,
            fmt=FMT,
            what=what,
            offset=base,
            limits=self.limits,
        )
        start = base + 8 + n
        table = {k: (e[0], tuple(e[1]), start + e[2], start + e[3]) for k, e in entries.items()}
        self._sten[name] = table
        return table

    def read_tensor(
        self, chunk: str, name: str, index: Any = None, *, verify: bool = True
    ) -> np.ndarray:
        """Tensor ``name`` of the tensor chunk ``chunk`` (``STEN``, ``NPZ0`` or ``TSAV``), or
        the basic slice ``index`` of it (ints, slices with steps, ``...``; see
        :mod:`tenfold.core.slicing`).

        With ``verify`` (default) the chunk is read whole and checked (and repaired) as
        :meth:`read` does, then indexed. With ``verify=False`` a tensor of an uncompressed
        ``STEN`` chunk is read straight from the file: only the rows the slice touches (a
        read-only view of the map locally, one range request remotely). The chunk's CRC-32C
        and SHA-256 cover the whole chunk, so such a read checks neither (as zTensor's slice
        reads check no tensor checksum). Other chunks are decoded whole either way.
        """
        from ...core.slicing import plan

        what = f"chunk {chunk!r} tensor {name!r}"
        table = None if verify else self.sten_entries(chunk)
        if table is None:
            c = self.chunk(chunk)
            if c.ctype not in ARRAY_CTYPES:
                raise TypeError(f"{FMT}: chunk {chunk!r} is {c.ctype}, not a tensor chunk")
            arrays = self.read_state_dict(chunk, verify)
            if name not in arrays:
                raise KeyError(f"{FMT}: chunk {chunk!r} has no tensor {name!r}")
            arr = np.asarray(arrays[name])
            return arr if index is None else plan(FMT, what, arr.shape, index).apply(arr)
        if name not in table:
            raise KeyError(f"{FMT}: chunk {chunk!r} has no tensor {name!r}")
        from ..safetensors.writer import DTYPES, PACKED_BITS, tensor_of

        entry = table[name]
        tag, shape, begin, end = entry
        if tag in PACKED_BITS or not shape or index is None:
            whole = tensor_of(
                self._mf.u8(begin, end - begin, what),
                entry,
                copy=False,
                fmt=FMT,
                where=what,
                offset=begin,
                budget=self.limits.budget(),
            )
            return whole if index is None else plan(FMT, what, shape, index).apply(whole)
        p = plan(FMT, what, shape, index)
        dt = DTYPES[tag]
        row = dt.itemsize
        for d in shape[1:]:
            row *= d
        rows = self._mf.array(begin + p.lo * row, dt, (p.hi - p.lo, *shape[1:]), what)
        if rows.flags.writeable:  # an empty array is a fresh one: keep the read-only rule
            rows.flags.writeable = False
        return np.asarray(p.finish(rows))

    # verify(): a per-chunk report (ok, repaired, damaged), fold.verify.verify_reader, joined
    # in the package __init__ (MappedReader.use_verifier)
