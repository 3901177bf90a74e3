"""Tensors of a PyTorch state dict that share memory (tied weights), found as
``safetensors.torch.save_model`` / ``load_model`` find them.

Two entries of a state dict share memory when they are views of one storage whose byte ranges
overlap (an embedding tied to a language-model head is one ``Parameter`` under two names).
:func:`aliases` groups them and picks, in each group, the name to keep: one whose tensor covers
its whole storage (so the file holds every byte the others see), the first such name in sorted
order, or the first of ``preferred`` among them (the names a file holds, when loading). Every
other name of the group is an alias of the kept one.

Only what torch exposes is used (``untyped_storage()``, ``data_ptr()``, ``stride()``); no
tensor is copied.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["aliases", "shared_groups"]


def _storage(t: Any) -> tuple[str, int, int] | None:
    """``(device, address, bytes)`` of ``t``'s storage, or None when it has none to share
    (a meta tensor, an empty or null storage)."""
    if t.device.type == "meta":
        return None
    st = t.untyped_storage()
    ptr, size = int(st.data_ptr()), int(st.nbytes())
    if ptr == 0 or size == 0:
        return None
    return str(t.device), ptr, size


def _extent(t: Any) -> tuple[int, int]:
    """The first and one past the last byte address ``t``'s elements occupy (any strides)."""
    start = int(t.data_ptr())
    if t.numel() == 0:
        return start, start
    k = t.element_size()
    lo = hi = start
    for d, s in zip(t.shape, t.stride(), strict=True):
        step = (d - 1) * s * k
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi + k


def _covers_storage(t: Any) -> bool:
    """Whether ``t`` starts at its storage's start and holds all of its bytes."""
    st = t.untyped_storage()
    return int(t.data_ptr()) == int(st.data_ptr()) and t.numel() * t.element_size() == int(
        st.nbytes()
    )


def shared_groups(state: Mapping[str, Any]) -> list[list[str]]:
    """The names of ``state`` in groups of tensors whose bytes overlap (each group sorted,
    the groups in order of their first name); a tensor sharing nothing is a group of one.
    Tensors of one storage whose byte ranges do not meet are separate groups."""
    by_storage: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    groups: list[list[str]] = []
    for name, t in state.items():
        key = _storage(t)
        if key is None:
            groups.append([name])
        else:
            by_storage[key].append(name)
    for names in by_storage.values():
        spans = sorted((*_extent(state[n]), n) for n in names)
        current: list[str] = []
        reach = -1
        for lo, hi, n in spans:
            if current and lo >= reach:  # starts after every byte of the group so far
                groups.append(sorted(current))
                current = []
            current.append(n)
            reach = max(reach, hi)
        groups.append(sorted(current))
    return sorted(groups)


def aliases(
    state: Mapping[str, Any], preferred: Iterable[str] | None = None
) -> dict[str, list[str]]:
    """``{kept name: [alias, ...]}`` for each group of :func:`shared_groups` with more than
    one name (see the module doc for the choice of the kept name). A group in which no tensor
    covers its whole storage is a ``RuntimeError``, as in safetensors (storing any one of
    them would lose bytes another one sees)."""
    wanted = set(preferred or ())
    out: dict[str, list[str]] = {}
    for group in shared_groups(state):
        if len(group) < 2:
            continue
        complete = [n for n in group if _covers_storage(state[n])]
        if not complete:
            raise RuntimeError(
                f"tensors {group} share memory and none of them covers all of it: storing one "
                "would lose bytes the others see; save copies (e.g. .clone()) instead"
            )
        keep = min(n for n in complete if n in wanted) if wanted & set(complete) else complete[0]
        out[keep] = [n for n in group if n != keep]
    return out
