"""The `tenfold` command: inspect, verify, convert, demo; exit codes and one-line errors."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.cli import main


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "m.zt"
    with zt.Writer(p) as w:
        w.add("w", np.arange(12, dtype=np.float32).reshape(3, 4), checksum="crc32c")
        w.add("b", np.zeros(4, np.float16), encoding="zstd")
    return p


def test_inspect_table(model, capsys):
    assert main(["inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert "ztensor, 2 objects" in out
    header = out.splitlines()[1].split()
    assert header[:7] == ["name", "dtype", "shape", "bytes", "encoding", "layout", "checksum"]
    assert "crc32c:0x" in out and "(3, 4)" in out and "zstd" in out


def test_inspect_one_shape_notation_human_sizes_json(tmp_path, capsys):
    import json

    import numpy as np

    import tenfold

    t = {"w": np.zeros((4096, 256), np.float32), "s": np.array(1.0), "v": np.ones(7, np.int8)}
    rows = {}
    for sfx in (".zt", ".oinf", ".wtxt"):
        p = tmp_path / f"m{sfx}"
        tenfold.save(p, t)
        assert main(["inspect", str(p)]) == 0
        out = capsys.readouterr().out
        assert "(4096, 256)" in out and "(7,)" in out and "4.0 MiB" in out, out
        assert main(["inspect", "--bytes", str(p)]) == 0
        assert "4194304" in capsys.readouterr().out
        assert main(["inspect", "--json", str(p)]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["schema"] == "tenfold.inspect/1" and doc["size"] == p.stat().st_size
        rows[sfx] = {o["name"]: o for o in doc["objects"]}
    assert rows[".zt"]["w"]["shape"] == rows[".oinf"]["w"]["shape"] == [4096, 256]
    assert rows[".zt"]["s"]["shape"] == rows[".oinf"]["s"]["shape"] == []
    assert rows[".zt"]["w"]["bytes"] == 4194304


def test_inspect_oinf_metadata_section(tmp_path, capsys):
    import numpy as np

    from tenfold import oinf

    p = tmp_path / "m.oinf"
    oinf.write(p, sizevars={"B": 4}, metadata={"mode": "fast"}, tensors={"w": np.ones(2)})
    assert main(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    section = out.split("metadata and size variables:")[1]
    assert "mode (str) = 'fast'" in section and "B (sizevar) = 4" in section


def test_verify_ok_and_damaged(model, tmp_path, capsys):
    assert main(["verify", str(model)]) == 0
    assert "OK: 2 checked, 0 errors" in capsys.readouterr().out
    data = bytearray(model.read_bytes())
    data[70] ^= 0xFF  # inside tensor 'w', which carries a CRC
    bad = tmp_path / "bad.zt"
    bad.write_bytes(bytes(data))
    assert main(["verify", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "crc32c checksum mismatch" in out


def test_errors_are_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.bin"  # no format's suffix either: a usage error (#24)
    junk.write_bytes(b"not a tensor file at all")
    assert main(["inspect", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tenfold: error:") and "unknown format" in err
    assert main(["inspect", str(tmp_path / "missing.zt")]) == 2  # a usage error
    assert "no such file" in capsys.readouterr().err
    trunc = tmp_path / "t.zt"
    trunc.write_bytes(b"ZTEN0001\x80")
    assert main(["verify", str(trunc)]) == 1


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["frobnicate"])
    assert ei.value.code == 2
    with pytest.raises(SystemExit) as ei:
        main(["verify"])
    assert ei.value.code == 2


@pytest.mark.parametrize("mid", [".npz", ".safetensors", ".zt"])
def test_convert_round_trip(model, tmp_path, mid, capsys):
    dst = tmp_path / f"c{mid}"
    back = tmp_path / "back.zt"
    assert main(["convert", str(model), str(dst)]) == 0
    assert main(["convert", str(dst), str(back)]) == 0
    a, b = zt.load(model), zt.load(back)
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes()


def test_convert_bfloat16_via_safetensors_peer(tmp_path):
    st = pytest.importorskip("safetensors.numpy", reason="safetensors (peer) not installed")
    import ml_dtypes

    src = tmp_path / "s.safetensors"
    tensors = {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "h": np.ones(3, np.float16),
        "i": np.arange(5, dtype=np.int64),
    }
    st.save_file(tensors, str(src))
    assert main(["convert", str(src), str(tmp_path / "s.zt")]) == 0
    back = zt.load(tmp_path / "s.zt")
    for k, v in tensors.items():
        np.testing.assert_array_equal(back[k], v)
    zt.save(tmp_path / "bf.zt", {"b": np.ones(4, ml_dtypes.bfloat16), "f": np.arange(3.0)})
    assert main(["convert", str(tmp_path / "bf.zt"), str(tmp_path / "bf.safetensors")]) == 0
    from safetensors import safe_open

    with safe_open(str(tmp_path / "bf.safetensors"), framework="numpy") as f:
        np.testing.assert_array_equal(f.get_tensor("f"), np.arange(3.0))


def test_convert_unknown_suffix(model, tmp_path, capsys):
    assert main(["convert", str(model), str(tmp_path / "x.unknown")]) == 2
    assert "unknown suffix" in capsys.readouterr().err


def test_demo_writes_and_verifies_every_format(tmp_path, capsys):
    assert main(["demo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "zTensor 0.1.0 / v1 / v2: wrote" in out and "not available" not in out


@pytest.mark.skipif(shutil.which("tenfold") is None, reason="tenfold entry point not on PATH")
def test_console_script(model):
    proc = subprocess.run(["tenfold", "verify", "-q", str(model)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == ""  # -q: nothing on success
    proc = subprocess.run(["tenfold", "verify", str(model)], capture_output=True, text=True)
    assert proc.returncode == 0 and "OK" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "tenfold", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("tenfold ")
