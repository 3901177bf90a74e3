"""zTensor commands for the ``tenfold`` CLI: ``id`` (layout-independent content digest)."""

from __future__ import annotations

import argparse
from typing import Any

from ...core.cli_support import Schema, add_json, note, print_json

__all__ = ["register"]


#: ``id --json``
ID = Schema(
    "tenfold.id/1",
    {
        "file": "str",
        "algo": ("sha256", "xxh3"),
        "digest": note("str", "hex, the same for the same tensors however stored"),
    },
)


def cmd_id(args: argparse.Namespace) -> int:
    from ._content import content_digest

    digest = content_digest(args.file, args.algo)
    if args.json:
        print_json({"schema": ID.name, "file": args.file, "algo": args.algo, "digest": digest})
    else:
        print(f"{digest}  {args.file}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "id",
        help="content digest of a zTensor file (same for the same tensors however stored)",
        description="Print the content digest of FILE (zTensor v2 spec 6.4: each tensor's "
        "name, shape, layout, attributes, dtypes and decoded bytes), the same however the "
        "tensors are stored (generation, encoding, offsets, shards), then the file name.",
    )
    p.add_argument("file", help="a .zt file of any generation (or a sharded v2 root)")
    p.add_argument(
        "--algo",
        choices=["sha256", "xxh3"],
        default="sha256",
        help="digest of the content (default sha256)",
    )
    add_json(p, ID)
    p.set_defaults(func=cmd_id, inputs=("file",))


def metadata(source: Any) -> dict[str, Any]:
    """The file metadata ``tenfold inspect`` lists (the ``metadata`` hook): what
    ``tenfold.save(..., metadata=)`` stored (0.1.0: the first tensor's ``__metadata__`` map;
    v1 / v2: the manifest's file attributes)."""
    from . import open as zt_open

    with zt_open(source) as r:
        return dict(r.metadata)
