"""zTensor v2 parts: a part's stored and decoded bytes (``zt.zstd-seekable/1`` decoded whole or
in pieces), its digest and logical-type data rules checked once, and its values as a typed array.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...core.alloc import empty
from ...core.bounds import Limits
from ...errors import LimitError
from . import _seekable
from ._v2file import digest_hasher, digest_hex
from ._v2layout import check_type_data
from ._v2shards import V2Shards
from ._v2spec import DENSE, DIGESTS, LOGICAL, ZSTD_SEEKABLE, ObjectInfo, PartInfo, reject

FMT = "zt"


class V2Parts(V2Shards):
    """Part reads of :class:`~tenfold.ztensor.v2reader.V2Reader` (a base class of it)."""

    limits: Limits
    verify_checksums: bool
    _verified: set[tuple[str, str]]

    def stored(self, name: str, part: str | None = None) -> np.ndarray:
        """A part's blob exactly as stored (``uint8`` view); ``part`` defaults to the main one."""
        info = self.info(name)
        p = info.main_part if part is None else self._part(info, part)
        return self._file(p).u8(p.offset, p.length, f"object {name!r} part {p.name!r}")

    def _part(self, info: ObjectInfo, role: str) -> PartInfo:
        try:
            return info.parts[role]
        except KeyError:
            raise KeyError(f"zt: object {info.name!r} has no part {role!r}") from None

    def decoded(self, name: str, part: str) -> np.ndarray:
        """A part's decoded bytes (``uint8``; a view when the part is raw and local)."""
        info = self.info(name)
        p = self._part(info, part)
        what = f"object {name!r} part {part!r}"
        if p.encoding is None:
            return self._file(p).u8(p.offset, p.length, what)
        self._check_encoding(p, what)
        out = empty(p.decoded_length, np.uint8, fmt=FMT, what=what, offset=p.offset)
        _seekable.decode_into(
            self._file(p).u8(p.offset, p.length, what), out, what=what, offset=p.offset
        )
        return out

    def _pieces(self, info: ObjectInfo, p: PartInfo) -> Iterator[np.ndarray]:
        """A part's decoded bytes in pieces, each valid until the next (verification keeps
        nothing, so its memory does not grow with the part)."""
        what = f"object {info.name!r} part {p.name!r}"
        stored = self._file(p).u8(p.offset, p.length, what)
        if p.encoding is None:
            yield stored
            return
        self._check_encoding(p, what)
        yield from _seekable.decode_pieces(
            stored,
            p.decoded_length,  # type: ignore[arg-type]
            what=what,
            offset=p.offset,
        )

    def _check_encoding(self, p: PartInfo, what: str) -> None:
        if p.encoding != ZSTD_SEEKABLE:
            raise reject(
                "unsupported",
                what,
                field="encoding",
                detail="unknown encoding",
                expected=ZSTD_SEEKABLE,
                got=p.encoding,
            )
        if p.decoded_length > self.limits.max_decoded_bytes:  # type: ignore[operator]
            raise reject(
                "encoding-data",
                what,
                field="decoded_length",
                detail="above limit",
                expected=f"<= {self.limits.max_decoded_bytes}",
                got=p.decoded_length,
                cls=LimitError,
            )

    def _checked(self, info: ObjectInfo, p: PartInfo, raw: np.ndarray, count: int | None) -> None:
        key = (info.name, p.name)
        if key in self._verified:
            return
        if self.verify_checksums and p.digest is not None:
            self._check_digest(info, p, raw)
        check_type_data(info, p, raw, count)
        self._verified.add(key)

    def check_part(self, info: ObjectInfo, role: str, count: int | None) -> None:
        """Check part ``role`` of object ``info`` as its first read does (digest, logical type's
        data rules for ``count`` elements), then mark it verified; once."""
        p = self._part(info, role)
        self._checked(info, p, self.decoded(info.name, role), count)

    def _check_digest(self, info: ObjectInfo, p: PartInfo, raw: np.ndarray) -> None:
        algo, want = p.digest_algo, p.digest_hex
        what = f"object {info.name!r} part {p.name!r}"
        if algo not in DIGESTS:
            raise reject("unsupported", what, field="digest", detail="unknown algorithm", got=algo)
        got = digest_hex(algo, raw)  # type: ignore[arg-type]
        if got != want:
            raise reject(
                "digest", what, offset=p.offset, field=f"{algo} digest", expected=want, got=got
            )

    def verify_part(self, name: str, part: str) -> None:
        """Decode one part and check its digest and its logical type's data rules (decoded
        in pieces, keeping none: the memory it takes does not grow with the part)."""
        info = self.info(name)
        p = self._part(info, part)
        known = p.type is None or p.type in LOGICAL
        self._scan_part(info, p, types=known)
        if not known:
            raise reject(
                "unsupported",
                f"object {name!r} part {part!r}",
                field="type",
                detail="unknown logical type",
                got=p.type,
            )

    def _digest_scan(self, info: ObjectInfo, p: PartInfo) -> Any:
        """The hasher a scan feeds (v2 digests cover the decoded bytes), or None."""
        if p.digest is None:
            return None
        if p.digest_algo not in DIGESTS:
            what = f"object {info.name!r} part {p.name!r}"
            raise reject(
                "unsupported", what, field="digest", detail="unknown algorithm", got=p.digest_algo
            )
        return digest_hasher(p.digest_algo)  # type: ignore[arg-type]

    def _scan_part(self, info: ObjectInfo, p: PartInfo, *, types: bool = True) -> None:
        """Decode part ``p`` in pieces, checking its digest and (with ``types``) its logical
        type's data rules on each piece as it goes; nothing is kept."""
        hasher = self._digest_scan(info, p)
        pos = 0
        last = np.empty(0, np.uint8)
        for piece in self._pieces(info, p):
            if hasher is not None:
                hasher.update(piece)
            if types:
                check_type_data(info, p, piece, None, pos)
            if piece.size:
                last = piece[-1:].copy()
            pos += piece.size
        if hasher is not None:
            got = hasher.hexdigest()
            if got != p.digest_hex:
                raise reject(
                    "digest",
                    f"object {info.name!r} part {p.name!r}",
                    offset=p.offset,
                    field=f"{p.digest_algo} digest",
                    expected=p.digest_hex,
                    got=got,
                )
        if types and info.layout == DENSE:
            check_type_data(info, p, last, info.numel, pos - last.size)

    def check_digest(self, info: ObjectInfo, p: PartInfo) -> None:
        """Decode part ``p`` of object ``info`` in pieces and check its digest only (not its
        logical type's data rules: for a part of a type this reader does not know)."""
        self._scan_part(info, p, types=False)

    def _typed(
        self, info: ObjectInfo, role: str, count: int, shape: tuple[int, ...] | None, copy: bool
    ) -> np.ndarray:
        """Decode part ``role`` as its logical type (``count`` logical elements)."""
        p = self._part(info, role)
        what = f"object {info.name!r} part {role!r}"
        if p.type is not None and p.type not in LOGICAL:
            raise reject(
                "unsupported",
                what,
                field="type",
                detail="unknown logical type; use stored() for the raw bytes",
                got=p.type,
            )
        raw = self.decoded(info.name, role)
        self._checked(info, p, raw, count)
        lt = LOGICAL.get(p.type) if p.type else None
        dt = p.np_dtype if lt is None else lt.np_dtype
        shp = (count,) if shape is None else shape
        if lt is not None and lt.packed4:
            out = empty(count, np.uint8, fmt=FMT, what=what, offset=p.offset)
            out[0::2] = raw[: (count + 1) // 2] & 0x0F
            out[1::2] = raw[: count // 2] >> 4
            return out.view(dt).reshape(shp)
        if count == 0:
            return np.empty(shp, dt)
        arr = raw.view(dt).reshape(shp)
        if copy and p.encoding is None:
            arr = arr.copy()
        return arr
