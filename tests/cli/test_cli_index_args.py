"""`tenfold index` subcommands take the split the same way (ROOT --split NAME [--index PATH]);
the old `--fold` still works, with a deprecation note on stderr."""

from __future__ import annotations

import io
import tarfile

from tenfold.cli import main


def _tar(path, members):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_every_index_subcommand_takes_root_and_fold(tmp_path, capsys):
    _tar(tmp_path / "c_0000.tar", [("k1.jpg", b"12345"), ("k1.cls", b"1")])
    idx = tmp_path / "elsewhere.taridx"
    assert main(["index", "build", str(tmp_path), "--split", "c", "-q", "--index", str(idx)]) == 0
    assert main(["index", "check", str(tmp_path), "--split", "c", "--index", str(idx)]) == 0
    assert main(["index", "lookup", str(tmp_path), "--split", "c", "--index", str(idx), "k1"]) == 0
    argv = ["index", "export", str(tmp_path), "--split", "c", "--index", str(idx), "--wids"]
    assert main(argv) == 0 and (tmp_path / "c.wids.json").exists()
    assert main(["index", "build", str(tmp_path), "--split", "c", "-q"]) == 0
    assert main(["index", "lookup", str(tmp_path), "--split", "c", "k1"]) == 0
    assert "jpg@fid0+0[5]" in capsys.readouterr().out
    assert main(["index", "lookup", str(tmp_path / "c.taridx"), "k1"]) == 0  # the old form


def test_every_argument_has_help():
    import argparse

    from tenfold.cli import build_parser

    missing = []

    def walk(p, prefix):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, prefix + [name])
            elif a.help is None and not isinstance(a, argparse._HelpAction):
                missing.append(" ".join(prefix) + ": " + a.dest)

    walk(build_parser(), [])
    assert missing == []
