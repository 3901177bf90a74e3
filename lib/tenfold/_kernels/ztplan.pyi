from typing import Any

import numpy as np
from typing_extensions import Buffer

def scan_manifest(
    data: Buffer,
    max_depth: int,
    region: int,
    align: int,
    max_rank: int,
    max_name_bytes: int,
    dtypes: dict[str, Any],
    digests: dict[str, int],
) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], bool, int, int] | None: ...
def view(base: Any, plan: tuple[Any, ...]) -> np.ndarray: ...
def map_spans(data: Buffer, pos: int, max_depth: int) -> tuple[list[tuple[int, int, int]], int]: ...
