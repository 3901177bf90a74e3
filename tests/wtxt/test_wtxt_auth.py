"""HMAC, Ed25519 signatures (root coverage and sign_all), Merkle chain, verify reports."""

import re

import numpy as np
import pytest
from _wtxt_helpers import HKEY, SEED, sample, write
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tenfold import wtxt
from tenfold.core.checksums import xxh64_hex
from tenfold.errors import IntegrityError

PRIV = Ed25519PrivateKey.from_private_bytes(SEED)
PUB = PRIV.public_key()
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(32)).public_key()


def statuses(report):
    return {(f.obj, f.status, f.message) for f in report.findings}


def test_hmac_authenticated_and_keys_required(tmp_path):
    p = write(tmp_path / "a.wtxt", hmac_key=HKEY)
    assert wtxt.read(p, hmac_keys=[b"other", HKEY]).keys() == sample().keys()
    with pytest.raises(IntegrityError, match="hmac mismatch"):
        wtxt.read(p, hmac_keys=[b"wrong"])
    r = wtxt.verify(p, hmac_keys=[HKEY])
    assert r.ok and any(f.message == "hmac authenticated" for f in r.findings)
    r = wtxt.verify(p, hmac_keys=[b"wrong"])
    assert not r.ok and any("hmac mismatch" in f.message for f in r.errors)


def test_unauthenticated_reported(tmp_path):
    p = write(tmp_path / "a.wtxt")
    assert "0" * 64 in p.read_text()
    r = wtxt.verify(p)
    assert r.ok
    assert any(
        f.status == "info" and "unauthenticated (hmac is zero)" in f.message for f in r.findings
    )
    with pytest.raises(IntegrityError, match="unauthenticated"):
        wtxt.read(p, hmac_keys=[HKEY])


def test_explicit_salt(tmp_path):
    p = write(tmp_path / "a.wtxt", hmac_key=HKEY, salt=bytes(range(8)))
    assert p.read_text().count("salt=0001020304050607") == len(sample())
    q = write(tmp_path / "b.wtxt", hmac_key=HKEY, salt={"b": "00000000000000ff"})
    assert "salt=00000000000000ff" in q.read_text()
    assert wtxt.read(q, hmac_keys=[HKEY])


def test_signature_covers_through_root(tmp_path):
    p = write(tmp_path / "a.wtxt", signing_key=SEED)
    text = p.read_text().split("\n")
    sign = text[4]
    assert re.fullmatch(r"sign ed25519=[A-Za-z0-9+/]{86}== keyid=[0-9a-f]{16}", sign)
    raw_pub = (
        bytes.fromhex(PUB.public_bytes_raw().hex()) if hasattr(PUB, "public_bytes_raw") else None
    )
    assert sign.endswith("keyid=" + xxh64_hex(raw_pub))
    assert wtxt.keyid_of(PUB) == xxh64_hex(raw_pub)
    import base64

    msg = "\n".join(text[:4]).encode() + b"\n"
    PUB.verify(base64.b64decode(sign.split()[1][8:]), msg)
    assert wtxt.read(p, public_keys=[PUB])
    r = wtxt.verify(p, public_keys=[PUB])
    assert r.ok and any("ed25519 verified" in f.message for f in r.findings)
    # without keys the signature is reported, not checked; with another key it is an error
    r = wtxt.verify(p)
    assert r.ok and any("not verified: no public key given" in f.message for f in r.findings)
    r = wtxt.verify(p, public_keys=[OTHER])
    assert not r.ok and any("not the keyid of any public key given" in f.message for f in r.errors)
    with pytest.raises(IntegrityError, match="signature"):
        wtxt.read(p, public_keys=[OTHER])
    # an unsigned file fails when a signature is required
    u = write(tmp_path / "u.wtxt")
    with pytest.raises(IntegrityError, match="unsigned"):
        wtxt.read(u, public_keys=[PUB])


def test_signature_tamper_detected(tmp_path):
    p = write(tmp_path / "a.wtxt", signing_key=SEED)
    data = p.read_bytes()
    bad = data.replace(b"build=abc123", b"build=abc124", 1)
    r = wtxt.verify(bad, public_keys=[PUB])
    assert not r.ok
    errs = {(f.obj, f.message.split(" ", 1)[0]) for f in r.errors}
    assert ("signature (line 5)", "ed25519") in errs and ("root (line 4)", "merkle_this") in errs


def test_sign_all(tmp_path):
    p = write(tmp_path / "a.wtxt", signing_key=SEED, sign_all=True, audit={"k": "v"})
    text = p.read_bytes()
    assert b"cap ext=crc32c,line_parity,sign_all\n" in text
    assert wtxt.read(p, public_keys=[PUB])
    # the audit line is covered by sign_all (not by hashes)
    bad = text.replace(b"audit k=v", b"audit k=w")
    with pytest.raises(IntegrityError, match="signature"):
        wtxt.read(bad, public_keys=[PUB])
    # without sign_all the audit line is not covered
    q = write(tmp_path / "b.wtxt", signing_key=SEED, audit={"k": "v"})
    bad = q.read_bytes().replace(b"audit k=v", b"audit k=w")
    assert wtxt.read(bad, public_keys=[PUB])
    r = wtxt.verify(bad, public_keys=[PUB])
    assert any(f.obj.startswith("audit") and "unauthenticated" in f.message for f in r.findings)
    w2 = write(tmp_path / "c.wtxt", signing_key=SEED, sign_all=True, audit={"k": "v"}, workers=2)
    assert w2.read_bytes() == text


def test_resign_equals_direct_write(tmp_path):
    from tenfold.wtxt.signing import sign_file

    plain = write(tmp_path / "a.wtxt", hmac_key=HKEY)
    signed = write(tmp_path / "b.wtxt", hmac_key=HKEY, signing_key=SEED)
    sign_file(plain, SEED, out=tmp_path / "c.wtxt")
    assert (tmp_path / "c.wtxt").read_bytes() == signed.read_bytes()
    all_ = write(tmp_path / "d.wtxt", hmac_key=HKEY, signing_key=SEED, sign_all=True)
    sign_file(signed, SEED, sign_all=True, out=tmp_path / "e.wtxt")
    assert (tmp_path / "e.wtxt").read_bytes() == all_.read_bytes()


def test_merkle_chain(tmp_path):
    g1 = write(tmp_path / "g1.wtxt", gen=1)
    with wtxt.open(g1) as f:
        assert f.root["merkle_prev"] == "0" * 64
        prev = f.root["merkle_this"]
    g2 = write(tmp_path / "g2.wtxt", gen=2, merkle_prev=prev)
    with wtxt.open(g2) as f:
        assert f.root["merkle_prev"] == prev
    r = wtxt.verify(g2)
    assert any(
        f.obj == "root (line 4)" and f.message.startswith("merkle_this") and prev[:16] in f.message
        for f in r.findings
    )


def test_verify_reports_chunks_and_damage(tmp_path):
    p = write(tmp_path / "a.wtxt", {"x": np.arange(100, dtype=np.float64)}, rows_per_chunk=10)
    lines = p.read_bytes().split(b"\n")
    i = [k for k, line in enumerate(lines) if line.startswith(b"ch ix=000003")][0] + 2
    lines[i] = lines[i][:5] + (b"A" if lines[i][5:6] != b"A" else b"B") + lines[i][6:]
    r = wtxt.verify(b"\n".join(lines))
    assert not r.ok
    errs = [f for f in r.errors if "chunk 000003" in f.obj]
    assert errs and f"line {i + 1}" in errs[0].message
    ok_chunks = [f for f in r.findings if "chunk" in f.obj and f.status == "ok"]
    assert len(ok_chunks) == 9


def test_verify_never_raises_on_structural_damage(tmp_path):
    p = write(
        tmp_path / "a.wtxt",
        {"x": np.arange(100, dtype=np.float64), "y": np.ones(5)},
        rows_per_chunk=10,
    )
    data = p.read_bytes().replace(b"endarr\narr name=y", b"arr name=y", 1)
    r = wtxt.verify(data)
    assert not r.ok and r.errors[0].obj == "structure"
    assert any(f.obj == "array 'x'" and "intact" in f.message for f in r.findings)
