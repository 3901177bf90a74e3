"""The CLI finds each format's commands through the registry (the ``cli`` hook): a format
registered here, in the test, gets its command with no edit elsewhere."""

from __future__ import annotations

import argparse

import pytest

import tenfold.registry as reg
from tenfold.cli import build_parser, main

MAGIC = b"TINYCLI\0"


def _cmd(args: argparse.Namespace) -> int:
    tensors_loadable = callable(args.front.load) and callable(args.front.write)
    print(f"tiny {args.file} front={tensors_loadable}")
    return 0


def _register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tiny-hello", help="TINYCLI: greet a file", description="Greet FILE.")
    p.add_argument("file")
    p.set_defaults(func=_cmd, inputs=("file",))


@pytest.fixture
def tiny_format():
    fmt = reg.Format(
        name="tinycli",
        description="a format defined in the test",
        suffixes=(".tinycli",),
        magics=(MAGIC,),
        package=__name__,
        hooks={"cli": f"{__name__}:_register"},
    )
    reg.register(fmt)
    try:
        yield fmt
    finally:
        reg.unregister("tinycli")


def test_a_registered_format_adds_its_command(tiny_format, tmp_path, capsys):
    p = tmp_path / "a.tinycli"
    p.write_bytes(MAGIC + b"payload")
    assert main(["tiny-hello", str(p)]) == 0
    assert capsys.readouterr().out == f"tiny {p} front=True\n"
    # and its file arguments are checked like every command's
    assert main(["tiny-hello", str(tmp_path / "missing.tinycli")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_command_goes_with_the_format(tiny_format):
    assert "tiny-hello" in build_parser().format_help()
    reg.unregister("tinycli")
    assert "tiny-hello" not in build_parser().format_help()
    reg.register(tiny_format)


def test_every_format_with_a_cli_hook_has_its_commands():
    text = build_parser().format_help()
    for fmt in reg.formats():
        if fmt.hooks.get("cli"):
            assert fmt.hook("cli") is not None
    for command in ("repair", "index", "wverify", "id"):
        assert command in text
