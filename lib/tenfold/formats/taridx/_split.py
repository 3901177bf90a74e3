"""The TARIDX split name parameter, and its old name ``fold`` (deprecated).

The shards ``<split>_<id>.tar`` (or webdataset's ``<split>-<id>.tar``) and the index
``<split>.taridx`` of one dataset split (train, val, ...) are named by ``split``.
Until 0.1 that parameter was called ``fold``, which is also the name of another format of this
package; ``fold=`` still works for one release with a ``DeprecationWarning``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable

from ...errors import describe
from ._spec import FMT, E

__all__ = ["optional_split", "required_split", "select_shards", "shards_wanted"]


def select_shards(split: str, names: Iterable[str], where: str) -> list[str]:
    """The shard file names of ``split`` among ``names``, sorted (the fid order):
    ``<split>_<digits>.tar`` or ``<split>-<digits>.tar`` (webdataset's naming). One split uses
    one separator: both under one root is a ``FormatError`` naming them (their fids would
    interleave by accident of sorting)."""
    pat = re.compile(re.escape(split) + r"([_-])[0-9]+\.tar")
    found: dict[str, str] = {}
    for n in names:
        m = pat.fullmatch(n)
        if m is not None:
            found[n] = m.group(1)
    seps = sorted(set(found.values()))
    if len(seps) > 1:
        under = min(n for n, s in found.items() if s == "_")
        dash = min(n for n, s in found.items() if s == "-")
        raise E.format(
            f"split {split!r} in {where}",
            detail=f"shards named both {split}_<id>.tar ({under}) and {split}-<id>.tar "
            f"({dash}); keep one naming per split",
        )
    return sorted(found)


def shards_wanted(split: str, where: str) -> str:
    """The message when ``where`` holds no shard of ``split``."""
    msg: str = describe(FMT, f"no shards {split}_<id>.tar or {split}-<id>.tar in {where}")
    if split[-1:] in ("_", "-") and split[:-1]:
        msg = f"{msg} (the split is the name before the separator: {split[:-1]!r})"
    return msg


def _resolve(split: str | None, fold: str | None, where: str) -> str | None:
    if fold is None:
        return split
    warnings.warn(
        f"taridx: {where}(fold=...) is deprecated; use split=... "
        "(fold= will be removed in the next release)",
        DeprecationWarning,
        stacklevel=4,  # the caller of the public function
    )
    if split is not None and split != fold:
        raise TypeError(f"{where}: give split= only (got split={split!r} and fold={fold!r})")
    return fold


def optional_split(split: str | None, fold: str | None, where: str) -> str | None:
    """``split``, or the deprecated ``fold`` keyword (with a ``DeprecationWarning``); both,
    different, is a ``TypeError``."""
    return _resolve(split, fold, where)


def required_split(split: str | None, fold: str | None, where: str) -> str:
    """As :func:`optional_split`, and one of them must be given."""
    name = _resolve(split, fold, where)
    if name is None:
        raise TypeError(f"{where}: missing the split name (split=...)")
    return name
