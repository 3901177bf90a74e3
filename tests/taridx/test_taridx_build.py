"""Building indexes from tar shards: conformance shards, tar dialects, errors, staleness, CLI."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import shutil
import tarfile

import pytest

import tenfold.taridx as tx
from tenfold.cli import main as cli_main
from tenfold.core.checksums import xxh64
from tenfold.errors import FormatError, TruncatedError, UnsupportedError

#: Plain-ustar folds: the built index must equal glzn's byte for byte.
IDENTICAL = [
    ("basic_ustar", "train"),
    ("basic_ustar", "val"),
    ("crash_collision", "train"),
    ("names_multidot_case_utf8", "train"),
    ("names_multidot_case_utf8", "latin1"),
    ("noncontiguous", "train"),
    ("shard_order_lexicographic", "train"),
    ("truncated_and_concat", "concat"),
    ("empty_shards", "only"),
    ("writer/ds", "train"),
]

#: Folds where glzn's index is wrong; tenfold's rows must match what the tar really holds.
DIALECTS = [
    ("gnu_longname_python", "train"),
    ("gnutar_pax_and_gnu", "gnufold"),
    ("gnutar_pax_and_gnu", "paxfold"),
    ("pax_python_default", "train"),
    ("webdataset_tarwriter", "train"),
    ("dirs_links_noext", "train"),
]


def _stem_ext(name: str) -> tuple[str, str]:
    base = name.rsplit("/", 1)[-1]
    stem, _, ext = base.partition(".")
    return stem, ext.lower()


@pytest.mark.parametrize("vec, fold", IDENTICAL)
def test_byte_identical_to_reference(conformance, tmp_path, vec, fold):
    d = conformance / "taridx" / vec
    out = tx.build(d, fold, out=tmp_path / f"{fold}.taridx", show_progress=False)
    assert out.read_bytes() == (d / f"{fold}.taridx").read_bytes()


@pytest.mark.parametrize("vec, fold", DIALECTS)
def test_dialect_rows_point_at_real_payloads(conformance, tmp_path, vec, fold):
    d = conformance / "taridx" / vec
    side = json.loads((d / f"{fold}.expected.json").read_text())
    sha_at = {(r["fid"], r["payload_offset"]): r["payload_sha256"] for r in side["rows"]}
    out = tx.build(d, fold, out=tmp_path / "x.taridx", show_progress=False)
    with tx.Index.open(out, validate=True) as idx:
        shards = [s["file"] for s in side["shards"]]
        want = []
        for fid, shard in enumerate(shards):
            for m in side["tarfile_view"][shard]["members"]:
                if m["type"] in ("0", "\x00", "7"):
                    want.append((fid, m["offset_data"] - 512, m["size"], *_stem_ext(m["name"])))
        got = [(int(r["fid"]), int(r["offset"]), int(r["size"])) for r in idx.rows]
        assert got == [w[:3] for w in want]
        exts = idx.ext_of()
        for k, (fid, off, size, stem, ext) in enumerate(want):
            assert exts[k] == ext
            assert int(idx.rows["keyhash"][k]) == xxh64(stem.encode())
            payload = (d / shards[fid]).read_bytes()[off + 512 : off + 512 + size]
            if (fid, off + 512) in sha_at:
                assert hashlib.sha256(payload).hexdigest() == sha_at[(fid, off + 512)]
        assert idx.n_stems == len({(w[3]) for w in want})


def test_pax_long_and_non_ascii_names(conformance, tmp_path):
    d = conformance / "taridx" / "pax_python_default"
    out = tx.build(d, "train", out=tmp_path / "x.taridx", show_progress=False)
    with tx.Index.open(out) as idx:
        assert idx.lookup(["y" * 120, "é", "?", "@PaxHeader"]).tolist()[2:] == [-1, -1]
        assert (idx.lookup(["y" * 120, "é"]) >= 0).all()
        assert "" not in idx.ext


def test_empty_shards_keep_their_fid(conformance, tmp_path):
    d = conformance / "taridx" / "empty_shards"
    side = json.loads((d / "train.expected.json").read_text())
    out = tx.build(d, "train", out=tmp_path / "x.taridx", show_progress=False)
    with tx.Index.open(out) as idx:
        assert idx.rows["fid"].tolist() == side["rows_correct_fid"]
        assert idx.lookup(["e3", "e4"]).min() >= 0


def test_reference_errors(conformance, tmp_path):
    base = conformance / "taridx"
    for name, fold, cls, match in [
        (
            "bad_checksum_ignored/train_0000.tar",
            "train",
            FormatError,
            r"shard train_0000.tar at offset 0x0: header checksum mismatch",
        ),
        (
            "truncated_and_concat/trunc_0000.tar",
            "trunc",
            TruncatedError,
            r"shard trunc_0000.tar at offset 0x1200: member data ends past end of file",
        ),
        ("errors_no_index/badoctal.tar", "bad", FormatError, r"shard bad_0000.tar at offset"),
    ]:
        root = tmp_path / fold
        root.mkdir()
        shutil.copy(base / name, root / f"{fold}_0000.tar")
        with pytest.raises(cls, match=match):
            tx.build(root, fold, show_progress=False)
        assert not (root / f"{fold}.taridx").exists()


def test_base256_size(conformance, tmp_path):
    shutil.copy(conformance / "taridx" / "errors_no_index" / "b256.tar", tmp_path / "b_0000.tar")
    out = tx.build(tmp_path, "b", show_progress=False)
    with tx.Index.open(out) as idx:
        assert idx.rows["size"].tolist() == [5] and idx.ext == ["jpg"]
        assert idx.lookup(["big"]).tolist() == [0]


def _tar(path, members, fmt=tarfile.USTAR_FORMAT):
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))


def test_ustar_prefix_and_directories(tmp_path):
    long_dir = "d" * 120
    _tar(tmp_path / "f_0.tar", [(f"{long_dir}/s1.JPG", b"abc"), ("x/s1.cls", b"1")])
    with tarfile.open(tmp_path / "f_0.tar") as tf:
        assert tf.getmembers()[0].name.startswith(long_dir)  # really in the prefix field
    with tx.Index.open(tx.build(tmp_path, "f", show_progress=False)) as idx:
        assert idx.ext == ["jpg", "cls"] and idx.n_stems == 1
        assert idx.lookup(["s1"]).tolist() == [0]


def test_pax_global_header_and_no_rows_for_links(tmp_path):
    with tarfile.open(
        tmp_path / "g_0.tar", "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}
    ) as tf:
        d = tarfile.TarInfo("dir")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        info = tarfile.TarInfo("dir/a.bin")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"xyz"))
        ln = tarfile.TarInfo("dir/b.bin")
        ln.type, ln.linkname = tarfile.SYMTYPE, "a.bin"
        tf.addfile(ln)
    with tx.Index.open(tx.build(tmp_path, "g", show_progress=False)) as idx:
        assert idx.n_rows == 1 and idx.ext == ["bin"]
        off = int(idx.rows["offset"][0])
    raw = (tmp_path / "g_0.tar").read_bytes()
    assert raw[off + 512 : off + 515] == b"xyz"


def test_sparse_member_is_unsupported(tmp_path):
    _tar(tmp_path / "s_0.tar", [("a.bin", b"x" * 10)])
    raw = bytearray((tmp_path / "s_0.tar").read_bytes())
    raw[156] = ord("S")
    raw[148:156] = b" " * 8
    raw[148:155] = f"{sum(raw[:512]):06o}\0".encode()
    (tmp_path / "s_0.tar").write_bytes(bytes(raw))
    with pytest.raises(UnsupportedError, match="sparse"):
        tx.build(tmp_path, "s", show_progress=False)


def test_parallel_build_equals_serial(tmp_path):
    for k in range(4):
        _tar(
            tmp_path / f"p_{k:04d}.tar",
            [(f"s{k}_{j}.{e}", bytes([j]) * (j * 37 % 900)) for j in range(30) for e in ("a", "b")],
        )
    one = tx.build(tmp_path, "p", out=tmp_path / "one.taridx", workers=1, show_progress=False)
    two = tx.build(tmp_path, "p", out=tmp_path / "two.taridx", workers=2, show_progress=True)
    assert one.read_bytes() == two.read_bytes()
    with tx.Index.open(one) as idx:
        assert idx.n_rows == 240


@pytest.mark.parametrize("vec, fold", IDENTICAL + DIALECTS)
def test_build_bytes_do_not_depend_on_threads(conformance, tmp_path, vec, fold):
    """Issue 28: the key table is cut into one partition per thread (up to 256) and filled in
    parallel; the index must be the same bytes at every thread count (crash ids, pax and GNU
    names, empty shards, non-contiguous samples included)."""
    d = conformance / "taridx" / vec
    want = tx.build(d, fold, out=tmp_path / "w1.taridx", workers=1, show_progress=False)
    for w in (2, 3, 16, 300):
        got = tx.build(d, fold, out=tmp_path / f"w{w}.taridx", workers=w, show_progress=False)
        assert got.read_bytes() == want.read_bytes(), w


def test_build_is_atomic(tmp_path, monkeypatch):
    _tar(tmp_path / "a_0.tar", [("k.x", b"1")])
    path = tx.build(tmp_path, "a", show_progress=False)
    before = path.read_bytes()
    _tar(tmp_path / "a_1.tar", [("j.x", b"2")])

    def boom(*a, **k):
        raise RuntimeError("disk full")

    import tenfold.taridx.writer as w

    real = w.np.ascontiguousarray
    monkeypatch.setattr(w.np, "ascontiguousarray", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        tx.build(tmp_path, "a", show_progress=False)
    monkeypatch.setattr(w.np, "ascontiguousarray", real)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_build_fsync_option(tmp_path, monkeypatch):
    _tar(tmp_path / "f_0.tar", [("k.x", b"1"), ("k.y", b"22")])
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    durable = tx.build(tmp_path, "f", out=tmp_path / "d.taridx", show_progress=False)
    assert calls  # the file, then its directory
    calls.clear()
    fast = tx.build(tmp_path, "f", out=tmp_path / "n.taridx", show_progress=False, fsync=False)
    assert calls == []
    assert fast.read_bytes() == durable.read_bytes()
    assert (
        cli_main(["index", "build", str(tmp_path), "--split", "f", "--no-progress", "--no-fsync"])
        == 0
    )
    assert calls == []
    assert (tmp_path / "f.taridx").read_bytes() == durable.read_bytes()


def test_no_shards(tmp_path):
    with pytest.raises(FileNotFoundError):
        tx.build(tmp_path, "nothing")


def test_staleness(tmp_path):
    for k in range(3):
        _tar(tmp_path / f"t_{k:04d}.tar", [(f"s{k}.{e}", b"v" * (100 + k)) for e in ("a", "b")])
    path = tx.build(tmp_path, "t", show_progress=False)
    with tx.Index.open(path) as idx:
        assert tx.stale_shards(idx, tmp_path, "t") == {}
        # same size, different member size in a header -> caught by the header re-check
        _tar(tmp_path / "t_0001.tar", [(f"s1.{e}", b"w" * 90) for e in ("a", "b")])
        stale = tx.stale_shards(idx, tmp_path, "t")
        assert list(stale) == ["t_0001.tar"] and "member size mismatch" in stale["t_0001.tar"]
        assert "size 90)" in stale["t_0001.tar"]
        assert not stale["t_0001.tar"].startswith("taridx:")  # the caller names the format
        _tar(tmp_path / "t_0001.tar", [(f"s1.{e}", b"v" * 101) for e in ("a", "b", "c")])
        assert "after the last indexed" in tx.stale_shards(idx, tmp_path, "t")["t_0001.tar"]
        (tmp_path / "t_0002.tar").write_bytes(b"")
        stale = tx.stale_shards(idx, tmp_path, "t")
        assert "smaller" in stale["t_0002.tar"]
        os.unlink(tmp_path / "t_0002.tar")
        assert "missing" in tx.stale_shards(idx, tmp_path, "t")["t fid 2"]
    rep = tx.verify(path)
    assert not rep.ok


def test_cli(tmp_path, capsys):
    _tar(tmp_path / "c_0000.tar", [("k1.jpg", b"12345"), ("k1.cls", b"1")])
    assert cli_main(["index", "build", str(tmp_path), "--split", "c", "--no-progress"]) == 0
    assert "2 rows, 1 sample, ext" in capsys.readouterr().out
    assert cli_main(["index", "check", str(tmp_path), "--split", "c"]) == 0
    assert cli_main(["index", "lookup", str(tmp_path / "c.taridx"), "k1"]) == 0
    assert "jpg@fid0+0[5]" in capsys.readouterr().out
    assert cli_main(["index", "lookup", str(tmp_path / "c.taridx"), "zz"]) == 1
    _tar(tmp_path / "c_0000.tar", [("k1.jpg", b"1234"), ("k1.cls", b"1")])
    assert cli_main(["index", "check", str(tmp_path), "--split", "c"]) == 1
    assert "stale: c_0000.tar" in capsys.readouterr().out
    assert cli_main(["inspect", str(tmp_path / "c.taridx")]) == 0
    (tmp_path / "c_0000.tar").write_bytes(b"\x01" * 512)
    assert cli_main(["index", "build", str(tmp_path), "--split", "c", "--no-progress"]) == 1
    assert "checksum" in capsys.readouterr().err


def test_demo(tmp_path):
    p = tx.demo(tmp_path)
    assert tx.verify(p).ok and len(tx.inspect(p)) == 6


@pytest.mark.parametrize("vec, fold", [("crash_collision", "train"), ("noncontiguous", "train")])
def test_fold_rows_of_shard_scans_equals_build(conformance, tmp_path, vec, fold):
    """``fold_rows`` (public) over ``scan_shard`` results gives the rows, tables and stem count
    of the built index (crash ids included)."""
    d = conformance / "taridx" / vec
    scans = [tx.scan_shard(p) for p in tx.shard_paths(d, fold)]
    build_module = importlib.import_module("tenfold.formats.taridx.build")
    rows, ext, crash, n_stems = build_module.fold_rows(scans)
    with tx.Index.open(tx.build(d, fold, out=tmp_path / "x.taridx", show_progress=False)) as idx:
        assert rows.tobytes() == idx.rows.tobytes()
        assert (ext, crash, n_stems) == (list(idx.ext), list(idx.crash), idx.n_stems)
