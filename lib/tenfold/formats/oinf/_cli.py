"""What ``tenfold inspect`` asks of an OINF file beyond its rows (the ``metadata`` hook)."""

from __future__ import annotations

from typing import Any

__all__ = ["metadata"]


def metadata(source: Any) -> dict[str, Any]:
    """The typed metadata values the reader decodes (``inspect`` lists their names)."""
    from .reader import OinfReader

    with OinfReader(source) as r:
        return dict(r.metadata)
