"""Issue 15, WTXT part: forged files refused by verify and wverify as by read, empty chunks'
digests checked, canonical base64 for signatures and keys, integrity errors naming their lines,
and numbers too long for ``int()`` refused as format errors. Each test is named after the
promise the adversarial review found broken."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
from _wtxt_helpers import HKEY, SEED, write
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tenfold import errors, wtxt
from tenfold.cli import main
from tenfold.errors import FormatError, IntegrityError
from tenfold.wtxt import _spec as S

PRIV = Ed25519PrivateKey.from_private_bytes(SEED)
PUB = PRIV.public_key()
OTHER_SEED = bytes(range(1, 33))
LINE = re.compile(r"\blines? \d+")
ARRAYS = {
    "a": np.arange(6, dtype=np.int16),
    "e": np.zeros(0, np.uint8),
    "m": np.arange(4, dtype=np.float32).reshape(2, 2),
}


def key_files(tmp_path):
    k = tmp_path / "hmac.key"
    k.write_bytes(HKEY + b"\n")
    pub = tmp_path / "pub.hex"
    pub.write_bytes(PUB.public_bytes_raw().hex().encode())
    return k, pub


def wverify(path, *args):
    return main(["wverify", str(path), "-q", *map(str, args)])


# -- 1. verify / wverify apply read's policy ------------------------------------------------


def _forgeries(tmp_path):
    """Files a holder of (HKEY, PUB) must refuse, each forged one way."""
    good = write(tmp_path / "good.wtxt", ARRAYS, hmac_key=HKEY, signing_key=SEED)
    out = {
        # no HMAC at all, but properly signed
        "no_hmac": write(tmp_path / "no_hmac.wtxt", ARRAYS, signing_key=SEED),
        # other data, its HMAC made with another key, signed
        "other_data": write(
            tmp_path / "other_data.wtxt",
            {"a": np.ones(6, np.int16)},
            hmac_key=b"attacker",
            signing_key=SEED,
        ),
        # right HMAC, signed by another key
        "other_signer": write(
            tmp_path / "other_signer.wtxt", ARRAYS, hmac_key=HKEY, signing_key=OTHER_SEED
        ),
        # right HMAC, unsigned
        "unsigned": write(tmp_path / "unsigned.wtxt", ARRAYS, hmac_key=HKEY),
    }
    # a sign line with the right keyid taken from another file
    donor = write(tmp_path / "donor.wtxt", ARRAYS, hmac_key=HKEY, signing_key=SEED, gen=7)
    lines = good.read_bytes().split(b"\n")
    lines[4] = donor.read_bytes().split(b"\n")[4]
    p = tmp_path / "bad_signature.wtxt"
    p.write_bytes(b"\n".join(lines))
    out["bad_signature"] = p
    return good, out


FORGERIES = ["no_hmac", "other_data", "other_signer", "unsigned", "bad_signature"]


@pytest.mark.parametrize("kind", FORGERIES)
def test_verify_with_keys_refuses_forgeries_like_read(tmp_path, kind, capsys):
    good, forged = _forgeries(tmp_path)
    k, pub = key_files(tmp_path)
    assert wtxt.verify(good, hmac_keys=[HKEY], public_keys=[PUB]).ok
    assert wverify(good, "--hmac-key-file", k, "--public-key", pub) == 0
    p = forged[kind]
    with pytest.raises(IntegrityError) as ei:
        wtxt.read(p, hmac_keys=[HKEY], public_keys=[PUB])
    assert LINE.search(str(ei.value)) and isinstance(ei.value.line, int)
    r = wtxt.verify(p, hmac_keys=[HKEY], public_keys=[PUB])
    assert not r.ok and r.exit_code == 1
    assert all(LINE.search(f.obj + " " + f.message) for f in r.errors)
    assert not r.summary["authentication"].startswith("yes")
    capsys.readouterr()
    assert wverify(p, "--hmac-key-file", k, "--public-key", pub) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "DAMAGED" in out and "\nOK:" not in out


def test_missing_hmac_or_signature_with_keys_is_an_error_not_info(tmp_path):
    _, forged = _forgeries(tmp_path)
    r = wtxt.verify(forged["no_hmac"], hmac_keys=[HKEY])
    assert [f.message for f in r.errors] == [
        "unauthenticated (hmac is zero) but hmac keys were given"
    ] * len(ARRAYS)
    assert not any("unauthenticated" in f.message for f in r.findings if f.status == "info")
    r = wtxt.verify(forged["unsigned"], public_keys=[PUB])
    assert [(f.obj, f.message) for f in r.errors] == [
        ("signature (line 5)", "unsigned but public keys were given")
    ]
    r = wtxt.verify(forged["other_signer"], public_keys=[PUB])
    assert len(r.errors) == 1 and "not the keyid of any public key given" in r.errors[0].message


def test_verify_without_keys_reports_unauthenticated_as_info(tmp_path, capsys):
    _, forged = _forgeries(tmp_path)
    for kind in ("no_hmac", "unsigned", "other_signer"):
        r = wtxt.verify(forged[kind])
        assert r.ok, kind
        assert r.summary["authentication"].startswith("no: integrity only")
    r = wtxt.verify(forged["no_hmac"])
    assert any(
        f.status == "info" and f.message == "unauthenticated (hmac is zero)" for f in r.findings
    )
    r = wtxt.verify(forged["unsigned"])
    assert any(f.status == "info" and f.message == "unsigned" for f in r.findings)
    assert wverify(forged["unsigned"]) == 0
    assert main(["verify", str(forged["unsigned"])]) == 0
    assert "authentication: no: integrity only" in capsys.readouterr().out


def test_wverify_refuses_an_empty_key_file(tmp_path, capsys):
    """An empty --hmac-key-file used to be dropped silently: no key, no check, exit 0."""
    _, forged = _forgeries(tmp_path)
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"\n")
    assert wverify(forged["no_hmac"], "--hmac-key-file", empty) == 1
    assert "empty key" in capsys.readouterr().err


def test_wsum_signature_is_mandatory_with_public_keys(tmp_path):
    p = write(tmp_path / "s.wtxt", ARRAYS, hmac_key=HKEY, root_pending=True)
    wtxt.finalize_wsum(p)  # unsigned WSUM
    assert wtxt.verify(p).ok
    r = wtxt.verify(p, public_keys=[PUB])
    assert not r.ok and any(
        f.obj == "wsum signature (s.wtxt.wsum line 1)"
        and f.message == "unsigned but public keys were given"
        for f in r.errors
    )
    wtxt.finalize_wsum(p, signing_key=OTHER_SEED)
    assert not wtxt.verify(p, public_keys=[PUB]).ok
    (tmp_path / "s.wtxt.wsum").unlink()
    r = wtxt.verify(p, public_keys=[PUB])
    assert not r.ok and all(LINE.search(f.obj + f.message) for f in r.errors)


def test_verify_does_not_trust_a_signature_whose_root_does_not_match(tmp_path):
    """DECISIONS WTXT 11: recompute sha256_all and merkle_this before trusting a signature."""
    good = write(tmp_path / "g.wtxt", ARRAYS, signing_key=SEED)
    # change a salt: not covered by the signature (lines 1-4), but by sha256_all
    data = re.sub(
        rb"(arr name=a .* salt=)[0-9a-f]{16}", rb"\g<1>0123456789abcdef", good.read_bytes()
    )
    r = wtxt.verify(data, public_keys=[PUB])
    sig = [f for f in r.findings if f.obj == "signature (line 5)"]
    assert len(sig) == 1 and sig[0].status == "error"
    assert "does not match the content: nothing is authenticated" in sig[0].message
    r = wtxt.verify(data)
    assert not r.ok and r.summary["authentication"].startswith("none")


def test_apply_delta_with_key_refuses_unauthenticated_arrays(tmp_path):
    base = write(tmp_path / "b.wtxt", ARRAYS, hmac_key=HKEY)
    new = dict(ARRAYS, a=ARRAYS["a"] + 1)
    d = tmp_path / "d.wtxtdelta"
    wtxt.make_delta(base, new, d)  # no key: the changed array's hmac is zero
    assert "hmac=" + "0" * 64 in d.read_text()
    with pytest.raises(IntegrityError, match=r"delta array 'a' \(lines 4-\d+\).*hmac is zero"):
        wtxt.apply_delta(base, d, tmp_path / "o.wtxt", hmac_key=HKEY)
    wtxt.apply_delta(base, d, tmp_path / "o.wtxt")  # no key asked for: allowed, unauthenticated
    wtxt.make_delta(base, new, d, hmac_key=HKEY)
    wtxt.apply_delta(base, d, tmp_path / "o.wtxt", hmac_key=HKEY)
    assert np.array_equal(wtxt.read(tmp_path / "o.wtxt", hmac_keys=[HKEY])["a"], new["a"])


# -- 2. the digests of an empty chunk ---------------------------------------------------------

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
BOGUS = [
    (rb"sha256=" + EMPTY_SHA256.encode(), b"sha256=" + b"5" * 64, "sha256"),
    (rb"crc32c=00000000", b"crc32c=deadbeef", "crc32c"),
]


@pytest.mark.parametrize(("old", "new", "field"), BOGUS)
def test_empty_chunk_digests_are_checked(tmp_path, old, new, field):
    p = write(tmp_path / "g.wtxt", ARRAYS, hmac_key=HKEY, signing_key=SEED)
    lines = p.read_bytes().split(b"\n")
    i = next(k for k, ln in enumerate(lines) if ln.startswith(b"ch ") and b" len=0 " in ln)
    assert old in lines[i]
    lines[i] = lines[i].replace(old, new)
    bad = b"\n".join(lines)
    with pytest.raises(
        IntegrityError,
        match=rf"line {i + 1}\b.*chunk {field} mismatch "
        r"\(empty chunk",
    ):
        wtxt.read(bad, hmac_keys=[HKEY], public_keys=[PUB])
    r = wtxt.verify(bad, hmac_keys=[HKEY], public_keys=[PUB])
    assert not r.ok
    row = [f for f in r.findings if f.obj.startswith("array 'e' chunk 000000")]
    assert len(row) == 1 and row[0].status == "error" and f"{field} mismatch" in row[0].message
    assert not any(
        "parity, crc32c, sha256" in f.message for f in r.findings if f.obj.startswith("array 'e'")
    )
    rec = wtxt.recover(bad)
    assert "e" not in rec.arrays and any(
        d.array == "e" and d.first_line == i + 1 for d in rec.damage
    )


@pytest.mark.parametrize(("old", "new", "field"), BOGUS)
def test_empty_chunk_digests_are_checked_in_deltas(tmp_path, old, new, field):
    base = write(tmp_path / "b.wtxt", ARRAYS)
    d = tmp_path / "d.wtxtdelta"
    wtxt.make_delta(base, ARRAYS, d, gen=124)
    text = d.read_bytes()
    # the new gen changes every derived salt, so every array has an arr line (and no chunk);
    # a hand-made delta carries the empty array's chunk, with a bogus digest
    e_line = next(ln for ln in text.split(b"\n") if ln.startswith(b"arr name=e "))
    ch = S.ch_line(0, 0, 0, EMPTY_SHA256, 0).encode().replace(old, new)
    bad = text.replace(e_line + b"\n", e_line + b"\n" + ch + b"\nendch\n")
    assert bad != text
    d.write_bytes(bad)
    with pytest.raises(IntegrityError, match=rf"chunk {field} mismatch \(empty chunk"):
        wtxt.apply_delta(base, d, tmp_path / "o.wtxt")
    r = wtxt.verify(d)
    assert not r.ok and LINE.search(r.errors[0].message)


# -- 3. canonical base64 -----------------------------------------------------------------------


def _non_canonical(sig: bytes) -> bytes:
    """The same bytes with non-zero padding bits: the sibling of the last data character
    (``sig`` ends with ``==``, so that character carries 2 data bits and 4 padding bits)."""
    assert sig.endswith(b"==") and sig[-3:-2] in b"AQgw"
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return sig[:-3] + bytes([alphabet[alphabet.index(sig[-3]) + 1]]) + b"=="


def test_signature_base64_must_be_canonical(tmp_path):
    import base64

    p = write(tmp_path / "g.wtxt", ARRAYS, signing_key=SEED)
    lines = p.read_bytes().split(b"\n")
    sig = lines[4].split(b" ")[1][len(b"ed25519=") :]
    forged = _non_canonical(sig)
    assert forged != sig and base64.b64decode(forged) == base64.b64decode(sig)
    lines[4] = lines[4].replace(sig, forged)
    bad = b"\n".join(lines)
    with pytest.raises(FormatError, match=r"line 5\b.*'ed25519' malformed"):
        wtxt.read(bad, public_keys=[PUB])
    with pytest.raises(FormatError, match=r"line 5\b"):
        wtxt.read(bad)
    assert not wtxt.verify(bad, public_keys=[PUB]).ok
    from tenfold.wtxt.reader import check_signature

    msg = b"\n".join(lines[:4]) + b"\n"
    assert check_signature(sig.decode(), wtxt.keyid_of(PUB), msg, [PUB]) == "verified"
    assert check_signature(forged.decode(), wtxt.keyid_of(PUB), msg, [PUB]) == "bad"


def test_wsum_signature_base64_must_be_canonical(tmp_path):
    p = write(tmp_path / "s.wtxt", ARRAYS, root_pending=True)
    out = wtxt.finalize_wsum(p, signing_key=SEED)
    line = Path(out).read_bytes()
    sig = line.rstrip(b"\n").rsplit(b"sign=", 1)[1]
    Path(out).write_bytes(line.replace(sig, _non_canonical(sig)))
    with pytest.raises(FormatError, match=r"line 1\b.*'sign' malformed"):
        wtxt.read(p, public_keys=[PUB])
    r = wtxt.verify(p, public_keys=[PUB])
    assert not r.ok and any("'sign' malformed" in f.message for f in r.errors)


def test_public_key_pem_base64_must_be_canonical(tmp_path):
    from tenfold.wtxt.signing import load_private_key, load_public_key

    pem = PUB.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    good = tmp_path / "pub.pem"
    good.write_bytes(pem)
    assert load_public_key(good).public_bytes_raw() == PUB.public_bytes_raw()
    body = pem.split(b"\n")[1]
    assert body.endswith(b"=") and not body.endswith(b"==")
    bad = tmp_path / "bad.pem"
    bad.write_bytes(pem.replace(body, _non_canonical(body[:-1] + b"==")[:-1]))
    with pytest.raises(FormatError, match="not canonical base64"):
        load_public_key(bad)
    junk = tmp_path / "junk.pem"
    junk.write_bytes(pem.replace(body, body[:10] + b"*" + body[11:]))
    with pytest.raises(FormatError, match="not canonical base64"):
        load_public_key(junk)
    rsa_like = tmp_path / "priv_as_pub.pem"
    rsa_like.write_bytes(
        PRIV.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(FormatError, match="PEM block"):
        load_public_key(rsa_like)
    assert load_private_key(rsa_like).public_key().public_bytes_raw() == PUB.public_bytes_raw()
    # the CLI prints one line and exits 1, no traceback
    p = write(tmp_path / "g.wtxt", ARRAYS, signing_key=SEED)
    assert main(["wverify", str(p), "--public-key", str(bad)]) == 1


# -- 4. integrity errors name their line ---------------------------------------------------


def _small(tmp_path, **kw):
    p = write(
        tmp_path / "small.wtxt",
        {"a": np.arange(4, dtype=np.int16), "e": np.zeros(0, np.uint8)},
        rows_per_chunk=2,
        hmac_key=b"k",
        signing_key=SEED,
        audit={"n": 1},
        **kw,
    )
    return p.read_bytes()


@pytest.mark.parametrize("field", ["sha256_all", "fastxor", "merkle_this"])
def test_root_integrity_errors_name_their_lines(tmp_path, field):
    data = _small(tmp_path)
    ls = data.split(b"\n")
    last = max(i for i, ln in enumerate(ls) if ln == b"endarr") + 1
    lines = (4, 4) if field == "merkle_this" else (4, last)
    assert ls[3].startswith(b"root ")
    ls[3] = re.sub(
        rb"(%s=)([0-9a-f])" % field.encode(),
        lambda m: m.group(1) + (b"1" if m.group(2) != b"1" else b"2"),
        ls[3],
    )
    with pytest.raises(IntegrityError) as ei:
        wtxt.read(b"\n".join(ls))
    msg = str(ei.value)
    assert msg.startswith(f"wtxt: root (line 4): {field} mismatch"), msg
    assert ei.value.line == 4 and ei.value.lines == lines
    if field != "merkle_this":
        assert f"lines 6-{last}" in msg  # the arr lines and bytes the root covers


def _edits(data: bytes, values: bytes):
    for pos in range(len(data)):
        for b in sorted((set(values) | {data[pos] ^ 1}) - {data[pos]}):
            yield pos, data[:pos] + bytes([b]) + data[pos + 1 :]


def _uncovered(data: bytes, pos: int, sign_all: bool) -> bool:
    """Is ``pos`` in text that no hash covers and that cannot change an array: the audit line,
    or the ``idx`` line of the empty array (its rows_per_chunk cuts nothing)? ``sign_all``
    covers both."""
    start = data.rfind(b"\n", 0, pos) + 1
    line = data[start : data.index(b"\n", pos)] if data[pos] != 10 else b""
    nxt = data[data.index(b"\n", pos) + 1 :]
    return not sign_all and (
        line.startswith(b"audit ")
        or (line.startswith(b"idx ") and nxt.startswith(b"ch ") and b" len=0 " in nxt[:200])
    )


def _check_mutations(data: bytes, values: bytes, sign_all: bool) -> None:
    want = {"a": np.arange(4, dtype=np.int16), "e": np.zeros(0, np.uint8)}
    for pos, m in _edits(data, values):
        uncovered = _uncovered(data, pos, sign_all)
        try:
            got = wtxt.read(m, hmac_keys=[b"k"], public_keys=[PUB])
        except errors.TenfoldError as exc:
            assert LINE.search(str(exc)), (pos, m[pos], str(exc))
            assert isinstance(getattr(exc, "line", None), int), (pos, str(exc))
        else:
            assert uncovered, (pos, m[pos : pos + 1])
            assert got.keys() == want.keys()
            assert all(
                np.array_equal(got[k], v) and got[k].dtype == v.dtype for k, v in want.items()
            )
        r = wtxt.verify(m, hmac_keys=[b"k"], public_keys=[PUB])
        assert uncovered or not r.ok, (pos, m[pos : pos + 1])
        for f in r.errors:
            assert LINE.search(f.obj + " " + f.message), (pos, f)


@pytest.mark.parametrize("sign_all", [False, True])
def test_every_rejection_names_a_line_and_no_edit_passes_with_keys(tmp_path, sign_all):
    """Every single-byte edit (flip the lowest bit, or write one of a few delimiter bytes) of a
    small keyed, signed file: rejected with a line number (message and ``line`` attribute), or,
    only in text nothing covers without sign_all and that cannot change an array, accepted
    with the same arrays; verify with the keys reports every other edit as an error naming a
    line."""
    _check_mutations(_small(tmp_path, sign_all=sign_all), b"\n", sign_all)


@pytest.mark.slow
@pytest.mark.parametrize("sign_all", [False, True])
def test_every_rejection_names_a_line_more_edits(tmp_path, sign_all):
    _check_mutations(_small(tmp_path, sign_all=sign_all), b"\n =0aAf+/\x80\r\t", sign_all)


# -- 5. numbers longer than int() accepts --------------------------------------------------


def _huge(data: bytes, marker: bytes, field: bytes) -> tuple[bytes, int]:
    i = data.index(field, data.index(marker)) + len(field)
    j = i
    while data[j : j + 1].isdigit():
        j += 1
    return data[:i] + b"9" * 5000 + data[j:], data[:i].count(b"\n") + 1


@pytest.mark.parametrize(
    ("marker", "field"),
    [
        (b"ch ix=000000", b"len="),
        (b"ch ix=000000", b"lines="),
        (b"ch ix=000001", b"len="),
        (b"arr name=a", b"bytes="),
        (b"arr name=a", b"shape="),
        (b"idx ", b"rows_per_chunk="),
        (b"idx ", b"row_size="),
        (b"meta ", b"gen="),
        (b"ch ix=000001", b"ix="),
        (b"ch ix=000001", b"off="),
    ],
)
def test_huge_numbers_are_format_errors_naming_line_and_field(tmp_path, marker, field):
    data = _small(tmp_path)
    bad, line = _huge(data, marker, field)
    name = field.decode()[:-1]
    with pytest.raises(FormatError, match=rf"^wtxt: line {line}\b.*'{name}'"):
        wtxt.read(bad)
    r = wtxt.verify(bad)
    assert not r.ok and any(
        f"line {line}" in f.message or f"line {line}" in f.obj for f in r.errors
    )
    if marker != b"meta ":  # recover reads arrays only
        rec = wtxt.recover(bad)
        assert not rec.ok and any(d.first_line <= line <= d.last_line for d in rec.damage)


@pytest.mark.parametrize("field", [b"len=", b"lines="])
def test_huge_numbers_in_deltas_are_format_errors(tmp_path, field):
    base = write(tmp_path / "b.wtxt", ARRAYS, rows_per_chunk=1)
    d = tmp_path / "d.wtxtdelta"
    assert wtxt.make_delta(base, dict(ARRAYS, a=ARRAYS["a"] * 2), d) > 0
    bad, line = _huge(d.read_bytes(), b"\nch ", field)
    d.write_bytes(bad)
    name = field.decode()[:-1]
    for call in (lambda: wtxt.apply_delta(base, d, tmp_path / "o.wtxt"), lambda: wtxt.inspect(d)):
        with pytest.raises(FormatError, match=rf"^wtxt: line {line}\b.*'{name}'"):
            call()
    r = wtxt.verify(d)
    assert not r.ok and f"line {line}" in r.errors[0].message


def test_huge_numbers_in_wsum_are_format_errors(tmp_path):
    p = write(tmp_path / "s.wtxt", ARRAYS, root_pending=True)
    out = wtxt.finalize_wsum(p)
    line = Path(out).read_bytes()
    Path(out).write_bytes(re.sub(rb"fastxor=[0-9a-f]+", b"fastxor=" + b"9" * 5000, line))
    with pytest.raises(FormatError, match=r"line 1\b.*'fastxor' malformed.*5000 characters"):
        wtxt.read(p)
    r = wtxt.verify(p)
    assert not r.ok and any("'fastxor' malformed" in f.message for f in r.errors)


def test_verify_of_a_delta_with_keys_is_not_reported_authenticated(tmp_path):
    """A delta carries no signature and its HMACs cover arrays that exist only once applied:
    keys given to verify cannot authenticate it, so that must not exit 0."""
    base = write(tmp_path / "b.wtxt", ARRAYS, hmac_key=HKEY)
    d = tmp_path / "d.wtxtdelta"
    wtxt.make_delta(base, dict(ARRAYS, a=ARRAYS["a"] + 1), d, hmac_key=HKEY)
    r = wtxt.verify(d)
    assert r.ok and r.summary["authentication"].startswith("none")
    r = wtxt.verify(d, hmac_keys=[HKEY])
    assert not r.ok and r.errors[0].obj == "delta (line 1)"
    k, pub = key_files(tmp_path)
    assert wverify(d, "--hmac-key-file", k) == 1
    assert wverify(d) == 0


def test_verify_and_recover_report_an_impossible_shape_as_damage(capsys):
    # found by scripts/fuzz.py: shape=0,2**63 made verify/recover raise NumPy's ValueError
    # ("Maximum allowed dimension exceeded") instead of reporting the array as damaged
    from pathlib import Path

    import tenfold.wtxt as w
    from tenfold.cli import main

    p = Path(__file__).resolve().parents[1] / "vectors" / "fuzz" / "fuzz_shape_dim_2pow63.wtxt"
    rec = w.recover(p)
    assert any("bad shape" in d.reason and d.array == "e" for d in rec.damage)
    assert "e" not in rec.arrays
    assert main(["verify", str(p)]) == 1
    assert "bad shape" in capsys.readouterr().out
