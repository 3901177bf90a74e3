"""What the ``tenfold`` command and the formats' own subcommands share.

A format adds commands to the CLI through its ``cli`` hook (``register(subparsers)``, see
:mod:`tenfold.registry`); those modules import what they need from here, never from
:mod:`tenfold.cli`, which sits above the formats and discovers them through the registry.

What the front door does for a command (load any file, write any format) reaches a format's
command as ``args.front`` (a :class:`Front`, set by :func:`tenfold.cli.main`), so that no format
imports the front door either.

Exit status of every command: 0 ok, 1 the file is damaged or invalid, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from .bounds import empty_file
from .progress import human as human  # the one byte-size formatter (the CLI's name)

__all__ = [
    "UsageError",
    "Front",
    "check_input",
    "check_dir",
    "check_output",
    "human",
    "add_quiet",
    "add_json",
    "print_json",
    "inspect_row",
    "Schema",
    "note",
    "either",
    "VERIFY",
    "REPORT_SCHEMA",
    "reading",
    "failed_source",
    "count",
]


class UsageError(Exception):
    """A mistake on the command line (exit status 2), e.g. a missing input file."""


class Front(Protocol):
    """The front door's services lent to a format's commands (``args.front``)."""

    def load(self, path: str) -> dict[str, Any]:
        """The tensors of any file tenfold reads (``tenfold.load``)."""
        ...

    def write(self, path: str, tensors: Mapping[str, Any]) -> None:
        """Write ``tensors`` in the format ``path``'s suffix names (the rules of convert)."""
        ...


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


#: the note :func:`reading` adds to an exception (the path follows)
_NOTE = "tenfold: while reading "


@contextmanager
def reading(path: Any, *, unless: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Note ``path`` on a tenfold or OS error raised inside (not one of ``unless``), so that a
    command with several inputs says which one could not be read: :func:`failed_source` gives
    it back, and the CLI leads its message with it. The innermost ``reading`` wins: an error
    already noted keeps its file.

    ``unless`` leaves out the errors that are not the input's fault (a conversion that reads
    its source while it writes: :class:`~tenfold.errors.EncodeError`, the target's refusal).
    """
    from ..errors import TenfoldError

    try:
        yield
    except (TenfoldError, OSError) as exc:
        if not isinstance(exc, unless) and failed_source(exc) is None:
            exc.add_note(
                _NOTE + (os.fsdecode(path) if isinstance(path, (str, os.PathLike)) else str(path))
            )
        raise


def failed_source(exc: BaseException) -> str | None:
    """The input file :func:`reading` noted on ``exc``, or None."""
    for n in getattr(exc, "__notes__", ()):
        if isinstance(n, str) and n.startswith(_NOTE):
            return n[len(_NOTE) :]
    return None


def count(n: int, plural: str) -> str:
    """``n`` and the noun, singular for one.

    >>> count(1, "samples"), count(2, "samples"), count(0, "crash stems"), count(1, "entries")
    ('1 sample', '2 samples', '0 crash stems', '1 entry')
    """
    if n != 1:
        return f"{n} {plural}"
    if plural.endswith("ies"):
        return f"1 {plural[:-3]}y"
    return f"1 {plural[:-1] if plural.endswith('s') else plural}"


def check_input(path: str) -> None:
    """Refuse what cannot be an input file, before any reader opens it (a FIFO would block)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{path}: no such file") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise UsageError(f"{path}: is {kind}, not a regular file")
    if st.st_size == 0:
        raise empty_file(path)


def check_dir(path: str) -> None:
    """Refuse a path that is not an existing directory."""
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise UsageError(f"{path}: is not a directory")


def check_output(path: str) -> None:
    """Refuse an output path that is a directory or in a missing directory."""
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory; give a file name to write")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{path}: no such directory: {os.path.dirname(path) or parent}")


def add_quiet(p: argparse.ArgumentParser, help: str = "print nothing on success") -> None:  # noqa: A002
    """``-q`` / ``--quiet``: the same option, spelled the same, on every command."""
    p.add_argument("-q", "--quiet", action="store_true", help=help)


def add_json(p: argparse.ArgumentParser, schema: Schema | str) -> None:
    """``--json``: one JSON object on stdout. Given a :class:`Schema`, the command's help ends
    with it (:meth:`Schema.help`) and the parser keeps it (``p.get_default("json_schema")``),
    which the tests check every command's output against; given a name, the command's epilog
    must describe the object itself."""
    name = schema if isinstance(schema, str) else schema.name
    p.add_argument(
        "--json", action="store_true", help=f"print one JSON object (schema {name}; see below)"
    )
    if isinstance(schema, str):
        return
    p.set_defaults(json_schema=schema)
    if p.description and "\n" not in p.description:  # wrapped here: the help is raw below
        p.description = textwrap.fill(p.description, 79)
    p.epilog = (p.epilog + "\n\n" if p.epilog else "") + schema.help()
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def print_json(doc: Mapping[str, Any]) -> None:
    """``doc`` on stdout as indented JSON (what ``--json`` prints)."""
    print(json.dumps(doc, indent=1))


def inspect_row(
    name: str,
    dtype: str,
    shape: Any,
    nbytes: int,
    encoding: str,
    *,
    layout: str = "dense",
    checksum: Any = "-",
    offset: Any = "-",
) -> dict[str, Any]:
    """One row of ``tenfold inspect``'s table (a format's ``inspect``), its shape written as
    ``"2x3"`` (``"()"`` for a scalar).

    >>> inspect_row("w", "F32", (2, 3), 24, "raw", offset=128)["shape"]
    '2x3'
    """
    return {
        "name": name,
        "dtype": dtype,
        "shape": "x".join(map(str, shape)) or "()",
        "bytes": nbytes,
        "encoding": encoding,
        "layout": layout,
        "checksum": checksum,
        "offset": offset,
    }


# -- the JSON a command prints ------------------------------------------------------------------
@dataclass(frozen=True)
class Note:
    """A value's description with a word on what it means (:func:`note`)."""

    of: Any
    text: str


@dataclass(frozen=True)
class Either:
    """Any one of several descriptions (:func:`either`)."""

    options: tuple[Any, ...]


def note(of: Any, text: str) -> Note:
    """``of`` (a description, see :class:`Schema`), explained by ``text`` in the help."""
    return Note(of, text)


def either(*options: Any) -> Either:
    """A value matching any one of ``options`` (descriptions, see :class:`Schema`)."""
    return Either(options)


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "null": (type(None),),
}


class Schema:
    """The JSON object a command's ``--json`` prints. Its help text (:meth:`help`) and its
    check (:meth:`problems`) come from this one description, so they cannot drift apart.

    ``fields`` maps each key to its value's description: ``"str"``, ``"int"``, ``"number"``,
    ``"bool"``, ``"null"`` or ``"any"``, with a final ``?`` for "or null" (``"int?"``); a
    tuple: one of those JSON values; ``[d]``: a list of ``d``; a dict: an object with those
    keys (``"*"`` describes the value of any further key); :func:`either` of several;
    :func:`note` to explain one; another :class:`Schema`: an object of that schema. A key
    ending in ``?`` may be absent. Every object starts with ``schema``: the schema's name.

    >>> s = Schema("tenfold.demo/1", {"n": note("int", "how many"), "why?": "str?"})
    >>> print(s.help())
    --json prints one object (schema tenfold.demo/1):
      schema  "tenfold.demo/1"
      n       int: how many
      why?    str or null
      (a key marked ? may be absent)
    >>> s.problems({"schema": "tenfold.demo/1", "n": "2"})
    ["$.n: expected int, got '2'"]
    """

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        self.name = name
        self.fields: dict[str, Any] = {"schema": (name,), **fields}

    def help(self) -> str:
        """The lines the command's ``--help`` ends with."""
        lines = [f"--json prints one object (schema {self.name}):"]
        lines += _field_lines(self.fields, "  ")
        keys = _keys(self.fields)
        legend = [
            "a key marked ? may be absent" if any(k.endswith("?") for k in keys) else "",
            "* is any other key" if "*" in keys else "",
        ]
        if any(legend):
            lines.append(f"  ({'; '.join(t for t in legend if t)})")
        return "\n".join(lines)

    def problems(self, doc: object) -> list[str]:
        """How ``doc`` differs from the schema (``$.key[i]...: what``); empty when it matches."""
        out: list[str] = []
        _check(doc, self.fields, "$", out)
        return out

    def extend(self, name: str, fields: dict[str, Any]) -> Schema:
        """A schema named ``name`` with this one's fields and ``fields`` after them."""
        own = {k: v for k, v in self.fields.items() if k != "schema"}
        return Schema(name, own | fields)


def _keys(fields: dict[str, Any]) -> list[str]:
    """Every key of ``fields`` and of the objects nested in them."""
    out = list(fields)
    for d in fields.values():
        while isinstance(d, (Note, list)):
            d = d.of if isinstance(d, Note) else d[0]
        if isinstance(d, dict):
            out += _keys(d)
    return out


def _text(d: Any) -> tuple[str, dict[str, Any] | None]:
    """A description as one line of help, and the fields to list below it (an object's)."""
    if isinstance(d, Note):
        text, sub = _text(d.of)
        return f"{text}: {d.text}", sub
    if isinstance(d, str):
        return (d[:-1] + " or null" if d.endswith("?") else d), None
    if isinstance(d, tuple):
        return " | ".join(json.dumps(v) for v in d), None
    if isinstance(d, Schema):
        return f"object of schema {d.name}", None
    if isinstance(d, Either):
        return " or ".join(_text(o)[0] for o in d.options), None
    if isinstance(d, list):
        text, sub = _text(d[0])
        return ("list of objects" if text == "object" else f"list of {text}"), sub
    if set(d) == {"*"}:
        return f"object {{str: {_text(d['*'])[0]}}}", None
    return "object", d


def _field_lines(fields: dict[str, Any], indent: str) -> list[str]:
    width = max(len(k) for k in fields) + 2
    lines = []
    for key, d in fields.items():
        text, sub = _text(d)
        lines.append(f"{indent}{key:<{width}}{text}" + (":" if sub else ""))
        if sub:
            lines += _field_lines(sub, indent + "  ")
    return lines


def _check(v: object, d: Any, at: str, out: list[str]) -> None:
    if isinstance(d, Note):
        _check(v, d.of, at, out)
    elif isinstance(d, str):
        kind = d.rstrip("?")
        if (v is None and d.endswith("?")) or kind == "any":
            return
        if not isinstance(v, _TYPES[kind]) or (isinstance(v, bool) and kind != "bool"):
            out.append(f"{at}: expected {_text(d)[0]}, got {v!r}"[:200])
    elif isinstance(d, tuple):
        if not any(v == c and type(v) is type(c) for c in d):
            out.append(f"{at}: expected {_text(d)[0]}, got {v!r}"[:200])
    elif isinstance(d, Either):
        if all(_problems(v, o, at) for o in d.options):
            out.append(f"{at}: expected {_text(d)[0]}, got {v!r}"[:200])
    elif isinstance(d, Schema):
        _check(v, d.fields, at, out)
    elif isinstance(d, list):
        if not isinstance(v, list):
            out.append(f"{at}: expected a list, got {v!r}"[:200])
            return
        for i, x in enumerate(v):
            _check(x, d[0], f"{at}[{i}]", out)
    else:
        _check_object(v, d, at, out)


def _problems(v: object, d: Any, at: str) -> list[str]:
    out: list[str] = []
    _check(v, d, at, out)
    return out


def _check_object(v: object, d: dict[str, Any], at: str, out: list[str]) -> None:
    if not isinstance(v, dict):
        out.append(f"{at}: expected an object, got {v!r}"[:200])
        return
    named = {k.rstrip("?"): k for k in d if k != "*"}
    for name, key in named.items():
        if name in v:
            _check(v[name], d[key], f"{at}.{name}", out)
        elif not key.endswith("?"):
            out.append(f"{at}: no key {name!r}")
    for name in v.keys() - named.keys():
        if "*" in d:
            _check(v[name], d["*"], f"{at}.{name}", out)
        else:
            out.append(f"{at}: unexpected key {name!r}")


#: What every command that prints a verification report prints with ``--json``
#: (:meth:`tenfold.core.report.Report.to_json`).
VERIFY = Schema(
    "tenfold.verify/1",
    {
        "file": note("str", "the file checked"),
        "format": note("str", "its format"),
        "verdict": ("OK", "REPAIRABLE", "DAMAGED"),
        "ok": note("bool", "the file is as it was written"),
        "intact": note("bool", "readable, perhaps through error correction"),
        "exit_code": (0, 1),
        "summary": {"*": "any"},
        "findings": [
            {
                "object": "str",
                "status": ("ok", "info", "warning", "repairable", "repaired", "error"),
                "message": "str",
                "offset": "int?",
            }
        ],
        "unverified": note(["str"], "objects with no checksum"),
        "repair": note("str?", "the command that fixes the file"),
    },
)

#: :data:`VERIFY`'s help (the epilog of a command whose report it is)
REPORT_SCHEMA = VERIFY.help()
