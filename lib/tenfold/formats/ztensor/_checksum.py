"""The ``checksum`` field: ``"crc32c:0x%08X"`` or ``"sha256:<hex>"`` over the stored bytes.

:class:`Summer` computes a tensor's checksum while its bytes are written: with two CPUs or more
a large piece is hashed on a second thread while the writing thread copies it into the file
(the CRC-32C kernel, :mod:`hashlib` and the write all release the GIL), so the checksum costs
the write almost nothing.
"""

from __future__ import annotations

import re
from typing import Any

from ...core import parallel
from ...core.checksums import crc32c, sha256_hex
from ...errors import EncodeError, FormatError, IntegrityError, UnsupportedError, describe
from ._spec import FMT

_CRC = re.compile(r"crc32c:0x([0-9A-Fa-f]{8})\Z")
_SHA = re.compile(r"sha256:([0-9A-Fa-f]{64})\Z")

ALGORITHMS = ("crc32c", "sha256")


def parse(text: object, what: str, offset: int) -> tuple[str, str]:
    """Split a checksum field into ``(algorithm, normalised lowercase hex)``."""
    if not isinstance(text, str):
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="checksum",
                detail="not a string",
                expected="str",
                got=type(text).__name__,
            )
        )
    m = _CRC.match(text)
    if m:
        return "crc32c", m.group(1).lower()
    m = _SHA.match(text)
    if m:
        return "sha256", m.group(1).lower()
    algo = text.split(":", 1)[0]
    if algo in ALGORITHMS:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="checksum",
                detail="malformed",
                expected=f"{algo}:<hex>",
                got=text,
            )
        )
    raise UnsupportedError(
        describe(
            FMT,
            what,
            offset=offset,
            field="checksum",
            detail="unknown algorithm",
            expected="crc32c | sha256",
            got=text,
        )
    )


def compute(algo: str, data: object) -> str:
    """Lowercase hex digest of ``data`` with ``algo``."""
    if algo == "crc32c":
        return f"{crc32c(data):08x}"
    return sha256_hex(data)


#: a piece of at least this many bytes is hashed on the second thread while it is written
OVERLAP_MIN = 1 << 20


class Summer:
    """The ``algo`` checksum (``None``: none) of the pieces given to :meth:`write`, in order.

    ``pool`` is the writer's one-thread :class:`~tenfold.core.parallel.Pool`, used for pieces
    of at least :data:`OVERLAP_MIN` bytes when :func:`tenfold.core.parallel.threads` allows two
    threads or more; a CRC-32C of a piece large enough to split is computed there on the
    threads left (``threads() - 1``). Every piece is hashed to the end before the next is
    written, so a piece need only live until :meth:`write` returns.
    """

    def __init__(self, algo: str | None, pool: parallel.Pool) -> None:
        self.algo = algo
        self.crc = 0
        self._sha: Any = None
        if algo == "sha256":
            import hashlib

            self._sha = hashlib.sha256()
        self._pool = pool
        self._others = parallel.threads() - 1  # threads besides the writing one

    def _update(self, mv: memoryview) -> None:
        if self.algo == "crc32c":
            self.crc = crc32c(mv, self.crc, threads=max(1, self._others))
        else:
            self._sha.update(mv)

    def write(self, f: Any, mv: memoryview) -> None:
        """Write ``mv`` to ``f`` and add it to the checksum."""
        if self.algo is None:
            f.write(mv)
            return
        if self._others < 1 or mv.nbytes < OVERLAP_MIN:
            f.write(mv)
            self._update(mv)
            return
        hashing = self._pool.submit(self._update, mv)
        try:
            f.write(mv)
        finally:
            hashing.result()  # the piece is not used after this returns, even on an error

    def hexdigest(self) -> str | None:
        if self.algo == "crc32c":
            return f"{self.crc:08x}"
        return None if self._sha is None else self._sha.hexdigest()


def render(algo: str, hexdigest: str) -> str:
    """The field as tenfold writes it (uppercase CRC hex, lowercase SHA-256)."""
    if algo == "crc32c":
        return f"crc32c:0x{hexdigest.upper()}"
    return f"sha256:{hexdigest}"


def check_algorithm(algo: object) -> str | None:
    if algo is None:
        return None
    if algo not in ALGORITHMS:
        raise EncodeError(
            describe(
                FMT,
                "writer",
                field="checksum",
                detail="unknown algorithm",
                expected="None | crc32c | sha256",
                got=algo,
            )
        )
    return algo  # type: ignore[return-value]


def mismatch(algo: str, expected_hex: str, got_hex: str, what: str, offset: int) -> IntegrityError:
    """The error of a checksum that does not match."""
    return IntegrityError(
        describe(
            FMT, what, offset=offset, field=f"{algo} checksum", expected=expected_hex, got=got_hex
        )
    )


def verify(algo: str, expected_hex: str, data: object, what: str, offset: int) -> None:
    got = compute(algo, data)
    if got != expected_hex:
        raise mismatch(algo, expected_hex, got, what, offset)
