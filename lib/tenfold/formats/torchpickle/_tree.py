"""From the object a checkpoint holds to tensor names and file metadata.

A checkpoint holds any nesting of dicts, lists and tuples: a state dict, or ``{"model": {...},
"optimizer": {...}, "epoch": 3}``. :func:`flatten` walks it:

* a tensor is named by its path, the keys joined with dots (``model.layer.weight``; an item of
  a list or tuple by its index: ``optimizer.state.0.exp_avg``); a tensor saved alone
  (``torch.save(t)``) is named ``tensor``;
* a dict, list or tuple that holds no tensor at any depth, and every other value (numbers,
  strings, ``None``), is file metadata under its path (``epoch``,
  ``optimizer.param_groups``), as JSON: tuples and sets become lists, dict keys strings,
  ``bytes`` ``{"base64": ...}``, a ``torch.<dtype>`` its name (``"torch.float16"``), a float
  that JSON cannot hold (NaN, infinities) its name (``"nan"``, ``"inf"``, ``"-inf"``); a value
  saved alone (``torch.save(3)``) is ``value``.

Key to name: a ``str`` key as it is, an ``int`` in decimal, any other key (a float, a tuple)
its ``repr``. Two paths that give the same name are refused (:class:`FormatError`), as is a
structure that contains itself, one nested more than :data:`MAX_DEPTH` deep, or one whose
shared parts would make the walk visit more items than the pickle has bytes (a "billion
laughs" of shared lists).
"""

from __future__ import annotations

import base64
import math
from typing import Any

from ...errors import factory
from ._format import FMT
from ._pickle import Global, Storage, Tensor, TorchDtype

__all__ = ["flatten", "MAX_DEPTH", "name_of_key"]

E = factory(FMT)

#: Deepest nesting of containers the walk follows.
MAX_DEPTH = 100


def name_of_key(k: Any) -> str:
    """The name part of dict key ``k``."""
    if type(k) is str:
        return k
    if type(k) is int:
        return str(k)
    return repr(k)


class _Walk:
    def __init__(self, visits: int, what: str) -> None:
        self.left = visits
        self.what = what
        self.holds: dict[int, bool] = {}
        self.open: set[int] = set()
        self.tensors: dict[str, Tensor] = {}
        self.meta: dict[str, Any] = {}

    def tick(self, depth: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise E.limit(self.what, detail="the object's shared parts unfold to more items "
                          "than the pickle has bytes")  # fmt: skip
        if depth > MAX_DEPTH:
            raise E.limit(self.what, field="nesting", expected=f"<= {MAX_DEPTH}", got=depth)

    def holds_tensor(self, v: Any, depth: int) -> bool:
        if isinstance(v, Tensor):
            return True
        if not isinstance(v, (dict, list, tuple)):
            return False
        i = id(v)
        seen = self.holds.get(i)
        if seen is not None:
            return seen
        if i in self.open:
            raise E.format(self.what, detail="the object contains itself (a cycle)")
        self.tick(depth)
        self.open.add(i)
        found = False
        for c in v.values() if isinstance(v, dict) else v:
            found = self.holds_tensor(c, depth + 1) or found
        self.open.discard(i)
        self.holds[i] = found
        return found

    def walk(self, v: Any, path: str | None, depth: int) -> None:
        self.tick(depth)
        if isinstance(v, Tensor):
            self.put(self.tensors, "tensor" if path is None else path, v)
        elif isinstance(v, (dict, list, tuple)) and self.holds_tensor(v, depth):
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, c in items:
                part = name_of_key(k)
                self.walk(c, part if path is None else f"{path}.{part}", depth + 1)
        else:
            self.put(self.meta, "value" if path is None else path, self.json(v, depth))

    def put(self, into: dict[str, Any], name: str, v: Any) -> None:
        if name in self.tensors or name in self.meta:
            raise E.format(f"name {name!r}", detail="two paths in the checkpoint give this name")
        into[name] = v

    def json(self, v: Any, depth: int) -> Any:
        self.tick(depth)
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
        if isinstance(v, bytes):
            return {"base64": base64.b64encode(v).decode("ascii")}
        if isinstance(v, TorchDtype):
            return f"torch.{v.name}"
        if isinstance(v, Global):
            return v.qualname
        if isinstance(v, dict):
            out: dict[str, Any] = {}
            for k, c in v.items():
                key = name_of_key(k)
                if key in out:
                    raise E.format(self.what, detail=f"metadata key {key!r} appears twice")
                out[key] = self.json(c, depth + 1)
            return out
        if isinstance(v, (list, tuple)):
            return [self.json(c, depth + 1) for c in v]
        if isinstance(v, Storage):
            raise E.unsupported(self.what, detail=f"a bare storage ({v.key!r}) outside a tensor")
        raise E.format(self.what, detail=f"a {type(v).__name__} value")  # pragma: no cover


def flatten(root: Any, visits: int, what: str) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """``(tensors by name, metadata)`` of ``root`` (see the module doc); the walk visits at
    most ``visits`` items."""
    w = _Walk(visits, what)
    w.holds_tensor(root, 0)  # every cycle is found here, before anything is named
    w.walk(root, None, 0)
    return w.tensors, w.meta
