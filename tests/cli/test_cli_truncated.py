"""A truncated file names the cause (#24): "truncated: the file has N bytes, ..." for every
zTensor generation and npz, the same message from Python and the CLI; an empty file of every
format gets one message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tenfold
from tenfold import registry
from tenfold.cli import main
from tenfold.errors import FormatError, TruncatedError

V1 = Path(__file__).parents[1] / "conformance" / "ztensor" / "v1" / "zstd_and_checksums.zt"
TENSORS = {"w": np.arange(64, dtype=np.float32), "b": np.ones(3)}


def _v1(tmp_path: Path) -> bytes:
    return V1.read_bytes()


def _v2(tmp_path: Path) -> bytes:
    p = tmp_path / "full.zt"
    tenfold.save(p, TENSORS, generation=2)
    return p.read_bytes()


def _npz(tmp_path: Path) -> bytes:
    p = tmp_path / "full.npz"
    tenfold.save(p, TENSORS)
    return p.read_bytes()


#: (suffix, the whole file, where to cut: a fraction of its size or bytes from its end,
#: what the message says after "truncated: the file has N bytes")
CASES = [
    ("v1", ".zt", _v1, 8, ", its magic and manifest size need at least 16"),
    ("v1", ".zt", _v1, 64, " and does not end with its footer"),
    ("v1", ".zt", _v1, 0.5, " and does not end with its footer"),
    ("v1", ".zt", _v1, -1, " and does not end with its footer"),
    ("v2", ".zt", _v2, 30, ", its magic and footer need at least 48"),
    ("v2", ".zt", _v2, 100, " and does not end with its footer"),
    ("v2", ".zt", _v2, 0.5, " and does not end with its footer"),
    ("v2", ".zt", _v2, -1, " and does not end with its footer"),
    ("npz", ".npz", _npz, 40, ", its local header needs at least"),
    ("npz", ".npz", _npz, 100, ", its member 'w.npy' needs at least"),
    ("npz", ".npz", _npz, -40, ", its zip directory needs at least"),
    ("npz", ".npz", _npz, -1, ", its zip directory needs at least"),
]


@pytest.mark.parametrize(
    ("kind", "suffix", "make", "cut", "says"),
    CASES,
    ids=[f"{c[0]}-{c[3]}" for c in CASES],
)
def test_a_truncated_file_names_the_cause(tmp_path, capsys, kind, suffix, make, cut, says):
    data = make(tmp_path)
    n = int(len(data) * cut) if isinstance(cut, float) else cut if cut > 0 else len(data) + cut
    p = tmp_path / f"cut{suffix}"
    p.write_bytes(data[:n])
    want = f"truncated: the file has {n} bytes{says}"
    with pytest.raises(TruncatedError, match=want) as ei:
        tenfold.load(p)
    with pytest.raises(TruncatedError) as opened:
        tenfold.open(p)
    assert str(opened.value) == str(ei.value)
    for argv in (["inspect", str(p)], ["convert", str(p), str(tmp_path / "o.safetensors")]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(ei.value).split(": ", 1)[1] in err, err
    assert main(["verify", str(p)]) == 1
    assert want in capsys.readouterr().out


def test_a_damaged_v2_footer_magic_is_not_called_truncated(tmp_path):
    """The footer is in place (version, manifest bounds) and only its magic differs: the file
    is damaged, not short (the reference corpus's footer-magic case)."""
    data = bytearray(_v2(tmp_path))
    data[-1] ^= 0xFF
    p = tmp_path / "m.zt"
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"magic mismatch.*\[footer-magic\]") as ei:
        tenfold.load(p)
    assert not isinstance(ei.value, TruncatedError)


def test_a_whole_npz_with_a_bad_directory_is_not_called_truncated(tmp_path):
    data = bytearray(_npz(tmp_path))
    end = data.rindex(b"PK\x05\x06")
    data[end : end + 4] = b"XXXX"  # the end record's signature gone, nothing missing
    p = tmp_path / "m.npz"
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError) as ei:
        tenfold.load(p)
    assert not isinstance(ei.value, TruncatedError) and "truncated" not in str(ei.value)


SUFFIXES = (".zt", ".npz", ".oinf", ".fold", ".mind", ".wtxt", ".safetensors", ".taridx")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_an_empty_file_of_every_format_gets_one_message(tmp_path, capsys, suffix):
    p = tmp_path / f"e{suffix}"
    p.write_bytes(b"")
    message = f"{p}: the file is empty (0 bytes)"
    for call in (tenfold.open, tenfold.load):
        with pytest.raises(TruncatedError) as ei:
            call(p)
        assert str(ei.value) == f"tenfold: {message}"
    for command in ("inspect", "verify"):
        assert main([command, str(p)]) == 1
        assert capsys.readouterr().err == f"tenfold: error: {message}\n"


@pytest.mark.parametrize(
    ("suffix", "head", "fmt"),
    [(".zt", b"ZTEN", "ztensor"), (".gguf", b"GGU", "gguf"), (".zt", b"Z", "ztensor")],
)
def test_a_file_cut_inside_its_magic_is_truncated(tmp_path, capsys, suffix, head, fmt):
    """A file shorter than the magic it starts with was "unknown format": it is truncated,
    the same from Python and the CLI (exit 1: a damaged file)."""
    p = tmp_path / f"cut{suffix}"
    p.write_bytes(head)
    with pytest.raises(TruncatedError) as e:
        tenfold.open(p)
    assert f"the file has {len(head)} bytes" in str(e.value)
    assert registry.get(fmt).description in str(e.value)
    capsys.readouterr()
    assert main(["inspect", str(p)]) == 1
    assert str(e.value).removeprefix("tenfold: ") in capsys.readouterr().err
    q = tmp_path / f"other{suffix}"
    q.write_bytes(b"XYZ")  # the start of no magic: still unknown
    with pytest.raises(FormatError, match="unknown format") as e2:
        tenfold.open(q)
    assert not isinstance(e2.value, TruncatedError)


@pytest.mark.parametrize("cut", [-1, -9, 0.5, 100])
def test_a_cut_010_file_names_its_index_size_field(tmp_path, capsys, cut):
    """zTensor 0.1.0 ends with a bare u64 index size (no footer magic): a cut file ends in
    tensor or index bytes, which were read as a size (before: "its footer needs at least
    306245066786078804"). Now the field, its offset, the bound and the value it holds."""
    p = tmp_path / "full.zt"
    tenfold.save(p, TENSORS, metadata={"version": "v3"})
    data = p.read_bytes()
    n = int(len(data) * cut) if isinstance(cut, float) else cut if cut > 0 else len(data) + cut
    p.write_bytes(data[:n])
    got = int.from_bytes(data[n - 8 : n], "little")
    want = (
        f"zt: footer at offset {n - 8:#x}: index size: truncated: the file has {n} bytes, its "
        "footer's index size does not fit after the 8-byte magic (or that field is damaged); "
        f"expected <= {n - 16}, got {got}"
    )
    with pytest.raises(TruncatedError) as ei:
        tenfold.open(p)
    assert str(ei.value) == want and "needs at least" not in want
    assert main(["inspect", str(p)]) == 1
    assert want in capsys.readouterr().err
