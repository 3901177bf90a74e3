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

class PlanTable:
    index: dict[Any, int]
    def __len__(self) -> int: ...
    def plan(self, i: int) -> tuple[Any, ...]: ...
    def has_digest(self, i: int) -> bool: ...
    def view(self, base: Any, name: Any, verify: bool, verified: Any) -> np.ndarray | None: ...

class TableReader:
    _table: PlanTable | None
    _base: Any
    _verified: Any
    copy: bool
    verify_checksums: bool
    def __getitem__(self, key: Any, /) -> Any: ...

def scan_table(
    data: bytes,
    max_depth: int,
    region: int,
    align: int,
    max_rank: int,
    max_name_bytes: int,
    dtypes: dict[str, Any],
    digests: dict[str, int],
) -> tuple[PlanTable, dict[Any, Any], dict[Any, Any], bool, int, int] | None: ...
