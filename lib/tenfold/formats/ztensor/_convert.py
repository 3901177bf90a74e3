"""zTensor in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (0.1.0
with each tensor's stored encoding and checksum, v1 / v2 through the generation's reader), the
``zt_generation`` option, and its 0.1.0 and v2 targets."""

from __future__ import annotations

import math
import os
import unicodedata
from typing import Any

from ...conversion import (
    KEEP,
    Target,
    WriteOptions,
    check_source_sum,
    checkable,
    checked_blocks,
    declaration_refusal,
    meta_refusal,
)
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...errors import EncodeError, FormatError, factory
from ...tensor_source import Source, reader_source
from ._format import FORMAT
from ._spec import E

#: The zTensor 0.1.0 custom key that carries file metadata (on the first tensor).
METADATA_KEY = "__metadata__"


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of a zTensor file (``convert_source``): the generation's reader, sparse
    tensors kept sparse for a zTensor target; a 0.1.0 source also tells each tensor's stored
    encoding and checksum (what a faithful zTensor -> zTensor conversion keeps)."""
    from . import detect
    from .reader import Reader

    if detect(path) != "0.1.0":  # v1 / v2: read through the generation's reader
        return _v2_source(path, limits)
    r = Reader(path, limits=limits, sparse="raw")
    md: dict[str, Any] = {}  # the user's (the reader's metadata adds the version)
    for i in r.infos():
        if isinstance(i.attrs.get(METADATA_KEY), dict):
            md = dict(i.attrs[METADATA_KEY])
            break
    src = reader_source(FORMAT, r, metadata=md)
    src.stored = lambda n: (r.info(n).encoding, r.info(n).checksum_algo)
    src.generation = "0.1.0"
    return src


def _v2_source(path: Any, limits: Limits = DEFAULT_LIMITS) -> Source:
    """The objects of a zTensor v1 / v2 file, read one at a time (raw dense parts as views
    of the map, each part's digest checked when it is read); the file attributes are its
    metadata. Layouts other than dense and sparse (``zt.mx/1``, ``zt.quant_group/1``, ...)
    and unknown logical types have no form in another file yet: they are refused."""
    from . import open as zt_open
    from ._v2spec import DENSE, LOGICAL

    r = zt_open(path, limits=limits, sparse="raw", copy=False)
    refuse = []
    try:
        for n in r:
            i = r.info(n)
            t = i.main_part.type
            if i.layout != DENSE and i.layout not in r.sparse_layouts:
                refuse.append(f"tensor {n!r} has layout {i.layout} (parts {', '.join(i.parts)})")
            elif t is not None and t not in LOGICAL:
                refuse.append(f"tensor {n!r} has logical type {t!r}, unknown to tenfold")
    except BaseException:
        r.close()
        raise
    src = reader_source(FORMAT, r, refuse=refuse)
    src.generation = r.generation
    return src


def generation(dst: Any, value: Any, max_shard_size: Any) -> int | None:
    """``convert(..., zt_generation=value)`` (``convert_generation``): None for 0.1.0 (the
    default), 2 for v2 (with ``max_shard_size``, every shard is a v2 file)."""
    if value in (None, 0, "0", "0.1.0"):
        return None
    if value not in (2, "2", "v2"):
        raise factory("tenfold").unsupported(
            os.fspath(dst), field="zt_generation", expected="0.1.0 or 2", got=value,
            message=f"tenfold: {os.fspath(dst)}: zt_generation must be 0.1.0 or 2, "
            f"got {value!r}",
        )  # fmt: skip
    return 2


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.zt`` destination (``convert_target``)."""
    return V2Target(fmt, dst, generation) if generation == 2 else ZtTarget(fmt, dst, generation)


class ZtTarget(Target):
    """zTensor 0.1.0: metadata as a ``__metadata__`` map on the first tensor; a zTensor source
    keeps each tensor's encoding and checksum (``"keep"``)."""

    compressions = ("zstd",)

    def metadata(self, src: Source) -> dict[str, Any]:
        md = super().metadata(src)
        if md and not src.names:
            raise meta_refusal(self.name, next(iter(md)), "zTensor keeps file metadata on "
                               "the first tensor and this file has none")  # fmt: skip
        return md

    def resolve(
        self, src: Source, checksum: str | None, compress: str | None
    ) -> tuple[str | None, str | None]:
        if src.fmt == self.name and src.stored is not None:
            return checksum, compress  # each tensor's own choices (see write)
        return super().resolve(src, checksum, compress)

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from ...core.release import release
        from .writer import Writer

        with Writer(dst, fsync=opts.fsync, threads=opts.threads) as w:
            for i, n in enumerate(s.names):
                attrs = {METADATA_KEY: md} if i == 0 and md else None
                ck, enc = opts.checksum, opts.compress
                if KEEP in (ck, enc):  # a zTensor source: this tensor's own choices
                    assert s.stored is not None
                    kept_enc, kept_ck = s.stored(n)
                    ck = kept_ck if ck == KEEP else ck
                    enc = (None if kept_enc == "raw" else kept_enc) if enc == KEEP else enc
                raw = s.raw(n) if enc is None else None
                if raw is not None and checkable(raw.checksum):
                    dt, shape = s.spec(n)
                    same = raw.checksum is not None and raw.checksum.split(":")[0] == ck
                    # the stored checksum is the one written (computed once), or is checked
                    # on the way
                    pieces = s.blocks(raw) if same else checked_blocks(s, n, raw)
                    got = w.add_raw(n, dt, shape, pieces, checksum=ck, attrs=attrs)
                    if same:
                        check_source_sum(s, n, raw.checksum, got)
                    bar.update(raw.nbytes)
                    continue
                v = s.get(n)
                w.add(n, v, checksum=ck, encoding=enc or "raw", level=opts.level,
                      attrs=attrs)  # fmt: skip
                bar.update(getattr(v, "nbytes", 0))
                release(v)
                del v  # before the next tensor is read: one decoded tensor at a time


class V2Target(Target):
    """Canonical zTensor v2, one tensor at a time: every part carries an xxh3 digest (no
    ``checksum``); ``compress="zstd"`` writes ``zt.zstd-seekable/1`` parts (not canonical)."""

    compressions = ("zstd",)

    def check_options(self, checksum: str | None, compress: str | None) -> None:
        if checksum != KEEP:
            from .writer import v2_checksum_refusal

            raise v2_checksum_refusal(self.dst, checksum)
        super().check_options(checksum, compress)

    def check(self, src: Source) -> None:
        """What a canonical zTensor v2 file cannot hold: element types without a v2 storage
        type, names that break v2's rule or are not NFC (canonical form), OINF declarations
        without data."""
        from ._v2spec import check_name
        from .v2writer import storage_of

        for n in src.names:
            try:
                check_name(n, f"tensor {n!r}", "name")
            except FormatError as exc:
                raise E.recast(EncodeError, exc, f"tensor {n!r}") from None
            if unicodedata.normalize("NFC", n) != n:
                raise E.encode(
                    f"tensor {n!r}",
                    message=f"zt: tensor {n!r}: name: not in Unicode NFC, which canonical "
                    "zTensor v2 needs; formats that keep it: .zt (0.1.0), .safetensors, "
                    ".fold/.mind, .npz",
                )
            storage_of(src.spec(n)[0], f"tensor {n!r}")
        if src.uninitialized:
            raise declaration_refusal("zt", src)

    def metadata(self, src: Source) -> dict[str, Any]:
        """File attributes: a v1 / v2 source's attributes as they are (any value deterministic
        CBOR holds), strings from any other source; keys follow v2's name rule (non-empty, no
        U+0000, at most 1024 UTF-8 bytes)."""
        from . import _dcbor
        from ._v2spec import check_name

        if src.sizevars or not src.metadata:
            return super().metadata(src)  # refuses sizevars; nothing to keep
        fmt = "zt"
        keep_all = src.generation in ("v1", "v2")
        for k, v in src.metadata.items():
            try:
                check_name(k, "file attributes", "attribute key")
            except FormatError as exc:
                raise meta_refusal(
                    fmt, k, f"not a zTensor v2 attribute key ({exc.detail})"
                ) from None
            if not keep_all and not isinstance(v, str):
                raise meta_refusal(fmt, k, f"value of type {type(v).__name__}; only string "
                                   "metadata converts between formats")  # fmt: skip
            try:
                _dcbor.encode(v)
            except (TypeError, ValueError) as exc:
                raise meta_refusal(fmt, k, f"value not encodable in CBOR ({exc})") from None
        return dict(src.metadata)

    def resolve(
        self, src: Source, checksum: str | None, compress: str | None
    ) -> tuple[str | None, str | None]:
        return None, None if compress == KEEP else compress

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from ...core.release import release
        from .v2writer import V2Writer

        zstd = opts.compress == "zstd"
        with V2Writer(dst, canonical=not zstd, attributes=md or None, fsync=opts.fsync) as w:
            for n in sorted(s.names, key=lambda n: n.encode()):
                v = s.get(n)
                w.add(n, v, encoding="zstd" if zstd else None)
                dt, shape = s.spec(n)
                bar.update(math.prod(shape) * dt.itemsize)
                release(v)
                del v  # before the next tensor is read: one decoded tensor at a time
