"""``tenfold convert SRC DST``: move tensors between formats, lossless or loud.

Readers: every tenfold format that holds tensors (detected by content), ``.npz`` and
``.safetensors``. Writers: the format the destination suffix names (``.zt .oinf .fold .mind
.wtxt .safetensors .npz``).

Rules
-----
* Names, dtypes, shapes (0-d and empty included) and the bits of every element are kept. A
  tensor the target cannot hold (e.g. bfloat16 into ``.npz``, float16 into ``.wtxt``) is
  refused before anything is written, naming the tensor, its dtype and the formats that can
  hold it (:mod:`tenfold.capabilities`). No file appears at ``dst`` on any error.
* File metadata travels too: safetensors ``__metadata__`` <-> FOLD index ``metadata`` <->
  OINF metadata (string values whose key and value fit OINF's ``[A-Za-z0-9._-]+``) <->
  zTensor 0.1.0 (a ``__metadata__`` map in the first tensor's entry, a custom key that other
  readers ignore) <-> zTensor v1 / v2 file attributes (v1 / v2 -> v2 keeps any value). What
  the target cannot hold (any metadata in ``.npz`` / ``.wtxt``, non-string values outside
  OINF, OINF sizevars outside OINF) is refused too; ``metadata=False`` (``--no-metadata``)
  drops it on purpose.
* OINF packed types (i4, t2, ...) become their unpacked int8/uint8 values elsewhere (exact
  values); OINF tensors without data exist only in OINF. Sparse zTensor tensors are densified
  for formats with no sparse layout.
* ``checksum`` is the per-tensor checksum of targets that have one (zTensor); FOLD and WTXT
  always checksum every chunk, and OINF, safetensors and npz have no per-tensor checksum.
  ``checksum=None`` keeps zTensor output byte-identical to ztensor 0.1.4. ``compress``
  compresses (zTensor per tensor, FOLD per chunk, npz members with deflate).
* A conversion within one format is faithful by default (``checksum="keep"``,
  ``compress="keep"``): zTensor 0.1.0 -> zTensor keeps each tensor's encoding (raw or zstd)
  and checksum (none, crc32c or sha256), FOLD -> FOLD keeps zstd chunks when the source's
  tensor chunks are compressed, npz -> npz keeps deflate when its members are deflated.
  Between formats ``"keep"`` means ``crc32c`` and no compression. An explicit value applies
  to every tensor.

Memory: tensors are read one at a time (views of memory-mapped zTensor, OINF, safetensors
and stored npz sources; WTXT arrays, deflated npz members and encoded zTensor v2 parts
decoded alone), written and released (:mod:`tenfold.core.release`), and every writer (the
zTensor v2 one included) takes one tensor at a time, so a conversion needs about the largest
tensor, not the file. Exceptions: compressed FOLD chunks
(compressed or decompressed whole) and the signature of a ``sign_all`` WTXT source (over all
its bytes).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .capabilities import NOT_TENSOR_FORMATS, TARGETS, check_all, target_of
from .core.alloc import dense as _dense
from .core.bounds import DEFAULT_LIMITS, Limits
from .errors import EncodeError, FormatError, UnsupportedError
from .tensor_source import Source

__all__ = ["convert", "read_any", "write_any", "open_source", "Source"]

#: ``checksum`` / ``compress`` value: what the source has (same format), else the default.
KEEP = "keep"
#: The zTensor custom key that carries file metadata (on the first tensor).
ZT_METADATA_KEY = "__metadata__"
from .formats.fold._spec import INTERNAL_METADATA as FOLD_INTERNAL  # noqa: E402


def _suffix(path: str | os.PathLike[str]) -> str:
    return os.path.splitext(os.fspath(path))[1].lower()


def _dict_source(fmt: str, tensors: Mapping[str, Any], **kw: Any) -> Source:
    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        v = tensors[n]
        if not hasattr(v, "dtype"):
            v = np.asarray(v)
        return np.dtype(v.dtype), tuple(int(d) for d in v.shape)

    return Source(fmt, list(tensors), spec, tensors.__getitem__, **kw)


def zt_source(path: Any, limits: Limits = DEFAULT_LIMITS) -> Source:
    from .formats import ztensor
    from .formats.ztensor import Reader

    if ztensor.detect(path) != "0.1.0":  # v1 / v2: read through the generation's reader
        return _zt2_source(path, limits)

    r = Reader(path, limits=limits, sparse="raw")  # sparse stays sparse for a zTensor target
    infos = {i.name: i for i in r.infos()}
    md: dict[str, Any] = {}
    for i in infos.values():
        if ZT_METADATA_KEY in i.attrs and isinstance(i.attrs[ZT_METADATA_KEY], dict):
            md = dict(i.attrs[ZT_METADATA_KEY])
            break

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        i = infos[n]
        return np.dtype(i.np_dtype), tuple(i.shape)

    def raw(n: str) -> tuple[int, int, str | None] | None:
        i = infos[n]
        if i.layout != "dense" or i.encoding != "raw" or not i.zero_copy:
            return None
        return i.offset, i.size, (f"{i.checksum_algo}:{i.checksum_hex}" if i.checksum else None)

    src = Source("ztensor", list(infos), spec, lambda n: r.read(n, copy=False), metadata=md,
                 close=r.close, raw=raw, path=path)  # fmt: skip
    src.stored = lambda n: (infos[n].encoding, infos[n].checksum_algo)
    src.generation = "0.1.0"
    return src


def _zt2_source(path: Any, limits: Limits = DEFAULT_LIMITS) -> Source:
    """The objects of a zTensor v1 / v2 file, read one at a time (raw dense parts as views
    of the map, each part's digest checked when it is read); the file attributes are its
    metadata. Layouts other than dense and sparse (``zt.mx/1``, ``zt.quant_group/1``, ...)
    and unknown logical types have no form in another file yet: they are refused."""
    from .formats.ztensor import open as zt_open
    from .formats.ztensor._v2spec import DENSE, LOGICAL

    r = zt_open(path, limits=limits, sparse="raw")
    try:
        names = list(r)
        infos = {n: r.info(n) for n in names}
        metadata = r.metadata
    except BaseException:
        r.close()
        raise
    refuse = []
    for n, i in infos.items():
        t = i.main_part.type
        if i.layout != DENSE and i.layout not in r.sparse_layouts:
            refuse.append(f"tensor {n!r} has layout {i.layout} (parts {', '.join(i.parts)})")
        elif t is not None and t not in LOGICAL:
            refuse.append(f"tensor {n!r} has logical type {t!r}, unknown to tenfold")

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        i = infos[n]
        return np.dtype(i.np_dtype), tuple(i.shape)

    src = Source("ztensor", names, spec, lambda n: r.read(n, copy=False), metadata=metadata,
                 close=r.close, path=path, refuse=refuse)  # fmt: skip
    src.generation = r.generation
    return src


def _oinf_source(path: Any, limits: Limits = DEFAULT_LIMITS) -> Source:
    from .formats.oinf import OinfReader, Scalar, Tensor
    from .formats.oinf import _spec as S

    r = OinfReader(path, limits=limits)
    infos = {t.name: t for t in r.infos()}
    with_data = [n for n, t in infos.items() if t.has_data]
    uninit = {n: (t.dtype, tuple(t.shape)) for n, t in infos.items() if not t.has_data}
    typed: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for key, value in r.metadata.items():
        tname = r.metadata_info(key).dtype
        plain[key] = value
        if tname == "ndarray":
            typed[key] = Tensor(value)
        elif tname in ("str", "bitset"):
            typed[key] = value
        else:
            typed[key] = Scalar(value, tname)

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        t = infos[n]
        return np.dtype(t.numpy_dtype), tuple(t.shape)

    packed = {n: t.dtype for n, t in infos.items() if t.has_data and t.tag in S.PACKED_BITS}
    quant = [f"tensor {n!r} carries OINF v2 quantization parameters" for n, t in infos.items()
             if t.quant is not None]  # fmt: skip

    def raw(n: str) -> tuple[int, int, str | None] | None:
        t = infos[n]
        if t.tag not in S.NUMPY_DTYPE or t.quant is not None:
            return None
        return t.data_offset, t.data_nbytes, None

    return Source("oinf", with_data, spec, lambda n: r.tensor(n), metadata=plain,
                  sizevars=r.sizevars, close=r.close, oinf_meta=typed, uninitialized=uninit,
                  oinf_types=packed, raw=raw, path=path, refuse=quant)  # fmt: skip


def _safetensors_source(path: Any) -> Source:
    from .core.mapped import MappedFile
    from .formats.safetensors.writer import parse, parse_metadata

    mf = MappedFile(path, fmt="safetensors")
    try:
        buf = mf.buffer()
        tensors = parse(buf)
        md = parse_metadata(buf)
    except BaseException:
        mf.close()
        raise
    base = buf.ctypes.data
    packed = {n for n, v in tensors.items() if v.base is None or not v.flags.c_contiguous}

    def raw(n: str) -> tuple[int, int, str | None] | None:
        v = tensors[n]
        if v.nbytes == 0:
            return 0, 0, None
        if n in packed or v.dtype.byteorder == ">":
            return None
        return v.ctypes.data - base, v.nbytes, None

    return _dict_source("safetensors", tensors, metadata=md, close=mf.close, raw=raw, path=path)


def _fold_source(path: Any, limits: Limits = DEFAULT_LIMITS) -> Source:
    from .formats import fold

    with fold.Reader(path, limits=limits) as r:
        md = {k: v for k, v in r.metadata.items() if k not in FOLD_INTERNAL}
        sten = [c for c in r.chunks if c.ctype in ("STEN", "NPZ0")]
        extras = [f"chunk {c.name!r} ({c.ctype})" for c in r.chunks if c not in sten]
        compressed = any(c.compression != "none" for c in sten)
        streamable = len(sten) == 1 and sten[0].ctype == "STEN" and sten[0].compression == "none"
        local = isinstance(path, (str, os.PathLike))  # a fetched buffer has no raw copies
        if streamable and local and _fold_chunk_intact(path, r, sten[0]):
            src = _fold_sten_source(path, sten[0], md)
            src.extras = extras
            return src
    src = _dict_source("fold", fold.load(path, limits=limits), metadata=md, extras=extras)
    src.compressed = compressed
    return src


def _fold_chunk_intact(path: Any, r: Any, c: Any) -> bool:
    """CRC-32C and SHA-256 of an uncompressed chunk, computed in 1 MiB blocks (no map, no
    copy of the chunk). False sends the caller to the reader, which repairs with the ECC or
    reports the damage."""
    import hashlib

    from .core.checksums import crc32c
    from .formats.fold import _digest

    tmp = Source("fold", [], lambda n: (np.dtype("u1"), ()), lambda n: None, path=path)
    tmp._raw = lambda n: None
    crc, sha = 0, hashlib.sha256()
    try:
        for block in tmp.blocks(c.payload_offset, c.comp_len):
            crc = crc32c(block, crc)
            sha.update(block)
    finally:
        tmp.close()
    return crc == c.crc32c and bool(_digest.matches(c.sha256, sha.hexdigest(), r._key))


def _fold_sten_source(path: Any, c: Any, md: dict[str, Any]) -> Source:
    """The tensors of an intact, uncompressed STEN chunk, copied as raw ranges of the file."""
    from .core.mapped import MappedFile
    from .formats.safetensors.writer import parse

    mf = MappedFile(path, fmt="fold")
    try:
        buf = mf.buffer()[c.payload_offset : c.payload_offset + c.comp_len]
        tensors = parse(buf, fmt="fold", what=f"chunk {c.name!r}", offset=c.payload_offset)
    except BaseException:
        mf.close()
        raise
    base = mf.buffer().ctypes.data

    def raw(n: str) -> tuple[int, int, str | None] | None:
        v = tensors[n]
        if v.nbytes == 0:
            return 0, 0, None
        if v.base is None or not v.flags.c_contiguous:  # F4: unpacked copy
            return None
        return v.ctypes.data - base, v.nbytes, None

    return _dict_source("fold", tensors, metadata=md, close=mf.close, raw=raw, path=path)


def _wtxt_source(path: Any, limits: Limits = DEFAULT_LIMITS) -> Source:
    """The arrays of a WTXT file, each decoded (and checked again) only when asked for: the
    reader checks every chunk, hash and signature when it opens the file but keeps no
    decoded bytes. Its keys are the tensor names (``tenfold_names`` decoded, as
    :func:`wtxt.load` does)."""
    from .formats import wtxt
    from .formats.wtxt import _spec as WS

    f = wtxt.open(path, limits=limits)
    try:
        plan: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        for n in f:
            info = f.info(n)
            plan[n] = (np.dtype(WS.DTYPES[info.dtype]), tuple(info.shape))
    except BaseException:
        f.close()
        raise

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        return plan[n]

    return Source("wtxt", list(plan), spec, f.read, close=f.close)


def _npz_source(path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None) -> Source:
    """Arrays of an ``.npz``, one member at a time through the hardened parser
    (:class:`tenfold.interop.npz.Archive`: the zip directory and every ``.npy`` header are
    checked when the source opens, before anything is written). A stored member is a view of
    the file map (its CRC-32 checked; the writers give its pages back), a deflated one is
    decompressed alone into an array charged to a fresh decode budget. :func:`read_any` sets
    ``budget``: then every array is an owned copy charged to that one budget."""
    from .core.mapped import MappedFile
    from .formats.npz.writer import Archive

    mf = MappedFile(path, fmt="npz")
    try:
        what = label if label is not None else os.fspath(path)
        a = Archive(mf.buffer(), what=what, limits=limits)
        members = {n: a.member(n) for n in a.members}
    except BaseException:
        mf.close()
        raise

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        m = members[n]
        assert m.dtype is not None
        return np.dtype(m.dtype), m.shape

    def get(n: str) -> np.ndarray:
        if src.budget is not None:
            return a.read(n, src.budget)
        return a.read(n, copy=False)

    def close() -> None:
        a.close()
        mf.close()

    src = Source("npz", list(members), spec, get, close=close)
    src.compressed = any(not m.stored for m in members.values())
    return src


def open_source(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> Source:
    """A :class:`Source` for ``path`` (format detected by content, then by suffix).

    ``path`` may be an fsspec URL (:func:`tenfold.open`'s): convert copies every tensor, so
    the object is fetched whole into memory (one range request after its head; no local copy
    is written)."""
    from .core.mapped import open_regular
    from .core.source import is_remote
    from .registry import SNIFF_BYTES

    if is_remote(path):
        return _remote_source(path, limits)
    with os.fdopen(open_regular(path), "rb") as f:  # a FIFO is refused, never blocks
        head = f.read(SNIFF_BYTES)
    return _source_for(path, head, limits)


def _remote_source(url: Any, limits: Limits) -> Source:
    from .registry import SNIFF_BYTES, open_remote

    name, mf = open_remote(url, tail_first=False)
    try:
        data = mf.u8(0, mf.size, "the whole object")
    finally:
        mf.close()
    if name not in _BUFFER_SOURCES:
        raise UnsupportedError(
            f"tenfold: {mf.path}: {name} is not a tensor format (convert reads a remote "
            f"{', '.join(_BUFFER_SOURCES)} file)"
        )
    src = _source_for(data, data[:SNIFF_BYTES].tobytes(), limits, label=str(mf.path))
    src._path = None  # no raw pread copies from a buffer: every tensor goes through get()
    return src


#: The formats whose :class:`Source` reads from a buffer as well as from a path.
_BUFFER_SOURCES = ("ztensor", "oinf", "fold", "wtxt", "safetensors", "npz")


def _source_for(path: Any, head: bytes, limits: Limits, label: str | None = None) -> Source:
    from .registry import FORMATS, detect_bytes

    if label is None:
        label = os.fspath(path)
    info = detect_bytes(head)
    suffix = _suffix(label)
    if info is not None and info.opens_path:  # a sharded checkpoint's index
        from .sharded import open_source as sharded_source

        return sharded_source(path, lambda p: open_source(p, limits=limits))
    if info is not None:
        if info.name == "ztensor":
            return zt_source(path, limits)
        if info.name == "oinf":
            return _oinf_source(path, limits)
        if info.name == "fold":
            return _fold_source(path, limits)
        if info.name == "wtxt":
            return _wtxt_source(path, limits)
        if info.name == "safetensors":  # should the format table learn to sniff them
            return _safetensors_source(path)
        if info.name == "npz":
            return _npz_source(path, limits, label)
        raise UnsupportedError(f"tenfold: {label}: {info.description} is not a tensor format")
    if suffix == ".npz" or head[:4] == b"PK\x03\x04":
        return _npz_source(path, limits)
    if suffix == ".safetensors":
        return _safetensors_source(path)
    known = ", ".join(dict.fromkeys([s for i in FORMATS for s in i.suffixes] + [".safetensors"]))
    raise UnsupportedError(
        f"tenfold: {label}: cannot read: not a format tenfold knows by its content "
        f"(tensor formats: {known})"
    )


def read_any(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Tensors of ``path`` as owned arrays (at most ``limits.decode_budget`` bytes of them)."""
    budget = limits.budget()
    with open_source(path, limits=limits) as src:
        src.budget = budget
        return {n: _owned(_dense(src.get(n), n, budget)) for n in src.names}


def _owned(v: Any) -> np.ndarray:
    """An owned copy of ``v``; a zero-itemsize array (``|V0``: no bytes, any number of
    elements) is made, not copied: NumPy would copy it element by element."""
    a = np.asarray(v)
    if a.dtype.itemsize == 0:
        return np.empty(a.shape, a.dtype)
    return np.array(a)


# -- checks before anything is written --------------------------------------------------------
def _target(path: str | os.PathLike[str]) -> str:
    suffix = _suffix(path)
    if suffix in NOT_TENSOR_FORMATS:
        raise UnsupportedError(
            f"tenfold: {os.fspath(path)}: {suffix} is not a tensor format "
            f"({NOT_TENSOR_FORMATS[suffix]}); tensor formats: "
            + ", ".join("/".join(s) for s, _ in TARGETS.values())
        )
    fmt = target_of(path)
    if fmt is None:
        raise UnsupportedError(
            f"tenfold: {os.fspath(path)}: unknown suffix; expected one of "
            + ", ".join("/".join(s) for s, _ in TARGETS.values())
        )
    return fmt


def _oinf_token_ok(s: str) -> bool:
    import re

    return bool(re.fullmatch(r"[A-Za-z0-9._-]+", s))


def _meta_refusal(fmt: str, key: str, why: str) -> EncodeError:
    return EncodeError(
        f"{fmt}: metadata {key!r}: {why}; pass metadata=False (--no-metadata) to drop metadata"
    )


def plan_metadata(fmt: str, src: Source, *, v2: bool = False) -> dict[str, Any]:
    """The metadata ``fmt`` receives from ``src`` (EncodeError when some cannot go); ``v2``:
    the target is zTensor v2 (file attributes)."""
    if fmt == "oinf":
        if src.fmt == "oinf":
            return dict(src.oinf_meta or {})
        for k, v in src.metadata.items():
            if not isinstance(v, str):
                raise _meta_refusal(fmt, k, f"value of type {type(v).__name__} (OINF metadata "
                                    "from other formats must be strings)")  # fmt: skip
            if not (_oinf_token_ok(k) and _oinf_token_ok(v)):
                raise _meta_refusal(fmt, k, "key and value must match [A-Za-z0-9._-]+")
        return dict(src.metadata)
    if src.sizevars:
        k = next(iter(src.sizevars))
        raise _meta_refusal(fmt, k, "OINF sizevars have no place in " + fmt)
    if not src.metadata:
        return {}
    if fmt in ("npz", "wtxt"):
        raise _meta_refusal(fmt, next(iter(src.metadata)), f"{fmt} has no file metadata")
    if fmt == "fold" and src.fmt == "fold":
        return dict(src.metadata)
    if v2:
        return _v2_attributes(src)
    for k, v in src.metadata.items():
        if not isinstance(v, str):
            raise _meta_refusal(fmt, k, f"value of type {type(v).__name__}; only string "
                                "metadata converts between formats")  # fmt: skip
        if fmt == "fold" and k in FOLD_INTERNAL:
            raise _meta_refusal(fmt, k, "the key is reserved by FOLD")
    if fmt == "ztensor" and not src.names:
        raise _meta_refusal(fmt, next(iter(src.metadata)), "zTensor keeps file metadata on "
                            "the first tensor and this file has none")  # fmt: skip
    return dict(src.metadata)


def _v2_attributes(src: Source) -> dict[str, Any]:
    """File attributes of a zTensor v2 target: a v1 / v2 source's attributes as they are
    (any value deterministic CBOR holds), strings from any other source; keys follow v2's
    name rule (non-empty, no U+0000, at most 1024 UTF-8 bytes)."""
    from .formats.ztensor import _dcbor
    from .formats.ztensor._v2spec import check_name

    fmt = "zt"
    keep_all = src.generation in ("v1", "v2")
    for k, v in src.metadata.items():
        try:
            check_name(k, "file attributes", "attribute key")
        except FormatError as exc:
            raise _meta_refusal(fmt, k, f"not a zTensor v2 attribute key ({exc.detail})") from None
        if not keep_all and not isinstance(v, str):
            raise _meta_refusal(fmt, k, f"value of type {type(v).__name__}; only string "
                                "metadata converts between formats")  # fmt: skip
        try:
            _dcbor.encode(v)
        except (TypeError, ValueError) as exc:
            raise _meta_refusal(fmt, k, f"value not encodable in CBOR ({exc})") from None
    return dict(src.metadata)


def _v2_target(dst: Any, fmt: str, generation: Any, max_shard_size: Any) -> bool:
    """True when ``zt_generation`` asks for zTensor v2 (checked against the destination)."""
    if generation in (None, 0, "0", "0.1.0"):
        return False
    if generation not in (2, "2", "v2"):
        raise UnsupportedError(
            f"tenfold: {os.fspath(dst)}: zt_generation must be 0.1.0 or 2, got {generation!r}"
        )
    if fmt != "ztensor":
        raise UnsupportedError(f"tenfold: {os.fspath(dst)}: --zt-generation needs a .zt file")
    if max_shard_size is not None:
        raise UnsupportedError(
            f"tenfold: {os.fspath(dst)}: --max-shard-size writes zTensor 0.1.0 shards; "
            "it does not combine with --zt-generation"
        )
    return True


def _check_v2(src: Source) -> None:
    """What a canonical zTensor v2 file cannot hold, refused before anything is written:
    element types without a v2 storage type, names that break v2's rule or are not NFC
    (canonical form), OINF declarations without data."""
    import unicodedata

    from .formats.ztensor._v2spec import check_name
    from .formats.ztensor.v2writer import storage_of

    for n in src.names:
        try:
            check_name(n, f"tensor {n!r}", "name")
        except FormatError as exc:
            raise EncodeError(str(exc)) from None
        if unicodedata.normalize("NFC", n) != n:
            raise EncodeError(
                f"zt: tensor {n!r}: name: not in Unicode NFC, which canonical zTensor v2 needs; "
                "formats that keep it: .zt (0.1.0), .safetensors, .fold/.mind, .npz"
            )
        storage_of(src.spec(n)[0], f"tensor {n!r}")
    if src.uninitialized:
        n = next(iter(src.uninitialized))
        raise EncodeError(
            f"zt: tensor {n!r} has no data (an OINF declaration); only .oinf can hold it"
        )


def _check_all(fmt: str, src: Source) -> None:
    check_all(fmt, ((n, src.spec(n)[0]) for n in src.names))
    if src.uninitialized and fmt != "oinf":
        n = next(iter(src.uninitialized))
        raise EncodeError(
            f"{fmt}: tensor {n!r} has no data (an OINF declaration); only .oinf can hold it"
        )
    if fmt == "oinf":
        for n in src.names:
            if not _oinf_token_ok(n):
                raise EncodeError(
                    f"oinf: tensor {n!r}: name must match [A-Za-z0-9._-]+ (OINF's rule); "
                    "formats that can hold any name: .zt, .fold/.mind, .safetensors, .npz, "
                    ".wtxt (encoded)"
                )


# -- writing ---------------------------------------------------------------------------------
def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    checksum: str | None = KEEP,
    compress: str | None = KEEP,
    level: int = 3,
    threads: int = 0,
    metadata: bool = True,
    fsync: bool = True,
    progress: bool | None = False,
    zt_generation: Any = None,
    max_shard_size: int | str | None = None,
) -> int:
    """Copy every tensor (and the metadata) of ``src`` into a new file ``dst``; return how
    many tensors. See the module docstring for the rules.

    ``threads``: ``.fold``: zstd workers per chunk; ``.zt`` with ``compress="zstd"``: zstd
    workers per tensor (0, the default, writes the single-threaded frames pyfolds and
    ztensor 0.1.4 write; -1: one per CPU); ``.wtxt``: 2 or more (or -1) hashes each array
    on a second thread while the text is written (two tensors in memory). Other targets copy
    raw bytes at memory speed and ignore it.

    ``zt_generation`` chooses the zTensor generation of a ``.zt`` destination: ``0``/``"0.1.0"``
    (the default) or ``2``/``"v2"``: canonical v2 (:class:`tenfold.ztensor.V2Writer`), one
    tensor at a time; ``compress="zstd"`` writes ``zt.zstd-seekable/1`` parts (not canonical).
    Every v2 part carries an xxh3 digest, so ``checksum`` other than ``"keep"`` is refused.

    ``src`` may be a sharded checkpoint's index (:mod:`tenfold.sharded`); ``max_shard_size``
    writes ``dst`` as shards plus an index (one file when everything fits).
    """
    fmt = _target(dst)
    v2 = _v2_target(dst, fmt, zt_generation, max_shard_size)
    if v2 and checksum != KEEP:
        raise EncodeError(
            f"convert: {os.fspath(dst)}: checksum={checksum!r} does not apply to zTensor v2 "
            "(every part carries an xxh3 digest)"
        )
    if compress not in (None, "zstd", KEEP):
        raise EncodeError(f"convert: compress must be None, 'zstd' or 'keep', got {compress!r}")
    if checksum not in (None, "crc32c", "sha256", KEEP):
        raise EncodeError(
            f"convert: checksum must be None, 'crc32c', 'sha256' or 'keep', got {checksum!r}"
        )
    with open_source(src) as s:
        if s.refuse:
            raise EncodeError(f"{fmt}: {s.refuse[0]}, which tenfold cannot write to any format yet")
        if s.extras and metadata:
            raise EncodeError(
                f"{fmt}: the source also holds {', '.join(s.extras)}, which convert does not "
                "copy (tensors and metadata only); pass metadata=False (--no-metadata) to "
                "convert the tensors alone"
            )
        if v2:
            _check_v2(s)
        else:
            _check_all(fmt, s)
        md = plan_metadata(fmt, s, v2=v2) if metadata else {}
        if not metadata:
            s.sizevars = {}
        if v2:
            _write(fmt, dst, s, md, checksum=None, compress=None if compress == KEEP else
                   compress, level=level, threads=threads, fsync=fsync, show=progress,
                   v2=True)  # fmt: skip
            return len(s.names)
        checksum, compress = _faithful(fmt, s, checksum, compress)
        if max_shard_size is not None:
            from .sharded import write_source

            write_source(dst, s, max_shard_size, lambda p, sub: _write(
                fmt, p, sub, md, checksum=checksum, compress=compress, level=level,
                threads=threads, fsync=fsync, show=progress), fsync=fsync)  # fmt: skip
            return len(s.names)
        _write(fmt, dst, s, md, checksum=checksum, compress=compress, level=level,
               threads=threads, fsync=fsync, show=progress)  # fmt: skip
        return len(s.names)


def _faithful(
    fmt: str, s: Source, checksum: str | None, compress: str | None
) -> tuple[str | None, str | None]:
    """Resolve ``"keep"``: what the source has when it is of the target's format (a zTensor
    source's per-tensor choices stay ``"keep"`` for :func:`_write_ztensor`), else crc32c and
    no compression."""
    per_tensor = fmt == s.fmt == "ztensor" and s.stored is not None
    if checksum == KEEP and not per_tensor:
        checksum = "crc32c"
    if compress == KEEP and not per_tensor:
        compress = "zstd" if fmt == s.fmt and s.compressed else None
    return checksum, compress


def _write(
    fmt: str,
    dst: Any,
    s: Source,
    md: dict[str, Any],
    *,
    checksum: str | None,
    compress: str | None,
    level: int,
    threads: int,
    fsync: bool,
    show: bool | None,
    v2: bool = False,
) -> None:
    from .core.progress import ByteProgress

    total = 0
    for n in s.names:
        dt, shape = s.spec(n)
        total += int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    bar = ByteProgress(total, desc=os.path.basename(os.fspath(dst)), show=show)
    with bar:
        if v2:
            _write_ztensor_v2(dst, s, md, bar, compress=compress, fsync=fsync)
        elif fmt == "ztensor":
            _write_ztensor(dst, s, md, bar, checksum=checksum, compress=compress, level=level,
                           threads=threads, fsync=fsync)  # fmt: skip
        elif fmt == "safetensors":
            _write_safetensors(dst, s, md, bar, total, fsync=fsync)
        elif fmt == "npz":
            from .core.release import release
            from .formats.npz.writer import write_npz

            def done(a: np.ndarray) -> None:
                bar.update(a.nbytes)
                release(a)

            lazy = {n: _Lazy(s, n) for n in s.names}
            write_npz(dst, lazy, compressed=compress is not None, fsync=fsync, done=done)  # type: ignore[arg-type]
        elif fmt == "oinf":
            _write_oinf(dst, s, md, bar)
        elif fmt == "fold":
            from .formats import fold

            lazy = {n: _Lazy(s, n, bar) for n in s.names}
            fold.save(dst, lazy, metadata=md, compress=compress, level=level,  # type: ignore[arg-type]
                      threads=threads, fsync=fsync)  # fmt: skip
        elif fmt == "wtxt":
            from .formats import wtxt

            # the writer reads each array twice (digests for the root line, then the text);
            # threads >= 2 runs the two passes side by side (two tensors in memory)
            wtxt.save(dst, {n: _Lazy(s, n, bar, 0.5) for n in s.names}, fsync=fsync,
                      workers=2 if threads >= 2 or threads < 0 else 1)  # fmt: skip
        else:  # pragma: no cover
            raise UnsupportedError(f"tenfold: no writer for {fmt}")


def _write_ztensor(
    dst: Any,
    s: Source,
    md: dict[str, Any],
    bar: Any,
    *,
    checksum: str | None,
    compress: str | None,
    level: int,
    threads: int,
    fsync: bool,
) -> None:
    from .core.release import release
    from .formats.ztensor import Writer

    with Writer(dst, fsync=fsync, threads=threads) as w:
        for i, n in enumerate(s.names):
            attrs = {ZT_METADATA_KEY: md} if i == 0 and md else None
            ck, enc = checksum, compress
            if KEEP in (ck, enc):  # a zTensor source: this tensor's own choices
                assert s.stored is not None
                kept_enc, kept_ck = s.stored(n)
                ck = kept_ck if ck == KEEP else ck
                enc = (None if kept_enc == "raw" else kept_enc) if enc == KEEP else enc
            raw = s.raw(n) if enc is None else None
            if raw is not None and (raw[2] is None or raw[2].split(":")[0] == ck):
                dt, shape = s.spec(n)
                got = w.add_raw(n, dt, shape, s.blocks(raw[0], raw[1]),
                                checksum=ck, attrs=attrs)  # fmt: skip
                _check_source_sum(s, n, raw[2], got)
                bar.update(raw[1])
                continue
            v = s.get(n)
            w.add(n, v, checksum=ck, encoding=enc or "raw", level=level,
                  attrs=attrs)  # fmt: skip
            bar.update(getattr(v, "nbytes", 0))
            release(v)
            del v  # before the next tensor is read: one decoded tensor at a time


def _write_ztensor_v2(
    dst: Any, s: Source, md: dict[str, Any], bar: Any, *, compress: str | None, fsync: bool
) -> None:
    """A zTensor v2 file, one tensor at a time (names in UTF-8 byte order, as canonical form
    needs); sparse tensors of a zTensor source stay sparse. ``compress="zstd"`` writes
    ``zt.zstd-seekable/1`` parts (not canonical)."""
    from .core.release import release
    from .formats.ztensor import V2Writer

    zstd = compress == "zstd"
    with V2Writer(dst, canonical=not zstd, attributes=md or None, fsync=fsync) as w:
        for n in sorted(s.names, key=lambda n: n.encode()):
            v = s.get(n)
            w.add(n, v, encoding="zstd" if zstd else None)
            dt, shape = s.spec(n)
            bar.update(math.prod(shape) * dt.itemsize)
            release(v)
            del v  # before the next tensor is read: one decoded tensor at a time


def _write_safetensors(
    dst: Any, s: Source, md: dict[str, Any], bar: Any, total: int, *, fsync: bool
) -> None:
    from .core.atomic import atomic_write
    from .core.buffers import byte_view
    from .core.checksums import crc32c
    from .core.prealloc import preallocate
    from .core.release import release
    from .formats.safetensors.writer import header, stored, tag_of

    specs = {}
    for n in s.names:
        dt, shape = s.spec(n)
        specs[n] = (tag_of(n, dt), shape)
    head, order = header(specs, md if md else None)
    with atomic_write(dst, fsync=fsync) as f:
        f.write(head)
        f.flush()
        preallocate(f.fileno(), len(head), total)  # one extent for the data
        for n in order:
            raw = s.raw(n)
            if (
                raw is not None
                and specs[n][0] != "F4"
                and (raw[2] is None or raw[2].startswith("crc32c:"))
            ):
                crc = 0
                for block in s.blocks(raw[0], raw[1]):
                    f.write(block)
                    if raw[2] is not None:
                        crc = crc32c(block, crc)
                _check_source_sum(s, n, raw[2], f"{crc:08x}")
                bar.update(raw[1])
                continue
            v = np.asarray(_dense(s.get(n), n))
            f.write(byte_view(stored(specs[n][0], v)))
            bar.update(v.nbytes)
            release(v)
            del v  # before the next tensor is read: one decoded tensor at a time


def _write_oinf(dst: Any, s: Source, md: dict[str, Any], bar: Any) -> None:
    from .formats import oinf

    tensors: dict[str, Any] = {}
    for n in s.names:  # packed OINF types come from OINF sources: views of their map
        if n in s.oinf_types:
            tensors[n] = oinf.Tensor(_dense(s.get(n), n), s.oinf_types[n])
        else:
            tensors[n] = _Lazy(s, n, bar)
    for n, (dtype, shape) in s.uninitialized.items():
        tensors[n] = oinf.Uninitialized(dtype, shape)
    oinf.write(dst, tensors=tensors, metadata=md, sizevars=s.sizevars)


def _check_source_sum(s: Source, name: str, stored: str | None, got: str | None) -> None:
    """A source tensor copied without decoding is checked against its stored checksum (when
    the copy computed the same algorithm): a mismatch aborts the conversion."""
    from .errors import IntegrityError

    if stored is None or got is None:
        return
    algo, _, want = stored.partition(":")
    if algo == "crc32c" and want.lower() != got.lower() or algo == "sha256" and want != got:
        raise IntegrityError(
            f"{s.fmt}: tensor {name!r}: checksum mismatch; expected {stored}, got {algo}:{got}"
        )


class _Lazy:
    """A source tensor fetched only when a writer asks for it (``np.asarray``); each fetch
    credits ``share`` of its bytes to the progress bar ``bar`` (a writer that reads every
    tensor twice, like WTXT's hash-then-write, passes ``share=0.5``)."""

    def __init__(self, s: Source, name: str, bar: Any = None, share: float = 1.0) -> None:
        self.s, self.name, self.bar, self.share = s, name, bar, share
        self.dtype, self.shape = s.spec(name)
        self.ndim = len(self.shape)
        self._left = math.prod(self.shape) * self.dtype.itemsize  # bytes not yet credited

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = np.asarray(_dense(self.s.get(self.name), self.name))
        if self.bar is not None:
            credit = min(self._left, math.ceil(a.nbytes * self.share))
            self._left -= credit
            self.bar.update(credit)
        return a if dtype is None else a.astype(dtype)


def write_any(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    checksum: str | None = "crc32c",
    compress: str | None = None,
    level: int = 3,
    threads: int = 0,
    fsync: bool = True,
) -> None:
    """Write a dict of arrays (and string ``metadata``) in the format ``path``'s suffix
    names, with the rules of :func:`convert`."""
    fmt = _target(path)
    s = _dict_source("dict", {k: _dense(v, k) for k, v in tensors.items()}, metadata=metadata)
    _check_all(fmt, s)
    md = plan_metadata(fmt, s)
    _write(fmt, path, s, md, checksum=checksum, compress=compress, level=level,
           threads=threads, fsync=fsync, show=False)  # fmt: skip
