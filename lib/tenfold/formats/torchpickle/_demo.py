"""A small writer of zip-layout checkpoints that ``torch.load(weights_only=True)`` reads, for
:func:`tenfold.formats.torchpickle.reader.demo` and the tests (tenfold does not offer it as a
target: it writes the subset of pickle a state dict needs, protocol 2, as ``torch.save`` does).

Values: dicts (keys ``str`` or ``int``), lists, tuples, ``str``, ``int``, ``float``, ``bool``,
``None`` and NumPy arrays (C-contiguous copies of each array become one storage each).
"""

from __future__ import annotations

import struct
import zipfile
from typing import Any

import numpy as np

from ...core.atomic import atomic_write
from ...core.dtypes import canonical

__all__ = ["write_checkpoint", "pickle_of", "STORAGE_OF"]

#: canonical dtype -> the torch storage class that holds it
STORAGE_OF = {
    "float64": "DoubleStorage", "float32": "FloatStorage", "float16": "HalfStorage",
    "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
    "int16": "ShortStorage", "int8": "CharStorage", "uint8": "ByteStorage",
    "bool": "BoolStorage", "complex64": "ComplexFloatStorage",
}  # fmt: skip


class _Pickler:
    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.storages: list[np.ndarray] = []

    def text(self, s: str) -> None:
        raw = s.encode("utf-8", "surrogatepass")
        self.out += b"X" + struct.pack("<I", len(raw)) + raw

    def glob(self, module: str, name: str) -> None:
        self.out += b"c" + f"{module}\n{name}\n".encode()

    def value(self, v: Any) -> None:
        if isinstance(v, np.ndarray):
            self.tensor(v)
        elif v is None:
            self.out += b"N"
        elif isinstance(v, bool):
            self.out += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            if -(2**31) <= v < 2**31:
                self.out += b"J" + struct.pack("<i", v)
            else:
                raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                self.out += b"\x8a" + bytes([len(raw)]) + raw
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            self.text(v)
        elif isinstance(v, dict):
            self.out += b"}("
            for k, c in v.items():
                self.value(k)
                self.value(c)
            self.out += b"u"
        elif isinstance(v, list):
            self.out += b"]("
            for c in v:
                self.value(c)
            self.out += b"e"
        elif isinstance(v, tuple):
            self.out += b"("
            for c in v:
                self.value(c)
            self.out += b"t"
        else:
            raise TypeError(f"cannot write a {type(v).__name__}")

    def tensor(self, a: np.ndarray) -> None:
        key = str(len(self.storages))
        a = np.ascontiguousarray(a)
        self.storages.append(a)
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out += b"(("
        self.text("storage")
        self.glob("torch", STORAGE_OF[canonical(a.dtype)])
        self.text(key)
        self.text("cpu")
        self.value(int(a.size))
        self.out += b"tQ"
        self.value(0)
        self.value(tuple(int(d) for d in a.shape))
        strides = [1] * a.ndim
        for i in range(a.ndim - 2, -1, -1):
            strides[i] = strides[i + 1] * a.shape[i + 1]
        self.value(tuple(strides))
        self.out += b"\x89"
        self.glob("collections", "OrderedDict")
        self.out += b")RtR"


def pickle_of(obj: Any) -> tuple[bytes, list[np.ndarray]]:
    """The protocol-2 pickle of ``obj`` and its storages (arrays), in key order."""
    p = _Pickler()
    p.value(obj)
    p.out += b"."
    return bytes(p.out), p.storages


def write_checkpoint(path: Any, obj: Any, *, archive: str = "archive") -> None:
    """Write ``obj`` as ``torch.save`` would (zip layout, storages aligned to 64 bytes)."""
    data, storages = pickle_of(obj)
    members = [(f"{archive}/data.pkl", data), (f"{archive}/byteorder", b"little")]
    members += [(f"{archive}/data/{i}", a.tobytes()) for i, a in enumerate(storages)]
    members.append((f"{archive}/version", b"3\n"))
    with atomic_write(path, fsync=False) as f:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            for name, payload in members:
                zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                start = f.tell() + 30 + len(name.encode()) + 4
                pad = -start % 64
                zi.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
                z.writestr(zi, payload)
