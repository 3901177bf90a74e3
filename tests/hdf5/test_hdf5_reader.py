"""HDF5 datasets through h5py (the ``hdf5`` extra), differential against h5py's own reads on
files h5py writes: groups flattened to dotted names, contiguous datasets as views of tenfold's
map, chunked and gzip ones decoded, attributes as metadata, refusals by name, the front door,
and damaged files."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tenfold
import tenfold.convert
import tenfold.registry as registry
from tenfold.cli import main as cli
from tenfold.errors import FormatError, TenfoldError, UnsupportedError

h5py = pytest.importorskip("h5py", reason="h5py (the hdf5 extra) is not installed")
from tenfold.formats import hdf5 as hdf5_reader  # noqa: E402

RNG = np.random.default_rng(5)
DATA = {
    "w": RNG.standard_normal((8, 5)).astype(np.float32),
    "enc/layer0/weight": RNG.standard_normal((16, 4)).astype(np.float64),
    "enc/layer0/bias": np.arange(4, dtype=np.int16),
    "enc/mask": np.array([True, False, True]),
    "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
    "scalar": np.array(2.5, np.float16),
    "cplx": np.array([1 + 2j, -3j], np.complex64),
    "u64": np.array([2**64 - 1, 0], np.uint64),
    "empty": np.zeros((0, 3), np.float32),
}
CHUNKED = {
    "chunked": (RNG.standard_normal((33, 7)).astype(np.float32), {"chunks": (8, 7)}),
    "gz": (np.arange(1000, dtype=np.int64).reshape(10, 100), {"compression": "gzip"}),
    "shuffled": (
        RNG.integers(0, 255, (64,), dtype=np.uint8),
        {"shuffle": True, "fletcher32": True, "chunks": (16,)},
    ),
}


def _write(path, extra=True):
    with h5py.File(path, "w") as f:
        for k, v in DATA.items():
            f.create_dataset(k, data=v)
        if extra:
            for k, (v, kw) in CHUNKED.items():
                f.create_dataset(k, data=v, **kw)
        f.attrs["epoch"] = 3
        f.attrs["name"] = "run-1"
        f["enc"].attrs["lr"] = np.array([0.1, 0.01])
        f["w"].attrs["units"] = b"volts"
    return path


def _reference(path) -> dict[str, np.ndarray]:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda p, o: (
                out.__setitem__(p.replace("/", "."), o[()]) if isinstance(o, h5py.Dataset) else None
            )
        )
    return out


def _same(got, want, what):
    want = np.asarray(want)
    if want.dtype.byteorder == ">":
        want = want.astype(want.dtype.newbyteorder("<"))
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert got.tobytes() == want.tobytes(), what


def test_every_dataset_matches_h5py(tmp_path):
    p = _write(tmp_path / "m.h5")
    want = _reference(p)
    assert tenfold.detect(p) == "hdf5"
    with tenfold.open(p) as r:
        assert sorted(r) == sorted(want)
        assert "enc.layer0.weight" in r
        for k in want:
            _same(r[k], want[k], k)
        assert r.info("gz").encoding == "gzip" and r.info("gz").byte_range is None
        assert r.info("chunked").encoding == "chunked"
        v = r["w"]  # contiguous: a view of tenfold's own map
        assert not v.flags.writeable and not v.flags.owndata
        start, end = r.info("w").byte_range
        assert p.read_bytes()[start:end] == DATA["w"].tobytes()
        assert r.span("w").offset == start and r.span("gz") is None
        assert r.span("big_endian") is None  # a little-endian copy, not the file's bytes
        assert r.verify().ok


def test_attributes_become_metadata(tmp_path):
    p = _write(tmp_path / "m.h5")
    with h5py.File(p, "a") as f:
        f.attrs["ref"] = f["w"].ref  # no JSON form: left out, named
    with tenfold.open(p) as r:
        assert r.metadata == {
            "epoch": 3,
            "name": "run-1",
            "enc@lr": [0.1, 0.01],
            "w@units": "volts",
        }
        assert r.skipped_attributes == ["ref"]


def test_refused_dtypes_are_named(tmp_path):
    p = tmp_path / "odd.h5"
    with h5py.File(p, "w") as f:
        f["ok"] = np.arange(3)
        f["compound"] = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])
        f.create_dataset("vlen_str", data=["a", "bc"], dtype=h5py.string_dtype())
        f.create_dataset("refs", (2,), dtype=h5py.ref_dtype)
        f["fixed_str"] = np.array([b"ab", b"cd"])
        f.create_dataset("nothing", data=h5py.Empty("f4"))
    with tenfold.open(p) as r:
        assert r["ok"].tolist() == [0, 1, 2]
        for name, why in (
            ("compound", "compound type"),
            ("vlen_str", "strings"),
            ("refs", "references"),
            ("fixed_str", "strings"),
            ("nothing", "no dataspace"),
        ):
            with pytest.raises(UnsupportedError, match=why) as ei:
                r[name]
            assert ei.value.obj == f"dataset {name!r}" and ei.value.fmt == "hdf5"
        assert not r.verify().ok
    with pytest.raises(UnsupportedError, match="compound"):
        tenfold.load(p)


def test_data_in_other_files_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype="<i4").tobytes())
    p = tmp_path / "ext.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("ext", (4,), "<i4", external=[(str(secret), 0, 16)])
        f["other"] = h5py.ExternalLink("elsewhere.h5", "/x")
        f["soft"] = h5py.SoftLink("/ext")
    with tenfold.open(p) as r:
        assert list(r) == ["ext"]  # links are not followed
        with pytest.raises(UnsupportedError, match="external files"):
            r["ext"]


def test_flattened_name_collisions(tmp_path):
    p = tmp_path / "c.h5"
    with h5py.File(p, "w") as f:
        f["a.b"] = np.arange(2)
        f["a/b"] = np.arange(3)
    with pytest.raises(FormatError, match="flattens to 'a.b'") as ei:
        tenfold.open(p)
    assert "separator='/'" in str(ei.value)
    with hdf5_reader.open(p, separator="/") as r:
        assert sorted(r) == ["a.b", "a/b"] and r["a/b"].tolist() == [0, 1, 2]


def test_names_that_are_not_utf8(tmp_path):
    """An object name that is not UTF-8 (h5py hands it as bytes) is a FormatError naming the
    field, not a TypeError from joining bytes with str; attributes on groups and datasets
    below it are still found on a file that has none."""
    p = tmp_path / "n.h5"
    with h5py.File(p, "w") as f:
        f.create_group(b"g\xff").create_dataset("w", data=np.arange(3))
    with pytest.raises(FormatError) as ei:
        tenfold.open(p)
    assert ei.value.field == "name" and "not UTF-8" in str(ei.value)
    with h5py.File(p, "w") as f:
        f.create_group("g").attrs["k"] = 1
        f["g"].create_dataset("w", data=np.arange(3)).attrs["unit"] = "m"
        f["g"].create_group("empty")
    with tenfold.open(p) as r:
        assert list(r) == ["g.w"] and r.metadata == {"g@k": 1, "g.w@unit": "m"}
        assert r["g.w"].tolist() == [0, 1, 2]


def test_slices(tmp_path):
    p = _write(tmp_path / "m.h5")
    with tenfold.open(p) as r:
        assert r.read("w", (slice(2, 4),)).tolist() == DATA["w"][2:4].tolist()
        got = r.read("gz", (1, slice(None, None, 10)))
        assert got.tolist() == CHUNKED["gz"][0][1, ::10].tolist()


def test_front_door_and_convert(tmp_path, capsys):
    p = _write(tmp_path / "m.h5")
    want = _reference(p)
    assert cli(["inspect", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "hdf5" and {o["name"] for o in doc["objects"]} == set(want)
    assert cli(["verify", str(p)]) == 0
    with tenfold.safe_open(p, framework="np") as f:
        _same(f.get_tensor("enc.layer0.weight"), want["enc.layer0.weight"], "st")
    # complex64 has no place in .zt: convert refuses it before writing (tested elsewhere)
    q = tmp_path / "n.h5"
    with h5py.File(p, "r") as f, h5py.File(q, "w") as g:
        for k in want:
            if k != "cplx":
                f.copy(f[k.replace(".", "/")], g, name=k.replace(".", "/"))
        g.attrs["who"] = "me"
    want.pop("cplx")
    for dst in ("c.safetensors", "c.zt"):
        out = tmp_path / dst
        tenfold.convert.convert(q, out)
        back = tenfold.load(out)
        assert sorted(back) == sorted(want)
        for k in want:
            _same(back[k], want[k], f"{dst}:{k}")
        assert tenfold.load(out)["w"].tobytes() == DATA["w"].tobytes()
        with tenfold.open(out) as r:
            assert r.metadata["who"] == "me"
        assert tenfold.diff(q, out).identical
    # attributes with JSON values have no place in safetensors' string metadata: loud
    with pytest.raises(TenfoldError, match="metadata 'epoch'"):
        tenfold.convert.convert(p, tmp_path / "d.safetensors")
    tenfold.convert.convert(p, tmp_path / "d.safetensors", metadata=False)
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import tenfold.torch as tt

    sd = tt.load_file(p)
    assert sd["w"].dtype == torch.float32 and sd["big_endian"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_user_block_files_open_directly(tmp_path):
    p = tmp_path / "ub.h5"
    with h5py.File(p, "w", userblock_size=512) as f:
        f["x"] = np.arange(5)
    with hdf5_reader.open(p) as r:
        assert r["x"].tolist() == list(range(5))
    tenfold.convert.convert(p, tmp_path / "ub.safetensors")  # taken by its suffix
    assert tenfold.load(tmp_path / "ub.safetensors")["x"].tolist() == list(range(5))


@pytest.mark.parametrize("cut", [8, 100, 800, 2000, -40])
def test_damaged_files_are_tenfold_errors(tmp_path, cut):
    p = _write(tmp_path / "m.h5")
    data = p.read_bytes()
    bad = tmp_path / "bad.h5"
    bad.write_bytes(data[:cut])
    try:
        with tenfold.open(bad) as r:
            for k in r:
                r[k]
    except TenfoldError as exc:
        assert exc.fmt in ("hdf5", "tenfold") and exc.obj
    report = hdf5_reader.verify(bad)
    assert report is not None


def test_storage_size_lie_is_refused(tmp_path):
    # a contiguous dataset whose bytes the file does not hold: its view would read past the end
    p = _write(tmp_path / "m.h5", extra=False)
    with tenfold.open(p) as r:
        start, end = r.info("enc.layer0.weight").byte_range
    data = p.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[: start + 8])
    with pytest.raises(TenfoldError) as ei:
        with tenfold.open(cut) as r:
            r["enc.layer0.weight"]
    assert ei.value.fmt in ("hdf5", "tenfold")


def test_registry_and_missing_extra(monkeypatch, tmp_path):
    fmt = registry.get("hdf5")
    assert fmt.magics == (b"\x89HDF\r\n\x1a\n",) and fmt.suffixes == (".h5", ".hdf5")
    p = _write(tmp_path / "m.h5", extra=False)
    import sys

    monkeypatch.setitem(sys.modules, "h5py", None)  # as if the extra were not installed
    with pytest.raises(ImportError, match=r'pip install "tenfold\[hdf5\]"') as ei:
        tenfold.open(p)
    assert isinstance(ei.value, UnsupportedError) and "\n" not in str(ei.value)
    assert tenfold.detect(p) == "hdf5"  # recognising needs no h5py
    assert cli(["inspect", str(p)]) == 2
