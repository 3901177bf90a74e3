"""Every command (discovered from the parser, the formats' own included) has a description and
takes ``--json`` with its schema at the end of its help (#24); run with ``--json``, each prints
one JSON object that matches that schema (:class:`tenfold.core.cli_support.Schema`, the one
value both the help and this check come from)."""

from __future__ import annotations

import argparse
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tenfold
from tenfold.cli import build_parser, main
from tenfold.core.cli_support import Schema


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name (``index build`` for nested ones)."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out[prefix + name] = sub
                    walk(sub, prefix + name + " ")

    walk(build_parser(), "")
    return out


PARSERS = _parsers()
#: the commands that run something (``index`` only groups its subcommands)
COMMANDS = sorted(
    name
    for name, p in PARSERS.items()
    if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
)


def test_the_walk_finds_the_formats_commands():
    assert {"inspect", "verify", "convert", "demo", "id", "repair", "index build"} <= set(PARSERS)
    assert "index" not in COMMANDS and "index check" in COMMANDS


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_command_has_a_description(name):
    assert len((PARSERS[name].description or "").strip()) > 20, name


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_takes_json_with_its_schema_in_its_help(name):
    p = PARSERS[name]
    schema = p.get_default("json_schema")
    assert isinstance(schema, Schema), f"{name}: add_json(parser, Schema(...)) gives its --json"
    assert "--json" in p._option_string_actions
    assert schema.help() in p.format_help()
    assert schema.help().startswith(f"--json prints one object (schema {schema.name}):")


# -- each command run with --json ---------------------------------------------------------------
TENSORS = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.int16)}
WTXT_META = {"schema": "s/1", "gen": 1, "ts": "2026-01-01T00:00:00Z", "build": "b"}
SEED = bytes(range(32))


def _zt(d: Path) -> str:
    tenfold.save(d / "m.zt", TENSORS)
    return str(d / "m.zt")


def _wtxt(d: Path, name: str = "a.wtxt", scale: float = 1.0, **kw) -> str:
    from tenfold import wtxt

    arrays = {"R": np.arange(64.0).reshape(16, 4) * scale}
    wtxt.write(d / name, arrays, rows_per_chunk=4, **WTXT_META, **kw)
    return str(d / name)


def _key(d: Path) -> str:
    pytest.importorskip("cryptography", reason="Ed25519 keys need the cryptography package")
    (d / "key").write_bytes(SEED.hex().encode())
    return str(d / "key")


def _shards(d: Path) -> str:
    with tarfile.open(d / "s_0000.tar", "w") as t:
        for stem in ("a", "b"):
            info = tarfile.TarInfo(f"{stem}.txt")
            info.size = 2
            t.addfile(info, io.BytesIO(b"hi"))
    return str(d)


def _indexed(d: Path) -> str:
    root = _shards(d)
    assert main(["index", "build", root, "--split", "s", "-q"]) == 0
    return root


def _damaged_fold(d: Path) -> str:
    from tenfold import fold

    p = fold.demo(d)
    with fold.Reader(p) as r:
        c = r.chunk("ai_graph")
    b = bytearray(p.read_bytes())
    b[c.payload_offset + 3] ^= 0xFF  # correctable with the chunk's parity
    p.write_bytes(bytes(b))
    return str(p)


def _delta(d: Path) -> list[str]:
    base, new = _wtxt(d, "base.wtxt"), _wtxt(d, "new.wtxt", scale=2.0)
    assert main(["delta", base, new, str(d / "d.wtxt"), "--gen", "2"]) == 0
    return [base, str(d / "d.wtxt")]


#: (command, argv without --json from a fresh folder, exit status expected)
def _pair(d: Path, same: bool) -> list[str]:
    """Two checkpoints: the same tensors, or differing in every way ``diff`` reports."""
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    a, b = str(d / "a.safetensors"), str(d / "b.zt")
    tenfold.save(a, {"w": w, "only_a": np.zeros(2, np.int8)}, metadata={"step": "1"})
    if same:
        tenfold.save(b, {"w": w, "only_a": np.zeros(2, np.int8)}, metadata={"step": "1"})
    else:
        bad = w.copy()
        bad[0, 0] = np.nan
        tenfold.save(b, {"w": bad, "only_b": np.ones(3, np.uint16)}, metadata={"step": "2"})
    return [a, b]


CASES: list[tuple[str, Callable[[Path], list[str]], int]] = [
    ("diff", lambda d: _pair(d, True), 0),
    ("diff", lambda d: _pair(d, False), 1),
    ("inspect", lambda d: [_zt(d)], 0),
    ("verify", lambda d: [_zt(d)], 0),
    ("convert", lambda d: [_zt(d), str(d / "o.safetensors")], 0),
    ("convert", lambda d: [_zt(d), str(d / "o.safetensors"), "--max-shard-size", "64"], 0),
    ("demo", lambda d: [str(d)], 0),
    ("id", lambda d: [_zt(d), "--algo", "sha256"], 0),
    ("repair", lambda d: [_damaged_fold(d)], 0),
    ("sign", lambda d: [_wtxt(d), "--key", _key(d)], 0),
    ("delta", lambda d: [_wtxt(d, "base.wtxt"), _wtxt(d, "n.wtxt", 2.0), str(d / "d.wtxt")], 0),
    ("apply", lambda d: [*_delta(d), str(d / "out.wtxt")], 0),
    ("wsum", lambda d: [_wtxt(d, root_pending=True)], 0),
    ("recover", lambda d: [_wtxt(d), "-o", str(d / "r.npz")], 0),
    ("wverify", lambda d: [_wtxt(d)], 0),
    ("index build", lambda d: [_shards(d), "--split", "s"], 0),
    ("index check", lambda d: [_indexed(d), "--split", "s"], 0),
    ("index lookup", lambda d: [_indexed(d), "--split", "s", "a", "zz"], 1),
    ("index export", lambda d: [_indexed(d), "--split", "s"], 0),
]


def test_every_command_is_run_below():
    assert sorted({c for c, _, _ in CASES}) == COMMANDS


@pytest.mark.parametrize(("command", "argv", "code"), CASES, ids=[c[0] for c in CASES])
def test_json_output_matches_the_schema_in_the_help(tmp_path, capsys, command, argv, code):
    args = argv(tmp_path)
    capsys.readouterr()
    assert main([*command.split(), *args, "--json"]) == code
    out, err = capsys.readouterr()
    doc = json.loads(out)  # one object, nothing else on stdout
    schema = PARSERS[command].get_default("json_schema")
    assert doc["schema"] == schema.name
    assert schema.problems(doc) == []
    assert err == ""


def test_the_check_finds_what_differs():
    s = Schema("t/1", {"n": "int", "xs": [{"a": ("x", "y"), "b?": "str?"}], "m": {"*": "int"}})
    good = {"schema": "t/1", "n": 1, "xs": [{"a": "x"}, {"a": "y", "b": None}], "m": {"k": 2}}
    assert s.problems(good) == []
    bad = {"schema": "t/2", "n": True, "xs": [{"a": "z", "c": 1}], "m": {"k": "2"}}
    assert s.problems(bad) == [
        "$.schema: expected \"t/1\", got 't/2'",
        "$.n: expected int, got True",
        '$.xs[0].a: expected "x" | "y", got \'z\'',
        "$.xs[0]: unexpected key 'c'",
        "$.m.k: expected int, got '2'",
    ]
    assert s.problems({"schema": "t/1"}) == ["$: no key 'n'", "$: no key 'xs'", "$: no key 'm'"]
