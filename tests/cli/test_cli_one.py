"""One CLI (#24): ``-q`` meaning ``--quiet`` everywhere, usage errors exit 2, and errors that
name the cause (a truncated or empty file, a missing folder, a missing remote package); every
command's description and ``--json`` schema: test_cli_json.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tenfold
import tenfold.fold as fold
from tenfold.cli import build_parser, main
from tenfold.errors import TruncatedError


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


def test_q_means_quiet_everywhere():
    for name, p in PARSERS.items():
        action = p._option_string_actions.get("-q")
        if action is not None:
            assert "--quiet" in action.option_strings, name
            assert action.dest == "quiet", name


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "m.zt"
    tenfold.save(p, {"w": np.arange(6, dtype=np.float32)})
    return p


def test_verify_json(model, capsys):
    assert main(["verify", "--json", str(model)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "tenfold.verify/1" and doc["format"] == "ztensor"
    assert doc["verdict"] == "OK" and doc["ok"] and doc["exit_code"] == 0
    assert doc["findings"][0]["object"] == "tensor 'w'" and doc["findings"][0]["status"] == "ok"


def _damaged_fold(tmp_path):
    d = fold.demo(tmp_path)
    with fold.Reader(d) as r:
        c = r.chunk("ai_graph")
    b = bytearray(d.read_bytes())
    b[c.payload_offset + 3] ^= 0xFF  # correctable with the chunk's parity
    d.write_bytes(bytes(b))
    return d


def test_verify_says_repairable_not_repaired(tmp_path, capsys):
    d = _damaged_fold(tmp_path)
    assert main(["verify", str(d)]) == 1
    out = capsys.readouterr().out
    assert "REPAIRABLE chunk 'ai_graph'" in out and "REPAIRED" not in out
    assert main(["verify", "--json", str(d)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "REPAIRABLE" and doc["repair"].startswith("tenfold repair")
    assert {f["status"] for f in doc["findings"]} >= {"repairable"}


def test_repair_writes_where_its_help_says(tmp_path, capsys):
    d = _damaged_fold(tmp_path)  # demo.mind
    help_text = " ".join(PARSERS["repair"].format_help().split())
    assert "FILE.repaired.fold" not in help_text and "m.mind -> m.repaired.mind" in help_text
    assert main(["repair", "-q", str(d)]) == 0
    assert capsys.readouterr().out == ""  # -q: nothing on success
    assert (tmp_path / "demo.repaired.mind").exists()


def test_index_build_q_is_quiet(tmp_path, capsys):
    import io
    import tarfile

    with tarfile.open(tmp_path / "s_0000.tar", "w") as t:
        info = tarfile.TarInfo("a.txt")
        info.size = 2
        t.addfile(info, io.BytesIO(b"hi"))
    assert main(["index", "build", str(tmp_path), "--split", "s", "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["index", "check", str(tmp_path), "--split", "s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "tenfold.index.check/1" and doc["up_to_date"] and doc["stale"] == []


def test_a_file_of_no_format_is_a_usage_error(tmp_path, capsys):
    txt = tmp_path / "notes.txt"
    txt.write_text("not a tensor file\n")
    for argv in (["inspect", str(txt)], ["verify", str(txt)], ["convert", str(txt), "o.zt"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "notes.txt: unknown format" in err
    junk = tmp_path / "junk.zt"  # a format's suffix: a damaged file of that format
    junk.write_text("not a tensor file\n")
    assert main(["inspect", str(junk)]) == 1


def test_unknown_suffix_lists_only_targets(model, tmp_path, capsys):
    assert main(["convert", str(model), str(tmp_path / "o.unknown")]) == 2
    err = capsys.readouterr().err
    assert ".zt" in err and ".safetensors" in err and ".taridx" not in err
    assert main(["convert", str(model), str(tmp_path / "o.taridx")]) == 2
    assert "unknown suffix '.taridx'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("suffix", "cut", "part"),
    [(".zt", 100, "footer"), (".fold", 200, "header"), (".safetensors", 40, "header")],
)
def test_a_truncated_file_says_truncated(tmp_path, capsys, suffix, cut, part):
    p = tmp_path / f"m{suffix}"
    tenfold.save(p, {"w": np.arange(64, dtype=np.float32)}, checksum=None)
    p.write_bytes(p.read_bytes()[:cut])
    with pytest.raises(TruncatedError, match=f"truncated: the file has {cut} bytes, its {part}"):
        tenfold.load(p)
    assert main(["inspect", str(p)]) == 1
    assert f"truncated: the file has {cut} bytes" in capsys.readouterr().err


def test_an_empty_file_gets_one_message(tmp_path, capsys):
    p = tmp_path / "e.zt"
    p.write_bytes(b"")
    with pytest.raises(TruncatedError) as ei:
        tenfold.open(p)
    assert main(["inspect", str(p)]) == 1
    err = capsys.readouterr().err
    assert str(ei.value) == f"tenfold: {p}: the file is empty (0 bytes)"
    assert err == f"tenfold: error: {p}: the file is empty (0 bytes)\n"


def test_save_names_the_missing_folder(tmp_path):
    folder = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError) as ei:
        tenfold.save(folder / "m.zt", {"w": np.zeros(2)})
    assert ei.value.filename == str(folder) and "no such directory" in str(ei.value)
    assert not folder.exists()


def test_save_in_safetensors_order_names_the_order(tmp_path):
    with pytest.raises(TypeError, match=r"tenfold.save\(path, tensors\): the path comes first"):
        tenfold.save({"w": np.zeros(2)}, tmp_path / "m.zt")  # type: ignore[arg-type]
    assert not (tmp_path / "m.zt").exists()


def test_url_without_aiohttp_names_the_extra(tmp_path):
    pytest.importorskip("fsspec", reason="the hint is about fsspec's HTTP filesystem")
    code = (
        "import sys\n"
        "sys.modules['aiohttp'] = None\n"  # as if it were not installed
        "import tenfold\n"
        "from tenfold.cli import main\n"
        "from tenfold.core.optional import MissingDependencyError\n"
        "try:\n"
        "    tenfold.open('http://127.0.0.1:9/m.zt')\n"
        "except MissingDependencyError as e:\n"
        "    print('python:', e)\n"
        "sys.exit(main(['inspect', 'http://127.0.0.1:9/m.zt']))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(tenfold.__file__))}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "python: " in proc.stdout and 'pip install "tenfold[remote]"' in proc.stdout
    assert proc.stderr.count("\n") == 1 and 'pip install "tenfold[remote]"' in proc.stderr
