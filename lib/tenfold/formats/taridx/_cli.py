"""``tenfold index``: build and check TARIDX indexes of tar-shard splits.

Every subcommand takes the split the same way, ``ROOT --split NAME [--index PATH]`` (the index
defaults to ``ROOT/NAME.taridx``); ``lookup`` also accepts the index file itself as ROOT::

    tenfold index build ROOT --split NAME [--index PATH] [--workers N] [-q] [--no-fsync]
                        [--on-bad-name error|skip]
    tenfold index check ROOT --split NAME [--index PATH]     exit 1 when shards changed
    tenfold index lookup ROOT --split NAME STEM...           sample number and rows of stems
    tenfold index lookup INDEX STEM...
    tenfold index export ROOT --split NAME [--index PATH] [--dali [DIR]] [--wids [PATH]]
                         [--dali-version v1.2|v1.1] [--url-prefix URL] [--name NAME]
                         [--no-fsync]                   DALI .idx files and a wids shard list
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ...core.cli_support import Schema, add_json, add_quiet, count, note, print_json

#: what the index commands print with ``--json``
BUILD = Schema(
    "tenfold.index.build/1",
    {
        "index": note("str", "the index written"),
        "rows": note("int", "members indexed"),
        "samples": "int",
        "ext": note(["str"], "the member extensions, by id"),
        "crash_stems": "int",
        "contiguous": note("bool", "every sample's members are adjacent"),
        "skipped": [{"shard": "str", "offset": "int", "member": "str", "why": "str"}],
        "seconds": "number",
    },
)
CHECK = Schema(
    "tenfold.index.check/1",
    {"index": "str", "up_to_date": "bool", "stale": [{"shard": "str", "why": "str"}]},
)
LOOKUP = Schema(
    "tenfold.index.lookup/1",
    {
        "index": "str",
        "found": note("bool", "every stem was found"),
        "stems": [
            {
                "stem": "str",
                "sample": note("int?", "null when not found"),
                "members": [{"ext": "str", "fid": "int", "offset": "int", "size": "int"}],
            }
        ],
    },
)
EXPORT = Schema(
    "tenfold.index.export/1",
    {
        "index": "str",
        "dali": note(["str"], "the DALI .idx files written"),
        "dali_version": ("v1.2", "v1.1"),
        "wids": note("str?", "the wids shard list written"),
        "seconds": "number",
    },
)


class _FoldAlias(argparse.Action):
    """``--fold``: the old name of ``--split`` (deprecated, said on stderr)."""

    def __call__(
        self, parser: Any, ns: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        print(
            "tenfold index: --fold is deprecated; use --split "
            "(--fold will be removed in the next release)",
            file=sys.stderr,
        )
        ns.split = values


def _split_option(p: Any, help: str, required: bool = True) -> None:
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--split", help=help)
    g.add_argument("--fold", dest="split", action=_FoldAlias, help=argparse.SUPPRESS)


def cmd_build(args: argparse.Namespace) -> int:
    from .build import build

    t = time.perf_counter()
    skipped: list[tuple[str, int, bytes, str]] = []
    path = build(
        args.root,
        args.split,
        out=args.index,
        workers=args.workers,
        show_progress=False if args.no_progress or args.quiet else None,
        fsync=not args.no_fsync,
        on_bad_name=args.on_bad_name,
        skipped=skipped,
    )
    if args.json:
        return _build_json(path, skipped, time.perf_counter() - t)
    for shard, off, name, why in skipped:
        print(f"skipped: {shard} at offset {off:#x}: member {name!r}: {why}")
    if args.quiet:
        return 0
    from .reader import Index

    with Index.open(path) as idx:
        print(
            f"{path}: {count(idx.n_rows, 'rows')}, {count(idx.n_stems, 'samples')}, "
            f"ext {idx.ext}, {count(len(idx.crash), 'crash stems')}, "
            f"{'contiguous' if idx.is_contiguous else 'interleaved'} "
            f"({time.perf_counter() - t:.3f} s)"
        )
    return 0


def _build_json(path: Any, skipped: list[tuple[str, int, bytes, str]], secs: float) -> int:
    from .reader import Index

    with Index.open(path) as idx:
        print_json(
            {
                "schema": BUILD.name,
                "index": str(path),
                "rows": int(idx.n_rows),
                "samples": int(idx.n_stems),
                "ext": [str(e) for e in idx.ext],
                "crash_stems": len(idx.crash),
                "contiguous": bool(idx.is_contiguous),
                "skipped": [
                    {
                        "shard": str(shard),
                        "offset": int(off),
                        "why": why,
                        "member": name.decode("utf-8", "backslashreplace"),
                    }  # fmt: skip
                    for shard, off, name, why in skipped
                ],
                "seconds": round(secs, 3),
            }
        )
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .build import stale_shards
    from .reader import Index

    path = args.index or os.path.join(args.root, f"{args.split}.taridx")
    with Index.open(path) as idx:
        stale = stale_shards(idx, args.root, args.split, sample=args.sample)
    if args.json:
        print_json(
            {
                "schema": CHECK.name,
                "index": path,
                "up_to_date": not stale,
                "stale": [{"shard": n, "why": w} for n, w in stale.items()],
            }
        )
        return 1 if stale else 0
    for name, why in stale.items():
        print(f"stale: {name}: {why}")
    print(f"{path}: {'up to date' if not stale else f'{len(stale)} shard(s) changed'}")
    return 1 if stale else 0


def cmd_lookup(args: argparse.Namespace) -> int:
    from ...core.cli_support import UsageError, check_input
    from .reader import Index

    if args.index:
        path = args.index
    elif os.path.isdir(args.root):
        if not args.split:
            raise UsageError(
                f"{args.root}: is a directory; give --split NAME (or the .taridx file)"
            )
        path = os.path.join(args.root, f"{args.split}.taridx")
    else:
        path = args.root
    check_input(path)
    with Index.open(path) as idx:
        found = idx.lookup(args.stems)
        stems = []
        for stem, i in zip(args.stems, found.tolist(), strict=True):
            rows = idx.rows[idx.samples.rows_of(i)] if i >= 0 else []
            members = [
                {"ext": str(idx.ext[int(r["extid"])])}
                | {k: int(r[k]) for k in ("fid", "offset", "size")}
                for r in rows
            ]
            stems.append({"stem": stem, "sample": i if i >= 0 else None, "members": members})
    ok = bool((found >= 0).all())
    if args.json:
        print_json({"schema": LOOKUP.name, "index": str(path), "found": ok, "stems": stems})
    for s in stems if not args.json else []:
        if s["sample"] is None:
            print(f"{s['stem']}: not found")
            continue
        parts = [f"{m['ext']}@fid{m['fid']}+{m['offset']}[{m['size']}]" for m in s["members"]]
        print(f"{s['stem']}: sample {s['sample']}: " + " ".join(parts))
    return 0 if ok else 1


def cmd_export(args: argparse.Namespace) -> int:
    from ...core.cli_support import UsageError, check_dir
    from .export import export

    both = args.dali is None and args.wids is None
    dali = args.dali if args.dali else (args.root if both or args.dali == "" else None)
    wids = args.wids if args.wids else None
    if both or args.wids == "":
        wids = os.path.join(args.root, f"{args.split}.wids.json")
    index = args.index or os.path.join(args.root, f"{args.split}.taridx")
    if "://" not in index and not os.path.exists(index):
        raise UsageError(
            f"{index}: no such index; build it first: "
            f"tenfold index build {args.root} --split {args.split}"
        )
    if (
        dali is not None
        and not os.path.exists(dali)
        and os.path.isdir(os.path.dirname(os.path.abspath(dali)))
    ):
        os.mkdir(dali)  # the DALI index folder, like an output file: made when its parent exists
    if dali is not None:
        check_dir(dali)
    if wids is not None and os.path.isdir(wids):
        raise UsageError(f"{wids}: is a directory; give the shard list's file name")
    t = time.perf_counter()
    paths, doc = export(
        args.root,
        args.split,
        index=args.index,
        dali=dali,
        wids=wids,
        version=args.dali_version,
        name=args.name,
        url_prefix=args.url_prefix,
        fsync=not args.no_fsync,
    )
    dt = time.perf_counter() - t
    if args.json:
        wids_out = None if doc is None else str(doc)
        print_json({"schema": EXPORT.name, "index": str(index), "dali": [str(p) for p in paths],
                    "dali_version": args.dali_version, "wids": wids_out,
                    "seconds": round(dt, 3)})  # fmt: skip
        return 0
    if paths:
        print(f"dali: {len(paths)} index file(s) {args.dali_version} in {dali}")
    if doc is not None:
        print(f"wids: {doc}")
    print(f"exported in {dt:.3f} s")
    return 0


def register(subparsers: Any) -> None:
    """Add ``tenfold index`` and its subcommands."""
    p = subparsers.add_parser(
        "index",
        help="build / check TARIDX indexes of tar-shard splits",
        description="Build, check, query and export the TARIDX index of a split of tar "
        "shards ROOT/<split>_<id>.tar (the index: ROOT/<split>.taridx).",
    )
    sub = p.add_subparsers(dest="index_command", required=True)
    _add_build(sub)
    _add_check(sub)
    _add_lookup(sub)
    _add_export(sub)


def _add_build(sub: Any) -> None:
    b = sub.add_parser(
        "build",
        help="scan ROOT/<split>_<id>.tar and write ROOT/<split>.taridx",
        description="Scan the tar shards of a split (member headers only) and write its "
        "TARIDX index atomically.",
    )
    b.add_argument("root", help="directory holding the shards <split>_<id>.tar")
    _split_option(b, "split name (the shards' common prefix)")
    b.add_argument(
        "--index", "--out", dest="index", help="index path (default ROOT/<split>.taridx)"
    )
    b.add_argument("--workers", type=int, help="threads scanning shards (default: auto)")
    add_quiet(b, "no progress bar, no summary line (skipped members are still listed)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument(
        "--no-fsync",
        action="store_true",
        help="skip the fsyncs (still atomic, not durable across a power loss)",
    )
    b.add_argument(
        "--on-bad-name",
        choices=("error", "skip"),
        default="error",
        help="a member whose basename holds a newline cannot be indexed: fail "
        "(default) or leave it out",
    )
    add_json(b, BUILD)
    b.set_defaults(func=cmd_build, dirs=("root",), outputs=("index",))


def _add_check(sub: Any) -> None:
    c = sub.add_parser(
        "check",
        help="say which shards changed since the index was built",
        description="Compare each shard with what the index recorded (size, time, a sample "
        "of member headers re-read). Exit 1 when a shard changed.",
    )
    c.add_argument("root", help="directory holding the shards <split>_<id>.tar")
    _split_option(c, "split name (the shards' common prefix)")
    c.add_argument("--index", help="index path (default ROOT/<split>.taridx)")
    c.add_argument("--sample", type=int, default=8, help="headers re-read per shard")
    add_json(c, CHECK)
    c.set_defaults(func=cmd_check, dirs=("root",), inputs=("index",))


def _add_lookup(sub: Any) -> None:
    q = sub.add_parser(
        "lookup",
        help="find samples by stem",
        description="Print the sample number and the member rows (extension, shard, offset, "
        "size) of each STEM. Exit 1 when a stem is not found.",
    )
    q.add_argument(
        "root",
        metavar="ROOT|INDEX",
        help="shard directory (with --split) or the .taridx file itself",
    )
    _split_option(q, "split name: the index is ROOT/<split>.taridx", required=False)
    q.add_argument("--index", help="index path (overrides ROOT/--split)")
    q.add_argument("stems", nargs="+", help="sample stems to look up")
    add_json(q, LOOKUP)
    q.set_defaults(func=cmd_lookup)


def _add_export(sub: Any) -> None:
    e = sub.add_parser(
        "export",
        help="write DALI's per-shard .idx files and a wids shard list from the index",
        description="Write indexes for other loaders from the TARIDX index (only member "
        "headers are read from the shards): DALI's wds2idx files <shard stem>.idx (for "
        "fn.readers.webdataset index_paths) and a wids shard-list JSON (for "
        "wids.ShardListDataset). With neither --dali nor --wids, both are written beside "
        "the shards.",
    )
    e.add_argument("root", help="directory holding the shards <split>_<id>.tar")
    _split_option(e, "split name (the shards' common prefix)")
    e.add_argument("--index", help="index path (default ROOT/<split>.taridx)")
    e.add_argument(
        "--dali",
        nargs="?",
        const="",
        metavar="DIR",
        help="write the DALI .idx files (into DIR; default ROOT)",
    )
    e.add_argument(
        "--wids",
        nargs="?",
        const="",
        metavar="PATH",
        help="write the wids shard list (to PATH; default ROOT/<split>.wids.json)",
    )
    e.add_argument(
        "--dali-version",
        choices=("v1.2", "v1.1"),
        default="v1.2",
        help="v1.2 (default) lists member names; v1.1 leaves them out",
    )
    e.add_argument("--url-prefix", help="wids shard URLs as PREFIX/<shard> (default: relative)")
    e.add_argument("--name", help="the wids dataset name (default: the split)")
    e.add_argument(
        "--no-fsync",
        action="store_true",
        help="skip the fsyncs (still atomic, not durable across a power loss)",
    )
    add_json(e, EXPORT)
    e.set_defaults(func=cmd_export, dirs=("root",), inputs=("index",))


def remote_source(mf: Any, url: str) -> Any:
    """A TARIDX index is read from a local file (the ``remote_source`` hook refuses a URL:
    its tar shards are files beside it); ``mf`` is closed."""
    from ...errors import UnsupportedError

    mf.close()
    raise UnsupportedError(
        fmt="tenfold",
        obj=str(url),
        detail="a TARIDX index is read from a local file (its tar shards are files beside it), "
        "not from a URL",
    )
