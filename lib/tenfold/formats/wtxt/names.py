"""Reversible names for WTXT: any tensor name (and 0-d shape) in a ``[A-Za-z0-9_]+`` name.

The spec allows array names of ASCII letters, digits and ``_`` only, and stores a scalar as
``shape=1``. PyTorch state dicts use dotted names (``layer0.weight``) and 0-d tensors
(``bn.num_batches_tracked``). ``tenfold.save`` / ``tenfold convert`` therefore store such
arrays under an *encoded* name that satisfies the spec's rule, record that they did with the
``cap`` item ``tenfold_names``, and :func:`tenfold.load` decodes the names back. Files whose
names all fit (and hold no 0-d array) are written exactly as before, without the cap item.

Encoding (applied when the name does not match ``[A-Za-z0-9_]+``, starts with ``_Z``, or the
array is 0-d)::

    stored = "_Z" + escape(name) + ("_S" if the array is 0-d else "")

    escape: A-Z a-z 0-9 -> themselves       _ -> __        . -> _d
            / -> _s          - -> _h         any other code point c -> _u + 6 hex digits
                                             (lowercase, zero-padded: "é" -> _u0000e9)

Decoding reads the stored name after ``_Z`` token by token; ``_S`` may only come last. Every
name has exactly one encoding and the map is injective, so names stay unique and the round
trip is exact: ``decode(encode(n, s)) == (n, s)``. A stored name without the ``_Z`` prefix is
the name itself. Readers that do not know the convention see valid, readable names
(``layer0.weight`` -> ``_Zlayer0_dweight``) and a 0-d array as shape ``(1,)``.

>>> encode("layer0.weight"), encode("running_mean"), encode("bn.n", scalar=True)
('_Zlayer0_dweight', 'running_mean', '_Zbn_dn_S')
>>> decode("_Zlayer0_dweight"), decode("_Zbn_dn_S"), decode("running_mean")
(('layer0.weight', False), ('bn.n', True), ('running_mean', False))
"""

from __future__ import annotations

import re

from ...errors import FormatError, factory

__all__ = ["CAP_ITEM", "PREFIX", "encode", "decode", "needs_encoding"]

#: The ``cap ext=`` item a file carries when some stored names are encoded.
CAP_ITEM = "tenfold_names"
PREFIX = "_Z"
_PLAIN = re.compile(r"[A-Za-z0-9_]+")
_ALNUM = re.compile(r"[A-Za-z0-9]")
_SHORT = {"_": "__", ".": "_d", "/": "_s", "-": "_h"}
_BACK = {v[1]: k for k, v in _SHORT.items()}
_HEX = re.compile(r"[0-9a-f]{6}")


def needs_encoding(name: str, scalar: bool = False) -> bool:
    """Whether ``name`` (of a 0-d array when ``scalar``) is stored encoded."""
    return scalar or not _PLAIN.fullmatch(name) or name.startswith(PREFIX)


def encode(name: str, scalar: bool = False) -> str:
    """The stored name of ``name`` (identity for names that need no encoding)."""
    if not needs_encoding(name, scalar):
        return name
    out = [PREFIX]
    for ch in name:
        if _ALNUM.fullmatch(ch):
            out.append(ch)
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        else:
            out.append(f"_u{ord(ch):06x}")
    if scalar:
        out.append("_S")
    return "".join(out)


def decode(stored: str) -> tuple[str, bool]:
    """``(name, is_0d)`` of a stored name; FormatError naming the name when malformed."""
    if not stored.startswith(PREFIX):
        return stored, False
    out = []
    i, n = len(PREFIX), len(stored)
    scalar = False
    while i < n:
        ch = stored[i]
        if ch != "_":
            out.append(ch)
            i += 1
            continue
        code = stored[i + 1 : i + 2]
        if code in _BACK:
            out.append(_BACK[code])
            i += 2
        elif code == "u" and _HEX.fullmatch(stored[i + 2 : i + 8]):
            cp = int(stored[i + 2 : i + 8], 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                raise _bad(stored, i, "code point out of range")
            out.append(chr(cp))
            i += 8
        elif code == "S" and i + 2 == n:
            scalar = True
            i += 2
        else:
            raise _bad(stored, i, f"unknown escape {stored[i : i + 2]!r}")
    name = "".join(out)
    if encode(name, scalar) != stored:  # one encoding per name: reject non-canonical forms
        raise _bad(stored, len(PREFIX), "not the canonical encoding of its name")
    return name, scalar


def _bad(stored: str, pos: int, detail: str) -> FormatError:
    return factory("wtxt").format(
        f"array {stored!r}", field=f"encoded name ({CAP_ITEM}) at character {pos}", detail=detail
    )
