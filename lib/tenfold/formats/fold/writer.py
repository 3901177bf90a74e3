"""Write FOLD files: chunks streamed to disk, index and header at finalize, atomic rename.

For the same chunks, metadata, options and ``created_at_unix`` the index JSON and every chunk
header are byte-identical to pyfolds 1.0.2 (``FoldWriter``); the ECC region differs only for
chunks longer than one RS block, where pyfolds stored a wrong tail (tenfold writes the parity
of each block, as the format defines it).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ... import _kernels
from ...core import parallel
from ...core.atomic import atomic_write
from ...core.buffers import byte_view, exact_pieces
from ...core.checksums import crc32c, sha256_hex
from ...core.compression import zstd_compress
from ...core.prealloc import WRITEBACK_STEP, preallocate, start_writeback
from ...errors import EncodeError
from . import _digest, _payloads, _stream
from ._spec import (
    CHUNK_HEADER,
    CHUNK_HEADER_LEN,
    FLAG_NONE,
    FLAG_ZSTD,
    FMT,
    FORMAT_NAME,
    HEADER,
    HEADER_LEN,
    MAGIC,
    MAX_CHUNK_SIZE,
    MAX_INDEX_SIZE,
    PROTECTION,
    WRITE_VERSION,
    ecc_len_for,
    parse_ecc_algo,
)

__all__ = ["Writer", "parse_ecc_option"]

_PARALLEL_MIN = 4 << 20  # below this, threads cost more than they save


def parse_ecc_option(ecc: object) -> int:
    """Parity symbols for the ``ecc`` option: None/"none"/"off" -> 0, "low"/"med"/"high" ->
    16/32/64, "rs(N)" or N -> N (2..254).

    >>> parse_ecc_option("med"), parse_ecc_option("rs(10)"), parse_ecc_option(None)
    (32, 10, 0)
    """
    if ecc is None:
        return 0
    if isinstance(ecc, int) and not isinstance(ecc, bool):
        n: int | None = ecc if 2 <= ecc <= 254 else None
    elif isinstance(ecc, str):
        low = ecc.strip().lower()
        n = PROTECTION[low] if low in PROTECTION else parse_ecc_algo(low)
    else:
        n = None
    if n is None:
        raise EncodeError(
            fmt=FMT,
            obj="writer",
            field="ecc",
            detail="unsupported",
            expected="none | low | med | high | rs(2..254)",
            got=ecc,
        )
    return n


def _parity(
    comp: memoryview, nsym: int, ecc_len: int, pool: concurrent.futures.Executor | None
) -> np.ndarray:
    out = np.empty(ecc_len, np.uint8)
    rs = _kernels.load("rs")
    src = np.frombuffer(comp, np.uint8)
    k = 255 - nsym
    nblocks = ecc_len // nsym
    if pool is None or src.size < _PARALLEL_MIN or nblocks < 2:
        rs.encode_blocks(src, nsym, out)
        return out
    # parts split on block boundaries, one per thread allowed; the kernel releases the GIL
    parts = max(2, min(parallel.threads(), nblocks, src.size // (_PARALLEL_MIN // 2)))
    cuts = [nblocks * i // parts for i in range(parts + 1)]
    futs = [
        pool.submit(rs.encode_blocks, src[a * k : b * k], nsym, out[a * nsym : b * nsym])
        for a, b in zip(cuts[1:-1], cuts[2:], strict=True)
    ]
    rs.encode_blocks(src[: cuts[1] * k], nsym, out[: cuts[1] * nsym])
    for fut in futs:
        fut.result()
    return out


def _joined(name: str, pieces: Iterable[Any], size: int) -> np.ndarray:
    """The ``size`` bytes of ``pieces`` copied into one buffer (each piece once, no
    intermediate ``bytes``); more or fewer bytes is an :class:`EncodeError`."""
    out = np.empty(size, np.uint8)
    done = 0
    for mv in exact_pieces(pieces, size, _size_error(name, size)):
        out[done : done + mv.nbytes] = np.frombuffer(mv, np.uint8)
        done += mv.nbytes
    return out


def _size_error(name: str, size: int) -> Any:
    """What :func:`~tenfold.core.buffers.exact_pieces` raises for chunk ``name``."""
    return lambda got, more: EncodeError(
        fmt=FMT, obj=f"chunk {name!r}", field="size", expected=size, got=got
    )


_WRITEBACK_PIECE = 32 << 20


def _pwrite_all(fd: int, buf: memoryview, offset: int, writeback: bool = False) -> None:
    """``pwrite`` all of ``buf`` at ``offset`` (the kernel may write less per call).

    With ``writeback`` the buffer goes out in 32 MiB pieces, each handed to the disk at once
    (:func:`start_writeback`), so that a final fsync has little left to wait for; otherwise
    in one call.
    """
    n = buf.nbytes
    step = _WRITEBACK_PIECE if writeback else n
    done = 0
    while done < n:
        piece = done + os.pwrite(fd, buf[done : min(n, done + step)], offset + done)
        if writeback:
            start_writeback(fd, offset + done, piece - done)
        done = piece


def _check_size(name: str, field: str, n: int) -> None:
    if n > MAX_CHUNK_SIZE:
        raise EncodeError(
            fmt=FMT,
            obj=f"chunk {name!r}",
            field=field,
            detail="above MAX_CHUNK_SIZE",
            expected=f"<= {MAX_CHUNK_SIZE}",
            got=n,
        )


class Writer:
    """Write a FOLD / MIND file.

    Parameters
    ----------
    path
        Destination. Nothing appears under this name until the writer is finalized (temp file
        in the same directory, fsync, rename).
    compress
        ``"zstd"`` (default), or None / ``"none"`` for stored chunks.
    level
        zstd level (3, as pyfolds).
    ecc
        None / ``"none"`` (default), ``"low"`` / ``"med"`` / ``"high"`` (RS 16 / 32 / 64) or
        ``"rs(N)"`` (2 <= N <= 254).
    digest
        ``"hex"`` (plain SHA-256 hex, pyfolds 1.0.2, default), ``"sha256:"`` (pyfolds main
        branch) or ``"hmac-sha256:"`` (needs ``hmac_key``).
    created_at_unix
        Value of the index's ``created_at_unix``. Default 0.0 so that output is
        deterministic; pass ``time.time()`` for a wall-clock stamp.
    hmac_key
        Key of ``hmac-sha256:`` digests.
    threads
        zstd worker threads (0 = single-threaded, byte-identical to pyfolds; -1 = all cores).
        RS parity and SHA-256 of large chunks use the CPUs this process may use (at least two
        threads; ``TENFOLD_THREADS`` caps them).
    fsync
        fsync the file before the rename (default True).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.fold"
    >>> with Writer(p, compress=None, ecc="med") as w:
    ...     w.add_chunk("blob", "BLOB", b"abc")["ecc_len"]
    ...     w.finalize({"model_type": "demo"})
    32
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        compress: str | None = "zstd",
        level: int = 3,
        ecc: object = None,
        digest: str = "hex",
        *,
        created_at_unix: float | int = 0.0,
        hmac_key: str | bytes | None = None,
        threads: int = 0,
        fsync: bool = True,
    ) -> None:
        if compress in (None, "none"):
            self._flags = FLAG_NONE
        elif compress == "zstd":
            self._flags = FLAG_ZSTD
        else:
            raise EncodeError(
                fmt=FMT,
                obj="writer",
                field="compress",
                detail="unsupported",
                expected="zstd | none",
                got=compress,
            )
        if digest not in _digest.STYLES:
            raise EncodeError(
                fmt=FMT,
                obj="writer",
                field="digest",
                detail="unsupported",
                expected=" | ".join(_digest.STYLES),
                got=digest,
            )
        self._key = _digest.key_bytes(hmac_key)
        if digest == "hmac-sha256:" and self._key is None:
            raise EncodeError(
                fmt=FMT, obj="writer", field="digest", detail="hmac-sha256: needs hmac_key"
            )
        if isinstance(created_at_unix, bool) or not isinstance(created_at_unix, (int, float)):
            raise EncodeError(
                fmt=FMT,
                obj="writer",
                field="created_at_unix",
                detail="not a number",
                got=created_at_unix,
            )
        self.path = os.fspath(path)
        self.level = level
        self.nsym = parse_ecc_option(ecc)
        self.ecc_algo = f"rs({self.nsym})" if self.nsym else "none"
        self.digest = digest
        self.created_at_unix = created_at_unix
        self.threads = threads
        self._fsync = fsync
        self._chunks: list[dict[str, Any]] = []
        self._names: set[str] = set()
        self._stack: contextlib.ExitStack | None = None
        self._f: Any = None
        self._pool: concurrent.futures.Executor | None = None
        self._hasher: concurrent.futures.Executor | None = None
        self._finalized = False

    # -- lifetime ---------------------------------------------------------------------------
    def __enter__(self) -> Writer:
        stack = contextlib.ExitStack()
        self._f = stack.enter_context(atomic_write(self.path, fsync=self._fsync))
        # checksums of a large chunk side by side, RS parity in parts: one thread per CPU
        # this process may use (parallel.threads), at least two
        workers = max(2, parallel.threads())
        self._pool = stack.enter_context(parallel.scoped(workers, "tenfold-fold-write"))
        # the SHA-256 of a chunk written in pieces: one sequential stream, on a thread of its
        # own where this process may use a second CPU (a thread is started on first use)
        if parallel.threads() > 1:
            self._hasher = stack.enter_context(parallel.scoped(1, "tenfold-fold-sha256"))
        self._stack = stack
        self._f.write(HEADER.pack(MAGIC, HEADER_LEN, 0, 0))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        if exc_type is None and not self._finalized:
            try:
                self.finalize()
            except BaseException as err:
                stack.__exit__(type(err), err, err.__traceback__)
                raise
        stack.__exit__(exc_type, exc, tb)
        self._f = None

    def _check_open(self) -> None:
        if self._f is None:
            raise EncodeError(fmt=FMT, obj="writer", detail="not open; use `with Writer(...)`")
        if self._finalized:
            raise EncodeError(fmt=FMT, obj="writer", detail="already finalized")

    # -- chunks -----------------------------------------------------------------------------
    def _check_chunk(self, name: object, ctype: object) -> None:
        """Refuse a chunk name that is empty or taken, or a ctype that is not 4 ASCII chars."""
        if not isinstance(name, str) or not name:
            raise EncodeError(
                fmt=FMT, obj="chunk", field="name", detail="not a non-empty str", got=name
            )
        if name in self._names:
            raise EncodeError(fmt=FMT, obj=f"chunk {name!r}", detail="duplicate chunk name")
        if not isinstance(ctype, str) or len(ctype) != 4 or not ctype.isascii():
            raise EncodeError(
                fmt=FMT,
                obj=f"chunk {name!r}",
                field="ctype",
                detail="must be 4 ASCII characters",
                got=ctype,
            )

    def add_chunk(self, name: str, ctype: str, data: Any) -> dict[str, Any]:
        """Compress, checksum, protect and write one chunk; return its index entry.

        ``data`` is any buffer (bytes, bytearray, memoryview, contiguous NumPy array). It is
        written straight to the file (no copy when uncompressed).
        """
        self._check_open()
        self._check_chunk(name, ctype)
        raw = byte_view(data)
        _check_size(name, "size", raw.nbytes)
        if self._flags == FLAG_ZSTD:
            comp = memoryview(zstd_compress(raw, self.level, threads=self.threads, checksum=False))
        else:
            comp = raw
        _check_size(name, "compressed size", comp.nbytes)
        ecc_len = ecc_len_for(comp.nbytes, self.nsym)
        offset = self._f.tell()
        if comp.nbytes >= _PARALLEL_MIN:
            crc, sha = self._write_large(ctype, raw.nbytes, comp, ecc_len, offset)
        else:
            parity = _parity(comp, self.nsym, ecc_len, None) if ecc_len else None
            crc, sha = crc32c(comp), sha256_hex(comp)
            self._f.write(self._chunk_header(ctype, raw.nbytes, comp.nbytes, crc, ecc_len))
            self._f.write(comp)
            if parity is not None:
                self._f.write(memoryview(parity))  # type: ignore[arg-type]
        return self._add_entry(name, ctype, offset, comp.nbytes, raw.nbytes, crc, sha, ecc_len)

    def _add_entry(
        self,
        name: str,
        ctype: str,
        offset: int,
        comp_len: int,
        uncomp_len: int,
        crc: int,
        sha: str,
        ecc_len: int,
    ) -> dict[str, Any]:
        """Record the index entry of a chunk just written (keys in pyfolds' order)."""
        entry = {
            "name": name,
            "ctype": ctype,
            "flags": self._flags,
            "offset": offset,
            "header_len": CHUNK_HEADER_LEN,
            "comp_len": comp_len,
            "uncomp_len": uncomp_len,
            "crc32c": crc,
            "sha256": _digest.make(sha, self.digest, self._key),
            "ecc_algo": self.ecc_algo,
            "ecc_len": ecc_len,
        }
        self._chunks.append(entry)
        self._names.add(name)
        return dict(entry)

    def _chunk_header(self, ctype: str, uncomp: int, comp: int, crc: int, ecc_len: int) -> bytes:
        return CHUNK_HEADER.pack(ctype.encode("ascii"), self._flags, uncomp, comp, crc, ecc_len)

    def _write_large(
        self, ctype: str, uncomp: int, comp: memoryview, ecc_len: int, offset: int
    ) -> tuple[int, str]:
        """Write a large chunk straight from ``comp`` while two threads checksum it.

        SHA-256 and CRC-32C run in the pool (hashlib and crc32c release the GIL) while this
        thread preallocates the chunk's extent and writes the payload from the caller's buffer
        (no copy): one ``pwrite``, or with fsync on, 32 MiB pieces whose writeback starts at
        once (the disk then works while SHA-256 runs instead of during the final fsync). The
        RS parity, split between the pool and this thread, follows. The header, which carries
        the CRC, is written into its slot last.
        """
        assert self._pool is not None
        sha_future = self._pool.submit(sha256_hex, comp)
        crc_future = self._pool.submit(crc32c, comp)
        self._f.flush()
        fd = self._f.fileno()
        data_off = offset + CHUNK_HEADER_LEN
        end = data_off + comp.nbytes + ecc_len
        preallocate(fd, offset, end - offset)
        try:
            _pwrite_all(fd, comp, data_off, writeback=self._fsync)
            if ecc_len:
                parity = _parity(comp, self.nsym, ecc_len, self._pool)
                _pwrite_all(fd, memoryview(parity), data_off + comp.nbytes)  # type: ignore[arg-type]
            crc = crc_future.result()
            _pwrite_all(
                fd, memoryview(self._chunk_header(ctype, uncomp, comp.nbytes, crc, ecc_len)), offset
            )
            sha = sha_future.result()
        finally:
            crc_future.cancel()
            sha_future.cancel()
        self._f.seek(end)
        return crc, sha

    def add_json(self, name: str, obj: Any, ctype: str = "JSON") -> dict[str, Any]:
        """A JSON chunk (UTF-8, ``ensure_ascii=False``, compact, as pyfolds)."""
        return self.add_chunk(name, ctype, _payloads.json_bytes(obj))

    def add_arrays(
        self, name: str, arrays: Mapping[str, Any], ctype: str = "NPZ0", *, compressed: bool = False
    ) -> dict[str, Any]:
        """An ``.npz`` chunk of NumPy arrays (deterministic; read back without pickle)."""
        return self.add_chunk(name, ctype, _payloads.npz_bytes(arrays, compressed=compressed))

    def add_state_dict(
        self,
        name: str,
        tensors: Mapping[str, Any],
        ctype: str = "STEN",
        *,
        metadata: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A safetensors chunk (``STEN``) of NumPy arrays (or anything ``np.asarray`` takes)."""
        return self.add_chunk(name, ctype, _payloads.safetensors_bytes(tensors, metadata))

    def add_chunk_pieces(
        self, name: str, ctype: str, pieces: Iterable[Any], size: int
    ) -> dict[str, Any]:
        """Write one chunk from an iterable of buffers totalling ``size`` bytes.

        Each piece need only stay valid until the next is requested (a block reader may reuse
        its buffer). Uncompressed, the pieces go straight to the file while CRC-32C and the RS
        parity are computed on this thread and the SHA-256 on a thread of its own that follows
        the writing without holding it up (:class:`~._stream.Sha256Stream`), so memory stays
        at one piece and a few MiB (plus the parity, ``nsym / (255 - nsym)`` of the chunk,
        written after it). With zstd the pieces are joined into one buffer and compressed in
        one shot (the bytes pyfolds writes; zstd's streaming mode gives a different, equally
        valid frame), which needs the whole chunk in memory. The result is byte-identical to
        :meth:`add_chunk` of the joined bytes; more or fewer bytes than ``size`` is an
        :class:`~tenfold.errors.EncodeError`.
        """
        self._check_open()
        if self._flags == FLAG_ZSTD:
            return self.add_chunk(name, ctype, _joined(name, pieces, size))
        self._check_chunk(name, ctype)
        _check_size(name, "size", size)
        nsym = self.nsym
        ecc_len = ecc_len_for(size, nsym)
        offset = self._f.tell()
        self._f.write(bytes(CHUNK_HEADER_LEN))  # the real header (with the CRC) comes last
        self._f.flush()
        preallocate(self._f.fileno(), offset, CHUNK_HEADER_LEN + size + ecc_len)
        sha = _stream.Sha256Stream(self._hasher)
        try:
            crc, parity = self._write_pieces(name, pieces, size, sha)
            digest = sha.hexdigest()
        finally:
            sha.close()
        for part in parity:
            self._f.write(memoryview(part))  # type: ignore[arg-type]
        end = self._f.tell()
        self._f.seek(offset)
        self._f.write(self._chunk_header(ctype, size, size, crc, ecc_len))
        self._f.seek(end)
        return self._add_entry(name, ctype, offset, size, size, crc, digest, ecc_len)

    def _write_pieces(
        self, name: str, pieces: Iterable[Any], size: int, sha: _stream.Sha256Stream
    ) -> tuple[int, list[np.ndarray]]:
        """Write ``pieces`` (``size`` bytes in all) at the file's position, fed to ``sha`` on
        the way; their CRC-32C and RS parity. With fsync on, what is written is handed to the
        disk every :data:`~tenfold.core.prealloc.WRITEBACK_STEP` bytes."""
        nsym = self.nsym
        block = 255 - nsym if nsym else 0
        crc, done = 0, 0
        start = handed = self._f.tell()
        parity: list[np.ndarray] = []
        carry = b""
        for mv in exact_pieces(pieces, size, _size_error(name, size)):
            sha.update(mv)  # hashed behind this thread, in order
            self._f.write(mv)
            crc = crc32c(mv, crc)
            done += mv.nbytes
            if nsym:
                if carry:
                    take = min(block - len(carry), mv.nbytes)
                    carry += bytes(mv[:take])
                    mv = mv[take:]
                    if len(carry) == block:
                        parity.append(_parity(memoryview(carry), nsym, nsym, None))
                        carry = b""
                full = mv.nbytes // block * block
                if full:
                    parity.append(_parity(mv[:full], nsym, full // block * nsym, self._pool))
                carry += bytes(mv[full:])
            sha.release()  # the piece is not used after this: the source may reuse it
            if self._fsync and start + done - handed >= WRITEBACK_STEP:
                self._f.flush()
                start_writeback(self._f.fileno(), handed, start + done - handed)
                handed = start + done
        if carry:
            parity.append(_parity(memoryview(carry), nsym, nsym, None))
        return crc, parity

    def add_torch(self, name: str, obj: Any, ctype: str = "TSAV") -> dict[str, Any]:
        """A ``torch.save`` chunk (needs torch; read back with ``weights_only=True``)."""
        return self.add_chunk(name, ctype, _payloads.torch_bytes(obj))

    # -- finalize ---------------------------------------------------------------------------
    def index_bytes(self, metadata: Mapping[str, Any] | None = None) -> bytes:
        """The index JSON :meth:`finalize` writes for ``metadata`` and the chunks so far."""
        md = dict(metadata or {})
        md.pop("manifest_hash", None)
        md["chunk_hashes"] = {c["name"]: c["sha256"] for c in self._chunks}
        try:
            src = _digest.manifest_source(md)
        except (TypeError, ValueError) as exc:
            raise EncodeError(
                fmt=FMT, obj="metadata", detail=f"not JSON-serialisable: {exc}"
            ) from exc
        md["manifest_hash"] = _digest.make(sha256_hex(src), self.digest, self._key)
        index = {
            "format": FORMAT_NAME,
            "version": WRITE_VERSION,
            "created_at_unix": self.created_at_unix,
            "metadata": md,
            "chunks": self._chunks,
        }
        out = json.dumps(index, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(out) > MAX_INDEX_SIZE:
            raise EncodeError(
                fmt=FMT,
                obj="index",
                field="size",
                detail="above MAX_INDEX_SIZE",
                expected=f"<= {MAX_INDEX_SIZE}",
                got=len(out),
            )
        return out

    def finalize(self, metadata: Mapping[str, Any] | None = None) -> None:
        """Write the index (with ``chunk_hashes`` and ``manifest_hash``) and the header.

        The file appears under its final name when the ``with`` block ends.
        """
        self._check_open()
        index = self.index_bytes(metadata)
        index_off = self._f.tell()
        self._f.write(index)
        self._f.seek(0)
        self._f.write(HEADER.pack(MAGIC, HEADER_LEN, index_off, len(index)))
        self._f.seek(0, os.SEEK_END)
        self._finalized = True

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """Index entries of the chunks written so far."""
        return [dict(c) for c in self._chunks]
