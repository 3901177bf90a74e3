"""A DCP checkpoint directory without torch (issue #26): recognised by content as a
directory (``Format.sniff_dir``), opened, loaded, inspected, verified, diffed and converted
one tensor at a time; written from one file by ``from_file``; every damage (a flipped byte, a
missing rank file, a document that lies, a save that did not finish) is a tenfold error
naming the rank, the file and the tensor."""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold.cli import main as cli
from tenfold.errors import EncodeError, FormatError, IntegrityError
from tenfold.interop import dcp_files
from tenfold.interop.dcp_files import META_NAME, from_file, read_document


def _tensors():
    rng = np.random.default_rng(26)
    return {
        "embed": rng.standard_normal((9, 4)).astype(np.float32),
        "bias": np.arange(5, dtype=np.int64),
        "table": rng.standard_normal((7, 3)).astype(ml_dtypes.bfloat16),
        "step": np.array(3.0, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }


@pytest.fixture
def ckpt(tmp_path):
    src = tmp_path / "src.safetensors"
    tenfold.save(src, _tensors())
    from_file(src, tmp_path / "ck", world_size=3)
    return tmp_path / "ck"


def _doc(path):
    return json.loads((path / META_NAME).read_text())


def _put(path, doc):
    (path / META_NAME).write_text(json.dumps(doc))


def test_a_checkpoint_directory_is_detected_opened_and_loaded(ckpt):
    assert tenfold.detect(ckpt) == "torch_dcp"
    assert sorted(os.listdir(ckpt)) == [
        META_NAME,
        "dcp-rank-00000.zt",
        "dcp-rank-00001.zt",
        "dcp-rank-00002.zt",
    ]
    want = _tensors()
    got = tenfold.load(ckpt)
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        assert got[k].tobytes() == v.tobytes()
    with tenfold.open(ckpt) as r:
        assert r.info("embed").extras["chunks"] == 3
        assert np.array_equal(r.read("embed", (slice(2, 5),)), want["embed"][2:5])
    doc = _doc(ckpt)
    assert [c["sizes"] for c in doc["entries"]["embed"]["chunks"]] == [[3, 4], [3, 4], [3, 4]]
    assert len(doc["entries"]["step"]["chunks"]) == 1  # a 0-d tensor: rank 0 holds it


def test_cli_inspect_verify_diff_and_convert_take_the_directory(ckpt, tmp_path, capsys):
    assert cli(["inspect", str(ckpt)]) == 0
    out = capsys.readouterr().out
    assert "torch_dcp" in out and "3 chunks" in out and "world_size" in out
    assert cli(["verify", str(ckpt)]) == 0
    assert cli(["diff", str(ckpt), str(tmp_path / "src.safetensors")]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    for dst in ("one.safetensors", "one.zt"):
        assert cli(["convert", str(ckpt), str(tmp_path / dst), "-q"]) == 0
        got = tenfold.load(tmp_path / dst)
        assert all(got[k].tobytes() == v.tobytes() for k, v in _tensors().items())
    assert (
        cli(
            [
                "convert",
                str(ckpt),
                str(tmp_path / "sh.safetensors"),
                "--max-shard-size",
                "150B",
                "-q",
            ]
        )
        == 0
    )
    got = tenfold.load(tmp_path / "sh.safetensors.index.json")
    assert sorted(got) == sorted(_tensors())


def test_convert_streams_one_tensor_at_a_time(ckpt):
    with tenfold.convert.open_source(ckpt) as s:
        assert sorted(s.names) == sorted(_tensors())
        assert s.spec("table") == (np.dtype(ml_dtypes.bfloat16), (7, 3))
        assert s.get("bias").tolist() == [0, 1, 2, 3, 4]
        assert s.extras == []


def test_a_flipped_byte_names_rank_file_and_tensor(ckpt, capsys):
    doc = _doc(ckpt)
    c = doc["entries"]["embed"]["chunks"][1]
    with open(ckpt / c["file"], "r+b") as f:
        f.seek(c["byte_range"][0] + 5)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(
        IntegrityError,
        match=r"dcp: rank 1 file 'dcp-rank-00001.zt' tensor "
        r"'embed' chunk at \[3, 0\]: .*digest",
    ):
        tenfold.load(ckpt)
    assert cli(["verify", str(ckpt)]) == 1
    assert "entry 'embed'" in capsys.readouterr().out
    assert tenfold.load(ckpt.parent / "src.safetensors")["bias"].tolist() == [0, 1, 2, 3, 4]


def test_a_missing_rank_file_names_rank_file_and_tensor(ckpt):
    os.unlink(ckpt / "dcp-rank-00002.zt")
    with pytest.raises(
        FormatError,
        match=r"rank 2 file 'dcp-rank-00002.zt' tensor '\w+' chunk at \[\d+.*\]: missing file",
    ):
        tenfold.load(ckpt)


def test_a_directory_without_its_document_is_refused_as_incomplete(ckpt, capsys):
    os.unlink(ckpt / META_NAME)
    assert tenfold.detect(ckpt) == "torch_dcp"  # rank files: an unfinished save
    with pytest.raises(FormatError, match="incomplete: no dcp-metadata.json"):
        tenfold.open(ckpt)
    assert cli(["verify", str(ckpt)]) == 1
    assert "incomplete" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["entries"]["embed"]["chunks"][1].update(offsets=[2, 0]), "overlap"),
        (lambda d: d["entries"]["embed"]["chunks"].pop(), "do not cover"),
        (lambda d: d["entries"]["embed"]["chunks"][0].update(sizes=[30, 4]), "outside"),
        (lambda d: d["entries"]["bias"]["chunks"][0].update(file="../x.zt"), "plain file name"),
        (lambda d: d.update(tenfold_dcp=2), "not a tenfold DCP document"),
        (lambda d: d["entries"]["bias"].update(dtype="float128"), "unknown dtype"),
    ],
)
def test_a_document_that_lies_is_refused(ckpt, edit, message):
    doc = _doc(ckpt)
    edit(doc)
    _put(ckpt, doc)
    with pytest.raises(FormatError, match=message):
        tenfold.open(ckpt)


def test_a_byte_range_that_differs_from_the_file_is_refused(ckpt):
    doc = _doc(ckpt)
    doc["entries"]["bias"]["chunks"][0]["byte_range"][0] += 8
    _put(ckpt, doc)
    with pytest.raises(FormatError, match="tensor 'bias'.*byte_range mismatch"):
        tenfold.load(ckpt)


def test_safetensors_rank_files_are_checked_against_the_document(tmp_path):
    src = tmp_path / "src.zt"
    tenfold.save(src, _tensors())
    from_file(src, tmp_path / "ck", world_size=2, file_format="safetensors")
    assert sorted(os.listdir(tmp_path / "ck"))[1:] == [
        "dcp-rank-00000.safetensors",
        "dcp-rank-00001.safetensors",
    ]
    assert tenfold.load(tmp_path / "ck")["embed"].tobytes() == _tensors()["embed"].tobytes()
    c = _doc(tmp_path / "ck")["entries"]["bias"]["chunks"][1]
    with open(tmp_path / "ck" / c["file"], "r+b") as f:
        f.seek(c["byte_range"][0])
        f.write(b"\x7f")
    with pytest.raises(IntegrityError, match="rank 1 .*tensor 'bias'.*xxh3 digest mismatch"):
        tenfold.load(tmp_path / "ck")


def test_an_existing_path_is_refused_or_replaced_whole(ckpt, tmp_path):
    src = tmp_path / "two.safetensors"
    tenfold.save(src, {"w": np.ones(3, np.float32)})
    with pytest.raises(EncodeError, match="exists; pass overwrite=True"):
        from_file(src, ckpt)
    from_file(src, ckpt, world_size=2, overwrite=True)
    assert list(tenfold.load(ckpt)) == ["w"]
    assert sorted(os.listdir(ckpt)) == [META_NAME, "dcp-rank-00000.zt", "dcp-rank-00001.zt"]
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # nothing left over
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(EncodeError, match="holding no dcp-metadata.json: not replaced"):
        from_file(src, other, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"


def test_a_checkpoint_of_non_tensor_entries_refuses_convert_unless_told(ckpt, tmp_path):
    doc = _doc(ckpt)
    first = doc["entries"]["bias"]["chunks"][0]
    # the bytes of tensor 'bias' listed as a non-tensor entry: what DCP stores for an int
    doc["entries"]["epoch"] = {
        "type": "bytes",
        **{k: first[k] for k in ("file", "object", "byte_range", "digest")},
    }
    _put(ckpt, doc)
    out = tmp_path / "m.safetensors"
    with dcp_files.DcpReader(ckpt) as r, pytest.raises(FormatError, match="stored object differs"):
        r.raw_entry("epoch")  # uint8 expected, int64 stored
    with pytest.raises(EncodeError, match="non-tensor entries pickled by DCP \\('epoch'\\)"):
        tenfold.convert.convert(ckpt, out)
    assert tenfold.convert.convert(ckpt, out, metadata=False) == 5


_NO_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed
import tenfold, tenfold.interop.dcp as tdcp
from tenfold.core.optional import MissingDependencyError
ck = sys.argv[1]
assert sorted(tenfold.load(ck)) == ["bias", "embed", "empty", "step", "table"]
tdcp.from_file(ck, ck + "-copy", world_size=2)
try:
    tdcp.TenfoldStorageWriter(ck + "-new")
except MissingDependencyError as exc:
    print("refused:", exc)
"""


def test_the_checkpoint_is_read_and_written_without_torch(ckpt):
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tenfold.__file__)))
    got = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, str(ckpt)],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    assert "refused: tenfold.torch.dcp needs PyTorch, which is not installed" in got.stdout
    assert tenfold.load(f"{ckpt}-copy")["table"].tobytes() == _tensors()["table"].tobytes()


@pytest.mark.parametrize("file_format", [None, "safetensors"])
def test_read_into_hashes_and_copies_in_one_pass_and_checks_the_digest(tmp_path, file_format):
    """``RankFiles.read_into`` (the storage reader's path for a whole chunk into a contiguous
    CPU tensor) copies the chunk exactly, refuses a destination it cannot fill raw, and checks
    the document's digest as ``read`` does: with the file's stored one (zTensor v2) or without
    one (safetensors)."""
    big = np.random.default_rng(3).standard_normal((700, 1024)).astype(np.float32)  # > BLOCK
    src = tmp_path / "src.zt"
    tenfold.save(src, {"big": big, "bias": np.arange(5, dtype=np.int64)})
    ck = tmp_path / "ck"
    from_file(src, ck, world_size=2, file_format=file_format)
    doc = dcp_files.read_document(ck)
    files = dcp_files.RankFiles(ck, doc)
    try:
        for c in doc.entries["big"].chunks:
            out = np.empty(c.sizes, np.float32)
            assert files.read_into("big", c, out.view(np.int32))
            assert out.tobytes() == big[dcp_files.box(c)].tobytes()
        c = doc.entries["big"].chunks[1]
        assert not files.read_into("big", c, np.empty(c.sizes, np.int32)[:, ::2])
        assert not files.read_into("big", c, np.empty(c.sizes, np.int64))  # not the item size
    finally:
        files.close()
    with open(ck / c.file, "r+b") as f:
        f.seek(c.byte_range[1] - 2)  # in the last block only
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))
    files = dcp_files.RankFiles(ck, read_document(ck))
    try:
        with pytest.raises(
            IntegrityError, match=rf"dcp: rank 1 file '{c.file}' tensor 'big' chunk at .*digest"
        ):
            files.read_into("big", c, np.empty(c.sizes, np.int32))
    finally:
        files.close()


def test_the_commit_flushes_each_directory_once(tmp_path, monkeypatch):
    """With fsync, the commit flushes the document, the staging directory once (the
    document's atomic write does, after every rank file is in) and the parent after the
    rename; it flushed the staging directory twice before."""
    src = tmp_path / "src.zt"
    tenfold.save(src, {"w": np.ones(4, np.float32)})
    synced = []
    real = os.fsync

    def counting(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name what is flushed")
    monkeypatch.setattr(os, "fsync", counting)
    from_file(src, tmp_path / "ck", world_size=1)
    dirs = [
        p
        for p in synced
        if os.path.dirname(p) == str(tmp_path) and os.path.basename(p).startswith(".ck.tenfold-")
    ]
    assert len(dirs) == 2, synced  # after the rank file's write, then after the document's
    assert synced.count(str(tmp_path)) == 1


def test_the_reader_verifies_through_the_base_readers_verifier(ckpt):
    from tenfold.core.reader import BaseReader

    assert "use_verifier" not in vars(dcp_files.DcpReader)  # BaseReader's, not a copy

    class Bare(BaseReader):
        pass

    with pytest.raises(NotImplementedError, match="Bare: no verifier joined"):
        Bare().verify()
    with tenfold.open(ckpt) as r:
        assert r.verify().ok


_HOLD = """
import sys
from tenfold.interop.dcp_files import Attempt
a = Attempt(sys.argv[1], sys.argv[2])  # a save in progress in another process
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def _plant(final, attempt_id, record=None):
    """A staging directory beside ``final`` holding a half-written rank file, with the
    attempt record ``record`` (None: none)."""
    path = dcp_files.staging_path(str(final), attempt_id)
    os.makedirs(path)
    with open(os.path.join(path, "dcp-rank-00000.zt"), "wb") as f:
        f.write(b"ZTEN" + bytes(100))
    if record is not None:
        with open(os.path.join(path, dcp_files._attempts.RECORD_NAME), "w") as f:
            json.dump(record, f)
    return path


def test_a_commit_removes_what_dead_attempts_left_and_never_a_live_one(tmp_path, capsys):
    """Each attempt has its own staging directory and a record locked while it can commit;
    the commit of a later save to the same path removes the staging directories of attempts
    that died (and an overwrite's unfinished removal), keeps a live one (another process
    holding its lock), and keeps and reports those it cannot judge (another host, no
    record). Before, a dead attempt's directory stayed forever."""
    import socket
    import subprocess
    import sys
    import uuid

    src = tmp_path / "src.zt"
    tenfold.save(src, {"w": np.arange(6, dtype=np.float32)})
    ck = tmp_path / "ck"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tenfold.__file__)))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **_text())
    host = socket.gethostname()
    dead_id, live_id, other_id, bare_id = (uuid.uuid4().hex for _ in range(4))
    dead = _plant(ck, dead_id, {"host": host, "pid": int(gone.stdout), "locked": True})
    other = _plant(ck, other_id, {"host": host + "-elsewhere", "pid": 1, "locked": True})
    bare = _plant(ck, bare_id)
    old = _plant(ck, "old-" + uuid.uuid4().hex[:12])
    unrelated = _plant(tmp_path / "ck2", uuid.uuid4().hex, {"host": host, "pid": 0})
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, dcp_files.staging_path(str(ck), live_id), live_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        live = dcp_files.staging_path(str(ck), live_id)
        states = {os.path.basename(x["path"]): x["state"] for x in dcp_files.leftovers(str(ck))}
        assert sorted(states.values()) == ["dead", "live", "old", "unknown", "unknown"]
        with pytest.raises(FormatError, match="incomplete: .* of a save that died"):
            tenfold.open(dead)
        from_file(src, ck)  # the later save: its commit cleans up
        assert not os.path.exists(dead) and not os.path.exists(old)
        assert all(os.path.isdir(p) for p in (live, other, bare, unrelated))
        assert sorted(os.listdir(ck)) == [META_NAME, "dcp-rank-00000.zt"]  # no record in it
        assert cli(["verify", str(ck)]) == 0  # beside it, not part of it: warnings
        out = capsys.readouterr().out
        assert "of a save in progress" in out and out.count("cannot be told from here") == 2
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    # the holder has ended: its attempt is dead now, and the next save removes it
    assert [x["state"] for x in dcp_files.leftovers(str(ck)) if x["path"] == live] == ["dead"]
    from_file(src, ck, overwrite=True)
    assert not os.path.exists(live) and os.path.isdir(other) and os.path.isdir(bare)


def _text():
    return {"capture_output": True, "text": True, "timeout": 60, "check": True}


def test_read_into_copies_while_hashing_with_copy_xxh3(tmp_path, monkeypatch):
    """A whole chunk is copied and hashed in one call of ``core.checksums.copy_xxh3`` (tenfold's
    kernel, stripe by stripe with the GIL released, where compiled; the xxhash package by
    blocks otherwise), with the state ``xxh3_hasher`` gives."""
    import importlib

    from tenfold import _kernels
    from tenfold.core import checksums

    reader_mod = importlib.import_module("tenfold.interop.dcp_files._reader")
    calls = []
    real = checksums.copy_xxh3

    def spy(src, dst, h):
        calls.append((src.nbytes, type(h).__name__))
        return real(src, dst, h)

    monkeypatch.setattr(reader_mod, "copy_xxh3", spy)
    big = np.random.default_rng(4).standard_normal((600, 1024)).astype(np.float32)
    src = tmp_path / "src.zt"
    tenfold.save(src, {"big": big})
    from_file(src, tmp_path / "ck", world_size=2)
    doc = dcp_files.read_document(tmp_path / "ck")
    files = dcp_files.RankFiles(tmp_path / "ck", doc)
    try:
        for c in doc.entries["big"].chunks:
            out = np.empty(c.sizes, np.float32)
            assert files.read_into("big", c, out.view(np.int32))
            assert out.tobytes() == big[dcp_files.box(c)].tobytes()
    finally:
        files.close()
    kind = "xxh3_64" if _kernels.pure_python() else "Xxh3State"
    assert calls == [(c.byte_range[1] - c.byte_range[0], kind) for c in doc.entries["big"].chunks]
