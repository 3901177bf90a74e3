"""Hand-made PyTorch checkpoints for the torchpickle tests: zips around a pickle given as bytes,
and the opcodes to spell pickles with (no torch needed)."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

PROTO2 = b"\x80\x02"
STOP = b"."
MARK = b"("
TUPLE = b"t"
EMPTY_DICT = b"}"
EMPTY_LIST = b"]"
EMPTY_TUPLE = b")"
SETITEM = b"s"
SETITEMS = b"u"
APPEND = b"a"
REDUCE = b"R"
BUILD = b"b"
BINPERSID = b"Q"
NEWFALSE = b"\x89"
NONE = b"N"


def text(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def glob(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def stack_glob(module: str, name: str) -> bytes:
    return text(module) + text(name) + b"\x93"


def i32(v: int) -> bytes:
    return b"J" + struct.pack("<i", v)


def ints(*vals: int) -> bytes:
    return MARK + b"".join(i32(v) for v in vals) + TUPLE


def storage(key: str, numel: int, cls: str = "FloatStorage") -> bytes:
    """A persistent id ('storage', torch.<cls>, key, 'cpu', numel), resolved."""
    return (
        MARK
        + text("storage")
        + glob("torch", cls)
        + text(key)
        + text("cpu")
        + i32(numel)
        + TUPLE
        + BINPERSID
    )


def odict() -> bytes:
    return glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE


def tensor(
    key: str, numel: int, offset: int, shape: tuple, stride: tuple, cls: str = "FloatStorage"
) -> bytes:
    """``_rebuild_tensor_v2(storage, offset, shape, stride, False, OrderedDict())``."""
    return (
        glob("torch._utils", "_rebuild_tensor_v2")
        + MARK
        + storage(key, numel, cls)
        + i32(offset)
        + ints(*shape)
        + ints(*stride)
        + NEWFALSE
        + odict()
        + TUPLE
        + REDUCE
    )


def state_dict(items: dict[str, bytes]) -> bytes:
    """A protocol-2 pickle of ``{name: <pickled value>}``."""
    body = b"".join(text(k) + v for k, v in items.items())
    return PROTO2 + EMPTY_DICT + MARK + body + SETITEMS + STOP


def write_zip(
    path: Path,
    pkl: bytes,
    storages: dict[str, bytes] | None = None,
    *,
    archive: str = "archive",
    byteorder: bytes | None = b"little",
    deflate: bool = False,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A zip-layout checkpoint: ``<archive>/data.pkl`` first, then the other members."""
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as z:
        z.writestr(f"{archive}/data.pkl", pkl)
        if byteorder is not None:
            z.writestr(f"{archive}/byteorder", byteorder)
        for k, v in (storages or {}).items():
            z.writestr(f"{archive}/data/{k}", v)
        for k, v in (extra or {}).items():
            z.writestr(f"{archive}/{k}", v)
        z.writestr(f"{archive}/version", b"3\n")
    return path


def rezip(src: Path, dst: Path, change=None, *, deflate: bool = False) -> Path:
    """A copy of the zip ``src`` with each member's bytes passed through ``change(name,
    data)`` (None drops the member), members in the same order."""
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", method) as zout:
        for zi in zin.infolist():
            data = zin.read(zi.filename)
            if change is not None:
                data = change(zi.filename, data)
            if data is not None:
                zout.writestr(zi.filename, data)
    return dst


def legacy(
    obj_pkl: bytes,
    keys: list[str],
    storages: dict[str, bytes],
    *,
    little: bool = True,
    version: int = 1001,
    counts: dict[str, int] | None = None,
    tail: bytes = b"",
) -> bytes:
    """A legacy-layout file: the magic number, protocol version and system info pickles, the
    object's pickle (its persistent ids with the sixth item None), the key list, then each
    storage as its element count and bytes (``counts``: the count written, default the
    storage's float32 count)."""
    magic = PROTO2 + b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + STOP
    ver = PROTO2 + b"M" + struct.pack("<H", version) + STOP
    info = PROTO2 + EMPTY_DICT + MARK + text("protocol_version") + b"M" + struct.pack("<H", 1001)
    info += text("little_endian") + (b"\x88" if little else b"\x89") + SETITEMS + STOP
    keylist = PROTO2 + EMPTY_LIST + MARK + b"".join(text(k) for k in keys) + b"e" + STOP
    out = magic + ver + info + obj_pkl + keylist
    for k in keys:
        data = storages[k]
        n = (counts or {}).get(k, len(data) // 4)
        out += struct.pack("<q", n) + data
    return out + tail


def legacy_tensor(key: str, numel: int, offset: int, shape: tuple, stride: tuple) -> bytes:
    """A float32 tensor whose persistent id has the legacy sixth item (None)."""
    pid = (MARK + text("storage") + glob("torch", "FloatStorage") + text(key) + text("cpu")
           + i32(numel) + NONE + TUPLE + BINPERSID)  # fmt: skip
    return (glob("torch._utils", "_rebuild_tensor_v2") + MARK + pid + i32(offset) + ints(*shape)
            + ints(*stride) + NEWFALSE + odict() + TUPLE + REDUCE)  # fmt: skip
