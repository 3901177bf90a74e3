from typing_extensions import Buffer

def walk_lp_records(
    buf: Buffer,
    start: int,
    end: int,
    count: int,
    align: int,
    head: int,
    count_at: int,
    item: int,
    tail: int,
    max_items: int,
    starts: Buffer,
    lengths: Buffer,
    counts: Buffer,
) -> tuple[int, int, int]: ...
