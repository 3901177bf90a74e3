"""The WTXT writer on several threads (issue 28): each array is fetched once, the thread
count comes from ``tenfold.core.parallel.threads()``, and any thread count writes the same
bytes."""

from __future__ import annotations

import numpy as np
import pytest
from _wtxt_helpers import HKEY, META, SEED

from tenfold import wtxt
from tenfold.core import parallel
from tenfold.wtxt import make_delta


class Deferred:
    """An array fetched on demand, as ``convert`` hands the writer its tensors; counts the
    fetches (a source that decodes on demand pays for each one)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.dtype, self.shape, self.fetches = a, a.dtype, a.shape, 0

    def __array__(self, dtype=None, copy=None):
        self.fetches += 1
        return self.a


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(28)
    return {
        "big": rng.standard_normal(700_001).astype(np.float32),  # 2.7 MiB: several batches
        "odd": rng.integers(0, 255, (1000, 1237), dtype=np.uint8),
        "s": np.array(1.5),
        "z": np.zeros((0, 4), np.int16),
    }


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_each_array_is_fetched_once(tmp_path, workers):
    # Before: twice (the digest pass, then the text pass), on one thread or two.
    src = _arrays()
    arrays = {k: Deferred(v) for k, v in src.items()}
    p = tmp_path / "a.wtxt"
    wtxt.write(p, arrays, **META, hmac_key=HKEY, workers=workers)
    assert {k: d.fetches for k, d in arrays.items()} == dict.fromkeys(src, 1)
    back = wtxt.read(p, hmac_keys=[HKEY])
    for k, v in src.items():
        assert np.array_equal(back[k].reshape(v.shape), v)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"hmac_key": HKEY, "signing_key": SEED, "audit": {"k": "v"}},
        {"signing_key": SEED, "sign_all": True},
        {"rows_per_chunk": {"odd": 3, "big": 50_000}, "hmac_key": HKEY},
        {"root_pending": True, "merkle_prev": "ab" * 32},
    ],
)
def test_any_thread_count_writes_the_same_bytes(tmp_path, kw):
    arrays = _arrays()
    one = tmp_path / "one.wtxt"
    wtxt.write(one, arrays, **META, workers=1, **kw)
    for workers in (2, 5, None):
        p = tmp_path / f"w{workers}.wtxt"
        wtxt.write(p, arrays, **META, workers=workers, **kw)
        assert p.read_bytes() == one.read_bytes(), workers


def _spy_pools(monkeypatch) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []
    real = parallel.scoped

    def spy(workers, name="tenfold"):
        calls.append((name, workers))
        return real(workers, name)

    monkeypatch.setattr(parallel, "threads", lambda: 3)
    monkeypatch.setattr(parallel, "scoped", spy)
    return calls


@pytest.mark.parametrize("threads", [0, -1])
def test_convert_to_wtxt_uses_every_cpu(tmp_path, monkeypatch, threads):
    # Before: convert's default (threads=0) wrote on one thread, and -1 meant a fixed 2.
    from tenfold.convert import convert

    src = tmp_path / "m.npz"
    np.savez(src, a=np.arange(10_000.0), b=np.ones((3, 3), np.float32))
    calls = _spy_pools(monkeypatch)
    convert(src, tmp_path / "m.wtxt", threads=threads, fsync=False)
    assert ("wtxt-w", 3) in calls
    back = wtxt.load(tmp_path / "m.wtxt")
    assert np.array_equal(back["a"], np.arange(10_000.0))


def test_save_uses_every_cpu_by_default(tmp_path, monkeypatch):
    # Before: tenfold.wtxt.save wrote on one thread unless given workers.
    calls = _spy_pools(monkeypatch)
    wtxt.save(tmp_path / "a.wtxt", {"a": np.arange(5.0)})
    assert ("wtxt-w", 3) in calls


def test_make_delta_fetches_each_array_a_few_times_not_once_per_chunk(tmp_path):
    # Before: the comparison with the base fetched the array again for each of its chunks
    # (66 fetches here); now once for the digests, once to compare, once to write the chunks.
    a = np.arange(64 * 8, dtype=np.float64).reshape(64, 8)
    base = tmp_path / "base.wtxt"
    wtxt.write(base, {"w": a}, **META, rows_per_chunk=1)
    b = a.copy()
    b[5] += 1
    new = Deferred(b)
    assert make_delta(base, {"w": new}, tmp_path / "d.wtxtdelta") == 1
    assert new.fetches <= 3


@pytest.mark.parametrize("field", ["sha256_all", "fastxor"])
def test_apply_delta_checks_the_target_root_before_the_file_appears(tmp_path, field):
    # The target root is now checked on the digests the writer computes (one pass over the
    # arrays, not two): a mismatch still raises and leaves no output.
    from tenfold.errors import IntegrityError
    from tenfold.wtxt import apply_delta

    a = np.arange(64 * 8, dtype=np.float64).reshape(64, 8)
    base = tmp_path / "base.wtxt"
    wtxt.write(base, {"w": a}, **META, rows_per_chunk=4)
    b = a.copy()
    b[5] += 1
    d = tmp_path / "d.wtxtdelta"
    make_delta(base, {"w": b}, d)
    good = tmp_path / "good.wtxt"
    apply_delta(base, d, good)
    assert np.array_equal(wtxt.read(good)["w"], b)
    text = d.read_bytes()
    start = text.index(f" {field}=".encode(), text.index(b"\nroot ")) + len(field) + 2
    flipped = b"1" if text[start : start + 1] != b"1" else b"2"
    d.write_bytes(text[:start] + flipped + text[start + 1 :])
    out = tmp_path / "out.wtxt"
    with pytest.raises(IntegrityError, match=f"delta target root.*{field}"):
        apply_delta(base, d, out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "base.wtxt", "d.wtxtdelta", "good.wtxt"
    ]  # fmt: skip
