"""Issue 15 (TARIDX): every read checks that the row points at the member it claims.

Promises broken before: swapped or replaced shards were not stale and served other samples'
bytes; corrupt rows (wrong fid or offset) served misdirected bytes; one member with a newline
in its extension failed the whole fold's build.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile

import numpy as np
import pytest

import tenfold.taridx as tx
from tenfold import _kernels
from tenfold.cli import main as cli_main
from tenfold.core.checksums import xxh64
from tenfold.errors import FormatError, IntegrityError, TenfoldError

FUTURE = 2**62  # ns: an index "written" after every shard (no open-time re-check)


def _tar(path, members, fmt=tarfile.USTAR_FORMAT):
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))


def _fold(root, shards=(0, 1, 2), per=5, fold="t"):
    """Shards of one layout: same stem lengths, same payload sizes, different names/bytes."""
    for k in shards:
        _tar(
            root / f"{fold}_{k:04d}.tar",
            [
                (f"k{k}s{j:03d}.{e}", bytes([k * 16 + j]) * (300 + 7 * j + (e == "cls")))
                for j in range(per)
                for e in ("jpg", "cls")
            ],
        )


def _truth(root, fold="t"):
    """{(stem, ext): payload} of every member of the fold's shards."""
    out = {}
    for p in sorted(root.glob(f"{fold}_*.tar")):
        with tarfile.open(p) as tf:
            for m in tf.getmembers():
                stem, _, ext = m.name.partition(".")
                out[(stem, ext)] = tf.extractfile(m).read()
    return out


def _swap(a, b):
    tmp = a.with_name("swap.tmp")
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)


# -- shards swapped or replaced -------------------------------------------------------------------
def test_swapped_shards_are_stale_and_never_served(tmp_path):
    _fold(tmp_path)
    path = tx.build(tmp_path, "t", show_progress=False)
    with tx.Dataset(tmp_path, "t") as ds:
        good = {k: bytes(v) for k, v in ds.get("k0s002").items()}
    _swap(tmp_path / "t_0000.tar", tmp_path / "t_0001.tar")
    assert (tmp_path / "t_0000.tar").stat().st_size == (tmp_path / "t_0001.tar").stat().st_size
    with tx.Index.open(path) as idx:
        stale = tx.stale_shards(idx, tmp_path, "t")
    assert sorted(stale) == ["t_0000.tar", "t_0001.tar"]
    assert "member name mismatch" in stale["t_0000.tar"] and "'k1s000.jpg'" in stale["t_0000.tar"]
    rep = tx.verify(path)
    assert not rep.ok and "shard t_0000.tar" in rep.format()
    # the renames made the shards newer than the index: caught when the shard is opened
    with (
        tx.Dataset(tmp_path, "t") as ds,
        pytest.raises(IntegrityError, match=r"shard t_0000.tar: changed since"),
    ):
        ds.get("k0s002")
    # an index newer than the shards: the header check of the read itself catches it
    os.utime(path, ns=(FUTURE, FUTURE))
    with tx.Dataset(tmp_path, "t") as ds:
        with pytest.raises(
            IntegrityError,
            match=(
                r"shard t_0000.tar: member header at offset 0x[0-9a-f]+: member name mismatch; "
                r"expected stem xxh64 0x[0-9a-f]+, extension 'jpg', size 314, got 'k1s002.jpg'"
            ),
        ):
            ds.get("k0s002")
        with pytest.raises(IntegrityError):
            ds[len(ds) // 3 + 1]  # a sample of shard 1
        assert {k: bytes(v) for k, v in ds.get("k2s002").items()} == {
            k: bytes([2 * 16 + 2]) * len(v) for k, v in good.items()
        }
    # the switch: no header check, the index is trusted (and here it is wrong)
    with tx.Dataset(tmp_path, "t", verify_headers=False) as ds:
        assert bytes(ds.get("k0s002")["jpg"]) == bytes([16 + 2]) * 314


def test_shard_zero_deleted_and_another_added(tmp_path):
    _fold(tmp_path)
    path = tx.build(tmp_path, "t", show_progress=False)
    os.unlink(tmp_path / "t_0000.tar")
    _fold(tmp_path, shards=(3,))
    os.utime(path, ns=(FUTURE, FUTURE))
    with tx.Index.open(path) as idx:
        stale = tx.stale_shards(idx, tmp_path, "t")
    assert sorted(stale) == ["t_0001.tar", "t_0002.tar", "t_0003.tar"]
    assert not tx.verify(path).ok
    with tx.Dataset(tmp_path, "t") as ds:
        for i in range(len(ds)):  # every row now points at another shard's member
            with pytest.raises(IntegrityError, match="member name mismatch"):
                ds[i]


def test_up_to_date_fold_is_not_stale_and_reads_everything(tmp_path):
    _fold(tmp_path)
    path = tx.build(tmp_path, "t", show_progress=False)
    with tx.Index.open(path) as idx:
        assert tx.stale_shards(idx, tmp_path, "t", sample=1000) == {}
    assert tx.verify(path).ok
    truth = _truth(tmp_path)
    with tx.Dataset(tmp_path, "t") as ds:
        for j in range(5):
            for k in range(3):
                got = ds.get(f"k{k}s{j:03d}")
                assert {e: bytes(v) for e, v in got.items()} == {
                    e: truth[(f"k{k}s{j:03d}", e)] for e in ("jpg", "cls")
                }


def test_changed_shard_gets_every_row_checked(tmp_path):
    """A shard newer than the index has every header checked, not only the sampled ones."""
    _fold(tmp_path, shards=(0,), per=20)
    path = tx.build(tmp_path, "t", show_progress=False)
    os.utime(path, ns=(10**18, 10**18))
    raw = bytearray((tmp_path / "t_0000.tar").read_bytes())
    with tx.Index.open(path) as idx:
        off = int(idx.rows["offset"][17])  # neither first, last nor sampled with sample=2
    assert raw[off : off + 10] == b"k0s008.cls"
    raw[off : off + 6] = b"k0s099"
    h = raw[off : off + 512]
    h[148:156] = b" " * 8
    raw[off + 148 : off + 156] = f"{sum(h):06o}\0 ".encode()
    (tmp_path / "t_0000.tar").write_bytes(bytes(raw))
    with tx.Index.open(path) as idx:
        stale = tx.stale_shards(idx, tmp_path, "t", sample=2)
        assert "member name mismatch" in stale["t_0000.tar"] and "k0s099.cls" in stale["t_0000.tar"]


def test_trailing_directory_is_not_a_new_member(tmp_path):
    p = tmp_path / "d_0000.tar"
    with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("a.jpg")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
        d = tarfile.TarInfo("dir")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        s = tarfile.TarInfo("dir/link.jpg")
        s.type, s.linkname = tarfile.SYMTYPE, "a.jpg"
        tf.addfile(s)
    path = tx.build(tmp_path, "d", show_progress=False)
    with tx.Index.open(path) as idx:
        assert tx.stale_shards(idx, tmp_path, "d") == {}
        with tarfile.open(p, "a") as tf:
            info = tarfile.TarInfo("b.jpg")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"b"))
        assert "member 'b.jpg' at offset" in tx.stale_shards(idx, tmp_path, "d")["d_0000.tar"]


# -- corrupt rows ---------------------------------------------------------------------------------
_FIELDS = ("fid", "offset", "size", "extid", "crashid", "keyhash")


def _edits(rows: np.ndarray, r: int) -> list[tuple[str, int]]:
    """Plausible wrong values for each field of row ``r``."""
    row = rows[r]
    other = rows[(r + 3) % len(rows)]
    return [
        ("fid", 1 - int(row["fid"])),
        ("fid", 2),
        ("offset", int(other["offset"])),
        ("offset", int(row["offset"]) + 512),
        ("offset", int(row["offset"]) - 512 if int(row["offset"]) >= 512 else 1024),
        ("offset", 0),
        ("offset", int(row["offset"]) + 1),
        ("size", int(row["size"]) + 1),
        ("size", int(row["size"]) - 1),
        ("size", 0),
        ("extid", 1 - int(row["extid"])),
        ("extid", 9),
        ("crashid", 1),
        ("keyhash", int(other["keyhash"])),
        ("keyhash", int(row["keyhash"]) ^ 1),
    ]


def test_every_corrupt_row_is_refused_or_harmless(tmp_path):
    """Mutate each field of each row of a small index: every read raises a tenfold error or
    returns exactly the bytes of the member the (mutated) row names."""
    src = tmp_path / "src"
    src.mkdir()
    _fold(src, shards=(0, 1), per=3)
    good = tx.build(src, "t", show_progress=False)
    truth = {(xxh64(stem.encode()), ext): data for (stem, ext), data in _truth(src).items()}
    with tx.Index.open(good) as idx:
        rows, ext = np.array(idx.rows), list(idx.ext)
    work = tmp_path / "work"
    work.mkdir()
    for f in src.glob("t_*.tar"):
        shutil.copy(f, work / f.name)
    n_edits = refused = served = 0  # refused: edits where the open or some read failed
    for r in range(len(rows)):
        for field, value in _edits(rows, r):
            if int(rows[field][r]) == value:
                continue  # not an edit
            bad = rows.copy()
            bad[field][r] = value
            n_edits += 1
            try:
                tx.write_rows(work / "t.taridx", bad, ext, [], fsync=False)
                ds = tx.Dataset(work, "t")
                n = len(ds)
                keys = ds.index.samples.keyhash
            except TenfoldError:
                refused += 1
                continue
            failed = False
            with ds:
                for i in range(n):
                    try:
                        sample = ds[i]
                    except TenfoldError:
                        failed = True
                        continue
                    for e, view in sample.items():
                        assert bytes(view) == truth[(int(keys[i]), e)], (field, value, r, e)
                    served += 1
            refused += failed
    # every real edit here makes its row point at another member: never silently served
    assert n_edits >= 42 * 4 and refused == n_edits
    assert served  # the other samples of an edited index still read


# -- bad member names ----------------------------------------------------------------------------
def _bad_fold(root):
    _tar(root / "b_0000.tar", [("a.jpg", b"1"), ("b.j\npg", b"22"), ("c.cls", b"333")])
    _tar(root / "b_0001.tar", [("d\ne.cls", b"4"), ("e.cls", b"55"), ("f.j\npg", b"666")])


def test_newline_in_a_name_is_an_error_naming_shard_and_offset(tmp_path):
    _bad_fold(tmp_path)
    with pytest.raises(
        FormatError,
        match=(
            r"shard b_0000.tar at offset 0x400: member name "
            r"b'b.j\\npg': newline in the basename"
        ),
    ):
        tx.build(tmp_path, "b", show_progress=False)
    assert not (tmp_path / "b.taridx").exists()


def test_newline_names_skipped_on_request(tmp_path):
    _bad_fold(tmp_path)
    skipped: list = []
    path = tx.build(tmp_path, "b", show_progress=False, on_bad_name="skip", skipped=skipped)
    assert [(s, o, n) for s, o, n, _why in skipped] == [
        ("b_0000.tar", 0x400, b"b.j\npg"),
        ("b_0001.tar", 0, b"d\ne.cls"),
        ("b_0001.tar", 0x800, b"f.j\npg"),
    ]
    with tx.Index.open(path) as idx:
        assert idx.ext == ["jpg", "cls"] and idx.n_rows == 3
        assert tx.stale_shards(idx, tmp_path, "b") == {}  # skipped members are not "new"
    with tx.Dataset(tmp_path, "b") as ds:
        assert [{k: bytes(v) for k, v in s.items()} for s in ds] == [
            {"jpg": b"1"},
            {"cls": b"333"},
            {"cls": b"55"},
        ]
    with pytest.raises(ValueError, match="on_bad_name"):
        tx.build(tmp_path, "b", on_bad_name="ignore")


def test_skip_keeps_extension_ids_first_seen(tmp_path):
    _tar(
        tmp_path / "x_0000.tar",
        [("a.t\nxt", b"1"), ("b.png", b"2"), ("c.t\nxt", b"3"), ("d.jpg", b"4"), ("e.png", b"5")],
    )
    path = tx.build(tmp_path, "x", show_progress=False, on_bad_name="skip")
    with tx.Index.open(path) as idx:
        assert idx.ext == ["png", "jpg"] and idx.ext_of() == ["png", "jpg", "png"]
        assert idx.lookup(["b", "d", "e", "a"]).tolist() == [0, 1, 2, -1]


def test_cli_on_bad_name(tmp_path, capsys):
    _bad_fold(tmp_path)
    assert cli_main(["index", "build", str(tmp_path), "--split", "b", "--no-progress"]) == 1
    assert "b_0000.tar at offset 0x400" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "index",
                "build",
                str(tmp_path),
                "--split",
                "b",
                "--no-progress",
                "--on-bad-name",
                "skip",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "skipped: b_0001.tar at offset 0x800: member b'f.j\\npg'" in out
    assert "3 rows" in out


# -- no false alarms: every tar dialect of the conformance vectors --------------------------------
DIALECTS = [
    ("basic_ustar", "train"),
    ("crash_collision", "train"),
    ("names_multidot_case_utf8", "train"),
    ("names_multidot_case_utf8", "latin1"),
    ("noncontiguous", "train"),
    ("gnu_longname_python", "train"),
    ("gnutar_pax_and_gnu", "gnufold"),
    ("gnutar_pax_and_gnu", "paxfold"),
    ("pax_python_default", "train"),
    ("webdataset_tarwriter", "train"),
    ("dirs_links_noext", "train"),
    ("writer/ds", "train"),
    ("shard_order_lexicographic", "train"),
    ("empty_shards", "train"),
    ("truncated_and_concat", "concat"),
]


def _payloads(d, fold):
    side = json.loads((d / f"{fold}.expected.json").read_text())
    shards = [s["file"] for s in side["shards"]]
    out = {}
    for fid, shard in enumerate(shards):
        raw = (d / shard).read_bytes()
        for m in side["tarfile_view"][shard]["members"]:
            if m["type"] in ("0", "\x00", "7"):
                out[(fid, m["offset_data"])] = raw[m["offset_data"] : m["offset_data"] + m["size"]]
    return out


@pytest.mark.parametrize("vec, fold", DIALECTS)
def test_every_dialect_reads_with_header_checks(conformance, tmp_path, vec, fold):
    d = conformance / "taridx" / vec
    idx_path = tx.build(d, fold, out=tmp_path / f"{fold}.taridx", show_progress=False)
    want = _payloads(d, fold)
    with tx.Index.open(idx_path) as idx:
        assert tx.stale_shards(idx, d, fold, sample=10**6) == {}
        rows = np.array(idx.rows)
    seen = 0
    with tx.Dataset(d, fold, index=idx_path) as ds:
        for i in range(len(ds)):
            sample = ds[i]
            last = {}  # a sample with two members of one extension returns the last one
            for r in rows[ds.index.samples.rows_of(i)]:
                last[ds.index.ext[int(r["extid"])]] = (int(r["fid"]), int(r["offset"]) + 512)
                seen += 1
            assert {e: bytes(v) for e, v in sample.items()} == {
                e: want[at] for e, at in last.items()
            }
    assert seen == len(rows)


def test_remote_long_names_fetch_their_extended_headers(conformance, tmp_path):
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    d = conformance / "taridx" / "gnu_longname_python"
    ours = tx.build(d, "train", out=tmp_path / "train.taridx", show_progress=False)
    fs = fsspec.filesystem("memory")
    root = "memory://taridx-longnames"
    for f in [*d.glob("train_*.tar"), ours]:
        fs.pipe(f"{root}/{f.name}", f.read_bytes())
    try:
        with tx.Dataset(d, "train", index=ours) as local, tx.Dataset(root, "train") as remote:
            assert len(remote) == len(local) > 0
            for i in range(len(local)):
                assert {k: bytes(v) for k, v in remote[i].items()} == {
                    k: bytes(v) for k, v in local[i].items()
                }
        # glzn's own index of these shards has rows for the long-name headers: refused
        with tx.Dataset(d, "train") as theirs, pytest.raises(IntegrityError, match="'L'"):
            for i in range(len(theirs)):
                theirs[i]
    finally:
        fs.rm(root, recursive=True)


def test_remote_swapped_shards_refused(tmp_path):
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    _fold(tmp_path, shards=(0, 1))
    tx.build(tmp_path, "t", show_progress=False)
    fs = fsspec.filesystem("memory")
    root = "memory://taridx-swapped"
    fs.pipe(f"{root}/t.taridx", (tmp_path / "t.taridx").read_bytes())
    fs.pipe(f"{root}/t_0000.tar", (tmp_path / "t_0001.tar").read_bytes())
    fs.pipe(f"{root}/t_0001.tar", (tmp_path / "t_0000.tar").read_bytes())
    try:
        with tx.Dataset(root, "t") as ds, pytest.raises(IntegrityError, match="member name"):
            ds.get("k0s001")
    finally:
        fs.rm(root, recursive=True)


# -- the kernel ----------------------------------------------------------------------------------
def _members_tar(fmt):
    bio = io.BytesIO()
    long = "y" * 120 if fmt != tarfile.USTAR_FORMAT else "y" * 90  # ustar: prefix + 100 bytes
    names = [
        "a/sample1.JPG",
        "x" * 150 + "/" + long + ".cls",
        "é.Txt",
        "noext",
        "d" * 120 + "/z.jpg",
    ]
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tf:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 5
            info.mtime = 1_700_000_000.5 if fmt == tarfile.PAX_FORMAT else 1_700_000_000
            tf.addfile(info, io.BytesIO(b"12345"))
    return bio.getvalue()


CLAIMS = [
    (b"sample1", b"jpg"),
    (b"y" * 120, b"cls"),
    (b"y" * 90, b"cls"),
    ("é".encode(), b"txt"),
    (b"noext", b""),
    (b"z", b"jpg"),
    (b"sample1", b"JPG"),
    (b"x", b"cls"),
]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_check_member_known(kernels, fmt):
    data = _members_tar(fmt)
    ts = kernels("tarscan")
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        members = [m for m in tf.getmembers()]
    for m in members:
        off = m.offset_data - 512
        stem, _, ext = m.name.rsplit("/", 1)[-1].partition(".")
        ascii_name = stem.isascii() and ext.isascii()
        ok = ts.check_member(data, off, 5, xxh64(stem.encode()), ext.lower().encode())
        assert ok == (ts.M_OK if ascii_name else ts.M_NON_ASCII)
        assert ts.check_member(data, off, 4, xxh64(stem.encode()), ext.lower().encode()) == (
            ts.M_SIZE if ascii_name else ts.M_NON_ASCII
        )
        for s, e in CLAIMS:
            if (s, e) != (stem.encode(), ext.lower().encode()):
                got = ts.check_member(data, off, 5, xxh64(s), e)
                assert got in (ts.M_NAME, ts.M_NON_ASCII)
        code, n_off, n_len, size, t = ts.member_name(data, off, True)
        name = data[n_off : n_off + n_len].decode()  # the name field: no ustar prefix
        assert (code, size, t) == (0, 5, 48) and (m.name == name or m.name.endswith("/" + name))
    assert ts.check_member(data, 1, 5, 0, b"") == ts.M_NO_HEADER
    assert ts.check_member(data, len(data) - 100, 5, 0, b"") == ts.M_PAST_END
    assert ts.check_member(data, -512, 5, 0, b"") == ts.M_PAST_END
    assert ts.check_member(data, members[0].offset_data - 512, 2**62, 0, b"") == ts.M_PAST_END
    assert ts.member_name(data, len(data), False)[0] == ts.M_PAST_END
    with pytest.raises(TypeError):
        ts.check_member(data, 0, 5, 0, "jpg")
    with pytest.raises(OverflowError):
        ts.check_member(data, 0, 5, -1, b"jpg")


def test_check_member_not_regular(kernels):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        d = tarfile.TarInfo("dir.jpg")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
    assert (
        kernels("tarscan").check_member(bio.getvalue(), 0, 0, xxh64(b"dir"), b"jpg")
        == kernels("tarscan").M_NOT_REGULAR
    )


def test_check_member_differential():
    """Compiled == reference on random claims and random corruptions of several dialects."""
    if _kernels.pure_python():
        pytest.skip("TENFOLD_PUREPYTHON=1: no compiled kernel to compare")
    ref, comp = _kernels.load("tarscan", "reference"), _kernels.load("tarscan", "compiled")
    rng = np.random.default_rng(5)
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        clean = _members_tar(fmt)
        for trial in range(60):
            data = bytearray(clean)
            for _ in range(int(rng.integers(0, 4))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
            data = bytes(data)
            for off in range(0, len(data), 512):
                s, e = CLAIMS[int(rng.integers(0, len(CLAIMS)))]
                size = int(rng.integers(3, 7))
                assert comp.check_member(data, off, size, xxh64(s), e) == ref.check_member(
                    data, off, size, xxh64(s), e
                ), (fmt, trial, off)
                for ext in (False, True):
                    assert comp.member_name(data, off, ext) == ref.member_name(data, off, ext)


def test_header_check_message(tmp_path):
    """Messages name the shard, the offset, what the row expects and what the header says."""
    _fold(tmp_path, shards=(0,), per=2)
    path = tx.build(tmp_path, "t", show_progress=False)
    with tx.Index.open(path) as idx:
        rows = np.array(idx.rows)
        ext = idx.ext
    rows["offset"][0], rows["offset"][1] = rows["offset"][1], rows["offset"][0]
    tx.write_rows(path, rows, ext, [], fsync=False)
    with tx.Dataset(tmp_path, "t") as ds, pytest.raises(IntegrityError) as info:
        ds[0]
    msg = str(info.value)
    assert msg.startswith("taridx: shard t_0000.tar: member header at offset 0x400: member ")
    assert f"expected stem xxh64 {xxh64(b'k0s000'):#x}, extension 'jpg'" in msg
    assert "got 'k0s000.cls' (stem xxh64" in msg


def _cols_of(ds):
    ds[0]
    return ds._cols, ds._kh, ds._starts


def test_row_check_known(kernels, tmp_path):
    _fold(tmp_path, shards=(0, 1), per=3)
    tx.build(tmp_path, "t", show_progress=False)
    ts = kernels("tarscan")
    with tx.Dataset(tmp_path, "t") as ds:
        cols, kh, starts = _cols_of(ds)
        shard0 = (tmp_path / "t_0000.tar").read_bytes()
        shard1 = (tmp_path / "t_0001.tar").read_bytes()
        rc = ts.RowCheck(cols, kh, starts, (b"jpg", b"cls"))
        for i in range(len(ds)):
            fid = int(cols[starts[i], 2])
            assert rc.sample([shard0, shard1][fid], i, fid) == -1
            assert rc.sample([shard0, shard1][fid], i, 1 - fid) == -1  # no rows of that fid
            assert rc.sample([shard1, shard0][fid], i, fid) == int(starts[i])  # swapped
        for i in range(len(ds)):
            want = cols[starts[i] : starts[i + 1]].tolist()
            fid = want[0][2]
            assert rc.rows(i, None) == want
            assert rc.rows(i, [shard0, shard1]) == want
            assert rc.rows(i, [None, None]) == want == rc.rows(i, [])
            with pytest.raises(ts.HeaderMismatch) as info:
                rc.rows(i, [shard1, shard0])
            assert info.value.args == (int(starts[i]),)
            swapped = [None, None]
            swapped[1 - fid] = [shard0, shard1][fid]  # only the other shard is "open"
            assert rc.rows(i, swapped) == want
        with pytest.raises(TypeError):
            rc.rows(0, (shard0, shard1))
        with pytest.raises(IndexError):
            rc.rows(len(ds), None)
        only_cls = ts.RowCheck(cols, kh, starts, (None, b"cls"))
        assert only_cls.sample(shard1, 0, 0) == int(starts[0]) + 1
        bad = cols.copy()
        bad[1, 1] += 1  # size
        assert ts.RowCheck(bad, kh, starts, (b"jpg", b"cls")).sample(shard0, 0, 0) == 1
        bad[1, 0] = 3  # payload start before any header
        assert ts.RowCheck(bad, kh, starts, (b"jpg", b"cls")).sample(shard0, 0, 0) == 1
        with pytest.raises(ValueError, match="extid"):
            ts.RowCheck(cols, kh, starts, (b"jpg",)).sample(shard0, 0, 0)
        with pytest.raises(TypeError):
            ts.RowCheck(cols, kh, starts, ("jpg", "cls")).sample(shard0, 0, 0)
        with pytest.raises(IndexError):
            rc.sample(shard0, len(ds), 0)
        with pytest.raises(IndexError):
            rc.sample(shard0, -1, 0)
        with pytest.raises(ValueError, match="starts"):
            ts.RowCheck(cols, kh, np.array([0, 5, 3], np.int64), (b"jpg", b"cls"))
        with pytest.raises(ValueError, match="starts"):
            ts.RowCheck(cols, kh, np.array([0, len(cols) + 1], np.int64), (b"jpg", b"cls"))
        with pytest.raises(ValueError, match="cols"):
            ts.RowCheck(cols[:5, :3].copy(), kh, starts, (b"jpg", b"cls"))
        with pytest.raises(ValueError, match="keyhash"):
            ts.RowCheck(cols, kh[1:].copy(), starts, (b"jpg", b"cls"))


def test_bad_checksum_reads_but_is_stale(kernels, tmp_path):
    """Reads skip the checksum when the name and size match; staleness checks verify it."""
    _fold(tmp_path, shards=(0,), per=2)
    path = tx.build(tmp_path, "t", show_progress=False)
    os.utime(path, ns=(FUTURE, FUTURE))
    raw = bytearray((tmp_path / "t_0000.tar").read_bytes())
    raw[148:154] = b"000000"  # checksum field of the first header
    (tmp_path / "t_0000.tar").write_bytes(bytes(raw))
    ts = kernels("tarscan")
    kh = xxh64(b"k0s000")
    assert ts.check_member(bytes(raw), 0, 300, kh, b"jpg") == ts.M_OK
    assert ts.check_member(bytes(raw), 0, 300, kh, b"jpg", True) == ts.M_NO_HEADER
    with tx.Dataset(tmp_path, "t") as ds:
        cols, kh, starts = _cols_of(ds)
        assert ts.RowCheck(cols, kh, starts, (b"jpg", b"cls")).sample(bytes(raw), 0, 0) == -1
        assert ts.RowCheck(cols, kh, starts, (b"jpg", b"cls"), True).sample(bytes(raw), 0, 0) == 0
        assert bytes(ds.get("k0s000")["jpg"]) == b"\0" * 300
    with tx.Index.open(path) as idx:
        stale = tx.stale_shards(idx, tmp_path, "t")
    assert "no member header there" in stale["t_0000.tar"]


@pytest.mark.parametrize("max_open", [1, 2, 8])
def test_samples_spanning_shards(tmp_path, max_open):
    """A sample's members in several shards: each checked, whichever shards are open."""
    for k in range(3):
        _tar(
            tmp_path / f"m_{k:04d}.tar",
            [(f"s{j}.e{k}", bytes([16 * k + j]) * (50 + j + k)) for j in range(4)],
        )
    path = tx.build(tmp_path, "m", show_progress=False)
    with tx.Dataset(tmp_path, "m", max_open=max_open) as ds:
        assert ds.lookup([f"s{j}" for j in range(4)]).tolist() == [0, 1, 2, 3]
        for j in [0, 3, 1, 1, 2, 0, 3, 2]:
            assert {e: bytes(v) for e, v in ds[j].items()} == {
                f"e{k}": bytes([16 * k + j]) * (50 + j + k) for k in range(3)
            }
            assert ds.open_shards <= max_open
    # shard 1 replaced by one of the same layout, other names: the read fails, whatever is open
    _tar(tmp_path / "m_0001.tar", [(f"t{j}.e1", bytes([99]) * (51 + j)) for j in range(4)])
    os.utime(path, ns=(FUTURE, FUTURE))
    with tx.Dataset(tmp_path, "m", max_open=max_open) as ds:
        for i in (0, 1, 0, 2):
            with pytest.raises(IntegrityError, match="shard m_0001.tar: member header"):
                ds[i]
        assert {
            e: bytes(v) for e, v in tx.Dataset(tmp_path, "m", extensions=["e0", "e2"])[3].items()
        } == {"e0": bytes([3]) * 53, "e2": bytes([35]) * 55}
