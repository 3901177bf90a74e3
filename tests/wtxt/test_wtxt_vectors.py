"""Golden vectors: rebuilt in memory and compared byte for byte; each read and verified."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from tenfold import errors, wtxt

ROOT = Path(__file__).resolve().parents[2]
VEC = ROOT / "tests" / "vectors" / "wtxt"
SEED = bytes(range(32))
HKEY = b"golden-hmac-key"


def _gen():
    spec = importlib.util.spec_from_file_location(
        "gen_wtxt_vectors", ROOT / "scripts" / "gen_wtxt_vectors.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def built():
    return _gen().build()


def test_vectors_regenerate_identically(built):
    names = sorted(p.name for p in VEC.iterdir())
    assert names == sorted(built)
    for name, data in built.items():
        assert (VEC / name).read_bytes() == data, f"{name} differs from the committed vector"


GOOD = [
    "basic.wtxt",
    "all_dtypes.wtxt",
    "row_blocking.wtxt",
    "multichunk.wtxt",
    "hmac.wtxt",
    "hmac_salt.wtxt",
    "signed.wtxt",
    "signed_all.wtxt",
    "audit.wtxt",
    "gen124_merkle.wtxt",
    "pending.wtxt",
    "delta_applied.wtxt",
]


@pytest.mark.parametrize("name", GOOD)
def test_good_vectors_read_and_verify(name):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pub = Ed25519PrivateKey.from_private_bytes(SEED).public_key()
    keys = [HKEY] if name.startswith(("hmac", "signed.")) else []
    pubs = [pub] if name.startswith(("signed", "pending")) else []
    got = wtxt.read(VEC / name, hmac_keys=keys, public_keys=pubs)
    assert got
    r = wtxt.verify(VEC / name, hmac_keys=keys, public_keys=pubs)
    assert r.ok, r.format()


def test_vector_contents():
    g = _gen()
    arrays = g._arrays()
    assert np.array_equal(wtxt.read(VEC / "basic.wtxt")["W_base"], arrays["basic"]["W_base"])
    got = wtxt.read(VEC / "all_dtypes.wtxt")
    for k, v in arrays["all_dtypes"].items():
        assert np.array_equal(got[k].reshape(v.shape), v)
    text = (VEC / "multichunk.wtxt").read_text()
    assert "len=32768" in text and "lines=575" in text and "len=4464" in text
    assert 'notes="Sera gamma=0.96 r=4096"' in (VEC / "audit.wtxt").read_text()
    with wtxt.open(VEC / "basic.wtxt") as a, wtxt.open(VEC / "gen124_merkle.wtxt") as b:
        assert b.root["merkle_prev"] == a.root["merkle_this"]
    with wtxt.open(VEC / "delta_applied.wtxt") as f:
        assert f["R"][20].tolist() == [-1] * 6


MANIFEST = json.loads((VEC / "MANIFEST.json").read_text())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_bad_vectors(name):
    want = MANIFEST[name]
    cls = getattr(errors, want["error"])
    with pytest.raises(cls, match=want["message"]):
        wtxt.read(VEC / name)
    assert not wtxt.verify(VEC / name).ok
