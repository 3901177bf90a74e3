"""The TARIDX split name parameter, and its old name ``fold`` (deprecated).

The shards ``<split>_<id>.tar`` and the index ``<split>.taridx`` of one dataset split (train,
val, ...) are named by ``split``. Until 0.1 that parameter was called ``fold``, which is also
the name of another format of this package; ``fold=`` still works for one release with a
``DeprecationWarning``.
"""

from __future__ import annotations

import warnings

__all__ = ["optional_split", "required_split"]


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
