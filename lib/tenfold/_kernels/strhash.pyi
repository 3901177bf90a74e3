from collections.abc import Iterable

from typing_extensions import Buffer

def hash_ranges(
    buf: Buffer, off: Buffer, length: Buffer, seed: int, out: Buffer, ascii_lower: bool = False
) -> None: ...
def hash_strs(strs: Iterable[str], seed: int, out: Buffer) -> None: ...
def split_basenames(
    buf: Buffer,
    off: Buffer,
    length: Buffer,
    stem_off: Buffer,
    stem_len: Buffer,
    ext_off: Buffer,
    ext_len: Buffer,
    ascii: Buffer,
) -> None: ...
def gather(buf: Buffer, off: Buffer, length: Buffer, out: Buffer) -> None: ...
def gather_strided(buf: Buffer, start: int, stride: int, width: int, out: Buffer) -> None: ...
def ranges_equal(
    buf: Buffer, a_off: Buffer, a_len: Buffer, b_off: Buffer, b_len: Buffer, out: Buffer
) -> None: ...
