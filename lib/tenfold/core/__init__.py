"""What every format shares: records, mapped files, bounds, checksums, compression, atomic
writes, file locks, the dtype registry and progress bars. Nothing here knows a format."""

from .atomic import atomic_write
from .bounds import DEFAULT_LIMITS, Limits, align_up, checked_numel, padding
from .checksums import crc32c, sha256, sha256_hex, xxh64, xxh64_hex
from .compression import zstd_compress, zstd_decompress, zstd_decompress_into
from .dtypes import BFLOAT16, FLOAT8_E4M3FN, FLOAT8_E5M2, canonical, registry
from .locking import FileLock
from .mapped import MappedFile
from .progress import progress
from .reader import BaseReader, MappedReader, Span, TensorInfo, TensorReader
from .records import record

__all__ = [
    "atomic_write",
    "FileLock",
    "DEFAULT_LIMITS",
    "Limits",
    "align_up",
    "checked_numel",
    "padding",
    "crc32c",
    "sha256",
    "sha256_hex",
    "xxh64",
    "xxh64_hex",
    "zstd_compress",
    "zstd_decompress",
    "zstd_decompress_into",
    "BFLOAT16",
    "FLOAT8_E4M3FN",
    "FLOAT8_E5M2",
    "canonical",
    "registry",
    "MappedFile",
    "BaseReader",
    "MappedReader",
    "Span",
    "TensorInfo",
    "TensorReader",
    "progress",
    "record",
]
