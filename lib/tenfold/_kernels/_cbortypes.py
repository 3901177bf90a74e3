"""Objects the ``dcbor`` kernel family shares with its callers (not a kernel family itself).

:class:`CborReject` is what both decoders raise for input that is not deterministic CBOR;
:class:`Key` is how they return a map key that is not a text string.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CborReject", "Key", "SYNTAX", "DETERMINISM", "DUPLICATE", "DEPTH"]

#: The rule names a :class:`CborReject` carries.
SYNTAX = "cbor-syntax"
DETERMINISM = "cbor-deterministic"
DUPLICATE = "cbor-duplicate-key"
DEPTH = "cbor-depth"


class CborReject(Exception):
    """Why an input is not deterministic CBOR: ``rule``, ``offset`` (relative), ``detail``."""

    def __init__(self, rule: str, offset: int, detail: str) -> None:
        super().__init__(f"{detail} at byte {offset}")
        self.rule = rule
        self.offset = offset
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rule, self.offset, self.detail))


class Key:
    """A map key that is not a text string (kept with its exact encoding)."""

    __slots__ = ("value", "raw")

    def __init__(self, value: Any, raw: bytes) -> None:
        self.value = value
        self.raw = raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.raw == self.raw

    def __repr__(self) -> str:
        return f"Key({self.value!r})"
