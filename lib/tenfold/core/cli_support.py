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
from collections.abc import Mapping
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
    "REPORT_SCHEMA",
]

#: The epilog of every command that prints a verification report (``--json``).
REPORT_SCHEMA = """\
--json prints one object (schema tenfold.verify/1):
  {schema: "tenfold.verify/1", file, format, verdict ("OK", "REPAIRABLE" or "DAMAGED"),
   ok (bool: as written), intact (bool: readable, perhaps through error correction),
   exit_code (0 or 1), summary: {key: value}, findings: [{object, status ("ok", "info",
   "warning", "repairable", "repaired" or "error"), message, offset (int or null)}],
   unverified: [objects with no checksum], repair (the command that fixes it, or null)}"""


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


def add_json(p: argparse.ArgumentParser, schema: str) -> None:
    """``--json``: one JSON object on stdout, of the ``schema`` the command's help describes."""
    p.add_argument(
        "--json", action="store_true", help=f"print one JSON object ({schema}; see below)"
    )


def print_json(doc: Mapping[str, Any]) -> None:
    """``doc`` on stdout as indented JSON (what ``--json`` prints)."""
    print(json.dumps(doc, indent=1))
