"""``tenfold repair FILE``: rewrite a FOLD file with every correctable chunk corrected."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ...core.cli_support import VERIFY, note

#: ``repair --json``: the verification report of the file repaired, and where it went
REPAIR = VERIFY.extend("tenfold.repair/1", {"output": note("str", "the file written")})


def _default_output(path: str) -> str:
    stem, ext = os.path.splitext(path)
    return f"{stem}.repaired{ext or '.fold'}"


def cmd_repair(args: argparse.Namespace) -> int:
    from ...core.cli_support import UsageError, check_output, print_json
    from . import repair

    if args.in_place and args.output:
        raise UsageError("repair: use either --output or --in-place")
    if not args.in_place and not args.output:
        check_output(_default_output(args.file))
    dst = args.file if args.in_place else (args.output or _default_output(args.file))
    report = repair(args.file, dst, hmac_key=args.hmac_key)
    if args.json:
        print_json(report.to_json() | {"schema": REPAIR.name, "output": dst})
    elif not (args.quiet and report.exit_code == 0):
        print(report.format(verbose=not args.quiet))
        print(f"wrote {dst}")
    return report.exit_code


def register(subparsers: Any) -> None:
    from ...core.cli_support import add_json, add_quiet

    p = subparsers.add_parser(
        "repair",
        help="FOLD: write a copy with every correctable chunk corrected",
        description="Correct FOLD chunks with their Reed-Solomon parity, rewrite binary chunk "
        "headers from the index and recompute stale parity. Exit 1 when some chunk "
        "could not be repaired.",
    )
    p.add_argument("file", help="the FOLD / MIND file to repair")
    p.add_argument(
        "-o",
        "--output",
        help="where to write (default: FILE with .repaired before its suffix: "
        "m.fold -> m.repaired.fold, m.mind -> m.repaired.mind)",
    )
    p.add_argument("--in-place", action="store_true", help="replace FILE (atomically)")
    p.add_argument("--hmac-key", help="key of hmac-sha256: digests")
    add_quiet(p, "print nothing on success; else only the problems")
    add_json(p, REPAIR)
    p.set_defaults(func=cmd_repair, inputs=("file",), outputs=("output",))


def metadata(source: Any) -> dict[str, Any]:
    """The file metadata ``tenfold inspect`` lists (the ``metadata`` hook): the index's
    metadata without the keys FOLD keeps for itself (chunk hashes, manifest hash)."""
    from ._spec import INTERNAL_METADATA
    from .reader import Reader

    with Reader(source) as r:
        return {k: v for k, v in r.metadata.items() if k not in INTERNAL_METADATA}
