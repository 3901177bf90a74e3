"""Bad paths on the command line: one line each, exit 2 for usage errors, 1 for a bad file.

Every subcommand that takes a file gets a missing file, a directory, a FIFO (which would block a
reader forever) and an empty file in that argument's place; output arguments get a directory, a
missing directory and (where the suffix picks the format) an unknown suffix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tenfold
from tenfold import cli
from tenfold.cli import main
from tenfold.registry import FORMATS


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A sample of every format tenfold writes (``tenfold demo``) plus a signing key."""
    d = tmp_path_factory.mktemp("demo")
    for info in FORMATS:
        make = getattr(info.load_module(), "demo", None)  # None: a format tenfold only reads
        if make is not None:
            make(d)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    (d / "key.hex").write_text(Ed25519PrivateKey.generate().private_bytes_raw().hex())
    (d / "hmac.key").write_bytes(b"k" * 32)
    return d


def _bad(tmp_path, kind: str) -> str:
    p = tmp_path / f"bad-{kind}.zt"
    if kind == "directory":
        p.mkdir()
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(p)
    return str(p)


# each command with "{}" where the bad input goes; the other arguments are good
COMMANDS = {
    "inspect": ["inspect", "{}"],
    "verify": ["verify", "{}"],
    "convert": ["convert", "{}", "{out}/c.zt"],
    "repair": ["repair", "{}", "-o", "{out}/r.fold"],
    "sign": ["sign", "{}", "--key", "{demo}/key.hex", "-o", "{out}/s.wtxt"],
    "sign --key": ["sign", "{demo}/demo.wtxt", "--key", "{}", "-o", "{out}/s.wtxt"],
    "delta base": ["delta", "{}", "{demo}/demo.wtxt", "{out}/d.wtxtdelta"],
    "delta new": ["delta", "{demo}/demo.wtxt", "{}", "{out}/d.wtxtdelta"],
    "apply base": ["apply", "{}", "{demo}/demo.wtxt", "{out}/a.wtxt"],
    "apply delta": ["apply", "{demo}/demo.wtxt", "{}", "{out}/a.wtxt"],
    "wsum": ["wsum", "{}"],
    "recover": ["recover", "{}"],
    "diff a": ["diff", "{}", "{demo}/demo.zt"],
    "diff b": ["diff", "{demo}/demo.zt", "{}"],
    "wverify": ["wverify", "{}"],
    "wverify --public-key": ["wverify", "{demo}/demo.wtxt", "--public-key", "{}"],
    "wverify --hmac-key-file": ["wverify", "{demo}/demo.wtxt", "--hmac-key-file", "{}"],
    "index check --index": ["index", "check", "{demo}", "--split", "demo", "--index", "{}"],
    "index lookup": ["index", "lookup", "{}", "k"],
    "index export --index": [
        *("index", "export", "{demo}", "--split", "demo", "--index", "{}"),
        *("--wids", "{out}/w.json"),
    ],
}

EXPECT = {  # kind -> (exit status, what the line says)
    "missing": (2, "no such file"),
    "directory": (2, "is a directory"),
    "fifo": (2, "is a FIFO, not a regular file"),
    "empty": (1, "the file is empty"),
}


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def _one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    assert err.startswith("tenfold: error: ") and "tenfold: error: tenfold:" not in err, err
    assert "Traceback" not in err and ".tmp" not in err, err
    return err


@pytest.mark.parametrize("kind", sorted(EXPECT))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bad_input_file(command, kind, demo, tmp_path, capsys):
    bad = _bad(tmp_path, kind)
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(bad, demo=demo, out=out) for a in COMMANDS[command]]
    code, err = _run(argv, capsys)
    status, says = EXPECT[kind]
    if command.startswith("diff"):
        status = 2  # diff's 1 means "different": an unreadable input is trouble (2) there
    assert code == status, err
    assert says in _one_line(err) and bad in err
    assert os.listdir(out) == []  # nothing written


@pytest.mark.parametrize("kind", ["missing", "file"])
@pytest.mark.parametrize("command", ["index build", "index check", "index export"])
def test_bad_root_directory(command, kind, tmp_path, capsys):
    root = tmp_path / "root"
    if kind == "file":
        root.write_bytes(b"x")
    argv = [*command.split(), str(root), "--split", "f"]
    code, err = _run(argv, capsys)
    assert code == 2
    assert ("no such directory" if kind == "missing" else "is not a directory") in _one_line(err)


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "{demo}/demo.zt", "{out}/x.unknown"],
        ["recover", "{demo}/demo.wtxt", "-o", "{out}/x.unknown"],
    ],
)
def test_unknown_output_suffix_is_a_usage_error(argv, demo, tmp_path, capsys):
    code, err = _run([a.format(demo=demo, out=tmp_path) for a in argv], capsys)
    assert code == 2
    assert "unknown suffix '.unknown'" in _one_line(err) and ".zt" in err
    assert not (tmp_path / "x.unknown").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "{demo}/demo.zt", "{dst}"],
        ["repair", "{demo}/demo.mind", "-o", "{dst}"],
        ["sign", "{demo}/demo.wtxt", "--key", "{demo}/key.hex", "-o", "{dst}"],
        ["delta", "{demo}/demo.wtxt", "{demo}/demo.wtxt", "{dst}"],
        ["apply", "{demo}/demo.wtxt", "{demo}/demo.wtxt", "{dst}"],
        ["index", "build", "{demo}", "--split", "demo", "--out", "{dst}"],
    ],
)
@pytest.mark.parametrize("kind", ["directory", "missing directory"])
def test_bad_output_path(argv, kind, demo, tmp_path, capsys):
    dst = tmp_path / "o.zt"
    if kind == "directory":
        dst.mkdir()
    else:
        dst = tmp_path / "nowhere" / "o.zt"
    code, err = _run([a.format(demo=demo, dst=dst) for a in argv], capsys)
    assert code == 2
    assert ("is a directory" if kind == "directory" else "no such directory") in _one_line(err)
    assert str(dst) in err


def test_demo_into_a_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "f").write_bytes(b"x")
    code, err = _run(["demo", str(tmp_path / "f")], capsys)
    assert code == 2 and "is not a directory" in _one_line(err)


def test_repair_output_and_in_place_conflict(demo, tmp_path, capsys):
    argv = ["repair", str(demo / "demo.mind"), "--in-place", "-o", str(tmp_path / "y.fold")]
    code, err = _run(argv, capsys)
    assert code == 2 and "either --output or --in-place" in _one_line(err)


def test_unknown_content_is_a_bad_file_without_double_prefix(tmp_path, capsys):
    junk = tmp_path / "junk.zt"
    junk.write_bytes(b"not a tensor file at all")
    for argv in (
        ["inspect", str(junk)],
        ["verify", str(junk)],
        ["convert", str(junk), str(tmp_path / "o.zt")],
    ):
        code, err = _run(argv, capsys)
        assert code == 1 and "junk.zt" in _one_line(err)
        assert "unknown format" in err or "cannot read" in err


def test_missing_optional_dependency_is_one_line_exit_2(monkeypatch, capsys):
    from tenfold.core.optional import require

    def needs_torch(args):
        require("tenfold_test_absent_module", extra="torch", what="this command")

    monkeypatch.setattr(cli, "cmd_inspect", needs_torch)
    code, err = _run(["inspect", __file__], capsys)
    assert code == 2
    assert 'pip install "tenfold[torch]"' in _one_line(err)
    assert "this command needs tenfold_test_absent_module" in err


def test_bare_import_error_is_one_line(monkeypatch, capsys):
    def plain(args):
        import tenfold_test_absent_module  # noqa: F401

    monkeypatch.setattr(cli, "cmd_inspect", plain)
    code, err = _run(["inspect", __file__], capsys)
    assert code == 2 and "tenfold_test_absent_module" in _one_line(err)


def test_writer_errors_name_the_destination_not_the_temp_file(tmp_path):
    (tmp_path / "d.zt").mkdir()
    arrays = {"a": np.ones(3)}
    with pytest.raises(IsADirectoryError) as ei:
        tenfold.save(tmp_path / "d.zt", arrays)
    assert ".tmp" not in str(ei.value) and str(ei.value.filename).endswith("d.zt")
    with pytest.raises(FileNotFoundError) as ei:
        tenfold.save(tmp_path / "nowhere" / "x.zt", arrays)
    # the missing folder is named, and the file that was to be written in it (#24)
    assert ".tmp" not in str(ei.value) and str(ei.value.filename).endswith("nowhere")
    assert "x.zt" in str(ei.value)
    assert sorted(os.listdir(tmp_path)) == ["d.zt"]


OPTIONAL = ("torch", "scipy", "fsspec", "aiohttp", "tqdm", "pyrage", "safetensors")


def test_every_command_works_without_any_optional_dependency(tmp_path):
    # a fresh interpreter in which every optional integration fails to import
    code = (
        "import sys\n"
        f"for m in {OPTIONAL!r}: sys.modules[m] = None\n"
        "from tenfold.cli import main\n"
        "for argv in (['demo', sys.argv[1]], ['inspect', sys.argv[1] + '/demo.mind'],\n"
        "             ['verify', sys.argv[1] + '/demo.mind'],\n"
        "             ['convert', sys.argv[1] + '/demo.zt', sys.argv[1] + '/c.npz']):\n"
        "    if main(argv) != 0: sys.exit(f'failed: {argv}')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


def test_errors_name_the_input_file(tmp_path, capsys):
    # the message of a damaged index named the format and offset but not the file, which is
    # what a user checking many files needs first
    p = tmp_path / "half.zt"
    tenfold.save(p, {"a": np.arange(1000, dtype=np.float32)})
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    assert main(["inspect", str(p)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tenfold: error: {p}: "), err


@pytest.mark.parametrize("what", ["zt", "random", "delta"])
def test_recover_refuses_what_is_not_a_wtxt_snapshot(what, demo, tmp_path, capsys):
    # before: no output, exit 0 and '"ok": true', as if an intact snapshot had been read
    if what == "zt":
        bad = str(demo / "demo.zt")
    elif what == "random":
        bad = str(tmp_path / "rand.bin")
        Path(bad).write_bytes(np.random.default_rng(3).integers(0, 256, 3000, np.uint8).tobytes())
    else:
        bad = str(tmp_path / "d.wtxtdelta")
        assert main(["delta", str(demo / "demo.wtxt"), str(demo / "demo.wtxt"), bad]) == 0
        capsys.readouterr()
    out = tmp_path / "o.safetensors"
    for extra in ([], ["--json"], ["-o", str(out)]):
        code, err = _run(["recover", bad, *extra], capsys)
        assert code == 1 and bad in _one_line(err)
        assert ("DELTA" if what == "delta" else "not a WTXT snapshot") in err
        assert not out.exists()
