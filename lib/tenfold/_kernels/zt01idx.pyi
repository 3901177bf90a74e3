from collections.abc import Callable
from typing import Any

from typing_extensions import Buffer

def parse_dense(
    buf: Buffer,
    index_start: int,
    max_objects: int,
    max_ndim: int,
    max_nbytes: int,
    dtypes: dict[Any, Any],
    make: Callable[..., Any] | None,
) -> tuple[list[Any], bool] | None: ...
