"""The exception hierarchy of tenfold.

Every error a reader, writer or verifier raises on bad input is one of these. Each is also a
builtin exception (``ValueError``, ``EOFError``) so that code written against the standard library
keeps working::

    TenfoldError(Exception)
      FormatError(TenfoldError, ValueError)      bad magic, header, enum value, layout
        TruncatedError(FormatError, EOFError)    file ends early
        UnsupportedError(FormatError)            unknown version, dtype or feature
        LimitError(FormatError)                  a size or count above the configured limit
      IntegrityError(TenfoldError, ValueError)   checksum / hash / signature / HMAC mismatch
        UncorrectableError(IntegrityError)       ECC could not repair
      EncodeError(TenfoldError, ValueError)      a writer was given what the format cannot hold
      LockedError(TenfoldError, TimeoutError)    another writer holds the file's lock
      MissingTensorError(TenfoldError, KeyError) a name the file does not hold
      ClosedError(TenfoldError, ValueError)      a handle used after it was closed
      SliceError(TenfoldError, IndexError, ValueError)
                                                 an index safetensors' slicing rules refuse

    SafetensorError(Exception)                   what code written for safetensors catches:
                                                 a base of FormatError, IntegrityError,
                                                 EncodeError and the last three above

    UnverifiedRemoteWarning(UserWarning)         a remote object with no ETag or Last-Modified

Messages follow one form: ``"<format>: <object> at offset 0x1f8: <field> mismatch; expected
36, got 32"`` (lower case, no final period), with the rule, where a format names one, at the end
in brackets. The parts are also attributes of the exception, so code that handles an error reads
them instead of parsing the message::

    >>> exc = FormatError(fmt="oinf", obj="tensor 'w1'", offset=0x1F8, field="data_nbytes",
    ...                   expected=36, got=32)
    >>> str(exc)
    "oinf: tensor 'w1' at offset 0x1f8: data_nbytes mismatch; expected 36, got 32"
    >>> exc.obj, exc.offset, exc.expected, exc.got
    ("tensor 'w1'", 504, 36, 32)

``fmt``, ``obj``, ``field``, ``offset``, ``expected``, ``got``, ``detail``, ``rule``, ``line`` and
``lines`` are keyword-only and default to None. A message given positionally is kept as written
(the form older code uses), with the attributes it came with when it was built by
:func:`describe`. The exceptions pickle and copy with their attributes (they cross process
boundaries in DataLoader workers).

Code that raises uses its format's bound factory (:func:`factory`), so every error names the
format and the object it is about::

    >>> E = factory("oinf")
    >>> exc = E.format("tensor 'w1'", offset=0x1F8, field="data_nbytes", expected=36, got=32)
    >>> type(exc).__name__, str(exc)
    ('FormatError', "oinf: tensor 'w1' at offset 0x1f8: data_nbytes mismatch; expected 36, got 32")
"""

from __future__ import annotations

from typing import Any, TypedDict, TypeVar, Unpack

__all__ = [
    "TenfoldError",
    "SafetensorError",
    "FormatError",
    "TruncatedError",
    "UnsupportedError",
    "LimitError",
    "IntegrityError",
    "UncorrectableError",
    "EncodeError",
    "LockedError",
    "MissingTensorError",
    "ClosedError",
    "SliceError",
    "UnverifiedRemoteWarning",
    "describe",
    "factory",
    "ErrorFactory",
    "Message",
    "FIELDS",
]

#: The structured parts every :class:`TenfoldError` carries (None where they do not apply).
FIELDS = ("fmt", "obj", "field", "offset", "expected", "got", "detail", "rule", "line", "lines")


class Message(str):
    """A message built by :func:`describe`: the text, with its parts as attributes.

    Passing one to an exception class gives the exception those attributes, which is how the
    ``raise FormatError(describe(...))`` form carries them.
    """

    __slots__ = ("parts",)
    parts: dict[str, Any]

    def __new__(cls, text: str, parts: dict[str, Any]) -> Message:
        self = super().__new__(cls, text)
        self.parts = parts
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Message, (str(self), self.parts))


class SafetensorError(Exception):
    """The class a ``safetensors`` user catches (``safetensors.SafetensorError``), as a base of
    the tenfold errors raised where safetensors raises its own: a malformed file
    (:class:`FormatError`, :class:`IntegrityError`), what a writer cannot store
    (:class:`EncodeError`), a missing tensor (:class:`MissingTensorError`), a closed handle
    (:class:`ClosedError`) and a refused slice (:class:`SliceError`). It is a mixin: those
    errors stay :class:`TenfoldError` and their builtin class, so ``except SafetensorError``,
    ``except TenfoldError`` and ``except ValueError`` all catch a malformed file."""


class TenfoldError(Exception):
    """Base class of every tenfold error; see the module docstring for the attributes."""

    fmt: str | None
    obj: str | None
    field: str | None
    offset: int | None
    expected: Any
    got: Any
    detail: str | None
    rule: str | None
    line: int | None
    lines: tuple[int, int] | None

    def __init__(
        self,
        *args: object,
        fmt: str | None = None,
        obj: str | None = None,
        field: str | None = None,
        offset: int | None = None,
        expected: object = None,
        got: object = None,
        detail: str | None = None,
        rule: str | None = None,
        line: int | None = None,
        lines: tuple[int, int] | None = None,
    ) -> None:
        given = {
            "fmt": fmt,
            "obj": obj,
            "field": field,
            "offset": offset,
            "expected": expected,
            "got": got,
            "detail": detail,
            "rule": rule,
            "line": line,
            "lines": lines,
        }
        if line is not None and lines is None:
            given["lines"] = (line, line)
        elif lines is not None and line is None:
            given["line"] = lines[0]
        if args:
            first = args[0]
            if len(args) == 1 and isinstance(first, Message):
                given = {
                    **given,
                    **first.parts,
                    **{k: v for k, v in given.items() if v is not None},
                }
                args = (str(first),)
            super().__init__(*args)
        else:
            super().__init__(_render(given))
        self.__dict__.update(given)

    def fields(self) -> dict[str, Any]:
        """The structured parts as a dict (every name in :data:`FIELDS`)."""
        return {k: getattr(self, k, None) for k in FIELDS}

    def evolve(self, **changes: Any) -> TenfoldError:
        """A new exception of the same class with some parts changed and the message rebuilt."""
        return type(self)(**{**self.fields(), **changes})


class FormatError(TenfoldError, ValueError, SafetensorError):
    """The bytes do not follow the format (bad magic, header, enum value or layout)."""


class TruncatedError(FormatError, EOFError):
    """The file ends before a structure it announces."""


class UnsupportedError(FormatError):
    """A version, dtype, encoding or feature this release does not implement."""


class LimitError(FormatError):
    """A size or count above the configured limit (see :class:`tenfold.core.Limits`)."""


class IntegrityError(TenfoldError, ValueError, SafetensorError):
    """A checksum, hash, signature or HMAC does not match."""


class UncorrectableError(IntegrityError):
    """Error correction could not repair the damage."""


class EncodeError(TenfoldError, ValueError, SafetensorError):
    """A writer was given something the format cannot hold."""


class LockedError(TenfoldError, TimeoutError):
    """A file changed in place (e.g. a zTensor append) is locked by another writer and stayed
    so for the time allowed, or the calling thread holds its lock already
    (see :mod:`tenfold.core.locking`)."""


class MissingTensorError(TenfoldError, KeyError, SafetensorError):
    """A tensor name the file does not hold (a ``KeyError``, as a ``Mapping`` raises)."""

    def __str__(self) -> str:  # the message as written, not quoted as KeyError quotes its key
        return Exception.__str__(self)


class ClosedError(TenfoldError, ValueError, SafetensorError):
    """A handle used after it was closed (a ``ValueError``, as a closed file raises)."""


class SliceError(TenfoldError, IndexError, ValueError, SafetensorError):
    """An index refused by the slicing rules of ``safe_open(...).get_slice(name)[...]``
    (see :class:`tenfold.interop.frameworks.Slice`): a bound outside its axis, a step that is
    not positive, an index of a kind other than an integer, a slice, ``...`` or ``[]``. Also a
    ``ValueError`` (as NumPy's ``AxisError`` is both), since that is what torch, whose rules
    safetensors follows for PyTorch slices, raises for a step below 1."""


class UnverifiedRemoteWarning(UserWarning):
    """A remote object was opened whose server gives nothing (no ETag, no Last-Modified) to
    tell one version from another, so a change while it is read can be detected only by its
    size. Turn it into an error with ``warnings.simplefilter("error", UnverifiedRemoteWarning)``
    to refuse such objects."""


_E = TypeVar("_E", bound=TenfoldError)


class Parts(TypedDict, total=False):
    """The keywords of :class:`ErrorFactory`'s methods (all optional)."""

    field: str | None
    offset: int | None
    expected: object
    got: object
    detail: str | None
    rule: str | None
    line: int | None
    lines: tuple[int, int] | None
    message: str | None


class ErrorFactory:
    """The errors of one format: each method returns (the caller raises) an exception of one
    class whose ``fmt`` is the format's and whose ``obj`` names what is wrong.

    Make one per format with :func:`factory`. The keywords are the attributes of
    :class:`TenfoldError` (see the module docstring); ``message``, where given, is the text
    kept as written (for a form :func:`describe` cannot build) and the parts are attached to
    it. ``obj`` may be None only with ``line``/``lines`` (the object of a line-based format).

    >>> E = factory("zt")
    >>> raise E.truncated("tensor 'w'", offset=0x40, detail="data ends early")
    Traceback (most recent call last):
    ...
    tenfold.errors.TruncatedError: zt: tensor 'w' at offset 0x40: data ends early
    >>> E.limit("index", field="entries", expected="<= 10", got=12).rule is None
    True
    """

    __slots__ = ("fmt",)

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def __repr__(self) -> str:
        return f"factory({self.fmt!r})"

    def __call__(
        self,
        cls: type[_E],
        obj: str | None,
        *,
        field: str | None = None,
        offset: int | None = None,
        expected: object = None,
        got: object = None,
        detail: str | None = None,
        rule: str | None = None,
        line: int | None = None,
        lines: tuple[int, int] | None = None,
        message: str | None = None,
    ) -> _E:
        """An exception of ``cls`` (any :class:`TenfoldError` class) for this format."""
        parts: dict[str, Any] = {
            "fmt": self.fmt,
            "obj": obj,
            "field": field,
            "offset": offset,
            "expected": expected,
            "got": got,
            "detail": detail,
            "rule": rule,
            "line": line,
            "lines": lines,
        }
        if message is None:
            return cls(**parts)
        return cls(message, **parts)

    def recast(
        self,
        cls: type[_E],
        exc: BaseException,
        obj: str | None = None,
        *,
        message: str | None = None,
    ) -> _E:
        """``exc`` as an exception of ``cls``: its message (or ``message``) and, where it is a
        :class:`TenfoldError`, its parts; the format and ``obj`` fill the parts it lacks.

        >>> inner = factory("zt").format("tensor 'w'", field="name", detail="empty name")
        >>> outer = factory("zt").recast(EncodeError, inner)
        >>> type(outer).__name__, str(outer), outer.field
        ('EncodeError', "zt: tensor 'w': name: empty name", 'name')
        """
        parts: dict[str, Any] = {}
        if isinstance(exc, TenfoldError):
            parts = {k: v for k, v in exc.fields().items() if v is not None}
        parts.setdefault("fmt", self.fmt)
        parts.setdefault("obj", obj)
        return cls(str(exc) if message is None else message, **parts)

    def format(self, obj: str | None, **kw: Unpack[Parts]) -> FormatError:
        """A :class:`FormatError`: bad magic, header, enum value or layout."""
        return self(FormatError, obj, **kw)

    def truncated(self, obj: str | None, **kw: Unpack[Parts]) -> TruncatedError:
        """A :class:`TruncatedError`: the file ends before a structure it announces."""
        return self(TruncatedError, obj, **kw)

    def unsupported(self, obj: str | None, **kw: Unpack[Parts]) -> UnsupportedError:
        """An :class:`UnsupportedError`: a version, dtype or feature not implemented."""
        return self(UnsupportedError, obj, **kw)

    def limit(self, obj: str | None, **kw: Unpack[Parts]) -> LimitError:
        """A :class:`LimitError`: a size or count above the configured limit."""
        return self(LimitError, obj, **kw)

    def integrity(self, obj: str | None, **kw: Unpack[Parts]) -> IntegrityError:
        """An :class:`IntegrityError`: a checksum, hash, signature or HMAC mismatch."""
        return self(IntegrityError, obj, **kw)

    def uncorrectable(self, obj: str | None, **kw: Unpack[Parts]) -> UncorrectableError:
        """An :class:`UncorrectableError`: error correction could not repair the damage."""
        return self(UncorrectableError, obj, **kw)

    def encode(self, obj: str | None, **kw: Unpack[Parts]) -> EncodeError:
        """An :class:`EncodeError`: a writer was given what the format cannot hold."""
        return self(EncodeError, obj, **kw)

    def name_not_str(self, what: str, name: object) -> EncodeError:
        """The :class:`EncodeError` of every writer for an entry name that is not a ``str``
        (``what``: ``"tensor"``, ``"array"``...).

        >>> str(factory("npz").name_not_str("array", 1))
        'npz: array 1: name: not a string; expected str, got int'
        """
        return self.encode(
            f"{what} {name!r}",
            field="name",
            detail="not a string",
            expected="str",
            got=type(name).__name__,
        )

    def locked(self, obj: str | None, **kw: Unpack[Parts]) -> LockedError:
        """A :class:`LockedError`: another writer holds the file's lock."""
        return self(LockedError, obj, **kw)


def factory(fmt: str) -> ErrorFactory:
    """The bound error factory of format ``fmt`` (``E = factory(FMT)``; ``raise E.format(...)``).

    >>> str(factory("fold").encode("chunk 'META'", detail="payload too large"))
    "fold: chunk 'META': payload too large"
    """
    return ErrorFactory(fmt)


def describe(
    fmt: str,
    what: str,
    *,
    offset: int | None = None,
    field: str | None = None,
    expected: object = None,
    got: object = None,
    detail: str | None = None,
) -> Message:
    """Build a message in tenfold's form (a ``str`` that also carries its parts).

    >>> describe("zt", "tensor 'w'", offset=0x40, field="size", expected=36, got=32)
    "zt: tensor 'w' at offset 0x40: size mismatch; expected 36, got 32"
    >>> describe("zt", "index", detail="not a CBOR array")
    'zt: index: not a CBOR array'
    """
    parts = {
        "fmt": fmt,
        "obj": what,
        "field": field,
        "offset": offset,
        "expected": expected,
        "got": got,
        "detail": detail,
    }
    return Message(_render(parts), parts)


def _render(p: dict[str, Any]) -> str:
    obj = p.get("obj")
    lines = p.get("lines")
    if obj is None and lines is not None:
        first, last = lines
        obj = f"line {first}" if last == first else f"lines {first}-{last}"
    fmt = p.get("fmt")
    head = ": ".join(str(x) for x in (fmt, obj) if x is not None)
    offset = p.get("offset")
    if offset is not None:
        head += f" at offset {offset:#x}"
    field, detail = p.get("field"), p.get("detail")
    tail = None
    if field is not None:
        tail = f"{field} mismatch" if detail is None else f"{field}: {detail}"
    elif detail is not None:
        tail = detail
    msg = head if tail is None else (f"{head}: {tail}" if head else tail)
    expected, got = p.get("expected"), p.get("got")
    if expected is not None or got is not None:
        msg += f"; expected {_show(expected)}, got {_show(got)}"
    rule = p.get("rule")
    if rule is not None:
        msg += f" [{rule}]"
    return msg


def _show(value: object) -> str:
    # Text is shown as written (it is often a constraint such as "<= 100"); other values by repr.
    return value if isinstance(value, str) else repr(value)
