"""Streaming convert: raw tensors are copied block by block (no memory map, no whole tensor in
memory), checked against the source's checksum on the way; progress only on request."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
import tenfold.tensor_source
from tenfold import convert as conv
from tenfold.errors import IntegrityError

T = {
    "model.embed.weight": np.arange(300_000, dtype=np.float32).reshape(1000, 300),
    "model.norm.bias": np.ones(7, np.float16),
    "step": np.array(3, np.int64),
    "empty": np.zeros((0, 2), np.int8),
}


@pytest.mark.parametrize("src_sfx", [".safetensors", ".zt", ".oinf", ".fold"])
@pytest.mark.parametrize("dst_sfx", [".zt", ".safetensors", ".fold", ".oinf", ".npz"])
def test_raw_tensors_never_go_through_memory(tmp_path, monkeypatch, src_sfx, dst_sfx):
    src, dst = tmp_path / f"s{src_sfx}", tmp_path / f"d{dst_sfx}"
    conv.write_any(src, T)

    real_open = conv.open_source

    def no_get(name):  # every tensor here is raw: get() must not be needed
        raise AssertionError(f"{name} was read through memory")

    def open_source(path):
        s = real_open(path)
        s.get = no_get
        return s

    monkeypatch.setattr(conv, "open_source", open_source)
    monkeypatch.setattr(tenfold.tensor_source, "_BLOCK", 4096)  # many blocks per tensor
    assert conv.convert(src, dst) == len(T)
    monkeypatch.undo()
    back = conv.read_any(dst)
    for k, v in T.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert back[k].tobytes() == v.tobytes()


@pytest.mark.parametrize("dst_sfx", [".zt", ".safetensors", ".fold", ".oinf", ".npz"])
def test_damaged_source_checksum_aborts_without_output(tmp_path, dst_sfx):
    from tenfold import ztensor

    src = tmp_path / "s.zt"
    tenfold.save(src, T)  # crc32c per tensor
    off = next(r["offset"] for r in ztensor.inspect(src) if r["name"] == "model.embed.weight")
    b = bytearray(src.read_bytes())
    b[off + 100] ^= 1
    src.write_bytes(bytes(b))
    dst = tmp_path / f"d{dst_sfx}"
    with pytest.raises(IntegrityError, match="model.embed.weight"):
        conv.convert(src, dst)
    assert not dst.exists()


@pytest.mark.parametrize("dst_sfx", [".oinf", ".fold", ".zt", ".safetensors", ".npz"])
def test_fsync_false_is_honoured(tmp_path, monkeypatch, dst_sfx):
    """convert(fsync=False) syncs nothing, whatever the target (OINF's writer used to sync
    its file regardless)."""
    src = tmp_path / "s.safetensors"
    conv.write_any(src, T)
    calls = []
    monkeypatch.setattr("os.fsync", lambda fd: calls.append(fd))
    conv.convert(src, tmp_path / f"d{dst_sfx}", fsync=False)
    assert calls == []
    conv.convert(src, tmp_path / f"e{dst_sfx}")
    assert calls  # the default still syncs


def test_progress_bar_on_request(tmp_path, capsys):
    src = tmp_path / "s.safetensors"
    conv.write_any(src, T)
    conv.convert(src, tmp_path / "quiet.zt")
    assert capsys.readouterr().err == ""
    conv.convert(src, tmp_path / "loud.zt", progress=True)
    err = capsys.readouterr().err
    assert "loud.zt" in err or "B/s" in err or "it/s" in err or "iB" in err


def test_fold_source_damaged_chunk_goes_through_ecc(tmp_path):
    from tenfold import fold

    src = tmp_path / "s.fold"
    fold.save(src, T, compress=None, ecc="med")
    with fold.Reader(src) as r:
        c = r.chunk("tensors")
    b = bytearray(src.read_bytes())
    b[c.payload_offset + 200] ^= 0x55  # correctable: the streaming check fails, ECC repairs
    src.write_bytes(bytes(b))
    conv.convert(src, tmp_path / "d.zt")
    back = conv.read_any(tmp_path / "d.zt")
    for k, v in T.items():
        assert back[k].tobytes() == v.tobytes() and back[k].shape == v.shape
