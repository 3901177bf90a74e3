"""zTensor commands for the ``tenfold`` CLI: ``id`` (layout-independent content digest)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def cmd_id(args: argparse.Namespace) -> int:
    from ._content import content_digest

    print(f"{content_digest(args.file, args.algo)}  {args.file}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "id",
        help="content digest of a zTensor file (same for the same tensors however stored)",
    )
    p.add_argument("file", help="a .zt file of any generation (or a sharded v2 root)")
    p.add_argument(
        "--algo",
        choices=["sha256", "xxh3"],
        default="sha256",
        help="digest of the content (default sha256)",
    )
    p.set_defaults(func=cmd_id, inputs=("file",))
