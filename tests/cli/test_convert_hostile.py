"""Issue 15: `tenfold convert` of hostile inputs (a tiny sparse file with a huge dense form, lying
or encrypted .npz, safetensors headers with object dtypes) ends in a tenfold error and a
one-line message, never MemoryError / RuntimeError / TypeError."""

from __future__ import annotations

import io
import json
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tenfold.cli import main
from tenfold.convert import convert
from tenfold.core import Limits
from tenfold.errors import FormatError, LimitError, UnsupportedError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ztensor"))
from _zt_build import build, entry  # noqa: E402


@pytest.fixture
def sparse_bomb(tmp_path):
    # a few hundred bytes declaring a 2**17 x 2**17 float64 sparse tensor (128 GiB dense)
    e = entry("big", offset=0, size=0, dtype="float64", shape=[2**17, 2**17], layout="sparsecoo")
    p = tmp_path / "bomb.zt"
    p.write_bytes(build([e], {}))
    assert p.stat().st_size < 300
    return p


@pytest.mark.parametrize("target", [".npz", ".safetensors"])
def test_densifying_a_tiny_sparse_file_is_bounded_by_the_budget(
    sparse_bomb, tmp_path, target, capsys
):
    # convert densified with np.zeros(2**17 x 2**17): MemoryError
    out = tmp_path / f"out{target}"
    with pytest.raises(LimitError, match=r"sparse tensor 'big'.*decode budget"):
        convert(sparse_bomb, out)
    assert not out.exists()
    assert main(["convert", str(sparse_bomb), str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "decode budget" in err


def test_small_sparse_tensors_still_convert(tmp_path):
    import tenfold.ztensor as zt
    from tenfold.ztensor.sparse import SparseTensor

    src = tmp_path / "s.zt"
    zt.save(
        src,
        {"s": SparseTensor("coo", (3, 4), np.array([2.0]), coords=np.array([[1], [2]], np.uint64))},
    )
    assert convert(src, tmp_path / "s.npz") == 1
    assert np.load(tmp_path / "s.npz")["s"][1, 2] == 2.0


def _npz_lying(tmp_path, encrypted=False):
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(10))
    data = bytearray(buf.getvalue())
    cd = data.rfind(b"PK\x01\x02")
    if encrypted:
        data[cd + 8] |= 1
        data[6] |= 1
    else:  # the .npy header and the directory agree on 1 GiB; 80 bytes are there
        hdr_at = data.find(b"\x93NUMPY")
        text_len = struct.unpack_from("<H", data, hdr_at + 8)[0]
        text = data[hdr_at + 10 : hdr_at + 10 + text_len].decode("latin-1")
        new = text.replace("(10,)", f"({(1 << 27) - 16},)").ljust(text_len)[:text_len]
        data[hdr_at + 10 : hdr_at + 10 + text_len] = new.encode("latin-1")
        struct.pack_into("<I", data, cd + 24, 1 << 30)
    p = tmp_path / ("enc.npz" if encrypted else "lie.npz")
    p.write_bytes(bytes(data))
    return p


def test_convert_of_a_lying_npz_is_a_format_error(tmp_path, capsys):
    # np.load allocated what the header claimed: MemoryError under a memory cap
    p = _npz_lying(tmp_path)
    with pytest.raises(FormatError, match=r"array 'a'.*size"):
        convert(p, tmp_path / "o.zt")
    assert main(["convert", str(p), str(tmp_path / "o.zt")]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_convert_of_an_encrypted_npz_is_unsupported(tmp_path, capsys):
    # zipfile raised RuntimeError: File 'a.npy' is encrypted, password required
    p = _npz_lying(tmp_path, encrypted=True)
    with pytest.raises(UnsupportedError, match="encrypted"):
        convert(p, tmp_path / "o.zt")
    assert main(["convert", str(p), str(tmp_path / "o.zt")]) == 1
    assert "encrypted" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [{"F32": 1}, ["F32"]])
def test_convert_of_safetensors_with_an_object_dtype_is_unsupported(tmp_path, dtype, capsys):
    # `tag not in DTYPES` with a dict tag: TypeError: unhashable type
    text = json.dumps({"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}).encode()
    text += b" " * (-len(text) % 8)
    p = tmp_path / "o.safetensors"
    p.write_bytes(len(text).to_bytes(8, "little") + text + bytes(4))
    with pytest.raises(UnsupportedError, match=r"tensor 'w'.*dtype"):
        convert(p, tmp_path / "o.zt")
    assert main(["convert", str(p), str(tmp_path / "o.zt")]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_convert_passes_limits_to_every_reader(tmp_path):
    from tenfold.convert import read_any

    src = tmp_path / "a.npz"
    np.savez(src, a=np.zeros(5000, np.uint8), b=np.zeros(5000, np.uint8))
    with pytest.raises(LimitError, match=r"array 'b'.*decode budget"):
        read_any(src, limits=Limits(decode_budget=8000))
    with zipfile.ZipFile(src) as z:
        assert len(z.namelist()) == 2
