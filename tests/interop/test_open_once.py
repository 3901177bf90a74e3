"""A local file is opened once: format detection, the reader and the copy-on-write map that
tenfold.torch builds tensors over all use the same descriptor (issue 13 speed)."""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tenfold
from tenfold.errors import SliceError
from tenfold.interop.frameworks import open_tensors

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None, reason="PyTorch is not installed (extra: tenfold[torch])"
)

ARRAYS = {
    "w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "b": np.arange(6, dtype=np.int64),
    "h": np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 4),
}


def _count_opens(monkeypatch: pytest.MonkeyPatch, path: str) -> list[str]:
    """Every open of ``path``: by ``os.open``, or by the ``fmap`` kernel's ``open_ends`` (in
    C; its pure-Python twin's own ``os.open`` is not counted again)."""
    from tenfold import _kernels
    from tenfold.ztensor import _generations

    seen: list[str] = []
    inside: list[int] = []
    real = os.open

    def counting(name, *args, **kwargs):
        if os.fspath(name) == path and not inside:
            seen.append(path)
        return real(name, *args, **kwargs)

    def counted(ends):
        def wrapper(name, *args, **kwargs):
            if os.fspath(name) == path:
                seen.append(path)
            inside.append(1)
            try:
                return ends(name, *args, **kwargs)
            finally:
                inside.pop()

        return wrapper

    monkeypatch.setattr(os, "open", counting)
    for impl in ("compiled", "reference"):
        try:
            mod = _kernels.load("fmap", impl)
        except ImportError:
            continue
        monkeypatch.setattr(mod, "open_ends", counted(mod.open_ends))
    monkeypatch.setattr(_generations, "_open_ends", counted(_generations._open_ends))
    return seen


@pytest.mark.parametrize("suffix", [".zt", ".safetensors", ".oinf", ".npz", ".wtxt"])
def test_tenfold_open_opens_a_local_file_once(tmp_path, monkeypatch, suffix):
    path = str(tmp_path / f"m{suffix}")
    arrays = {k: a for k, a in ARRAYS.items() if suffix not in (".npz", ".wtxt") or k != "h"}
    tenfold.save(path, arrays)
    seen = _count_opens(monkeypatch, path)
    with tenfold.open(path) as r:
        got = {k: np.asarray(r[k]) for k in arrays}
    for k, a in arrays.items():
        assert np.array_equal(got[k].view(a.dtype), a), k
    assert len(seen) == 1


def test_tenfold_load_opens_a_local_file_once(tmp_path, monkeypatch):
    path = str(tmp_path / "m.zt")
    tenfold.save(path, ARRAYS)
    seen = _count_opens(monkeypatch, path)
    got = tenfold.load(path, copy=True)
    assert set(got) == set(ARRAYS) and len(seen) == 1


@needs_torch
@pytest.mark.parametrize("suffix", [".zt", ".safetensors"])
def test_torch_load_file_opens_once_and_writes_stay_private(tmp_path, monkeypatch, suffix):
    import tenfold.torch as tt

    path = str(tmp_path / f"m{suffix}")
    tenfold.save(path, ARRAYS, **({"checksum": None} if suffix == ".zt" else {}))
    before = Path(path).read_bytes()
    seen = _count_opens(monkeypatch, path)
    state = tt.load_file(path)
    assert len(seen) == 1
    assert state["h"].dtype == torch.bfloat16  # no ml_dtypes hop
    assert np.array_equal(state["w"].numpy(), ARRAYS["w"])
    state["w"].fill_(-1.0)  # copy-on-write: never reaches the file
    state["h"].zero_()
    assert Path(path).read_bytes() == before
    again = tt.load_file(path)
    assert np.array_equal(again["w"].numpy(), ARRAYS["w"])


@pytest.mark.parametrize("suffix", [".zt", ".safetensors", ".oinf"])
def test_bulk_spans_match_span_per_name(tmp_path, suffix):
    path = str(tmp_path / f"m{suffix}")
    tenfold.save(path, ARRAYS, **({"checksum": None} if suffix == ".zt" else {}))
    t = open_tensors(path)
    try:
        assert t.spans() == [t.span(n) for n in t.names]
    finally:
        t.close()


def test_bulk_spans_skip_tensors_whose_checksum_is_not_verified_yet(tmp_path):
    path = str(tmp_path / "c.zt")
    tenfold.save(path, ARRAYS)  # CRC-32C by default: checked as read, so no raw span
    t = open_tensors(path)
    try:
        assert t.spans() == [None] * len(ARRAYS)
        t.array("w")  # verified now
        spans = dict(zip(t.names, t.spans(), strict=True))
        assert spans["w"] is not None and spans["b"] is None
    finally:
        t.close()


# -- safe_open(...).metadata() as the safetensors package gives it -----------------------------
def _st_file(path: Path, md: object) -> None:
    import json
    import struct

    header: dict = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    if md != "absent":
        header["__metadata__"] = md
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))


@pytest.mark.parametrize("md", ["absent", None, {}, {"format": "pt", "x": "y"}])
@pytest.mark.parametrize("framework", ["np", "pt"])
def test_safetensors_metadata_matches_the_safetensors_package(tmp_path, md, framework):
    safetensors = pytest.importorskip("safetensors", reason="safetensors is not installed")
    if framework == "pt" and torch is None:
        pytest.skip("PyTorch is not installed (extra: tenfold[torch])")
    path = tmp_path / "m.safetensors"
    _st_file(path, md)
    with safetensors.safe_open(str(path), framework=framework) as f:
        want = f.metadata()
    with tenfold.safe_open(path, framework=framework) as g:
        got = g.metadata()
    assert got == want and type(got) is type(want)
    assert (got is None) == (md in ("absent", None))


def test_metadata_of_other_formats_is_a_dict(tmp_path):
    path = tmp_path / "m.zt"
    tenfold.save(path, {"w": np.ones(2, np.float32)})
    with tenfold.safe_open(path) as f:
        assert f.metadata() == {}  # a dict, never None; nothing the writer was not given


@needs_torch
@pytest.mark.parametrize("suffix", [".zt", ".safetensors"])
def test_torch_get_slice_of_a_raw_tensor_is_a_view_of_the_private_map(tmp_path, suffix):
    import tenfold.torch as tt

    a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    path = tmp_path / f"s{suffix}"
    tenfold.save(path, {"a": a}, **({"checksum": None} if suffix == ".zt" else {}))
    before = path.read_bytes()
    slices = [(slice(8, 24),), (slice(None, None, 8),), (3, slice(1, None, 4)), (Ellipsis, 5)]
    for idx in slices:  # one open each: overlapping slices of one open are copies (#21)
        with tt.safe_open(path) as f:
            got = f.get_slice("a")[idx]
            assert np.array_equal(got.numpy(), a[idx]), idx
            assert f._convert.copies == 0  # no NumPy copy: views of the copy-on-write map
    with tt.safe_open(path) as f:
        with pytest.raises(SliceError, match="step must be positive"):  # safetensors' rule
            f.get_slice("a")[::-2, ::-3]
        part = f.get_slice("a")[0:2]
        part.fill_(7.0)
    assert path.read_bytes() == before
    with pytest.raises(IndexError, match=r"\(64, 32\)"):
        with tt.safe_open(path) as f:
            f.get_slice("a")[64]
