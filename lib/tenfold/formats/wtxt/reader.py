"""The WTXT reader: :class:`WtxtFile` (a verified ``Mapping`` of array name to array),
:func:`open`, :func:`read` and :func:`load`.

Opening parses and checks the whole file in one pass that keeps no decoded bytes
(:mod:`.parse`), then enforces the policy :mod:`.checks` states; ``reader[name]`` decodes one
array again (:func:`.codec.decode_array`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.reader import MappedReader, TensorInfo
from ...errors import FormatError
from . import _spec as S
from . import names
from ._crypto import check_signature as check_signature  # noqa: F401  (public here before)
from ._crypto import keyid_of as keyid_of  # noqa: F401  (public here since before _crypto)
from ._crypto import read_wsum, wsum_path
from ._text import err
from .checks import enforce, root_values
from .codec import decode_array
from .parse import parse
from .records import ArrayInfo, ChunkInfo, Parsed

__all__ = [
    "WtxtFile",
    "open",
    "read",
    "load",
    "ChunkInfo",
    "ArrayInfo",
    "Parsed",
    "parse",
]


class WtxtFile(MappedReader, Mapping[str, np.ndarray]):
    """An open, fully verified WTXT file: a ``Mapping`` of array name to array.

    Attributes: ``meta``, ``cap``, ``root``, ``audit`` and ``arrays`` (the parsed
    :class:`ArrayInfo` rows). Opening checks everything the file carries (every chunk, the
    array hashes and HMACs, the root and the signature) in one pass that keeps no decoded
    bytes; ``reader[name]`` then decodes that one array again, re-checks its chunks and its
    SHA-256 against the verified value, and returns it as a new owned array. Memory: about
    one array, not the file. ``mmap=False`` reads a local file with ``pread`` into owned
    memory; a URL or fsspec file is fetched whole (a text format parsed in full).

    Keys are the tensor names: a file written with tenfold's reversible name encoding (cap
    item ``tenfold_names``, :mod:`tenfold.wtxt.names`) has its stored names decoded and its
    0-d arrays given shape ``()`` again, as :func:`tenfold.load` does. ``raw_names=True``
    keys the arrays by the names the file stores instead (what a reader that does not know
    the convention sees); :meth:`stored_name` maps a key to its stored name either way.
    """

    def __init__(
        self,
        source: Any,
        *,
        hmac_keys: Iterable[bytes] = (),
        public_keys: Iterable[Any] = (),
        wsum: str | os.PathLike[str] | None = None,
        allow_pending: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        workers: int | None = None,
        mmap: bool = True,
        raw_names: bool = False,
    ) -> None:
        # A text format parsed (and checked) whole at open: a remote file is fetched whole.
        self._map(source, S.FMT, mmap=mmap)
        self._hmac_keys = list(hmac_keys)
        self._public_keys = list(public_keys)
        try:
            keys = self._hmac_keys
            pubs = self._public_keys
            self.parsed = parse(
                self._mf.buffer(), hmac_keys=keys, limits=limits, workers=workers, keep=False
            )
            if wsum is None and self._mf.path is not None and not self._mf.remote:
                wsum = wsum_path(self._mf.path)
            self.wsum = read_wsum(wsum) if self.parsed.pending else None
            enforce(self.parsed, self.wsum, keys, pubs, allow_pending)
            decode = not raw_names and names.CAP_ITEM in self.parsed.cap
            self._by_name, self._scalars = _keys(self.parsed.arrays, decode)
        except BaseException:
            self.close()
            raise
        self.meta = self.parsed.meta
        self.cap = self.parsed.cap
        self.root = root_values(self.parsed, self.wsum)
        self.audit = self.parsed.audit
        self.arrays = self.parsed.arrays
        data = self.parsed.data
        for a in self.arrays:
            a.loader = lambda info, data=data: decode_array(data, info)

    # -- the Mapping face (tenfold.core.reader) -----------------------------------------------
    def _keys(self) -> Mapping[str, Any]:
        return self._by_name

    def _array_info(self, name: str) -> ArrayInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"wtxt: no array named {name!r}") from None

    def read(self, name: str, index: Any = None) -> np.ndarray:
        """Array ``name``, decoded and checked again (a new owned array on every call), or
        its basic slice ``index`` (of the decoded array: base64 text cannot be read in row
        ranges)."""
        info = self._array_info(name)
        if self.closed:  # the text may still be in memory: a closed reader reads nothing
            raise ValueError(f"{S.FMT}: I/O operation on a closed file")
        a = info.array()
        if name in self._scalars:
            a = a.reshape(())
        if index is None:
            return a
        from ...core.slicing import plan

        return plan(S.FMT, f"array {name!r}", tuple(a.shape), index).apply(a)

    def info(self, name: str) -> TensorInfo:
        """The array's ``arr`` line in the common record (``extras`` has the WTXT fields).

        ``byte_range`` is ``None``: an array is base64 text spread over its chunk lines.
        """
        a = self._array_info(name)
        return TensorInfo(
            name=name,
            dtype=a.dtype,
            shape=() if name in self._scalars else a.shape,
            byte_range=None,
            encoding="base64",
            checksum=f"sha256:{a.sha256}",
            extras={
                "line": a.lineno,
                "nbytes": a.nbytes,
                "chunks": len(a.chunks),
                "hmac_state": a.hmac_state,
                "idx": a.idx,
                "stored_name": a.name,
            },
            np_dtype=S.DTYPES[a.dtype],
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """File-level fields: the ``meta`` line, ``cap`` list, ``root`` and ``audit``."""
        return {**self.meta, "cap": list(self.cap), "root": self.root, "audit": self.audit}

    def verify(self) -> Any:
        """Report on every chunk, array, the root and the signature (:func:`wtxt.verify`),
        with the keys this file was opened with."""
        from .verify import verify as _verify

        local = self._mf.path is not None and not self._mf.remote
        src = self._mf.path if local else self._mf.buffer()
        return _verify(src, hmac_keys=self._hmac_keys, public_keys=self._public_keys)

    def stored_name(self, name: str) -> str:
        """The name array ``name`` is stored under in the file (its ``arr`` line)."""
        return self._array_info(name).name

    def to_dict(self) -> dict[str, np.ndarray]:
        """Every array, decoded and checked again, by key."""
        return {name: self.read(name) for name in self._by_name}


def _keys(arrays: list[ArrayInfo], decode: bool) -> tuple[dict[str, ArrayInfo], set[str]]:
    """The arrays by key, and the keys of 0-d arrays: with ``decode``, the stored names
    decoded (:func:`.names.decode`; a malformed one is a FormatError naming its line)."""
    if not decode:
        return {a.name: a for a in arrays}, set()
    by_name: dict[str, ArrayInfo] = {}
    scalars: set[str] = set()
    for a in arrays:
        try:
            name, scalar = names.decode(a.name)
        except FormatError as exc:
            detail = str(exc).removeprefix(f"{S.FMT}: ")
            raise err(FormatError, a.lineno, a.offset, detail) from None
        by_name[name] = a
        if scalar and a.nbytes == S.DTYPES[a.dtype].itemsize:
            scalars.add(name)
    return by_name, scalars


def open(source: Any, **kw: Any) -> WtxtFile:  # noqa: A001 - format API name
    """Open and fully verify a WTXT file; see :class:`WtxtFile` for the options."""
    return WtxtFile(source, **kw)


def read(
    path: Any, *, hmac_keys: Iterable[bytes] = (), public_keys: Iterable[Any] = (), **kw: Any
) -> dict[str, np.ndarray]:
    """Read every array of a WTXT file, checking everything it carries.

    Parity nibbles, chunk CRC-32C and SHA-256, array SHA-256, ``sha256_all``, ``fastxor`` and
    ``merkle_this`` are always checked. Passing ``hmac_keys`` requires every array to be
    authenticated by one of them; passing ``public_keys`` requires a valid Ed25519 signature
    from one of them. A ``root_pending`` file needs its ``.wsum`` sidecar (``wsum=`` to name
    it, ``allow_pending=True`` to read without the root check). Keys are the tensor names
    (encoded names decoded; ``raw_names=True``: as stored), see :class:`WtxtFile`.

    Raises
    ------
    FormatError
        Any violation of the text rules, naming the line.
    IntegrityError
        A hash, HMAC or signature that does not match.
    """
    with WtxtFile(path, hmac_keys=hmac_keys, public_keys=public_keys, **kw) as f:
        return f.to_dict()


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """``read`` (arrays are always freshly decoded, hence owned and writable)."""
    return read(source, **kw)
