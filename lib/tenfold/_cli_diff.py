"""``tenfold diff A B``: the command-line face of :func:`tenfold.diff`.

:func:`add_diff` adds the subcommand to the ``tenfold`` parser; :func:`cmd_diff` runs it.
Exit status (as ``cmp`` and ``diff`` give it): 0 the checkpoints are equal, 1 they differ,
2 a usage error or a file that cannot be read (so that 1 always means "different").
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from typing import Any

from .core.cli_support import Schema, UsageError, add_json, add_quiet, count, either, human, note

__all__ = ["add_diff", "cmd_diff", "DIFF", "EPILOG"]

EPILOG = """\
exit status: 0 equal (identical, or close within --atol/--rtol), 1 different,
2 usage error or a file that cannot be read.
Every tensor in both files is listed in --json (its JSON Schema: tenfold.diff.SCHEMA); the
table lists those that are not identical (--all: every one). Statistics are null where they
do not apply; max_abs and max_rel are the string "inf" when a difference overflows float64."""

_SIDE = {
    "path": "str",
    "format": note("str?", "the registry's name"),
    "tensors": note("int", "how many"),
}
_NUM = either("number", "str", "null")
#: ``diff --json`` (the same object as :data:`tenfold.diff.SCHEMA` describes)
DIFF = Schema(
    "tenfold.diff/1",
    {
        "a": _SIDE,
        "b": _SIDE,
        "atol": note("number?", "null when not given: then equal means identical"),
        "rtol": "number?",
        "identical": "bool",
        "equal": note("bool", "what the exit status says"),
        "exit_code": (0, 1),
        "summary": {
            "compared": "int",
            **{k: "int" for k in ("identical", "close", "different", "dtype", "shape")},
            "only_in_a": "int",
            "only_in_b": "int",
            "metadata": note("int?", "keys that differ; null with --no-metadata"),
        },
        "only_in_a": ["str"],
        "only_in_b": ["str"],
        "tensors": [
            {
                "name": "str",
                "status": ("identical", "close", "different", "dtype", "shape"),
                "dtype_a": "str",
                "dtype_b": "str",
                "shape_a": ["int"],
                "shape_b": ["int"],
                "nbytes_a": "int?",
                "nbytes_b": "int?",
                "kind": note(("numeric", "raw", None), "by value, by bytes; null: shapes differ"),
                "identical": "bool",
                "elements": "int?",
                "mismatched": note("int?", "elements not equal"),
                "max_abs": note(_NUM, "an int for integer pairs"),
                "max_rel": note(_NUM, "|a-b| / max(|a|,|b|)"),
                "cosine": "number?",
                **{k: "int?" for k in ("nan_a", "nan_b", "inf_a", "inf_b")},
            }
        ],
        "metadata": note(
            either(
                [
                    {
                        "key": "str",
                        "status": ("only_in_a", "only_in_b", "changed"),
                        "a": "any",
                        "b": "any",
                    }
                ],
                "null",
            ),
            "null with --no-metadata",
        ),  # fmt: skip
    },
)


DESCRIPTION = (
    "Compare checkpoint A with checkpoint B, whatever their formats (a file of any format "
    "tenfold reads, a sharded index, an fsspec URL): per tensor whether it is bit-identical, "
    "the largest absolute and relative difference, the cosine similarity and the NaN / Inf "
    "counts of each side; names on one side only; dtype and shape changes; metadata "
    "differences. One tensor pair is read at a time. Without --atol/--rtol, equal means "
    "identical; with them, numpy.isclose's rule |a - b| <= atol + rtol * |b| (B is the "
    "reference), NaN equal to NaN only at the same place. Rules: docs/diff.md."
)


def _tolerance_arg(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not x >= 0.0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return x


def add_diff(sub: Any) -> None:
    """Add ``diff`` to the ``tenfold`` subcommands."""
    p = sub.add_parser(
        "diff",
        help="compare two checkpoints tensor by tensor (exit 0 equal, 1 different)",
        description=textwrap.fill(DESCRIPTION, 78),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", help="the first checkpoint (path, sharded index or URL)")
    p.add_argument("b", help="the second checkpoint, the reference of --rtol")
    p.add_argument("--atol", type=_tolerance_arg, metavar="X", help="absolute tolerance")
    p.add_argument("--rtol", type=_tolerance_arg, metavar="X", help="relative tolerance")
    p.add_argument("--no-metadata", action="store_true", help="compare the tensors only")
    p.add_argument("--all", action="store_true", help="list identical tensors in the table too")
    add_quiet(p, "print nothing: the exit status only")
    add_json(p, DIFF)
    # 1 means "different" here: an input that cannot be read (empty, say) is trouble, 2
    p.set_defaults(func=cmd_diff, inputs=("a", "b"), error_status=2)


def cmd_diff(args: argparse.Namespace) -> int:
    from .diff import diff, failed_source
    from .errors import TenfoldError

    try:
        result = diff(
            args.a,
            args.b,
            atol=args.atol,
            rtol=args.rtol,
            metadata=not args.no_metadata,
            progress=False if (args.quiet or args.json) else None,
        )
    except (TenfoldError, OSError) as exc:  # a file that cannot be read: trouble, not "differ"
        where = failed_source(exc)
        text = str(exc)
        if where is not None and where not in text:
            text = f"{where}: {text}"
        raise UsageError(text) from None
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    elif not args.quiet:
        print(render(result, every=args.all))
    return result.exit_code


# -- the table ----------------------------------------------------------------------------------

COLUMNS = ("name", "status", "dtype", "shape", "size", "mismatched", "max abs", "max rel",
           "cosine", "NaN A/B", "Inf A/B")  # fmt: skip


def _shape(s: Any) -> str:
    return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"


def _pair(a: Any, b: Any, show: Any = str) -> str:
    return show(a) if a == b else f"{show(a)} -> {show(b)}"


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    return f"{x:.4g}" if math.isfinite(x) else str(x)


def _row(t: Any) -> list[str]:
    size = "-" if t.nbytes_a is None else human(t.nbytes_a)
    counts = t.nan_a is not None
    return [
        t.name,
        t.status,
        _pair(t.dtype_a, t.dtype_b),
        _pair(tuple(t.shape_a), tuple(t.shape_b), _shape),
        size,
        _num(t.mismatched),
        _num(t.max_abs),
        _num(t.max_rel),
        "-" if t.cosine is None else f"{t.cosine:.8f}",
        f"{t.nan_a}/{t.nan_b}" if counts else "-",
        f"{t.inf_a}/{t.inf_b}" if counts else "-",
    ]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]

    def line(cells: Any) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(COLUMNS), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _value(v: Any) -> str:
    text = repr(v.tolist()) if hasattr(v, "tolist") else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _metadata_lines(result: Any) -> list[str]:
    out = ["metadata:"]
    for m in result.metadata:
        if m.status == "changed":
            out.append(f"  {m.key}: {_value(m.a)} -> {_value(m.b)}")
        else:
            side, v = ("A", m.a) if m.status == "only_in_a" else ("B", m.b)
            out.append(f"  {m.key}: only in {side} ({_value(v)})")
    return out


def _items(fmt: str | None) -> str:
    """What the entries of format ``fmt`` are called (its descriptor's ``items``)."""
    from . import registry

    known = {f.name: f.items for f in registry.formats()}
    return known.get(fmt or "", "tensors")


def _summary(result: Any) -> list[str]:
    c = result.counts()
    a, b = _items(result.a.format), _items(result.b.format)
    both = count(c["compared"], a if a == b else "entries")
    parts = [f"{both} in both: {c['identical']} identical"]
    parts += [f"{c[s]} {s}" for s in ("close", "different") if c[s]]
    parts += [f"{c[s]} {s} changed" for s in ("dtype", "shape") if c[s]]
    ends = [f"{c[k]} only in {k[-1].upper()}" for k in ("only_in_a", "only_in_b") if c[k]]
    if c["metadata"]:
        n = c["metadata"]
        ends.append(f"{n} metadata key{'s differ' if n > 1 else ' differs'}")
    if result.identical:
        verdict = "IDENTICAL"
    elif result.equal:
        verdict = f"EQUAL within atol={result.atol:g}, rtol={result.rtol:g}"
    else:
        verdict = "DIFFERENT"
    return ["; ".join([", ".join(parts), *ends]), verdict]


def render(result: Any, every: bool = False) -> str:
    """The terminal report of a :class:`tenfold.diff.DiffResult`."""
    lines = [
        f"{k}: {s.path} ({s.format}, {count(s.tensors, _items(s.format))})"
        for k, s in (("A", result.a), ("B", result.b))
    ]
    rows = [_row(t) for t in result.tensors if every or t.status != "identical"]
    if rows:
        lines += ["", *_table(rows)]
    for side, names in (("A", result.only_in_a), ("B", result.only_in_b)):
        if names:
            lines.append(f"only in {side}: " + ", ".join(names))
    if result.metadata:
        lines += _metadata_lines(result)
    return "\n".join([*lines, "", *_summary(result)])
