"""Real git diff locality, and the WTXT CLI commands."""

import shutil
import subprocess

import numpy as np
import pytest
from _wtxt_helpers import HKEY, SEED, write

from tenfold import wtxt
from tenfold.cli import main


@pytest.mark.slow
def test_git_diff_touches_one_chunk(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()

    def run(*args):
        return subprocess.run(
            [git, *args], cwd=repo, check=True, capture_output=True, text=True
        ).stdout

    run("init", "-q")
    run("config", "user.email", "t@example.com")
    run("config", "user.name", "t")
    (repo / ".gitattributes").write_text("*.wtxt text diff\n*.wtxtdelta text diff\n")
    rng = np.random.default_rng(0)
    R = rng.standard_normal((4096, 64))
    p = repo / "R.wtxt"
    write(p, {"R": R}, gen=1, rows_per_chunk=128, hmac_key=HKEY)
    run("add", ".")
    run("commit", "-q", "-m", "gen 1")
    with wtxt.open(p) as f:
        prev = f.root["merkle_this"]
    R2 = R.copy()
    R2[1000] += 1.0  # row 1000 lives in chunk 7 (rows 896..1023)
    write(p, {"R": R2}, gen=1, rows_per_chunk=128, hmac_key=HKEY, merkle_prev=prev)
    added, deleted, _ = run("diff", "--numstat").split("\t")
    diff = run("diff", "-U0")
    changed = [
        line[1:]
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    chunk_lines = 1 + 1150 + 1  # ch line + base64 lines of a 64 KiB chunk
    # root line, arr line, and at most one chunk's ch line + base64 lines (each side)
    assert int(added) == int(deleted) <= 2 + chunk_lines
    assert {c.split(" ")[0] for c in changed if not c[-2:-1] == " "} <= {"root", "arr", "ch"}
    assert sum(c.startswith("ch ix=000007 ") for c in changed) == 2
    assert not any(c.startswith("ch ") and not c.startswith("ch ix=000007 ") for c in changed)
    d = repo / "R.wtxtdelta"
    assert wtxt.make_delta(repo / "R.wtxt", {"R": R}, d) == 1
    assert d.read_text().count("\nch ") == 1


def test_cli_commands(tmp_path, capsys):
    p = write(
        tmp_path / "a.wtxt", {"R": np.arange(64.0).reshape(16, 4)}, rows_per_chunk=4, hmac_key=HKEY
    )
    key = tmp_path / "k"
    key.write_bytes(SEED.hex().encode())
    hk = tmp_path / "hk"
    hk.write_bytes(HKEY)
    assert main(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    assert "R[000003]" in out and "hmac (no key)" in out
    assert main(["verify", str(p)]) == 0
    assert main(["sign", str(p), "--key", str(key)]) == 0
    capsys.readouterr()
    pub = tmp_path / "pub"
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pub.write_bytes(Ed25519PrivateKey.from_private_bytes(SEED).public_key().public_bytes_raw())
    assert main(["wverify", str(p), "--public-key", str(pub), "--hmac-key-file", str(hk)]) == 0
    out = capsys.readouterr().out
    assert "ed25519 verified" in out and "hmac authenticated" in out
    # delta + apply
    new = tmp_path / "n.wtxt"
    arr = np.arange(64.0).reshape(16, 4)
    arr[5] = -1
    write(new, {"R": arr}, gen=2, rows_per_chunk=4, hmac_key=HKEY)
    d = tmp_path / "d.wtxtdelta"
    assert main(["delta", str(p), str(new), str(d), "--gen", "2", "--hmac-key-file", str(hk)]) == 0
    assert "1 changed chunks" in capsys.readouterr().out
    o = tmp_path / "o.wtxt"
    assert main(["apply", str(p), str(d), str(o), "--hmac-key-file", str(hk)]) == 0
    assert np.array_equal(wtxt.read(o)["R"], arr)
    # streaming
    s = write(tmp_path / "s.wtxt", {"x": np.ones(3)}, root_pending=True)
    assert main(["verify", str(s)]) == 1
    assert main(["wsum", str(s), "--key", str(key)]) == 0
    assert main(["verify", str(s)]) == 0
    # recover
    data = p.read_bytes().replace(b"endch\nch ix=000002", b"endch\nch ix=000009", 1)
    bad = tmp_path / "bad.wtxt"
    bad.write_bytes(data)
    capsys.readouterr()
    assert main(["recover", str(bad), "-o", str(tmp_path / "r.wtxt")]) == 1
    out = capsys.readouterr().out
    assert "DAMAGE" in out and "chunk 000002" in out
    assert main(["verify", str(bad)]) == 1
    # errors print one line, exit 1
    assert main(["apply", str(bad), str(d), str(o)]) == 1
    # ... led by the input at fault (here the base)
    assert f"tenfold: error: {bad}: wtxt: line" in capsys.readouterr().err
