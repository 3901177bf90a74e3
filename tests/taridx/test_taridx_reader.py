"""TARIDX reader: every conformance index, zero-copy views, lookups, and bad input."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenfold.taridx as tx
from tenfold.core.checksums import xxh64
from tenfold.errors import FormatError, TenfoldError, TruncatedError, UnsupportedError
from tenfold.taridx._spec import HEADER, HEADER_DT, ROW_DT


def _vectors(conformance):
    out = []
    for entry in json.loads((conformance / "taridx" / "index.json").read_text()):
        if entry.get("taridx"):
            out.append(entry)
    return out


def _sidecar(conformance, entry):
    return json.loads((conformance / "taridx" / entry["sidecar"]).read_text())


def test_every_conformance_index_reads(conformance):
    entries = _vectors(conformance)
    assert len(entries) >= 18
    for entry in entries:
        side = _sidecar(conformance, entry)
        path = conformance / "taridx" / entry["taridx"]
        with tx.Index.open(path, validate=True) as idx:
            h = side["taridx"]["header"]
            for field in (
                "major",
                "minor",
                "n_stems",
                "n_rows",
                "n_ext",
                "n_crash",
                "off_crash",
                "off_arr",
                "flags",
            ):
                assert getattr(idx, field) == h[field], (entry["taridx"], field)
            assert idx.ext == side["taridx"]["ext"]
            assert idx.crash == side["taridx"]["crash"]
            assert idx.is_contiguous == bool(h["flags"] & 1)
            for k, row in enumerate(side["rows"]):
                got = idx.rows[k]
                assert (
                    int(got["fid"]),
                    int(got["offset"]),
                    int(got["size"]),
                    int(got["crashid"]),
                    int(got["keyhash"]),
                ) == (row["fid"], row["offset"], row["size"], row["crashid"], row["keyhash"])
                assert idx.ext[int(got["extid"])] == row["ext"]
            assert len(idx.samples) == idx.n_stems


def test_rows_are_zero_copy_views_at_unaligned_offset(conformance):
    path = conformance / "taridx" / "crash_collision" / "train.taridx"
    raw = path.read_bytes()
    with tx.Index.open(path) as idx:
        assert idx.off_arr == 111  # unaligned
        assert idx.rows.dtype == ROW_DT and idx.header.dtype == HEADER_DT
        assert not idx.rows.flags.writeable and not idx.rows.flags.owndata
        base = idx.rows
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        assert not isinstance(base, np.ndarray)  # the mmap itself, not a copy
        assert idx.rows.tobytes() == raw[111:]
        kh = np.frombuffer(raw[111 + 24 : 111 + 32], "<u8")[0]
        assert idx.rows["keyhash"][0] == kh


@pytest.mark.parametrize(
    "vec, n_ext, ext, n_crash",
    [
        ("empty_shards/only.taridx", 0, [], 0),
        ("dirs_links_noext/train.taridx", 3, ["", "jpg", "cls"], 0),
        ("gnu_longname_python/train.taridx", 2, ["", "cls"], 0),
        ("webdataset_tarwriter/train.taridx", 4, ["", "cls", "jpg", "json"], 0),
    ],
)
def test_blocks_split_on_newline_and_counts_disambiguate(conformance, vec, n_ext, ext, n_crash):
    with tx.Index.open(conformance / "taridx" / vec) as idx:
        assert idx.n_ext == n_ext and idx.ext == ext and idx.n_crash == n_crash


def test_one_empty_extension_name_vs_empty_block():
    rows = np.zeros(1, ROW_DT)
    rows["keyhash"] = xxh64(b"a")
    one = tx.Index.from_buffer(tx.index_bytes(rows, [""]))
    assert one.ext == [""] and one.off_crash == 64
    none = tx.Index.from_buffer(tx.index_bytes(np.zeros(0, ROW_DT), []))
    assert none.ext == [] and none.n_rows == 0 and none.is_contiguous


def test_lookup_resolves_real_xxh64_collisions(conformance):
    with tx.Index.open(conformance / "taridx" / "crash_collision" / "train.taridx") as idx:
        assert xxh64(b"c6e609e1b6b782bf4") == xxh64(b"c5646d719f6fbcb3c")
        stems = [
            "before",
            "c6e609e1b6b782bf4",
            "c5646d719f6fbcb3c",
            "between",
            "c715357411fa77eb9",
            "cbed4f75fb696b797",
            "absent",
        ]
        got = idx.lookup(stems)
        assert got.tolist() == [0, 1, 2, 3, 4, 5, -1]
        rows = idx.sample_rows("c5646d719f6fbcb3c")
        assert rows["crashid"].tolist() == [1, 1, 1]
        assert sorted(idx.ext_of(rows)) == ["cls", "jpg", "json"]
        # the json rows of the colliding stems live in shard 1, not next to their shard-0 rows
        assert rows["fid"].tolist() == [0, 0, 1]
        rows2 = idx.sample_rows("cbed4f75fb696b797")
        assert rows2["crashid"].tolist() == [2, 2]
        with pytest.raises(KeyError):
            idx.sample_rows("absent")


def test_samples_of_noncontiguous_index_group_rows(conformance):
    with tx.Index.open(conformance / "taridx" / "noncontiguous" / "train.taridx") as idx:
        s = idx.samples
        assert not idx.is_contiguous and len(s) == 3
        # samples in order of first row: a (rows 0, 2), b (1, 3), c (4, 5)
        assert [s.rows_of(i).tolist() for i in range(3)] == [[0, 2], [1, 3], [4, 5]]
        assert idx.lookup(["b", "a", "c"]).tolist() == [1, 0, 2]


def test_enforce_contiguous_matches_reference(conformance):
    d = conformance / "taridx" / "noncontiguous"
    side = json.loads((d / "train.expected.json").read_text())
    with tx.Index.open(d / "train.taridx") as idx:
        fixed = idx.enforce_contiguous()
        assert fixed.is_contiguous and fixed.n_stems == idx.n_stems
        assert fixed._mf.buffer().tobytes() == (d / "train.enforced.taridx").read_bytes()
        perm = side["enforce_contiguous_permutation"]
        assert fixed.rows.tobytes() == idx.rows[perm].tobytes()
        assert fixed.enforce_contiguous() is fixed
        assert fixed.lookup(["a", "b", "c"]).tolist() != [-1, -1, -1]


def test_save_round_trip(conformance, tmp_path):
    src = conformance / "taridx" / "crash_collision" / "train.taridx"
    with tx.Index.open(src) as idx:
        idx.save(tmp_path / "copy.taridx")
    assert (tmp_path / "copy.taridx").read_bytes() == src.read_bytes()


def test_load_gives_columns(conformance):
    cols = tx.load(conformance / "taridx" / "basic_ustar" / "val.taridx")
    assert set(cols) == {"fid", "offset", "size", "extid", "crashid", "keyhash"}
    assert cols["offset"].tolist()[:3] == [0, 1536, 2560]


# -- bad input --------------------------------------------------------------------------------
def _good() -> bytearray:
    rows, ext, crash = tx.writer.rows_from_members(
        [(0, 0, 5, "a", "jpg"), (0, 1024, 1, "a", "cls"), (1, 0, 3, "b", "jpg")]
    )
    return bytearray(tx.index_bytes(rows, ext, crash))


def _patch(data: bytearray, fmt: str, offset: int, value: int) -> bytes:
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@pytest.mark.parametrize(
    "fmt, offset, value, cls, match",
    [
        ("<H", 8, 2, UnsupportedError, "major"),
        ("<H", 8, 0, UnsupportedError, "major"),
        ("<H", 12, 33, FormatError, "rec_size"),
        ("<H", 14, 65, FormatError, "hdr_size"),
        ("<Q", 24, 4, TruncatedError, "row region size"),
        ("<Q", 24, 2, FormatError, "row region size"),
        ("<Q", 16, 9, FormatError, "n_stems"),
        ("<Q", 40, 63, FormatError, "off_crash"),
        ("<Q", 40, 10**6, FormatError, "off_crash"),
        ("<Q", 48, 64, FormatError, "off_arr"),
        ("<Q", 48, 2**64 - 1, FormatError, "off_arr"),
        ("<I", 32, 3, FormatError, "n_ext"),
        ("<I", 32, 1, FormatError, "n_ext"),
        ("<I", 36, 2, FormatError, "n_crash"),
    ],
)
def test_lying_header_fields(fmt, offset, value, cls, match):
    with pytest.raises(cls, match=match):
        tx.Index.from_buffer(_patch(_good(), fmt, offset, value))


@pytest.mark.parametrize(
    "field, value, cls",
    [
        ("magic", b"XARIDX\0\0", FormatError),
        ("major", 2, UnsupportedError),
        ("rec_size", 33, FormatError),
        ("hdr_size", 65, FormatError),
        ("n_stems", 9, FormatError),
        ("off_crash", 63, FormatError),
        ("off_arr", 2**64 - 1, FormatError),
    ],
)
def test_header_errors_carry_the_record_offset(field, value, cls):
    # the offset an error names is the field's offset in the HEADER record, not a literal
    data = _good()
    size = HEADER.field_size(field)
    code = "<8s" if field == "magic" else "<" + {2: "H", 4: "I", 8: "Q"}[size]
    struct.pack_into(code, data, HEADER.offset(field), value)
    with pytest.raises(cls) as info:
        tx.Index.from_buffer(bytes(data))
    assert info.value.field == field and info.value.offset == HEADER.offset(field)


def test_newer_minor_accepted():
    idx = tx.Index.from_buffer(_patch(_good(), "<H", 10, 7))
    assert idx.minor == 7 and idx.lookup(["b"]).tolist() == [1]


def test_bad_magic():
    data = _good()
    data[0:1] = b"X"
    with pytest.raises(FormatError, match="magic"):
        tx.Index.from_buffer(bytes(data))


@pytest.mark.parametrize(
    "field, offset, value, match", [("extid", 18, 2, "extid"), ("crashid", 20, 1, "crashid")]
)
def test_row_ids_out_of_range(field, offset, value, match, tmp_path):
    data = _good()
    off_arr = struct.unpack_from("<Q", data, 48)[0]
    struct.pack_into("<H" if field == "extid" else "<I", data, off_arr + 32 + offset, value)
    idx = tx.Index.from_buffer(bytes(data))
    with pytest.raises(FormatError, match=rf"row 1 at offset {off_arr + 32:#x}: {match}"):
        idx.validate_rows()
    with pytest.raises(FormatError, match=match):
        idx.lookup(["a"])
    with pytest.raises(FormatError, match=match):
        tx.Index.from_buffer(bytes(data), validate=True)
    assert not tx.verify(_write_tmp(bytes(data), tmp_path)).ok


def _write_tmp(data: bytes, tmp_path):
    p = tmp_path / "x.taridx"
    p.write_bytes(data)
    return p


def test_verify_reports_instead_of_raising(tmp_path):
    p = tmp_path / "t.taridx"
    p.write_bytes(bytes(_good())[:70])
    rep = tx.verify(p)
    assert not rep.ok and "off_crash" in rep.errors[0].message


def test_flag_that_lies_is_caught():
    rows, ext, crash = tx.writer.rows_from_members(
        [(0, 0, 5, "a", "jpg"), (0, 1024, 1, "b", "cls"), (1, 0, 3, "a", "jpg")]
    )
    data = tx.index_bytes(rows, ext, crash, flags=1)
    with pytest.raises(FormatError, match="n_stems"):
        _ = tx.Index.from_buffer(data).samples


def test_n_stems_that_lies_is_caught():
    rows, ext, crash = tx.writer.rows_from_members(
        [(0, 0, 5, "a", "jpg"), (0, 1024, 1, "b", "cls"), (1, 0, 3, "a", "jpg")]
    )
    with pytest.raises(FormatError, match="n_stems"):
        _ = tx.Index.from_buffer(tx.index_bytes(rows, ext, crash, n_stems=3, flags=0)).samples


def test_truncation_at_every_region():
    data = bytes(_good())
    off_arr = struct.unpack_from("<Q", data, 48)[0]
    for cut in range(len(data)):
        with pytest.raises(TruncatedError if cut < 64 or cut >= off_arr else FormatError):
            tx.Index.from_buffer(data[:cut])
    with pytest.raises(FormatError, match="row region size"):
        tx.Index.from_buffer(data + b"\0")


def test_empty_index_says_so_as_every_format(tmp_path):
    # was "header at offset 0x0: file shorter than header; expected >= 64 bytes, got 0"
    p = tmp_path / "e.taridx"
    p.write_bytes(b"")
    with pytest.raises(TruncatedError, match=r"e\.taridx: the file is empty \(0 bytes\)$"):
        tx.Index.open(p)
    import tenfold

    with pytest.raises(TruncatedError, match=r"the file is empty \(0 bytes\)$") as ei:
        tenfold.open(p)
    assert "shorter than header" not in str(ei.value)


def test_invalid_utf8_in_block():
    data = _good()
    data[64] = 0xFF
    with pytest.raises(FormatError, match="not valid UTF-8"):
        tx.Index.from_buffer(bytes(data))


def test_errors_name_the_file(tmp_path):
    p = tmp_path / "bad.taridx"
    p.write_bytes(_patch(_good(), "<H", 8, 9))
    with pytest.raises(UnsupportedError, match="bad.taridx"):
        tx.Index.open(p)


def _check(data: bytes) -> None:
    try:
        idx = tx.Index.from_buffer(data)
        idx.validate_rows()
        _ = idx.samples
        idx.lookup(["a", "b", "zz"])
        idx.enforce_contiguous()
    except TenfoldError:
        pass


@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    _check(b"TARIDX\0\0" + data)


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=8))
def test_fuzz_mutations(edits):
    data = _good()
    for pos, val in edits:
        data[pos % len(data)] = val
    _check(bytes(data))


def test_iterating_an_index_over_a_replaced_shard_is_an_integrity_error(tmp_path):
    # found by scripts/fuzz.py: iteration yielded names read from a changed shard, which
    # index[key] then could not find (KeyError from a Mapping that had just listed the key)
    import io
    import tarfile

    import tenfold
    from tenfold.errors import IntegrityError
    from tenfold.taridx import build

    def shard(names):
        with tarfile.open(tmp_path / "f_0.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for n in names:
                info = tarfile.TarInfo(n)
                info.size = 3
                info.mtime = 0
                tf.addfile(info, io.BytesIO(b"abc"))

    shard(["s1.txt", "s2.txt"])
    idx = build(tmp_path, "f")
    with tenfold.open(idx) as r:
        assert sorted(r) == ["s1", "s2"]
    shard(["t1.txt", "t2.txt"])  # same layout, other names
    with tenfold.open(idx) as r, pytest.raises(IntegrityError, match="keyhash"):
        list(r)


def test_verify_of_an_index_read_from_a_buffer_is_refused(tmp_path):
    """Index.verify() checks the shards beside the index file: an index read from bytes has
    no file, and says so (the package joins the verifier to Index)."""
    p = tmp_path / "d.taridx"
    tx.write_index(p, [(0, 0, 5, "a", "jpg")])
    with tx.Index.open(p) as idx:
        report = idx.verify()  # from a path: a report (no shards beside it: not checked)
    assert report.ok and "shards" in report.format()
    with tx.Index.from_buffer(p.read_bytes()) as idx:
        with pytest.raises(UnsupportedError, match="verify needs a file path") as info:
            idx.verify()
    assert "expected an index opened from a path" in str(info.value)
    assert "got an index read from a buffer" in str(info.value)
