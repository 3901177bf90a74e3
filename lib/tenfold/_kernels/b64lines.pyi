from typing_extensions import Buffer

OK: int
ERR_TRUNCATED: int
ERR_WIDTH: int
ERR_CHAR: int
ERR_SEP: int
ERR_NIBBLE: int
ERR_PARITY: int
ERR_EOL: int
ERR_PADBITS: int

def framed_size(n: int, width: int = 76) -> int: ...
def frame_lines(b64: Buffer, out: Buffer, width: int = 76) -> int: ...
def frame_block(
    prefix: Buffer, b64: Buffer, suffix: Buffer, out: Buffer, pos: int, width: int = 76
) -> int: ...
def unframe_lines(
    text: Buffer, nlines: int, out: Buffer, width: int = 76
) -> tuple[int, int, int]: ...
