"""recover(), WSUM streaming finalization, DELTA v2 and age armor."""

import re
from pathlib import Path

import numpy as np
import pytest
from _wtxt_helpers import HKEY, META, SEED, sample, write
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tenfold import wtxt
from tenfold.errors import EncodeError, FormatError, IntegrityError

PUB = Ed25519PrivateKey.from_private_bytes(SEED).public_key()


# -- recover ----------------------------------------------------------------------------


def damaged(tmp_path):
    arrays = {
        "a": np.arange(200, dtype=np.float64),
        "b": np.arange(50, dtype=np.int32),
        "c": np.ones((4, 4), np.float32),
    }
    p = write(tmp_path / "a.wtxt", arrays, rows_per_chunk=50)
    ls = p.read_bytes().split(b"\n")
    # damage one base64 line of a's chunk 1 and delete one line of b's only chunk
    i = [k for k, line in enumerate(ls) if line.startswith(b"ch ix=000001")][0] + 3
    ls[i] = ls[i][:10] + b"\t" + ls[i][11:]
    j = [k for k, line in enumerate(ls) if line.startswith(b"arr name=b")][0] + 3
    del ls[j]
    return arrays, b"\n".join(ls), i + 1, j + 1


def test_recover_returns_intact_arrays_and_lines(tmp_path):
    arrays, data, bad_line, del_line = damaged(tmp_path)
    with pytest.raises(FormatError):
        wtxt.read(data)
    rec = wtxt.recover(data)
    assert list(rec.arrays) == ["c"]
    assert np.array_equal(rec.arrays["c"], arrays["c"])
    assert not rec.ok
    by = {(d.array, d.chunk): d for d in rec.damage}
    assert by[("a", 1)].first_line == bad_line and "tab" in by[("a", 1)].reason
    assert ("b", 0) in by and "base64 lines" in by[("b", 0)].reason
    part, mask = rec.partial["a"]
    good = mask.reshape(-1, 8).all(axis=1)
    assert np.array_equal(part[good], arrays["a"][good])
    assert int(mask.sum()) == 200 * 8 - 400
    r = wtxt.verify(data)
    assert not r.ok and any(f"line {bad_line}" in f.obj for f in r.errors)


def test_recover_refuses_a_file_that_is_not_wtxt():
    with pytest.raises(FormatError, match="not a WTXT snapshot") as e:
        wtxt.recover(b"ZTEN0001" + bytes(200))
    assert e.value.line == 1 and "'ZTEN0001" in str(e.value)
    with pytest.raises(FormatError, match="DELTA"):
        wtxt.recover(b"WTXT-DELTA 2 base=x\n")
    # a damaged magic line alone does not stop recovery when the arrays are there
    # (test_recover_returns_intact_arrays_and_lines); a snapshot of no array is intact
    assert wtxt.recover(b"WTXT 1\nendwtxt\n").ok


def test_recover_clean_file(tmp_path):
    p = write(tmp_path / "a.wtxt")
    rec = wtxt.recover(p)
    assert rec.ok and sorted(rec.arrays) == sorted(sample())


# -- WSUM -------------------------------------------------------------------------------


def test_wsum_roundtrip(tmp_path):
    p = write(tmp_path / "s.wtxt", hmac_key=HKEY, root_pending=True)
    text = p.read_text().split("\n")
    assert text[3] == "root_pending sha256_all=" + "0" * 64 + ' note="finalize with WSUM"'
    assert "wsum" in text[2]
    with pytest.raises(IntegrityError, match="WSUM"):
        wtxt.read(p)
    assert wtxt.read(p, allow_pending=True).keys() == sample().keys()
    r = wtxt.verify(p)
    assert not r.ok and any("no WSUM" in f.message for f in r.errors)
    prev = "cd" * 32
    out = wtxt.finalize_wsum(p, merkle_prev=prev, signing_key=SEED, hmac_keys=[HKEY])
    line = Path(out).read_bytes()
    assert re.fullmatch(
        rb"WSUM 1 sha256_all=[0-9a-f]{64} merkle_prev=(cd){32} "
        rb"merkle_this=[0-9a-f]{64} fastxor=[0-9a-f]{16} keyid=[0-9a-f]{16} "
        rb"sign=[A-Za-z0-9+/]{86}==\n",
        line,
    )
    assert wtxt.read(p, public_keys=[PUB], hmac_keys=[HKEY]).keys() == sample().keys()
    r = wtxt.verify(p, public_keys=[PUB])
    assert r.ok and any(
        f.obj == "wsum signature (s.wtxt.wsum line 1)" and f.status == "ok" for f in r.findings
    )
    # the WSUM root equals the root a direct (non-streaming) write would have had
    d = write(tmp_path / "d.wtxt", hmac_key=HKEY, merkle_prev=prev)
    droot = dict(t.split("=") for t in d.read_text().split("\n")[3].split()[1:])
    assert all(f"{k}={v}".encode() in line for k, v in droot.items())
    # tampering with the WSUM is caught
    bad = line.replace(b"merkle_prev=cd", b"merkle_prev=ce")
    (tmp_path / "s.wtxt.wsum").write_bytes(bad)
    with pytest.raises(IntegrityError):
        wtxt.read(p)


def test_wsum_unsigned_and_errors(tmp_path):
    p = write(tmp_path / "s.wtxt", root_pending=True)
    out = wtxt.finalize_wsum(p)
    assert Path(out).read_bytes().endswith(b" sign=\n")
    assert wtxt.read(p)
    with pytest.raises(IntegrityError, match="unsigned"):
        wtxt.read(p, public_keys=[PUB])
    q = write(tmp_path / "q.wtxt")
    with pytest.raises(FormatError, match="not root_pending"):
        wtxt.finalize_wsum(q)
    from tenfold.wtxt.stream import parse_wsum

    for bad in [
        b"",
        b"WSUM 1 x\n",
        b"WSUM 2 sha256_all=\n",
        Path(out).read_bytes() * 2,
        Path(out).read_bytes().replace(b"\n", b"\r\n"),
    ]:
        with pytest.raises(FormatError):
            parse_wsum(bad)


# -- DELTA v2 ---------------------------------------------------------------------------


def big_arrays():
    rng = np.random.default_rng(1)
    return {"R": rng.standard_normal((512, 16)), "s": np.arange(10, dtype=np.int64)}


def test_delta_one_chunk_and_apply_identity(tmp_path):
    base = write(tmp_path / "base.wtxt", big_arrays(), gen=1, hmac_key=HKEY, rows_per_chunk=64)
    new = big_arrays()
    new["R"][200, 3] += 1.0
    dpath = tmp_path / "d.wtxtdelta"
    n = wtxt.make_delta(base, new, dpath, gen=2, ts="2025-10-10T00:00:00Z", hmac_key=HKEY)
    dtext = dpath.read_text()
    # salts are derived from gen, so both arrays' arr lines change; only one chunk travels
    assert n == 1 and dtext.count("\nch ") == 1 and "ch ix=000003 off=000000024576" in dtext
    assert dtext.startswith("WTXT-DELTA 2 base_sha256_all=") and dtext.endswith("enddelta\n")
    out = tmp_path / "out.wtxt"
    wtxt.apply_delta(base, dpath, out, hmac_key=HKEY)
    with wtxt.open(base) as f:
        prev = f.root["merkle_this"]
    direct = write(
        tmp_path / "direct.wtxt",
        new,
        gen=2,
        ts="2025-10-10T00:00:00Z",
        hmac_key=HKEY,
        rows_per_chunk=64,
        merkle_prev=prev,
    )
    assert out.read_bytes() == direct.read_bytes()
    assert wtxt.verify(dpath).ok
    assert wtxt.inspect(dpath)[1]["layout"] == "chunks 000003"


def test_delta_same_meta_only_changed_array(tmp_path):
    base = write(
        tmp_path / "base.wtxt", big_arrays(), rows_per_chunk=64, signing_key=SEED, audit={"n": 1}
    )
    new = big_arrays()
    new["s"][0] = 99
    d = tmp_path / "d"
    assert wtxt.make_delta(base, new, d) == 1
    assert "arr name=R" not in d.read_text()
    out = tmp_path / "o.wtxt"
    wtxt.apply_delta(base, d, out, signing_key=SEED)
    with wtxt.open(base) as f:
        prev = f.root["merkle_this"]
    direct = write(
        tmp_path / "x.wtxt",
        new,
        rows_per_chunk=64,
        signing_key=SEED,
        merkle_prev=prev,
        audit={"n": 1},
    )
    assert out.read_bytes() == direct.read_bytes()
    # without a key the old signature is dropped
    wtxt.apply_delta(base, d, out)
    assert b"\nsign " not in out.read_bytes()


def test_delta_errors(tmp_path):
    base = write(tmp_path / "base.wtxt", big_arrays(), rows_per_chunk=64)
    other = write(
        tmp_path / "other.wtxt",
        {"R": np.zeros((512, 16)), "s": np.zeros(10, np.int64)},
        rows_per_chunk=64,
    )
    new = big_arrays()
    new["R"][0, 0] = 5
    d = tmp_path / "d"
    wtxt.make_delta(base, new, d)
    with pytest.raises(IntegrityError, match="base_sha256_all"):
        wtxt.apply_delta(other, d, tmp_path / "o.wtxt")
    bad = dict(new)
    bad["R"] = bad["R"][:10]
    with pytest.raises(EncodeError, match="dtype or shape"):
        wtxt.make_delta(base, bad, d)
    with pytest.raises(EncodeError, match="names"):
        wtxt.make_delta(base, {"R": new["R"]}, d)
    text = d.read_bytes()
    lied = re.sub(rb"(arr name=R sha256=)[0-9a-f]{64}", rb"\g<1>" + b"0" * 64, text)
    (tmp_path / "lied").write_bytes(lied)
    with pytest.raises(IntegrityError, match="sha256"):
        wtxt.apply_delta(base, tmp_path / "lied", tmp_path / "o.wtxt")
    moved = text.replace(b"ch ix=000000 off=000000000000", b"ch ix=000000 off=000000000008")
    (tmp_path / "moved").write_bytes(moved)
    with pytest.raises(FormatError, match="'off' mismatch"):
        wtxt.apply_delta(base, tmp_path / "moved", tmp_path / "o.wtxt")
    (tmp_path / "trunc").write_bytes(text[:-9])
    with pytest.raises(FormatError):
        wtxt.apply_delta(base, tmp_path / "trunc", tmp_path / "o.wtxt")
    assert not (tmp_path / "o.wtxt").exists()


# -- armor ------------------------------------------------------------------------------


def test_armor_roundtrip(tmp_path):
    pyrage = pytest.importorskip("pyrage", reason="pyrage (optional 'crypto' extra) not installed")
    ident = pyrage.x25519.Identity.generate()
    p = write(tmp_path / "a.wtxt")
    enc = tmp_path / "a.wtxt.age"
    wtxt.armor_encrypt(p, enc, [ident.to_public()])
    data = enc.read_bytes()
    assert data.startswith(b"-----BEGIN AGE ENCRYPTED FILE-----")
    assert all(b == 10 or 0x20 <= b <= 0x7E for b in data)
    out = tmp_path / "dec.wtxt"
    wtxt.armor_decrypt(enc, out, [str(ident)])
    assert out.read_bytes() == p.read_bytes()
    with pytest.raises(IntegrityError, match="cannot decrypt"):
        wtxt.armor_decrypt(enc, out, [pyrage.x25519.Identity.generate()])


_ = META


def test_armor_without_pyrage(tmp_path, monkeypatch):
    # pyrage is in the test extra; this checks the message users get without the crypto extra
    import sys

    from tenfold.errors import UnsupportedError

    monkeypatch.setitem(sys.modules, "pyrage", None)
    p = write(tmp_path / "a.wtxt")
    with pytest.raises(UnsupportedError, match="pyrage"):
        wtxt.armor_encrypt(p, tmp_path / "a.age", ["age1x"])
    with pytest.raises(UnsupportedError, match="pyrage"):
        wtxt.armor_decrypt(p, tmp_path / "b.wtxt", ["AGE-SECRET-KEY-1"])
    assert not (tmp_path / "a.age").exists()


def test_delta_and_apply_keep_encoded_names(tmp_path, capsys):
    # a new-user trial: `tenfold delta` refused every state dict tenfold.save wrote with dotted
    # or 0-d names ("name must match [A-Za-z0-9_]+"), and apply dropped the name encoding
    import numpy as np

    import tenfold
    from tenfold.cli import main

    a = {"layer.0.w": np.arange(12, dtype=np.float32).reshape(3, 4), "c": np.int64(5)}
    b = {"layer.0.w": a["layer.0.w"] * 2, "c": np.int64(7)}
    tenfold.save(tmp_path / "a.wtxt", a)
    tenfold.save(tmp_path / "b.wtxt", b)
    d, out = tmp_path / "d.wtxt", tmp_path / "out.wtxt"
    assert main(["delta", str(tmp_path / "a.wtxt"), str(tmp_path / "b.wtxt"), str(d)]) == 0
    assert main(["apply", str(tmp_path / "a.wtxt"), str(d), str(out)]) == 0
    got = tenfold.load(out)
    assert sorted(got) == ["c", "layer.0.w"]
    for k, v in b.items():
        assert got[k].shape == np.shape(v) and np.array_equal(got[k], v)


def test_inspect_counts_arrays_not_their_chunks(tmp_path, capsys):
    # a new-user trial: one 8 MiB array was shown as "258 objects, 27.1 MiB of data" (chunk
    # and root rows were counted as objects)
    import json

    import numpy as np

    import tenfold
    from tenfold.cli import main

    p = tmp_path / "w.wtxt"
    tenfold.save(p, {"w": np.zeros(1 << 20, np.float32), "b": np.ones(3, np.int32)})
    assert main(["inspect", str(p)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert ", 2 objects, 4.0 MiB of data," in head, head
    assert main(["inspect", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    chunks = [o for o in doc["objects"] if o.get("part") == "chunk"]
    assert chunks and all(o["name"] == o["name"].strip() for o in chunks)
    assert [o["name"] for o in doc["objects"] if not o.get("part")] == ["b", "w"] or [
        o["name"] for o in doc["objects"] if not o.get("part")
    ] == ["w", "b"]
