"""What ``tenfold.save`` / ``convert`` accept and refuse: dtypes by generation, options a
target cannot honour, metadata, tensor names (a new user's trial)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tenfold
from tenfold.capabilities import check_dtype, holders
from tenfold.errors import EncodeError

V2_ONLY = [
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2fnuz,
    ml_dtypes.float8_e8m0fnu,
    ml_dtypes.float4_e2m1fn,
    np.complex64,
    np.complex128,
]


# -- A: the dtype check knows the zTensor generation -----------------------------------------
@pytest.mark.parametrize("dt", V2_ONLY)
@pytest.mark.parametrize("gen", [2, "v2", "2"])
def test_save_v2_takes_what_v2_holds(tmp_path, dt, gen):
    a = np.arange(4).astype(dt)
    tenfold.save(tmp_path / "b.zt", {"x": a}, zt_generation=gen)
    back = tenfold.load(tmp_path / "b.zt")["x"]
    assert back.dtype == a.dtype and back.tobytes() == a.tobytes()


def test_save_v2_by_format_name_takes_float8(tmp_path):
    a = np.arange(4).astype(ml_dtypes.float8_e4m3fn)
    fmt = tenfold.detect(_written(tmp_path, "w.zt"))
    tenfold.save(tmp_path / "b.bin", {"x": a}, format=fmt, zt_generation=2)
    assert tenfold.load(tmp_path / "b.bin")["x"].tobytes() == a.tobytes()


def test_sharded_v2_saves_take_float8(tmp_path):
    # tenfold.save and tenfold.torch.save_file with max_shard_size check each dtype against the
    # generation asked for, before the first shard (they checked against 0.1.0's list)
    t = {f"f8_{i}": np.arange(4096).astype(ml_dtypes.float8_e4m3fn) for i in range(3)}
    tenfold.save(tmp_path / "a.zt", t, zt_generation=2, max_shard_size=5000)
    with tenfold.open(tmp_path / "a.zt.index.json") as r:
        assert {k: r[k].tobytes() for k in r} == {k: v.tobytes() for k, v in t.items()}
    torch = pytest.importorskip("torch", reason="torch is not installed")
    tft = pytest.importorskip("tenfold.torch")

    x = {k: torch.from_numpy(v.view(np.uint8)).view(torch.float8_e4m3fn) for k, v in t.items()}
    tft.save_file(x, tmp_path / "b.zt", zt_generation=2, max_shard_size=5000)
    with tenfold.open(tmp_path / "b.zt.index.json") as r:
        assert {k: r[k].tobytes() for k in r} == {k: v.tobytes() for k, v in t.items()}


def _written(tmp_path, name):
    tenfold.save(tmp_path / name, {"a": np.zeros(1, np.float32)})
    return tmp_path / name


def test_default_generation_still_refuses_float8_and_names_v2(tmp_path):
    with pytest.raises(EncodeError) as exc:
        tenfold.save(tmp_path / "b.zt", {"f8": np.zeros(4, ml_dtypes.float8_e4m3fn)})
    msg = str(exc.value)
    assert "formats that can: .zt (zt_generation=2), .fold/.mind, .safetensors" in msg
    assert not (tmp_path / "b.zt").exists()


def test_complex128_names_the_one_format_that_holds_it(tmp_path):
    with pytest.raises(EncodeError, match=r"formats that can: \.zt \(zt_generation=2\)$"):
        tenfold.save(tmp_path / "c.safetensors", {"c": np.zeros(2, np.complex128)})
    assert holders(np.complex128) == [".zt (zt_generation=2)"]
    assert holders(np.float32)[0] == ".zt"  # held by the default: no option named


def test_check_dtype_takes_the_option_as_given():
    # what sharded.save's check needs: the raw option value (its one-line change)
    from tenfold.capabilities import dtypes_of, target_of

    zt = target_of("m.zt")
    for gen in (2, "2", "v2"):
        check_dtype(zt, "x", np.dtype(ml_dtypes.float8_e4m3fn), generation=gen)
    for gen in (None, 0, "0.1.0", "bogus"):  # default, or refused later by the writer
        with pytest.raises(EncodeError, match="formats that can"):
            check_dtype(zt, "x", np.dtype(ml_dtypes.float8_e4m3fn), generation=gen)
    sten = target_of("m.safetensors")
    assert dtypes_of(sten, 2) == dtypes_of(sten)  # a format without generations


def test_v2_dtype_list_is_what_the_v2_writer_stores():
    from tenfold.core.dtypes import canonical
    from tenfold.formats.ztensor import _v2values
    from tenfold.formats.ztensor._format import generation_dtypes

    def name(dt):
        try:
            return canonical(dt)
        except Exception:
            return np.dtype(dt).name

    stored = {name(dt) for dt in _v2values._NP_TO_V2}
    assert generation_dtypes()[2] == stored


# -- B: an option the target cannot honour is refused on every path -----------------------------
A = {"a": np.arange(3, dtype=np.float32)}


def _src(tmp_path):
    tenfold.save(tmp_path / "good.zt", A)
    return tmp_path / "good.zt"


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".oinf"])
def test_save_refuses_a_checksum_the_format_has_no_field_for(tmp_path, suffix):
    with pytest.raises(EncodeError, match=r"checksum 'sha256': .*no per-tensor checksum field"):
        tenfold.save(tmp_path / f"c{suffix}", A, checksum="sha256")
    assert list(tmp_path.iterdir()) == []
    tenfold.save(tmp_path / f"c{suffix}", A)  # the default is simply not applicable
    tenfold.save(tmp_path / f"d{suffix}", A, checksum=None)  # none: honoured


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".oinf"])
def test_convert_refuses_a_checksum_the_format_has_no_field_for(tmp_path, suffix):
    from tenfold.convert import convert

    src = _src(tmp_path)
    with pytest.raises(EncodeError, match=r"checksum 'sha256': .*no per-tensor checksum field"):
        convert(src, tmp_path / f"c{suffix}", checksum="sha256")
    assert not (tmp_path / f"c{suffix}").exists()
    convert(src, tmp_path / f"c{suffix}")  # "keep", the default


@pytest.mark.parametrize("suffix", [".safetensors", ".oinf", ".wtxt", ".npz"])
def test_convert_refuses_zstd_where_the_target_cannot(tmp_path, suffix):
    from tenfold.convert import convert

    src = _src(tmp_path)
    with pytest.raises(EncodeError, match=r"compress 'zstd': .*expected .*None"):
        convert(src, tmp_path / f"c{suffix}", compress="zstd")
    assert not (tmp_path / f"c{suffix}").exists()
    convert(src, tmp_path / f"c{suffix}", compress=None)


def test_convert_to_npz_deflates_on_request(tmp_path):
    import zipfile

    from tenfold.convert import convert

    convert(_src(tmp_path), tmp_path / "c.npz", compress="deflate")
    with zipfile.ZipFile(tmp_path / "c.npz") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    assert tenfold.load(tmp_path / "c.npz")["a"].tobytes() == A["a"].tobytes()
    with pytest.raises(EncodeError, match=r"compress 'deflate': .*expected 'zstd' or None"):
        convert(_src(tmp_path), tmp_path / "c.fold", compress="deflate")


@pytest.mark.parametrize(
    "args",
    [["--compress", "zstd"], ["--checksum", "sha256"], ["--compress", "zstd:3"]],
)
@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_cli_convert_refuses_what_the_target_cannot_honour(tmp_path, capsys, args, suffix):
    from tenfold.cli import main

    src = _src(tmp_path)
    assert main(["convert", str(src), str(tmp_path / f"x{suffix}"), *args]) != 0
    assert f"{args[0][2:]} " in capsys.readouterr().err  # names the option
    assert not (tmp_path / f"x{suffix}").exists()
    assert main(["convert", str(src), str(tmp_path / f"x{suffix}")]) == 0  # the defaults


@pytest.mark.parametrize("suffix", [".safetensors", ".oinf", ".wtxt", ".npz"])
def test_save_refuses_compress_with_an_encode_error(tmp_path, suffix):
    with pytest.raises(EncodeError, match=r"compress 'zstd': "):
        tenfold.save(tmp_path / f"c{suffix}", A, compress="zstd")
    assert list(tmp_path.iterdir()) == []


def test_write_any_refuses_compress_with_the_default_checksum(tmp_path):
    from tenfold.convert import write_any

    with pytest.raises(EncodeError, match=r"compress 'zstd'"):
        write_any(tmp_path / "c.safetensors", A, compress="zstd")


# -- D: the metadata refusal lists only formats tenfold writes ----------------------------------
@pytest.mark.parametrize("suffix", [".npz", ".wtxt"])
def test_metadata_refusal_lists_writable_formats_only(tmp_path, suffix):
    with pytest.raises(EncodeError) as exc:
        tenfold.save(tmp_path / f"c{suffix}", A, metadata={"k": "v"})
    listed = str(exc.value).split("; use ")[1].removesuffix(" to keep it").split(", ")
    assert listed == [".zt", ".oinf", ".fold", ".mind", ".safetensors"]


@pytest.mark.parametrize(
    ("name", "compress", "gen", "encoding"),
    [
        ("c.zt", "zstd", None, "zstd"),
        ("c.zt", None, None, "raw"),
        ("c.zt", "zstd", 2, "zt.zstd-seekable/1"),
        ("c.npz", "deflate", None, "deflate"),
        ("c.npz", None, None, "raw"),
    ],
)
def test_save_compress_is_one_option_for_every_format(tmp_path, name, compress, gen, encoding):
    # before: the format's own keyword (encoding=, compressed=) was the only way, and
    # tenfold.save(..., compress=) was a TypeError naming the format's writer
    a = np.arange(4096, dtype=np.float32)
    tenfold.save(tmp_path / name, {"a": a}, compress=compress, zt_generation=gen)
    with tenfold.open(tmp_path / name) as r:
        assert r.info("a").encoding == encoding
        assert np.array_equal(r["a"], a)


def test_zt_compress_and_a_contrary_encoding_are_refused(tmp_path):
    with pytest.raises(EncodeError, match="compress"):
        tenfold.save(tmp_path / "c.zt", {"a": np.zeros(3)}, compress=None, encoding="zstd")
    assert list(tmp_path.iterdir()) == []


def test_writer_compress_refusals_name_the_field(tmp_path):
    from tenfold.formats.npz.reader import save as npz_save
    from tenfold.formats.ztensor.writer import save as zt_save

    a = {"a": np.zeros(3, np.float32)}
    with pytest.raises(EncodeError) as e:
        npz_save(tmp_path / "a.npz", a, compress="deflate", compressed=True)
    assert e.value.field == "compress" and "give one of the two" in str(e.value)
    with pytest.raises(EncodeError) as e:
        npz_save(tmp_path / "a.npz", a, compress="zstd")
    assert e.value.field == "compress" and "expected 'deflate' or None, got 'zstd'" in str(e.value)
    with pytest.raises(EncodeError) as e:
        zt_save(tmp_path / "a.zt", a, compress="lz4")
    assert e.value.field == "compress" and "expected 'zstd' or None, got 'lz4'" in str(e.value)
    assert list(tmp_path.iterdir()) == []
