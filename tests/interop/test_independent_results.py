"""Every writable tensor or array a load hands out is memory of its own (issue #21).

The zTensor v2 writer stores equal raw parts once (all-zero biases, tied weights); a reader of
any format may cache what it decoded; ``get_tensor`` may be asked twice for the same name. In
none of these cases may writing into one result change another result, a later result, or
the file. Read-only zero-copy views (``tenfold.open``, ``framework="np"`` over a map) may
share memory: nothing can be written through them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenfold
import tenfold.torch
from tenfold import ztensor
from tenfold.interop.frameworks import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_frameworks import WRITERS, _open_path  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None, reason="PyTorch is not installed (extra: tenfold[torch])"
)


def _dedup_v2(path: Path, *, tied: bool = False) -> dict[str, np.ndarray]:
    """A v2 file whose writer stores equal parts once: two zero biases (or tied weights)
    next to a tensor of its own."""
    rng = np.random.default_rng(5)
    if tied:
        w = rng.standard_normal((16, 8)).astype(np.float32)
        t = {"embed.weight": w, "other": rng.standard_normal(7), "lm_head.weight": w.copy()}
    else:
        t = {
            "l1.bias": np.zeros(1024, np.float32),
            "w": rng.standard_normal((4, 4)).astype(np.float32),
            "l2.bias": np.zeros(1024, np.float32),
            "l3.bias": np.zeros(1024, np.float32),
        }
    ztensor.save(path, t, generation=2)
    return t


def _blobs(path: Path) -> int:
    """How many distinct byte ranges the v2 file's tensors use (the test's premise)."""
    with tenfold.open(path) as r:
        return len({r[n].__array_interface__["data"][0] for n in r.keys()})


def _as_np(x) -> np.ndarray:
    if torch is not None and isinstance(x, torch.Tensor):
        from tenfold.interop._torch import from_torch

        return from_torch(x)
    return np.asarray(x)


def _scribble(x) -> bool:
    """Write into ``x`` when it is writable; False when it cannot be written."""
    if torch is not None and isinstance(x, torch.Tensor):
        if x.numel():
            x.reshape(-1).view(torch.uint8).fill_(0xA5) if x.is_contiguous() else x.fill_(7)
        return True
    if isinstance(x, np.ndarray) and x.flags.writeable:
        x.reshape(-1).view(np.uint8).fill(0xA5) if x.flags.c_contiguous else x.fill(7)
        return True
    return False


# -- the v2 deduplicated parts -------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("tied", [False, True], ids=["zero-biases", "tied-weights"])
def test_torch_load_file_of_deduplicated_parts_gives_independent_tensors(tmp_path, tied):
    p = tmp_path / "m.zt"
    want = _dedup_v2(p, tied=tied)
    assert _blobs(p) < len(want)  # the premise: the file stores some tensors once
    state = tenfold.torch.load_file(p)
    for n in want:
        state[n].add_(1)  # every tensor written once: each must see exactly its own write
    for n, a in want.items():
        np.testing.assert_array_equal(state[n].numpy(), a + 1, err_msg=n)
    again = tenfold.torch.load_file(p)  # and the file is untouched
    for n, a in want.items():
        np.testing.assert_array_equal(again[n].numpy(), a, err_msg=n)


@needs_torch
def test_only_the_duplicates_are_copied(tmp_path):
    """One tensor of each group of equal parts stays a view of the file's pages; the others
    are copies, and tensors with their own part are never copied."""
    p = tmp_path / "m.zt"
    want = _dedup_v2(p)
    with tenfold.torch.safe_open(p) as f:
        got = {n: f.get_tensor(n) for n in want}
        assert f._convert.copies == 2  # l2.bias and l3.bias; l1.bias and w are views
    ptrs = {n: t.data_ptr() for n, t in got.items()}
    assert len(set(ptrs.values())) == len(want)


@needs_torch
def test_torch_safe_open_get_tensor_of_deduplicated_parts(tmp_path):
    p = tmp_path / "m.zt"
    want = _dedup_v2(p)
    with tenfold.torch.safe_open(p) as f:
        a = f.get_tensor("l1.bias")
        b = f.get_tensor("l2.bias")
        a.add_(1)
        assert float(b[0]) == 0.0
        b.add_(2)
        assert float(a[0]) == 1.0
        assert float(f.get_tensor("l3.bias")[0]) == 0.0
        assert float(f.get_tensor("l1.bias")[0]) == 0.0  # a second time: the file's value
    _ = want


def test_numpy_load_copy_of_deduplicated_parts(tmp_path):
    p = tmp_path / "m.zt"
    want = _dedup_v2(p)
    got = tenfold.load(p, copy=True)
    for n in want:
        assert got[n].flags.writeable
        got[n] += 1
    for n, a in want.items():
        np.testing.assert_array_equal(got[n], a + 1, err_msg=n)


def test_numpy_views_of_deduplicated_parts_are_read_only(tmp_path):
    """Sharing is allowed where nothing can be written: the zero-copy views."""
    p = tmp_path / "m.zt"
    _dedup_v2(p)
    for got in (tenfold.load(p), tenfold.load(p, mmap=False)):
        assert not any(a.flags.writeable for a in got.values())


# -- the same name twice, every format ------------------------------------------------------------
FRAMEWORKS = ["np", pytest.param("pt", marks=needs_torch)]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("kind", list(WRITERS))
def test_get_tensor_twice_gives_independent_results(tmp_path, kind, fw):
    path, expected, _ = _open_path(tmp_path, kind)
    with safe_open(path, framework=fw) as f:
        for name, want in expected.items():
            first = f.get_tensor(name)
            wrote = _scribble(first)
            second = f.get_tensor(name)
            assert _as_np(second).tobytes() == want.tobytes(), name
            if wrote and _scribble(second):
                third = f.get_tensor(name)
                assert _as_np(third).tobytes() == want.tobytes(), name


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("kind", list(WRITERS))
def test_overlapping_slices_are_independent(tmp_path, kind, fw):
    path, expected, _ = _open_path(tmp_path, kind)
    want = expected["w"]
    with safe_open(path, framework=fw) as f:
        s = f.get_slice("w")
        first = s[0:4]
        wrote = _scribble(first)
        second = s[2:6]
        assert _as_np(second).tobytes() == want[2:6].tobytes()
        whole = f.get_tensor("w")
        assert _as_np(whole).tobytes() == want.tobytes()
        if wrote:
            _scribble(whole)
            assert _as_np(s[1:3, ::2]).tobytes() == np.ascontiguousarray(want[1:3, ::2]).tobytes()


@needs_torch
@pytest.mark.parametrize("kind", [k for k in WRITERS if not k.startswith("sharded")])
def test_torch_load_file_then_scribble_every_format(tmp_path, kind):
    path, expected, _ = _open_path(tmp_path, kind)
    state = tenfold.torch.load_file(path)
    for t in state.values():
        _scribble(t)
    again = tenfold.torch.load_file(path)
    for n, a in expected.items():
        assert _as_np(again[n]).tobytes() == a.tobytes(), n


# -- sharded ---------------------------------------------------------------------------------------
@needs_torch
def test_sharded_deduplicated_parts_and_twice(tmp_path):
    rng = np.random.default_rng(9)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    t = {"a.bias": np.zeros(64, np.float32), "b.bias": np.zeros(64, np.float32), "w": w,
         "tied": w.copy()}  # fmt: skip
    p = tmp_path / "m.zt"
    tenfold.save(p, t, max_shard_size=600, generation=2)  # v2: xxh3 digests, no checksum=
    index = Path(str(p) + ".index.json")
    assert index.exists()
    state = tenfold.torch.load_file(index)
    for v in state.values():
        v.add_(1)
    for n, a in t.items():
        np.testing.assert_array_equal(state[n].numpy(), a + 1, err_msg=n)
    with tenfold.torch.safe_open(index) as f:
        x = f.get_tensor("w")
        x.add_(1)
        np.testing.assert_array_equal(f.get_tensor("w").numpy(), w)
        np.testing.assert_array_equal(f.get_tensor("tied").numpy(), w)


# -- JAX -------------------------------------------------------------------------------------------
def test_jax_arrays_of_deduplicated_parts_are_separate_buffers(tmp_path):
    """JAX arrays are immutable; what could still be written is an export: a DLPack tensor
    (writable in torch) or ``np.asarray`` (read-only). Each array must own its buffer, so
    writing through one array's DLPack export changes nothing else."""
    jax = pytest.importorskip("jax", reason="JAX is not installed (extra: tenfold[jax])")
    import tenfold.jax

    p = tmp_path / "m.zt"
    want = _dedup_v2(p)
    got = tenfold.jax.load_file(p, device="cpu")
    ptrs = {n: a.unsafe_buffer_pointer() for n, a in got.items()}
    assert len(set(ptrs.values())) == len(want)
    with tenfold.open(p) as r:  # and none is the file's map
        mapped = {r[n].__array_interface__["data"][0] for n in r.keys()}
    assert not mapped & set(ptrs.values())
    assert not np.asarray(got["l1.bias"]).flags.writeable
    with safe_open(p, framework="jax", device="cpu") as f:
        a, b = f.get_tensor("l1.bias"), f.get_tensor("l1.bias")
        assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    if torch is not None:
        exported = torch.from_dlpack(got["l1.bias"])
        exported.add_(1)  # outside JAX's contract, but it must not reach another array
        assert float(jax.numpy.max(got["l2.bias"])) == 0.0
        assert float(jax.numpy.max(b)) == 0.0


# -- huge slice bounds on the torch fast path -----------------------------------------------------
BIG = [0, 1, 2, 3, 5, 2**31 - 1, 2**31 + 1, 2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**63 + 1,
       2**64, 2**64 + 2, 2**65 + 3, 10**30]  # fmt: skip
bound = st.one_of(st.none(), st.sampled_from(BIG + [-b for b in BIG]), st.integers(-12, 12))
step = st.one_of(st.none(), st.sampled_from([b for b in BIG if b]), st.integers(1, 12))
a_slice = st.builds(slice, bound, bound, step)


@pytest.fixture(scope="module")
def raw_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("slices") / "m.safetensors"
    a = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)
    tenfold.save(p, {"a": a})
    return p, a


@needs_torch
@given(first=a_slice, second=a_slice)
def test_torch_fast_path_slices_as_numpy(raw_file, first, second):
    p, a = raw_file
    with tenfold.torch.safe_open(p) as f:
        got = f.get_slice("a")[first, second]
        assert f._convert.copies == 0  # the fast path (a view of the private map) answered
    want = a[first, second]
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@needs_torch
@pytest.mark.parametrize("index", [(slice(None), slice(None, None, 2**64 + 2)),
                                   (slice(None, None, 2**63 + 1), slice(1, None, 2**64 + 3)),
                                   (slice(None, None, 2**63),)])  # fmt: skip
def test_torch_fast_path_huge_steps(raw_file, index):
    p, a = raw_file
    with tenfold.torch.safe_open(p) as f:
        got = f.get_slice("a")[index]
    np.testing.assert_array_equal(got.numpy(), a[index])


# -- the record itself -----------------------------------------------------------------------------
def test_handout_claims():
    from tenfold.interop._handout import Handout

    h = Handout()
    assert h.claim_many([0, 20, 5, 0], [10, 30, 15, 10]) == [True, True, False, False]
    assert not h.claim(9, 11)  # overlaps [0, 10)
    assert h.claim(10, 20)  # touches both neighbours, overlaps neither
    assert not h.claim(29, 40)
    assert h.claim(30, 30)  # empty
    owner = np.zeros(4)
    assert h.claim(100, 132, owner)
    assert not h.claim(120, 140)  # its owner is alive: its memory may be written
    del owner  # gone: the address may be reused by a new array
    assert h.claim(120, 140)
    assert not h.claim(100, 121)


# -- a file truncated while mapped -----------------------------------------------------------------
_TRUNCATE = """
import os, sys
import numpy as np
import tenfold
path, with_torch = sys.argv[1], sys.argv[2] == "1"
files = [os.path.join(os.path.dirname(path), f) for f in os.listdir(os.path.dirname(path))]
got = {"np-copy": tenfold.load(path, copy=True), "np-nomap": tenfold.load(path, mmap=False)}
if with_torch:
    import tenfold.torch
    got["pt-nomap"] = tenfold.torch.load_file(path, mmap=False)
    with tenfold.torch.safe_open(path, mmap=False) as f:
        got["pt-safe-open-nomap"] = {k: f.get_tensor(k) for k in f.keys()}
for f in files:
    if not f.endswith(".json"):
        os.truncate(f, 0)  # another program truncates the file in place
for kind, arrays in got.items():
    print(kind, sorted((k, float(np.asarray(v, np.float64).sum())) for k, v in arrays.items()))
"""


@pytest.mark.parametrize("suffix", [".zt", ".safetensors", ".oinf", "sharded"])
def test_what_docs_say_avoids_sigbus_on_a_truncated_file(tmp_path, suffix):
    """docs/frameworks.md: a file truncated in place while mapped ends the process (SIGBUS);
    ``mmap=False``, and for NumPy ``tenfold.load(copy=True)``, give results that no longer
    need the file. Run in a child process: a regression is a failed test, not a crashed
    test run."""
    import subprocess

    t = {"a": np.arange(4096, dtype=np.float32), "b": np.ones((64, 64), np.float32)}
    path = tmp_path / ("m.zt" if suffix == "sharded" else f"m{suffix}")
    kw = {"checksum": None} if path.suffix == ".zt" else {}
    if suffix == "sharded":
        tenfold.save(path, t, max_shard_size=20000, **kw)
        path = Path(str(path) + ".index.json")
    else:
        tenfold.save(path, t, **kw)
    env = {**os.environ, "PYTHONPATH": str(Path(tenfold.__file__).parents[1])}
    args = [sys.executable, "-c", _TRUNCATE, str(path), "1" if torch is not None else "0"]
    run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    want = str(sorted((k, float(v.sum())) for k, v in t.items()))
    kinds = ["np-copy", "np-nomap"] + (["pt-nomap", "pt-safe-open-nomap"] if torch else [])
    assert run.stdout.splitlines() == [f"{k} {want}" for k in kinds]
