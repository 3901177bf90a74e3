"""zTensor 0.1.0 byte layout (the rules of ``docs/formats/ztensor.md``).

::

    offset 0        8 bytes   magic b"ZTEN0001"
    offset 64*k     blobs     each tensor's bytes, at a multiple of 64, zero padding between
    offset S        N bytes   CBOR array of maps, one per tensor (definite or indefinite maps)
    offset S+N      8 bytes   N as u64 little-endian (S = file size - N - 8)

A file with no tensors is 17 bytes (``ZTEN0001``, ``0x80``, u64 1); the 16-byte variant whose
size field is 0 is accepted too.

Each map holds, in the order tenfold (and ztensor 0.1.4) writes them: ``name``, ``offset``,
``size``, ``dtype``, ``layout``, ``shape``, ``encoding``, then ``data_endianness`` (multi-byte
dtypes with raw encoding only, ``"little"``), then ``checksum`` (``"crc32c:0x%08X"`` or
``"sha256:<hex>"``), then the sparse keys, then custom keys.

Sparse tensors (``layout: "sparse"``): ``offset/size/dtype/encoding/checksum`` describe the
values blob (``nnz`` elements). ``sparse_format: "csr"`` adds ``indptr_offset, indptr_size``
(u64, rows+1) and ``indices_offset, indices_size`` (u64, nnz); ``"coo"`` adds ``coords_offset,
coords_size`` (u64, ndim x nnz, all dim-0 indices first). Every blob is 64-aligned and uses the
values' encoding. The single-blob layouts of ztensor 0.1.x are read too: ``"sparsecsr"``
(``indptr u64[rows+1] | indices u64[nnz] | values[nnz]``) and ``"sparsecoo"`` (nnz records of
``ndim`` u64 indices followed by one value).
"""

from __future__ import annotations

import numpy as np

from ...core.dtypes import registry
from ...errors import factory
from ._format import FORMAT as _FORMAT
from ._format import MAGIC as MAGIC  # the one definition, beside the descriptor
from ._format import MAGIC_V1 as MAGIC_V1
from ._format import MAGIC_V2 as MAGIC_V2

FMT = "zt"
#: A remote file is fetched from its tail first: the index sits at the end of the file (what
#: the descriptor declares, ``Format.index_at_end``; the front door reads it too).
TAIL_FIRST = _FORMAT.index_at_end
#: This format's errors: ``raise E.format(obj, field=..., ...)`` (:func:`~tenfold.errors.factory`)
E = factory(FMT)
ALIGN = 64
FOOTER = np.dtype("<u8")
EMPTY_FILE = MAGIC + b"\x80" + (1).to_bytes(8, "little")

DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
)
for _name in DTYPES:
    registry.register(FMT, _name, _name)

ENCODINGS = ("raw", "zstd")
LAYOUTS = ("dense", "sparse", "sparsecsr", "sparsecoo")
SPARSE_FORMATS = ("csr", "coo")
ENDIANNESS = ("little", "big")

#: Keys tenfold itself writes or interprets; anything else is a custom key.
KNOWN_KEYS = frozenset(
    {
        "name",
        "offset",
        "size",
        "dtype",
        "layout",
        "shape",
        "encoding",
        "data_endianness",
        "checksum",
        "sparse_format",
        "nnz",
        "indptr_offset",
        "indptr_size",
        "indices_offset",
        "indices_size",
        "coords_offset",
        "coords_size",
    }
)
