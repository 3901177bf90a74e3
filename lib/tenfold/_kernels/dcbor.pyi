from typing import Any

from typing_extensions import Buffer

def decode(data: Buffer, max_depth: int) -> Any: ...
