"""Issue 15: FOLD payloads that lie behind valid checksums (zstd sizes, NPZ0 zip directories,
encrypted members, STEN headers) end in tenfold.errors before anything large is allocated, and
one decode budget bounds everything a call decodes."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import zstandard

import tenfold.fold as fold
from tenfold.core import Limits
from tenfold.errors import FormatError, LimitError, TruncatedError, UnsupportedError
from tenfold.fold import _payloads


def _fold(path, chunks, *, compress=None):
    with fold.Writer(path, compress=compress, created_at_unix=1.0) as w:
        for name, ctype, data in chunks:
            w.add_chunk(name, ctype, data)
        w.finalize()
    return path


def _patch_chunk(path, name, **fields):
    """Change chunk fields in the index and in the binary chunk header alike."""
    data = bytearray(path.read_bytes())
    _magic, _hl, index_off, index_len = struct.unpack_from(">8sIQQ", data, 0)
    index = json.loads(data[index_off : index_off + index_len])
    c = next(c for c in index["chunks"] if c["name"] == name)
    c.update(fields)
    rel = {"flags": (4, ">I"), "uncomp_len": (8, ">Q"), "comp_len": (16, ">Q")}
    for k, v in fields.items():
        if k in rel:
            struct.pack_into(rel[k][1], data, c["offset"] + rel[k][0], v)
    raw = json.dumps(index, ensure_ascii=False, separators=(",", ":")).encode()
    struct.pack_into(">Q", data, 20, len(raw))
    path.write_bytes(bytes(data[:index_off]) + raw)


def _capped(code: str, extra_mb: int = 512) -> subprocess.CompletedProcess:
    """Run ``code`` in a child whose address space may grow by ``extra_mb`` only, as a
    memory-limited service would (without the cap, untouched pages cost nothing here)."""
    prog = textwrap.dedent(
        f"""
        import resource, sys
        import tenfold.fold, tenfold.errors
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
        cap = vm + ({extra_mb} << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
        {textwrap.indent(textwrap.dedent(code), "    ")}
        except MemoryError:
            print("MemoryError")
            sys.exit(3)
        except tenfold.errors.TenfoldError as exc:
            print(type(exc).__name__, exc)
        """
    )
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)


def test_zstd_chunk_claiming_2_gib_is_refused_before_allocating(tmp_path):
    # uncomp_len 2**31 (the maximum allowed) and a frame without a content size: the reader
    # allocated 2 GiB with a bare np.empty -> MemoryError under a memory cap
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 1000)
    p = _fold(tmp_path / "z.fold", [("z", "BLOB", frame)])
    _patch_chunk(p, "z", flags=1, uncomp_len=2**31)
    proc = _capped(f"tenfold.fold.Reader({str(p)!r}).read('z')")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("LimitError") and "cannot allocate" in proc.stdout
    # the same size above the call's budget: refused before any allocation, with no cap
    with fold.Reader(p, limits=Limits(decode_budget=1 << 30)) as r:
        with pytest.raises(LimitError, match=r"chunk 'z'.*decode budget"):
            r.read("z")


def test_zstd_frame_size_disagreeing_with_uncomp_len_is_refused_before_allocating(tmp_path):
    p = _fold(tmp_path / "z.fold", [("z", "BLOB", b"y" * 500)], compress="zstd")
    _patch_chunk(p, "z", uncomp_len=2**31)
    proc = _capped(f"tenfold.fold.Reader({str(p)!r}).read('z')", extra_mb=256)
    assert proc.stdout.startswith("IntegrityError") and "zstd content size" in proc.stdout, (
        proc.stdout + proc.stderr
    )


def _npz_with_directory_sizes(compressed: bool, comp: int | None, uncomp: int | None) -> bytes:
    """An npz whose member 'a' has an .npy header claiming ``uncomp`` bytes in all (header
    included, so the lie is consistent) and the central directory saying the same."""
    claim = uncomp if uncomp is not None else 228
    buf = io.BytesIO()
    header = {"descr": "|u1", "fortran_order": False, "shape": (claim - 128,)}
    np.lib.format.write_array_header_1_0(buf, header)
    assert buf.tell() == 128
    member = buf.getvalue() + bytes(100)
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", compression=method) as z:
        z.writestr("a.npy", member)
    data = bytearray(out.getvalue())
    cd = data.rfind(b"PK\x01\x02")
    if comp is not None:
        struct.pack_into("<I", data, cd + 20, comp)
    if uncomp is not None:
        struct.pack_into("<I", data, cd + 24, uncomp)
    return bytes(data)


@pytest.mark.parametrize(
    ("compressed", "comp", "uncomp", "cls"),
    [
        (False, None, 2**31, FormatError),  # stored: size differs from the stored size
        (True, None, 2**31, FormatError),  # deflated: more than deflate can expand to
        (False, 2**31, 2**31, TruncatedError),  # stored size larger than the archive
    ],
)
def test_npz0_member_whose_zip_directory_claims_2_gib_is_refused(
    tmp_path, compressed, comp, uncomp, cls
):
    # the reader allocated what the directory claimed: MemoryError under a memory cap
    payload = _npz_with_directory_sizes(compressed, comp, uncomp)
    p = _fold(tmp_path / "n.fold", [("arrays", "NPZ0", payload)])
    proc = _capped(f"tenfold.fold.Reader({str(p)!r}).read_arrays('arrays')")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(cls.__name__), proc.stdout
    assert "chunk 'arrays' array 'a'" in proc.stdout
    with fold.Reader(p) as r, pytest.raises(cls):
        r.read_arrays("arrays")


def test_npz0_member_flagged_encrypted_is_unsupported(tmp_path):
    # zipfile raised RuntimeError("File ... is encrypted, password required")
    data = bytearray(_payloads.npz_bytes({"a": np.arange(10)}))
    data[data.rfind(b"PK\x01\x02") + 8] |= 1
    data[6] |= 1  # the local header too
    p = _fold(tmp_path / "e.fold", [("arrays", "NPZ0", bytes(data))])
    with fold.Reader(p) as r:
        with pytest.raises(UnsupportedError, match=r"chunk 'arrays' array 'a'.*encrypted"):
            r.read_arrays("arrays")
    with pytest.raises(UnsupportedError, match="encrypted"):
        fold.load(p)


def _sten(header: dict, body: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + body


@pytest.mark.parametrize("dtype", [["F32"], {"F32": 1}, 7, None])
def test_sten_header_with_non_string_dtype_is_unsupported(tmp_path, dtype):
    # `tag not in DTYPES` with a list tag raised TypeError: unhashable type
    payload = _sten({"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}, bytes(4))
    p = _fold(tmp_path / "s.fold", [("tensors", "STEN", payload)])
    with pytest.raises(UnsupportedError, match=r"tensor 'w'.*dtype"):
        fold.load(p)


def test_sten_shape_with_zero_and_huge_dim_is_a_format_error(tmp_path):
    # the empty view was made with np.empty((0, 2**63)) -> ValueError
    payload = _sten({"w": {"dtype": "F32", "shape": [0, 2**63], "data_offsets": [0, 0]}})
    p = _fold(tmp_path / "s.fold", [("tensors", "STEN", payload)])
    with pytest.raises(FormatError, match=r"tensor 'w'.*shape"):
        fold.load(p)


def test_npz0_members_share_one_decode_budget(tmp_path):
    # each member was bounded, their total was not: two 1 GiB zero members in a 2 MB file
    # peaked at 2.1 GiB. Scaled down: two 16 MiB members against a 24 MiB budget.
    n = 16 << 20
    payload = _payloads.npz_bytes(
        {"a": np.zeros(n, np.uint8), "b": np.zeros(n, np.uint8)}, compressed=True
    )
    assert len(payload) < 100_000
    p = _fold(tmp_path / "bomb.fold", [("arrays", "NPZ0", payload)])
    with fold.Reader(p, limits=Limits(decode_budget=24 << 20)) as r:
        with pytest.raises(LimitError, match=r"array 'b'.*decode budget"):
            r.read_arrays("arrays")
    with pytest.raises(LimitError, match="decode budget"):
        fold.load(p, limits=Limits(decode_budget=24 << 20))
    with fold.Reader(p, limits=Limits(decode_budget=40 << 20)) as r:
        assert sum(a.size for a in r.read_arrays("arrays").values()) == 2 * n


def test_fold_load_shares_the_budget_across_chunks(tmp_path):
    a = _payloads.npz_bytes({"a": np.zeros(1 << 20, np.uint8)}, compressed=True)
    p = _fold(tmp_path / "two.fold", [("x", "NPZ0", a), ("y", "NPZ0", a)])
    assert len(fold.load(p, limits=Limits(decode_budget=3 << 20))) == 2
    with pytest.raises(LimitError, match=r"chunk 'y'.*decode budget"):
        fold.load(p, limits=Limits(decode_budget=(3 << 20) // 2))


def test_zip_stored_bomb_in_plain_npz_file(tmp_path):
    from tenfold.interop import read_npz

    p = tmp_path / "lie.npz"
    p.write_bytes(_npz_with_directory_sizes(False, None, 2**31))
    with pytest.raises(FormatError, match="stored member whose size differs"):
        read_npz(p)
    with zipfile.ZipFile(p) as z:  # the lie is in the directory only
        assert z.infolist()[0].file_size == 2**31


def test_copies_beyond_memory_are_limit_errors(tmp_path):
    # fold.load(copy=True) copied every array with np.array: MemoryError under a memory cap
    n = 200 << 20
    payload = _payloads.npz_bytes({"a": np.zeros(n, np.uint8)}, compressed=True)
    p = _fold(tmp_path / "big.fold", [("arrays", "NPZ0", payload)])
    proc = _capped(f"tenfold.fold.load({str(p)!r}, copy=True)", extra_mb=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("LimitError") and "array 'a'" in proc.stdout, proc.stdout
    proc = _capped(f"print(tenfold.fold.load({str(p)!r})['a'].size)", extra_mb=300)
    assert proc.stdout.strip() == str(n), proc.stdout + proc.stderr
