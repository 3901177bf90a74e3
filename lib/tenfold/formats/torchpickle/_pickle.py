"""A bounded reader of the pickles ``torch.save`` writes, which never unpickles.

Python's :mod:`pickle` runs a small stack machine whose ``GLOBAL`` opcode imports any module
the file names and whose ``REDUCE`` opcode calls what it imported: loading a pickle runs
whatever code its author chose. This module runs the same stack machine over the opcodes
themselves and builds only what a state dict is made of:

* ``None``, ``bool``, ``int`` (at most :data:`MAX_LONG_BYTES` bytes), ``float``, ``str``,
  ``bytes``, tuples, lists, dicts (``collections.OrderedDict`` too, as a :class:`ODict`),
  sets and frozensets (as a :class:`PickledSet`, a list);
* :class:`Storage` records for the persistent ids ``("storage", <storage type>, key,
  location, numel)`` (the legacy layout adds a sixth item, ``None``);
* :class:`Tensor` records for the calls ``torch._utils._rebuild_tensor``,
  ``_rebuild_tensor_v2``, ``_rebuild_tensor_v3``, ``_rebuild_parameter`` and
  ``_rebuild_parameter_with_state``; ``torch.Size(...)`` as a tuple;
  ``_codecs.encode(text, "latin1")`` and ``bytes()`` (how protocol 2 writes ``bytes``) as
  bytes;
  ``torch.<dtype>`` as a :class:`TorchDtype`.

Each of those globals is an entry of :data:`GLOBALS`, and ``REDUCE`` calls only this module's
own implementation of it. Every other global (``os.system``, ``builtins.eval``, a model's
class) is refused by name where the opcode stands, before anything else happens; so are the
opcodes that build arbitrary objects or reach outside the pickle (``INST``, ``OBJ``,
``NEWOBJ``, ``NEWOBJ_EX``, ``EXT1/2/4``, the text-form ``PERSID``, out-of-band buffers), the
text forms of protocols 0 and 1 that ``torch.save`` never writes, and ``BUILD`` on anything but
an ``OrderedDict`` (whose state, the module versions in ``_metadata``, is dropped).

Bounded: every length is checked against the bytes left before anything is sliced or
allocated, nesting of ``MARK`` is at most :data:`MAX_MARKS` deep, an integer at most
:data:`MAX_LONG_BYTES` long, the memo and the stack cannot hold more items than the pickle has
bytes, and the machine is a loop (no recursion).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ...errors import TenfoldError, factory
from ._calls import CALLS, short
from ._format import FMT
from ._records import (
    DTYPES,
    GLOBALS,
    Global,
    ODict,
    PickledSet,
    Storage,
    Tensor,
    TorchDtype,
)

__all__ = [
    "Tensor",
    "Storage",
    "TorchDtype",
    "ODict",
    "PickledSet",
    "Unpickler",
    "GLOBALS",
    "DTYPES",
    "MAX_MARKS",
    "MAX_LONG_BYTES",
    "MAX_OPS",
]

E = factory(FMT)

#: Deepest nesting of ``MARK`` (a state dict needs a handful).
MAX_MARKS = 1000
#: Most opcodes one pickle may run (a state dict of 10,000 tensors runs about 500,000): what
#: bounds the objects a pickle can make, whatever its size.
MAX_OPS = 1 << 23
#: Longest ``LONG1`` / ``LONG4`` integer, in bytes (the legacy magic number takes 10).
MAX_LONG_BYTES = 32

_MARK = object()
_SCALAR_KEYS = (str, int, float, bool, bytes, type(None))


def _key_ok(k: Any) -> bool:
    if isinstance(k, _SCALAR_KEYS):
        return True
    return type(k) is tuple and all(isinstance(x, _SCALAR_KEYS) for x in k)


class Unpickler:
    """Run the opcodes of the pickle in ``data`` (see the module doc).

    ``where`` is the file offset of ``data[0]`` (errors give file offsets); ``what`` names the
    pickle in messages; ``storages`` collects the persistent ids by key (shared with the other
    pickles of a legacy file).
    """

    def __init__(
        self,
        data: bytes | memoryview,
        *,
        where: int = 0,
        what: str = "pickle",
        storages: dict[str, Storage] | None = None,
        cut: bool = False,
    ) -> None:
        self.data = data
        self.cut = cut
        self.where = where
        self.what = what
        self.storages: dict[str, Storage] = {} if storages is None else storages
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.pos = 0
        self.op_at = 0
        self.proto = 0
        self.ops = 0

    # -- errors -----------------------------------------------------------------------------
    def fail(self, detail: str, cls: str = "format", **kw: Any) -> TenfoldError:
        """A tenfold error about the opcode being run (its file offset)."""
        make = getattr(E, cls)
        return make(self.what, offset=self.where + self.op_at, detail=detail, **kw)  # type: ignore[no-any-return]

    # -- reading ----------------------------------------------------------------------------
    def ends(self, detail: str) -> TenfoldError:
        """The pickle ends early: truncated, or longer than the bytes given to this reader."""
        if self.cut:
            return self.fail(f"{detail}: the pickle is longer than max_index_bytes", "limit",
                             expected=f"<= {len(self.data)} bytes")  # fmt: skip
        return self.fail(detail, "truncated")

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (``TruncatedError`` when the pickle ends first)."""
        end = self.pos + n
        if end > len(self.data):
            raise self.ends(
                f"the pickle ends inside an argument: {n} bytes announced, "
                f"{len(self.data) - self.pos} left"
            )
        out = self.data[self.pos : end]
        self.pos = end
        return out if type(out) is bytes else bytes(out)

    def byte(self) -> int:
        """The next byte's value."""
        pos = self.pos
        if pos >= len(self.data):
            raise self.ends("the pickle ends inside an argument: 1 byte announced, 0 left")
        self.pos = pos + 1
        return self.data[pos]  # type: ignore[no-any-return]

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def pop(self) -> Any:
        if not self.stack:
            raise self.fail("stack underflow")
        return self.stack.pop()

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.fail("no MARK to pop to")
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def top(self) -> Any:
        if not self.stack:
            raise self.fail("stack underflow")
        return self.stack[-1]

    def load(self, start: int = 0) -> tuple[Any, int]:
        """The object of the pickle starting at ``data[start]`` and the offset after its
        ``STOP``."""
        self.pos = start
        data = self.data
        size = len(data)
        table = _OPS
        left = MAX_OPS - self.ops
        while True:
            pos = self.pos
            self.op_at = pos
            if pos >= size:
                raise self.ends("the pickle ends before its STOP opcode")
            left -= 1
            if left < 0:
                raise self.fail("too many opcodes", "limit", expected=f"<= {MAX_OPS}")
            code = data[pos]
            self.pos = pos + 1
            run = table.get(code)
            if run is None:
                raise self.refuse_opcode(code)
            if run(self):
                break
        self.ops = MAX_OPS - left
        if self.marks or len(self.stack) != 1:
            raise self.fail(
                "STOP with an unbalanced stack",
                expected="one object, no open MARK",
                got=f"{len(self.stack)} objects, {len(self.marks)} open MARKs",
            )
        return self.stack.pop(), self.pos

    def refuse_opcode(self, code: int) -> TenfoldError:
        name = _REFUSED.get(code)
        if name is None:
            return self.fail(f"unknown opcode {code:#04x}")
        return self.fail(f"opcode {name} refused: {_WHY[name]}", "unsupported")

    # -- what the opcodes build -------------------------------------------------------------
    def push_global(self, module: str, name: str) -> None:
        kind = GLOBALS.get((module, name))
        if kind is None:
            raise self.fail(
                f"global {module}.{name} refused: not one a state dict is made of "
                "(tenfold never imports what a pickle names)",
                "unsupported",
                expected="a global of tensors, storages or containers",
                got=f"{module}.{name}",
            )
        if kind[0] == "dtype":  # a value, not a callable
            self.stack.append(TorchDtype(kind[1]))
        else:
            self.stack.append(Global(module, name, *kind))

    def memo_put(self, index: int) -> None:
        self.memo[index] = self.top()

    def memo_get(self, index: int) -> None:
        try:
            self.stack.append(self.memo[index])
        except KeyError:
            raise self.fail(f"memo entry {index} was never stored") from None

    def set_items(self, d: Any, items: list[Any]) -> None:
        if not isinstance(d, dict):
            raise self.fail(f"SETITEM(S) on a {type(d).__name__}, not a dict")
        if len(items) % 2:
            raise self.fail("SETITEMS with an odd number of items")
        for i in range(0, len(items), 2):
            k = items[i]
            if not _key_ok(k):
                raise self.fail(f"dict key of type {type(k).__name__} refused", "unsupported")
            d[k] = items[i + 1]

    def append_items(self, seq: Any, items: list[Any]) -> None:
        if type(seq) is not list:
            raise self.fail(f"APPEND(S) on a {type(seq).__name__}, not a list")
        seq.extend(items)

    def add_items(self, s: Any, items: list[Any]) -> None:
        if not isinstance(s, PickledSet):
            raise self.fail(f"ADDITEMS on a {type(s).__name__}, not a set")
        for k in items:
            if not _key_ok(k):
                raise self.fail(f"set item of type {type(k).__name__} refused", "unsupported")
            if k not in s:
                s.append(k)

    def persistent(self, pid: Any) -> Storage:
        """A persistent id: ``("storage", type, key, location, numel[, None])``."""
        if (
            type(pid) is not tuple
            or len(pid) not in (5, 6)
            or pid[0] != "storage"
            or not isinstance(pid[1], Global)
            or pid[1].kind != "storage"
        ):
            raise self.fail(
                "persistent id refused",
                "unsupported",
                expected="('storage', <torch storage type>, key, location, numel)",
                got=short(pid),
            )
        _, kind, key, location, numel = pid[:5]
        if len(pid) == 6 and pid[5] is not None:
            raise self.fail("storage views (legacy view metadata) are not read", "unsupported")
        if type(key) is not str or type(location) is not str or type(numel) is not int:
            raise self.fail("persistent id fields", got=short(pid))
        if numel < 0:
            raise self.fail("storage size", expected=">= 0", got=numel)
        seen = self.storages.get(key)
        if seen is None:
            seen = Storage(key, kind.arg, numel, location, self.where + self.op_at)
            self.storages[key] = seen
        elif (seen.dtype, seen.numel) != (kind.arg, numel):
            raise self.fail(
                f"storage {key!r} announced twice with different types or sizes",
                expected=f"{seen.dtype} x {seen.numel}",
                got=f"{kind.arg} x {numel}",
            )
        return seen

    def reduce(self, func: Any, args: Any) -> Any:
        if not isinstance(func, Global):
            raise self.fail(f"REDUCE of a {type(func).__name__}, not an accepted global")
        if type(args) is not tuple:
            raise self.fail("REDUCE arguments are not a tuple", got=type(args).__name__)
        call = CALLS.get(func.kind)
        if call is None:
            raise self.fail(f"{func.qualname} is not callable here", "unsupported")
        return call(self, func, args)


# -- the opcodes ---------------------------------------------------------------------------
def _proto(u: Unpickler) -> None:
    p = u.take(1)[0]
    if not 2 <= p <= 5:
        raise u.fail(f"pickle protocol {p}", "unsupported", expected="2 to 5", got=p)
    u.proto = p


def _frame(u: Unpickler) -> None:
    n = u.uint(8)
    if n > len(u.data) - u.pos:
        raise u.fail("frame longer than the pickle", "truncated", got=n)


def _stop(u: Unpickler) -> bool:
    return True


def _mark(u: Unpickler) -> None:
    if len(u.marks) >= MAX_MARKS:
        raise u.fail("MARKs nested too deeply", "limit", expected=f"<= {MAX_MARKS}")
    u.marks.append(u.stack)
    u.stack = []


def _long(u: Unpickler, width: int) -> None:
    n = u.uint(width)
    if n > MAX_LONG_BYTES:
        raise u.fail("integer too long", "limit", expected=f"<= {MAX_LONG_BYTES} bytes", got=n)
    u.stack.append(int.from_bytes(u.take(n), "little", signed=True))


def _text(u: Unpickler, width: int) -> None:
    raw = u.take(u.uint(width))
    try:
        u.stack.append(raw.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        raise u.fail("string is not UTF-8") from None


def _tuple(u: Unpickler, n: int) -> None:
    if len(u.stack) < n:
        raise u.fail("stack underflow")
    items = tuple(u.stack[len(u.stack) - n :])
    del u.stack[len(u.stack) - n :]
    u.stack.append(items)


def _from_mark(u: Unpickler, make: Callable[[list[Any]], Any]) -> None:
    items = u.pop_mark()  # first: it swaps u.stack for the one below the MARK
    u.stack.append(make(items))


def _setitem(u: Unpickler) -> None:
    v = u.pop()
    k = u.pop()
    u.set_items(u.top(), [k, v])


def _setitems(u: Unpickler) -> None:
    items = u.pop_mark()
    u.set_items(u.top(), items)


def _append(u: Unpickler) -> None:
    v = u.pop()
    u.append_items(u.top(), [v])


def _appends(u: Unpickler) -> None:
    items = u.pop_mark()
    u.append_items(u.top(), items)


def _additems(u: Unpickler) -> None:
    items = u.pop_mark()
    u.add_items(u.top(), items)


def _frozenset(u: Unpickler) -> None:
    items = u.pop_mark()
    s = PickledSet()
    u.add_items(s, items)
    u.stack.append(s)


def _dict(u: Unpickler) -> None:
    items = u.pop_mark()
    d: dict[Any, Any] = {}
    u.set_items(d, items)
    u.stack.append(d)


def _global(u: Unpickler) -> None:
    text = bytes(u.data[u.pos : u.pos + 1026])
    module, sep, rest = text.partition(b"\n")
    name, sep2, _ = rest.partition(b"\n")
    if not sep or not sep2 or len(module) > 512 or len(name) > 512:
        if len(text) < 1026 and not sep2:
            raise u.ends("GLOBAL without two newline-ended names")
        raise u.fail("GLOBAL without two newline-ended names of at most 512 bytes")
    u.pos += len(module) + len(name) + 2
    u.push_global(module.decode("utf-8", "replace"), name.decode("utf-8", "replace"))


def _stack_global(u: Unpickler) -> None:
    name = u.pop()
    module = u.pop()
    if type(module) is not str or type(name) is not str:
        raise u.fail("STACK_GLOBAL names are not strings")
    u.push_global(module, name)


def _reduce(u: Unpickler) -> None:
    args = u.pop()
    func = u.pop()
    u.stack.append(u.reduce(func, args))


def _build(u: Unpickler) -> None:
    state = u.pop()
    obj = u.top()
    if not isinstance(obj, ODict) or not isinstance(state, dict):
        raise u.fail(
            f"BUILD on a {type(obj).__name__} refused (only an OrderedDict's attributes)",
            "unsupported",
        )


def _binpersid(u: Unpickler) -> None:
    u.stack.append(u.persistent(u.pop()))


def _pop(u: Unpickler) -> None:
    u.pop()


def _dup(u: Unpickler) -> None:
    u.stack.append(u.top())


def _pop_mark(u: Unpickler) -> None:
    u.pop_mark()


def _push(value: Callable[[], Any]) -> Callable[[Unpickler], None]:
    def run(u: Unpickler) -> None:
        u.stack.append(value())

    return run


def _fixed(fmt: str, n: int) -> Callable[[Unpickler], None]:
    unpack = struct.Struct(fmt).unpack

    def run(u: Unpickler) -> None:
        u.stack.append(unpack(u.take(n))[0])

    return run


def _bytes(width: int) -> Callable[[Unpickler], None]:
    def run(u: Unpickler) -> None:
        u.stack.append(bytes(u.take(u.uint(width))))

    return run


def _memoize(u: Unpickler) -> None:
    u.memo_put(len(u.memo))


_OPS: dict[int, Callable[[Unpickler], Any]] = {
    0x80: _proto, 0x95: _frame, ord("."): _stop, ord("("): _mark, ord("0"): _pop,
    ord("1"): _pop_mark, ord("2"): _dup,
    ord("N"): _push(lambda: None), 0x88: _push(lambda: True), 0x89: _push(lambda: False),
    ord("J"): _fixed("<i", 4), ord("K"): lambda u: u.stack.append(u.byte()),
    ord("M"): _fixed("<H", 2),
    ord("G"): _fixed(">d", 8),
    0x8A: lambda u: _long(u, 1), 0x8B: lambda u: _long(u, 4),
    0x8C: lambda u: _text(u, 1), ord("X"): lambda u: _text(u, 4), 0x8D: lambda u: _text(u, 8),
    ord("C"): _bytes(1), ord("B"): _bytes(4), 0x8E: _bytes(8), 0x96: _bytes(8),
    ord(")"): _push(tuple), ord("t"): lambda u: _from_mark(u, tuple),
    0x85: lambda u: _tuple(u, 1), 0x86: lambda u: _tuple(u, 2), 0x87: lambda u: _tuple(u, 3),
    ord("]"): _push(list), ord("l"): lambda u: _from_mark(u, list),
    ord("a"): _append, ord("e"): _appends,
    ord("}"): _push(dict), ord("s"): _setitem, ord("u"): _setitems,
    ord("d"): _dict,
    0x8F: _push(PickledSet), 0x90: _additems, 0x91: _frozenset,
    ord("q"): lambda u: u.memo_put(u.byte()), ord("r"): lambda u: u.memo_put(u.uint(4)),
    0x94: _memoize,
    ord("h"): lambda u: u.memo_get(u.byte()), ord("j"): lambda u: u.memo_get(u.uint(4)),
    ord("c"): _global, 0x93: _stack_global, ord("R"): _reduce, ord("b"): _build,
    ord("Q"): _binpersid,
}  # fmt: skip

#: opcodes refused by name, and why
_REFUSED = {
    ord("i"): "INST", ord("o"): "OBJ", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX",
    0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", ord("P"): "PERSID",
    0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
    ord("I"): "INT", ord("L"): "LONG", ord("F"): "FLOAT", ord("S"): "STRING",
    ord("T"): "BINSTRING", ord("U"): "SHORT_BINSTRING", ord("V"): "UNICODE",
    ord("g"): "GET", ord("p"): "PUT",
}  # fmt: skip
_BUILDS = "builds an object of a class the pickle names"
_WHY = {
    "INST": _BUILDS, "OBJ": _BUILDS, "NEWOBJ": _BUILDS, "NEWOBJ_EX": _BUILDS,
    "EXT1": "names a global through the copyreg extension registry",
    "EXT2": "names a global through the copyreg extension registry",
    "EXT4": "names a global through the copyreg extension registry",
    "PERSID": "text persistent ids are not what torch.save writes",
    "NEXT_BUFFER": "out-of-band buffers reach outside the file",
    "READONLY_BUFFER": "out-of-band buffers reach outside the file",
}  # fmt: skip
for _name in ("INT", "LONG", "FLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
              "GET", "PUT"):  # fmt: skip
    _WHY[_name] = "a protocol 0/1 text form torch.save never writes"
