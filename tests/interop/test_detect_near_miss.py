"""A file no format recognises but one format almost does (safetensors with a damaged header
length, an npz cut inside its first local header) is reported by that format, with the field,
offset and bounds, not as "unknown format"."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
from tenfold.cli import main
from tenfold.errors import FormatError, TruncatedError


@pytest.fixture
def st_bytes(tmp_path):
    p = tmp_path / "g.safetensors"
    tenfold.save(p, {"w": np.ones(1000, np.float32)})
    return p.read_bytes()


@pytest.fixture
def npz_bytes(tmp_path):
    p = tmp_path / "g.npz"
    tenfold.save(p, {"w": np.ones(1000, np.float32)})
    return p.read_bytes()


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
@pytest.mark.parametrize("first8", [b"XXXXXXXX", bytes(8), (10**9).to_bytes(8, "little")])
def test_damaged_safetensors_header_length(tmp_path, st_bytes, suffix, first8):
    # the JSON header is intact after the length: that is safetensors, whatever the name
    p = tmp_path / f"b{suffix}"
    p.write_bytes(first8 + st_bytes[8:])
    with pytest.raises(FormatError) as ei:
        tenfold.open(p)
    msg = str(ei.value)
    assert "unknown format" not in msg, msg
    assert msg.startswith(f"safetensors: {p}: header length at offset 0x0: "), msg
    n = int.from_bytes(first8, "little")
    assert msg.endswith(f"; expected 2 to 104857600 (the limit), got {n}"), msg


def test_named_safetensors_cut_before_its_length(tmp_path, st_bytes):
    p = tmp_path / "b.safetensors"
    p.write_bytes(st_bytes[:5])
    with pytest.raises(TruncatedError, match=r"header length at offset 0x0: file shorter than"):
        tenfold.open(p)


def test_named_safetensors_without_json_header(tmp_path, st_bytes):
    p = tmp_path / "b.safetensors"
    p.write_bytes(st_bytes[:8] + b"[" + st_bytes[9:])
    with pytest.raises(
        FormatError, match=r"header at offset 0x8: not a JSON object; expected '\{'"
    ):
        tenfold.open(p)


def test_unnamed_garbage_is_still_unknown(tmp_path):
    p = tmp_path / "b.bin"
    p.write_bytes(b"\x01" * 64)
    with pytest.raises(FormatError, match="unknown format"):
        tenfold.open(p)


@pytest.mark.parametrize("cut", [2, 4, 10, 29, 30, 34, 40, 60, None])
def test_cut_npz_is_truncated_wherever_it_is_cut(tmp_path, npz_bytes, cut):
    p = tmp_path / "t.npz"
    p.write_bytes(npz_bytes[: cut if cut is not None else len(npz_bytes) // 2])
    with pytest.raises(TruncatedError) as ei:
        tenfold.open(p)
    msg = str(ei.value)
    assert msg.startswith(f"npz: {p} at offset 0x0: truncated: the file has "), msg


def test_a_cut_zip_not_named_npz_is_not_claimed(tmp_path, npz_bytes):
    p = tmp_path / "t.pt"  # a cut torch.save file is a zip too
    p.write_bytes(npz_bytes[:10])
    with pytest.raises(FormatError, match="unknown format"):
        tenfold.open(p)


def test_cli_names_the_header_length(tmp_path, st_bytes, capsys):
    p = tmp_path / "b.safetensors"
    p.write_bytes(b"XXXXXXXX" + st_bytes[8:])
    assert main(["inspect", str(p)]) == 1
    err = capsys.readouterr().err
    assert "header length at offset 0x0" in err and "unknown format" not in err, err
