"""WTXT commands for the ``tenfold`` CLI: sign, delta, apply, wsum, recover, wverify."""

from __future__ import annotations

import argparse
from typing import Any

from ...core.cli_support import VERIFY, Schema, add_json, note, print_json, reading

__all__ = ["register"]

#: what the writing commands print with ``--json``
SIGN = Schema(
    "tenfold.wtxt.sign/1",
    {"file": note("str", "the file signed"), "sign_all": "bool"},
)
DELTA = Schema(
    "tenfold.wtxt.delta/1",
    {"base": "str", "new": "str", "out": note("str", "the delta written"), "changed": "int"},
)
APPLY = Schema(
    "tenfold.wtxt.apply/1",
    {"base": "str", "delta": "str", "out": note("str", "the file written"), "signed": "bool"},
)
WSUM = Schema("tenfold.wtxt.wsum/1", {"file": "str", "sidecar": note("str", "the file written")})
#: ``recover --json``
RECOVER = Schema(
    "tenfold.wtxt.recover/1",
    {
        "file": "str",
        "ok": note("bool", "nothing damaged"),
        "intact": [{"name": "str", "dtype": "str", "shape": ["int"]}],
        "partial": [
            {
                "name": "str",
                "dtype": "str",
                "shape": ["int"],
                "recovered": note("int", "bytes recovered"),
                "bytes": "int",
            }
        ],
        "damage": [{"where": "str", "reason": "str"}],
        "output": note("str?", "the file written (with -o)"),
    },
)


def _key_bytes(path: str | None) -> bytes | None:
    """The HMAC key in ``path`` (surrounding whitespace removed); an empty one is refused, so a
    key that was asked for is never silently dropped."""
    if path is None:
        return None
    with open(path, "rb") as f:
        key = f.read(1 << 20).strip()
    if not key:
        from ...errors import FormatError, describe

        raise FormatError(describe("wtxt", f"hmac key file {path!r}", detail="empty key"))
    return key


def cmd_sign(args: argparse.Namespace) -> int:
    from .signing import load_private_key, sign_file

    sign_file(args.file, load_private_key(args.key), sign_all=args.sign_all, out=args.output)
    out = args.output or args.file
    if args.json:
        print_json({"schema": SIGN.name, "file": out, "sign_all": bool(args.sign_all)})
    else:
        print(f"{out}: signed")
    return 0


def cmd_delta(args: argparse.Namespace) -> int:
    from .delta import make_delta

    with reading(args.new):
        arrays = args.front.load(args.new)
    n = make_delta(
        args.base,
        arrays,
        args.out,
        gen=args.gen,
        ts=args.ts,
        build=args.build,
        hmac_key=_key_bytes(args.hmac_key_file),
    )
    if args.json:
        print_json({"schema": DELTA.name, "base": args.base, "new": args.new, "out": args.out,
                    "changed": n})  # fmt: skip
    else:
        print(f"{args.out}: delta with {n} changed chunks")
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from .delta import apply_delta
    from .signing import load_private_key

    key = load_private_key(args.key) if args.key else None
    apply_delta(
        args.base,
        args.delta,
        args.out,
        hmac_key=_key_bytes(args.hmac_key_file),
        signing_key=key,
        sign_all=args.sign_all,
    )
    if args.json:
        print_json({"schema": APPLY.name, "base": args.base, "delta": args.delta,
                    "out": args.out, "signed": key is not None})  # fmt: skip
    else:
        print(f"{args.out}: written")
    return 0


def cmd_wsum(args: argparse.Namespace) -> int:
    from .signing import load_private_key
    from .stream import finalize_wsum

    key = load_private_key(args.key) if args.key else None
    out = finalize_wsum(args.file, merkle_prev=args.merkle_prev, signing_key=key)
    if args.json:
        print_json({"schema": WSUM.name, "file": args.file, "sidecar": str(out)})
    else:
        print(f"{out}: written")
    return 0


def _original_names(path: str, arrays: dict) -> dict:
    """Decode names stored by ``tenfold.save`` (cap item ``tenfold_names``) when the cap line
    survived; otherwise keep the stored names."""
    from . import names as _names

    with open(path, "rb") as f:
        head = f.read(4096).split(b"\n")[:4]
    caps = [ln for ln in head if ln.startswith(b"cap ext=")]
    if not caps or _names.CAP_ITEM.encode() not in caps[0][8:].split(b","):
        return arrays
    out = {}
    for stored, arr in arrays.items():
        try:
            name, scalar = _names.decode(stored)
        except ValueError:
            name, scalar = stored, False
        out[name] = arr.reshape(()) if scalar and arr.size == 1 else arr
    return out


def cmd_recover(args: argparse.Namespace) -> int:
    from .verify import recover

    rec = recover(args.file)
    if args.json:
        return _recover_json(args, rec)
    for name, arr in rec.arrays.items():
        print(f"intact   {name} {arr.dtype} {arr.shape}")
    for name, (arr, mask) in rec.partial.items():
        print(
            f"damaged  {name} {arr.dtype} {arr.shape}: {int(mask.sum())}/{mask.size} bytes "
            "recovered"
        )
    for d in rec.damage:
        print(f"DAMAGE   {d.where()}: {d.reason}")
    if args.output and rec.arrays:
        args.front.write(args.output, _original_names(args.file, rec.arrays))
        print(f"{args.output}: {len(rec.arrays)} intact arrays written")
    return 0 if rec.ok else 1


def _recover_json(args: argparse.Namespace, rec: Any) -> int:
    written = None
    if args.output and rec.arrays:
        args.front.write(args.output, _original_names(args.file, rec.arrays))
        written = args.output
    print_json(
        {
            "schema": RECOVER.name,
            "file": args.file,
            "ok": bool(rec.ok),
            "intact": [
                {"name": n, "dtype": str(a.dtype), "shape": list(a.shape)}
                for n, a in rec.arrays.items()
            ],
            "partial": [
                {
                    "name": n,
                    "dtype": str(a.dtype),
                    "shape": list(a.shape),
                    "recovered": int(m.sum()),
                    "bytes": int(m.size),
                }  # fmt: skip
                for n, (a, m) in rec.partial.items()
            ],
            "damage": [{"where": d.where(), "reason": d.reason} for d in rec.damage],
            "output": written,
        }
    )
    return 0 if rec.ok else 1


def cmd_wverify(args: argparse.Namespace) -> int:
    from .signing import load_public_key
    from .verify import verify

    # keys given make authentication mandatory (the policy of read): a missing or foreign HMAC
    # or signature is an error and exit status 1
    keys = [_key_bytes(p) for p in args.hmac_key_file or []]
    pubs = [load_public_key(p) for p in args.public_key or []]
    report = verify(args.file, hmac_keys=[k for k in keys if k is not None], public_keys=pubs)
    if args.json:
        print_json(report.to_json())
    elif not (args.quiet and report.exit_code == 0):
        print(report.format(verbose=not args.quiet))
    return report.exit_code


def register(sub: Any) -> None:
    """Add the WTXT subcommands."""
    p = sub.add_parser(
        "sign",
        help="WTXT: add or replace the Ed25519 sign line",
        description="Sign a WTXT file with an Ed25519 key: the sign line covers the header "
        "and the root (or, with --sign-all, every byte but the sign line itself).",
    )
    p.add_argument("file", help="the .wtxt file to sign")
    p.add_argument("--key", required=True, help="Ed25519 private key (PEM, raw 32 B or hex)")
    p.add_argument("--sign-all", action="store_true", help="cover every byte but the sign line")
    p.add_argument("-o", "--output", help="write here instead of in place")
    add_json(p, SIGN)
    p.set_defaults(func=cmd_sign, inputs=("file", "key"), outputs=("output",))

    p = sub.add_parser(
        "delta",
        help="WTXT: write a DELTA v2 from BASE to the arrays of NEW",
        description="Write a WTXT DELTA v2 file holding the chunks of NEW's arrays that differ "
        "from BASE (NEW may be any file tenfold loads); `tenfold apply` rebuilds NEW.",
    )
    p.add_argument("base", help="the base .wtxt the delta applies to")
    p.add_argument("new", help="any file tenfold can load (e.g. the new .wtxt)")
    p.add_argument("out", help="where to write the .wtxt delta")
    p.add_argument("--gen", type=int, help="generation of the target (default: base gen + 1)")
    p.add_argument("--ts", help="target timestamp YYYY-MM-DDTHH:MM:SSZ")
    p.add_argument("--build", help="target build token")
    p.add_argument("--hmac-key-file", help="file holding the HMAC key of the arrays")
    add_json(p, DELTA)
    p.set_defaults(func=cmd_delta, inputs=("base", "new", "hmac_key_file"), outputs=("out",))

    p = sub.add_parser(
        "apply",
        help="WTXT: apply a DELTA v2 to BASE, writing OUT",
        description="Apply a WTXT DELTA v2 to BASE and write the resulting WTXT file to OUT "
        "(the delta's checks and, with --hmac-key-file, its HMACs verified first).",
    )
    p.add_argument("base", help="the base .wtxt")
    p.add_argument("delta", help="the DELTA v2 file")
    p.add_argument("out", help="where to write the resulting .wtxt")
    p.add_argument("--key", help="Ed25519 private key to sign the result")
    p.add_argument("--sign-all", action="store_true", help="sign every byte but the sign line")
    p.add_argument("--hmac-key-file", help="check the delta's HMACs with this key")
    add_json(p, APPLY)
    p.set_defaults(
        func=cmd_apply, inputs=("base", "delta", "key", "hmac_key_file"), outputs=("out",)
    )

    _register_more(sub)


def _register_more(sub: Any) -> None:
    from ...core.cli_support import add_quiet

    p = sub.add_parser(
        "wsum",
        help="WTXT: finalize a root_pending file with a .wsum sidecar",
        description="Finalize a WTXT file written as a stream (root_pending): compute its "
        "root and write it to a .wsum sidecar beside FILE (signed with --key).",
    )
    p.add_argument("file", help="the root_pending .wtxt file")
    p.add_argument("--key", help="Ed25519 private key to sign the WSUM line")
    p.add_argument("--merkle-prev", help="previous generation's merkle_this (hex)")
    add_json(p, WSUM)
    p.set_defaults(func=cmd_wsum, inputs=("file", "key"))

    p = sub.add_parser(
        "recover",
        help="WTXT: list damage by line and save the intact arrays",
        description="Read a damaged WTXT file line by line: list the intact arrays, the "
        "partly recovered ones and the damage; with -o, save the intact arrays. Exit 1 when "
        "anything is damaged.",
    )
    p.add_argument("file", help="the (damaged) .wtxt file")
    p.add_argument(
        "-o",
        "--output",
        help="save the intact arrays here; the suffix picks any format tenfold writes "
        "(.zt .oinf .fold .mind .wtxt .safetensors .npz)",
    )
    add_json(p, RECOVER)
    p.set_defaults(func=cmd_recover, inputs=("file",), suffixed=("output",))

    p = sub.add_parser(
        "wverify",
        help="WTXT: verify with HMAC keys and Ed25519 public keys "
        "(keys given: every array must authenticate / the signature must verify)",
        description="Verify a WTXT file as `tenfold verify` does, and authenticate it: with "
        "--hmac-key-file every array must carry an HMAC by one of the keys, with --public-key "
        "the file must carry a signature by one of them. Exit 0 ok, 1 damaged or not "
        "authentic.",
    )
    p.add_argument("file", help="the .wtxt file")
    p.add_argument(
        "--hmac-key-file",
        action="append",
        help="HMAC key file (repeatable); every array must authenticate with one of them",
    )
    p.add_argument(
        "--public-key",
        action="append",
        help="Ed25519 public key (repeatable); a signature by one of them is required",
    )
    add_quiet(p, "print nothing on success; else only the problems")
    add_json(p, VERIFY)
    p.set_defaults(func=cmd_wverify, inputs=("file", "hmac_key_file", "public_key"))


def remote_source(mf: Any, url: str) -> Any:
    """What ``inspect`` / ``verify`` read of a remote WTXT file (the ``remote_source`` hook):
    a WTXT file is parsed whole, so the object is fetched whole (``mf`` is closed)."""
    try:
        return mf.u8(0, int(mf.size), "the whole object")
    finally:
        mf.close()
