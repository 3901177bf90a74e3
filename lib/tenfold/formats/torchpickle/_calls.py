"""What ``REDUCE`` may call in the bounded pickle reader (:mod:`._pickle`): this module's own
implementation of each accepted global (:data:`CALLS`, by :attr:`Global.kind`), every argument
checked; the reader refuses everything else before a call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._records import DTYPES, Global, ODict, PickledSet, Storage, Tensor, TorchDtype

if TYPE_CHECKING:
    from ._pickle import Unpickler

__all__ = ["CALLS", "short"]


def short(v: Any) -> str:
    text = repr(v) if isinstance(v, (str, int, float, bytes, type(None))) else type(v).__name__
    if type(v) is tuple:
        text = "(" + ", ".join(short(x) for x in v[:6]) + ")"
    return text if len(text) <= 120 else text[:117] + "..."


# -- the calls REDUCE may make -------------------------------------------------------------
def _ints(u: Unpickler, what: str, v: Any) -> tuple[int, ...]:
    if type(v) is not tuple or not all(type(d) is int for d in v):
        raise u.fail(f"tensor {what} is not a tuple of ints", got=short(v))
    return v  # type: ignore[no-any-return]


def _rebuild(u: Unpickler, f: Global, args: tuple[Any, ...]) -> Tensor:
    want = {"v1": (4,), "v2": (6, 7), "v3": (7, 8)}[f.arg]
    if len(args) not in want:
        raise u.fail(f"{f.qualname} arguments", expected=f"{want[0]} items", got=len(args))
    storage, offset, size, stride = args[:4]
    if not isinstance(storage, Storage):
        raise u.fail(f"{f.qualname}: its storage is a {type(storage).__name__}")
    if type(offset) is not int or offset < 0:
        raise u.fail("tensor storage offset", expected="int >= 0", got=short(offset))
    shape, strides = _ints(u, "size", size), _ints(u, "stride", stride)
    if len(strides) != len(shape) or any(s < 0 for s in strides):
        raise u.fail("tensor stride", expected=f"{len(shape)} ints >= 0", got=short(stride))
    if f.arg != "v1":
        if type(args[4]) is not bool:
            raise u.fail("requires_grad is not a bool", got=short(args[4]))
        if not isinstance(args[5], dict) or args[5]:
            raise u.fail("backward hooks refused (a state dict has none)", "unsupported")
    dtype = storage.dtype
    if f.arg == "v3":
        if not isinstance(args[6], TorchDtype):
            raise u.fail(f"{f.qualname}: its dtype is a {type(args[6]).__name__}")
        dtype = args[6].name
        if storage.dtype != "uint8":
            raise u.fail(f"{f.qualname} over a typed storage", got=storage.dtype)
    if DTYPES.get(dtype) is None:
        raise u.fail(f"dtype torch.{dtype} has no NumPy type", "unsupported", got=dtype)
    return Tensor(storage, dtype, offset, shape, strides, u.where + u.op_at)


def _parameter(u: Unpickler, f: Global, args: tuple[Any, ...]) -> Tensor:
    n = 4 if f.arg == "state" else 3
    if len(args) != n or not isinstance(args[0], Tensor) or type(args[1]) is not bool:
        want = "(tensor, bool, hooks, state)" if n == 4 else "(tensor, bool, hooks)"
        raise u.fail(f"{f.qualname} arguments", expected=want)
    if not isinstance(args[2], dict) or args[2]:
        raise u.fail("backward hooks refused (a state dict has none)", "unsupported")
    return args[0]


def _odict(u: Unpickler, f: Global, args: tuple[Any, ...]) -> ODict:
    if args:
        raise u.fail("collections.OrderedDict with arguments", expected="()", got=len(args))
    return ODict()


def _size(u: Unpickler, f: Global, args: tuple[Any, ...]) -> tuple[int, ...]:
    if len(args) != 1:
        raise u.fail("torch.Size arguments", expected="(tuple of ints,)", got=len(args))
    return _ints(u, "torch.Size", tuple(args[0]) if type(args[0]) is list else args[0])


def _encode(u: Unpickler, f: Global, args: tuple[Any, ...]) -> bytes:
    if len(args) != 2 or type(args[0]) is not str or args[1] not in ("latin1", "latin-1"):
        raise u.fail("_codecs.encode other than (text, 'latin1')", "unsupported")
    try:
        return args[0].encode("latin-1")
    except UnicodeEncodeError:
        raise u.fail("_codecs.encode: text beyond latin-1") from None


def _empty_bytes(u: Unpickler, f: Global, args: tuple[Any, ...]) -> bytes:
    if args:
        raise u.fail(f"{f.qualname} with arguments", "unsupported", expected="()")
    return b""


def _set(u: Unpickler, f: Global, args: tuple[Any, ...]) -> PickledSet:
    if not args:
        return PickledSet()
    if len(args) != 1 or type(args[0]) is not list:
        raise u.fail(f"{f.qualname} arguments", expected="(list,)")
    out = PickledSet()
    u.add_items(out, args[0])
    return out


CALLS: dict[str, Callable[[Unpickler, Global, tuple[Any, ...]], Any]] = {
    "rebuild": _rebuild,
    "parameter": _parameter,
    "odict": _odict,
    "size": _size,
    "encode": _encode,
    "set": _set,
    "bytes": _empty_bytes,
}
