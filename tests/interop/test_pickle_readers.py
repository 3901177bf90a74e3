"""Readers pickle as "open the same file again with the same options" (tenfold.core.reopen):
every reader tenfold.open gives for a local path unpickles, in this process and in a spawned
one, into an open reader of the same file that reads the same bytes; a file changed since is
refused naming the path and what changed; a reader on a buffer, and a closed one, are refused
with a TypeError saying why (never Cython's "no default __reduce__ due to non-trivial
__cinit__").
"""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
import tenfold.ztensor
from tenfold.core.mapped import MappedFile
from tenfold.errors import IntegrityError

ARRAYS = {
    "w": np.arange(96, dtype=np.float32).reshape(24, 4),
    "b": np.arange(7, dtype=np.int64),
    "h": np.arange(12, dtype=np.uint16).reshape(3, 4),
}


def _demo(name: str, d: Path) -> Path:
    """The demo file of format ``name`` (its writer's sample; read-only formats build theirs)."""
    from tenfold.registry import get

    return Path(get(name).load_module().demo(d))


def _write(kind: str, d: Path) -> tuple[Path, dict[str, Any]]:
    """A file of ``kind`` and the options to open it with."""
    if kind == "zt010":
        p = d / "m.zt"
        tenfold.ztensor.save(p, ARRAYS, checksum="crc32c")
    elif kind in ("zt1", "zt2"):
        p = d / "m.zt"
        tenfold.ztensor.save(p, ARRAYS, generation=int(kind[-1]))
    elif kind == "zt2_pread":
        p = d / "m.zt"
        tenfold.ztensor.save(p, ARRAYS, generation=2, encoding="zstd")
        return p, {"mmap": False}
    elif kind == "safetensors_copy":
        p = d / "m.safetensors"
        tenfold.save(p, ARRAYS)
        return p, {"mmap": False}
    elif kind == "sharded":
        tenfold.save(d / "model.safetensors", ARRAYS, max_shard_size=200)
        p = d / "model.safetensors.index.json"
    elif kind in ("taridx", "torchpickle", "gguf"):
        p = _demo(kind, d)
    elif kind == "onnx":
        pytest.importorskip("onnx", reason="onnx is not installed (builds the test model)")
        from onnx import numpy_helper, save

        sys.path.insert(0, str(Path(__file__).parent.parent / "onnx"))
        try:
            import _onnx_models as om
        finally:
            sys.path.pop(0)
        m = om.model([numpy_helper.from_array(a, n) for n, a in ARRAYS.items()])
        p = d / "m.onnx"
        save(m, str(p))
    elif kind == "hdf5":
        h5py = pytest.importorskip("h5py", reason="h5py (the hdf5 extra) is not installed")
        p = d / "m.h5"
        with h5py.File(p, "w") as f:
            for n, a in ARRAYS.items():
                f[n] = a
    elif kind == "dcp":
        pytest.importorskip("torch", reason="torch is not installed (writes the checkpoint)")
        from tenfold.interop.dcp_files._convert import demo

        p = Path(demo(d))
    else:
        p = d / f"m.{kind}"
        tenfold.save(p, ARRAYS)
    return p, {}


KINDS = ["zt010", "zt1", "zt2", "zt2_pread", "oinf", "fold", "wtxt", "safetensors",
         "safetensors_copy", "npz", "taridx", "torchpickle", "gguf", "onnx", "hdf5", "sharded",
         "dcp"]  # fmt: skip


def _value_bytes(v: Any) -> bytes:
    if isinstance(v, np.ndarray):
        return str(v.dtype).encode() + repr(v.shape).encode() + np.ascontiguousarray(v).tobytes()
    if isinstance(v, dict):  # a TARIDX sample: {ext: payload}
        return b"".join(k.encode() + bytes(v[k]) for k in sorted(v))
    if hasattr(v, "numpy"):  # a torch tensor (a DCP reader)
        return _value_bytes(v.numpy())
    return repr(v).encode()


def digest(reader: Any) -> dict[str, str]:
    """sha256 of every value of ``reader``, by name (run in the spawned child too)."""
    return {n: hashlib.sha256(_value_bytes(reader[n])).hexdigest() for n in reader}


def child_digest(blob: bytes) -> tuple[str, bool, dict[str, str]]:
    """In the spawned process: the pickled reader opened again, its class, and its digests."""
    r = pickle.loads(blob)
    with r:
        return type(r).__qualname__, r.closed, digest(r)


@pytest.fixture(scope="module")
def spawned() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        yield pool


@pytest.fixture(params=KINDS)
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    p, options = _write(request.param, tmp_path)
    with tenfold.open(p, **options) as r:
        yield r


def test_pickled_reader_reopens_in_this_process(opened: Any) -> None:
    want = digest(opened)
    again = pickle.loads(pickle.dumps(opened))
    try:
        assert type(again) is type(opened)
        assert again is not opened and not again.closed
        assert list(again) == list(opened)
        assert digest(again) == want
        opened.close()  # the copy has its own file
        assert digest(again) == want
        with copy.copy(again) as c:  # copy.copy opens it again too
            assert c is not again and digest(c) == want
    finally:
        again.close()


def test_pickled_reader_reads_the_same_in_a_spawned_process(
    opened: Any, spawned: concurrent.futures.ProcessPoolExecutor
) -> None:
    want = digest(opened)
    name, closed, got = spawned.submit(child_digest, pickle.dumps(opened)).result(timeout=120)
    assert name == type(opened).__qualname__
    assert not closed
    assert got == want


def _safetensors(tmp_path: Path) -> Path:
    p = tmp_path / "m.safetensors"
    tenfold.save(p, ARRAYS)
    return p


def test_file_changed_since_pickled_is_refused(tmp_path: Path) -> None:
    p = _safetensors(tmp_path)
    with tenfold.open(p) as r:
        blob = pickle.dumps(r)
    tenfold.save(p, {**ARRAYS, "extra": np.zeros(3, np.float32)})  # replaced: another size
    with pytest.raises(IntegrityError, match=r"size: the file is not the one") as e:
        pickle.loads(blob)
    assert str(p) in str(e.value) and "expected" in str(e.value)


def test_file_touched_since_pickled_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "m.zt"
    tenfold.ztensor.save(p, ARRAYS, generation=2)
    with tenfold.open(p) as r:
        blob = pickle.dumps(r)
        st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same size, rewritten
    with pytest.raises(IntegrityError, match="mtime_ns") as e:
        pickle.loads(blob)
    assert str(p) in str(e.value)
    assert str(st.st_mtime_ns) in str(e.value)  # expected vs got


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_reader_on_a_buffer_is_refused_clearly(tmp_path: Path, kind: Any) -> None:
    data = kind(_safetensors(tmp_path).read_bytes())
    p = tmp_path / "m.zt"
    tenfold.ztensor.save(p, ARRAYS, generation=2)
    for r in (tenfold.open(data), tenfold.ztensor.open(kind(p.read_bytes()))):
        with r, pytest.raises(TypeError, match="opened on a .*buffer") as e:
            pickle.dumps(r)
        assert "open it by path" in str(e.value)
        assert "__cinit__" not in str(e.value)


def test_closed_reader_is_refused_clearly(tmp_path: Path) -> None:
    p = _safetensors(tmp_path)
    r = tenfold.open(p)
    r.close()
    with pytest.raises(TypeError, match="it is closed") as e:
        pickle.dumps(r)
    assert str(p) in str(e.value)


def test_mapped_file_refuses_pickling_clearly(tmp_path: Path) -> None:
    p = _safetensors(tmp_path)
    with MappedFile(p) as mf, pytest.raises(TypeError, match="pickle the reader") as e:
        pickle.dumps(mf)
    assert "__cinit__" not in str(e.value)


_DATALOADER = """
import sys
import numpy as np
import tenfold
import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self, path):
        self.reader = tenfold.open(path)
        self.n = self.reader.info("w").shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.from_numpy(np.array(self.reader.read("w", (slice(i, i + 1),))[0]))


if __name__ == "__main__":
    ds = Rows(sys.argv[1])
    dl = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn",
                    timeout=60)
    got = torch.cat([b for b in dl]).numpy()
    want = np.asarray(ds.reader["w"])
    assert got.shape == want.shape and got.tobytes() == want.tobytes(), (got, want)
    ds.reader.close()
    print("ok", got.shape[0])
"""


@pytest.mark.parametrize("gen", [1, 2])
def test_dataloader_spawn_workers_read_a_reader(tmp_path: Path, gen: int) -> None:
    pytest.importorskip("torch", reason="torch is not installed")
    p = tmp_path / "rows.zt"
    (tenfold.ztensor.save(p, ARRAYS) if gen == 1 else tenfold.save(p, ARRAYS))
    script = tmp_path / "dl.py"
    script.write_text(textwrap.dedent(_DATALOADER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(p)],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the DataLoader with spawned workers hung")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", "24"]


def test_remote_reader_reopens_from_its_url_and_refuses_a_new_upload(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
    fs = fsspec.filesystem("memory")
    p = tmp_path / "m.zt"
    tenfold.ztensor.save(p, ARRAYS, generation=2)
    fs.pipe("/pickle-readers/m.zt", p.read_bytes())
    try:
        with tenfold.open("memory://pickle-readers/m.zt") as r:
            blob = pickle.dumps(r)
            with pickle.loads(blob) as again:
                assert again.path == "memory://pickle-readers/m.zt"
                assert digest(again) == digest(r)
        fs.pipe("/pickle-readers/m.zt", p.read_bytes())  # uploaded again: a new object
        with pytest.raises(IntegrityError, match="memory://pickle-readers/m.zt"):
            pickle.loads(blob)
    finally:
        fs.rm("/pickle-readers", recursive=True)


def test_a_relative_path_is_the_one_of_the_open_not_of_the_pickle(tmp_path, monkeypatch):
    # the path is made absolute when the reader opens it: a later chdir does not move the file
    import pickle

    import numpy as np

    monkeypatch.chdir(tmp_path)
    tenfold.save("m.zt", {"a": np.arange(5)})
    readers = [tenfold.open("m.zt"), tenfold.open("m.zt", mmap=False)]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    for r in readers:
        with r, pickle.loads(pickle.dumps(r)) as back:
            assert back["a"].tolist() == [0, 1, 2, 3, 4]


def test_an_iterator_option_reaches_the_reopened_reader(tmp_path):
    # hmac_keys=iter(keys) was used up by the first open: the unpickled reader got no key
    import pickle

    import numpy as np

    from tenfold import wtxt

    p = tmp_path / "a.wtxt"
    key = b"k" * 32
    wtxt.write(p, {"a": np.arange(4, dtype=np.int32)}, hmac_key=key, schema="s/v1", gen=1,
               ts="2025-01-01T00:00:00Z", build="b")  # fmt: skip
    with tenfold.open(p, hmac_keys=iter([key])) as r, pickle.loads(pickle.dumps(r)) as back:
        assert back.__dict__["_tenfold_opened_as"][2] == {"hmac_keys": [key]}
        assert back["a"].tolist() == [0, 1, 2, 3]
