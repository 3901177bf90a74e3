from typing_extensions import Buffer

E_OK: int
E_TRUNCATED_HEADER: int
E_CHECKSUM: int
E_NUMBER: int
E_PAYLOAD_PAST_END: int
E_PAX: int
E_DANGLING_EXTENDED: int
E_CAPACITY: int
E_SPARSE: int

def scan(
    buf: Buffer,
    hdr_off: Buffer,
    size: Buffer,
    prefix_off: Buffer,
    prefix_len: Buffer,
    name_off: Buffer,
    name_len: Buffer,
    typeflag: Buffer,
    lanes: int = 0,
) -> tuple[int, int, int]: ...

FLAG_ASCII: int
FLAG_NEWLINE: int
WALK_FINISHED: int
WALK_STOPPED: int
WALK_STOPPED_STATE: int

def find_member(buf: Buffer, frm: int, to: int) -> int: ...
def walk(
    buf: Buffer,
    start: int,
    stop: int,
    hdr_off: Buffer,
    size: Buffer,
    name_off: Buffer,
    name_len: Buffer,
    stem_off: Buffer,
    stem_len: Buffer,
    keyhash: Buffer,
    exthash: Buffer,
    typeflag: Buffer,
    flags: Buffer,
    regular_only: bool = True,
) -> tuple[int, int, int, int, int]: ...

M_OK: int
M_PAST_END: int
M_NO_HEADER: int
M_NOT_REGULAR: int
M_NAME: int
M_SIZE: int
M_NON_ASCII: int
LOOKBACK: int

def check_member(
    buf: Buffer, offset: int, size: int, keyhash: int, ext: bytes, checksum: bool = False
) -> int: ...
def member_name(buf: Buffer, offset: int, extended: bool) -> tuple[int, int, int, int, int]: ...

class HeaderMismatch(Exception): ...

class RowCheck:
    exts: tuple[bytes | None, ...]
    checksum: bool
    def __init__(
        self,
        cols: Buffer,
        keyhash: Buffer,
        starts: Buffer,
        exts: tuple[bytes | None, ...],
        checksum: bool = False,
    ) -> None: ...
    def rows(self, i: int, shards: list[Buffer | None] | None) -> list[list[int]]: ...
    def batch(self, buf: Buffer, rows: Buffer, fid: int) -> int: ...
    def sample(self, buf: Buffer, i: int, fid: int) -> int: ...
