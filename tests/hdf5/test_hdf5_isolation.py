"""libhdf5 (C) meets an untrusted file in a checking process first: a crash, a hang or an
allocation without bound there refuses the file with a tenfold error naming it, and this
process never hands it to libhdf5; ``trusted=True`` skips the check. Errors h5py raises for a
damaged file, whatever their Python class, are tenfold errors. Hypothesis: a mutated file is
a tenfold error or reads what h5py (in another process) reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenfold
import tenfold.convert
from tenfold.core.bounds import Limits
from tenfold.errors import FormatError, LimitError, TenfoldError

h5py = pytest.importorskip("h5py", reason="h5py (the hdf5 extra) is not installed")
from tenfold.formats import hdf5  # noqa: E402
from tenfold.formats.hdf5 import _isolate  # noqa: E402
from tenfold.formats.hdf5 import reader as h5reader  # noqa: E402

VALUES = {
    "w": np.arange(30, dtype=np.float32).reshape(6, 5),
    "g.be": np.arange(12, dtype=">i4").reshape(3, 4),
    "g.gz": np.arange(300, dtype=np.int16).reshape(30, 10),
    "s": np.array(1.5, np.float16),
}


def _write(path, libver="earliest"):
    with h5py.File(path, "w", libver=libver) as f:
        f["w"] = VALUES["w"]
        f["g/be"] = VALUES["g.be"]
        f.create_dataset(
            "g/gz", data=VALUES["g.gz"], chunks=(8, 10), compression="gzip", fletcher32=True
        )
        f["s"] = VALUES["s"]
        f.attrs["epoch"] = 3
        f["g"].attrs["name"] = "enc"
    return path


def _planted(monkeypatch, code):
    """The check runs ``code`` instead of the real checking process."""
    monkeypatch.setattr(_isolate, "_command", lambda *a: [sys.executable, "-c", code])


def _never_open(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("libhdf5 was handed the file in this process")

    monkeypatch.setattr(h5reader, "_open_h5", boom)


def test_a_crash_in_the_check_refuses_the_file(tmp_path, monkeypatch):
    p = _write(tmp_path / "m.h5")
    _planted(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    _never_open(monkeypatch)
    with pytest.raises(FormatError, match="crashed reading it.*SIGSEGV") as ei:
        tenfold.open(p)
    assert ei.value.fmt == "hdf5" and ei.value.obj == str(p)
    with pytest.raises(FormatError, match="SIGSEGV") as ei:  # a buffer: its bytes on stdin
        hdf5.open(p.read_bytes())
    assert ei.value.obj == "<buffer>"
    for fn in (tenfold.load, tenfold.convert.read_any):  # every way in
        with pytest.raises(FormatError, match="SIGSEGV"):
            fn(p)


def test_trusted_skips_the_check(tmp_path, monkeypatch):
    p = _write(tmp_path / "m.h5")
    _planted(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with tenfold.open(p, trusted=True) as r:
        assert r["w"].tolist() == VALUES["w"].tolist() and r.trusted
    assert hdf5.load(p, trusted=True)["g.gz"].tolist() == VALUES["g.gz"].tolist()


def test_a_hang_in_the_check_is_a_limit_error(tmp_path, monkeypatch):
    p = _write(tmp_path / "m.h5")
    _planted(monkeypatch, "import time; time.sleep(60)")
    _never_open(monkeypatch)
    with pytest.raises(LimitError, match="check time.*<= 0.5 s") as ei:
        hdf5.open(p, check_seconds=0.5)
    assert ei.value.obj == str(p)


def test_a_file_libhdf5_hangs_on_is_refused(tmp_path, monkeypatch):
    """Found by scripts/fuzz.py: a group attribute (a variable-length string) whose global heap
    reference was lied in makes libhdf5 spin reading it; in this process (the old reader, or
    ``trusted=True``) that is a hang. The check stops it and the file is refused, named."""
    vector = Path(__file__).parents[1] / "vectors" / "fuzz" / "fuzz_hdf5_vlen_attr_heap_hang.h5"
    p = tmp_path / "hang.h5"
    p.write_bytes(vector.read_bytes())
    _never_open(monkeypatch)
    with pytest.raises(LimitError, match="did not finish reading it") as ei:
        hdf5.open(p, check_seconds=5)
    assert ei.value.obj == str(p) and ei.value.field == "check time"


def test_the_check_answering_nothing_refuses_the_file(tmp_path, monkeypatch):
    p = _write(tmp_path / "m.h5")
    _planted(monkeypatch, "import sys; sys.exit(5)")
    _never_open(monkeypatch)
    with pytest.raises(FormatError, match="exit status 5"):
        hdf5.open(p)


def test_an_allocation_beyond_the_cap_in_the_check_is_a_limit_error(tmp_path, monkeypatch):
    # the real checking process: decoding a 32 MiB dataset under a 4 MiB cap
    p = tmp_path / "big.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("z", data=np.zeros((4096, 1024), np.float64), compression="gzip")
    monkeypatch.setattr(_isolate, "CHECK_MEMORY", 4 << 20)
    _never_open(monkeypatch)
    with pytest.raises(LimitError, match="ran out of memory") as ei:
        hdf5.open(p)
    assert ei.value.field == "check memory"


def test_a_file_changed_while_checked_is_refused(tmp_path, monkeypatch):
    p = _write(tmp_path / "m.h5")
    run = _isolate._run

    def run_then_touch(*a, **k):
        out = run(*a, **k)
        os.utime(p, ns=(1, 1))  # the same inode and size, another modification time
        return out

    monkeypatch.setattr(_isolate, "_run", run_then_touch)
    with pytest.raises(FormatError, match="changed while it was checked"):
        hdf5.open(p)


def test_a_file_is_checked_once_while_it_is_unchanged(tmp_path, monkeypatch):
    p = _write(tmp_path / "m.h5")
    monkeypatch.setattr(_isolate, "_PASSED", {})
    calls = []
    run = _isolate._run

    def counted(*a, **k):
        calls.append(a[0][-1])
        return run(*a, **k)

    monkeypatch.setattr(_isolate, "_run", counted)
    for _ in range(3):
        with hdf5.open(p) as r:
            assert r["g.gz"].tolist() == VALUES["g.gz"].tolist()
    assert calls == [str(p)]
    os.utime(p, ns=(5, 5))  # touched: checked again
    hdf5.open(p).close()
    assert calls == [str(p)] * 2
    q = tmp_path / "n.h5"
    q.write_bytes(p.read_bytes())  # another file, the same bytes: checked
    hdf5.open(q).close()
    hdf5.open(p.read_bytes()).close()  # a buffer: checked each time
    hdf5.open(p.read_bytes()).close()
    assert calls == [str(p)] * 2 + [str(q), "-", "-"]
    # other decoding limits than the check used: checked again
    hdf5.open(p, limits=Limits(max_decoded_bytes=1 << 20)).close()
    assert len(calls) == 6


def _checksum_broken(tmp_path):
    """A file (latest layout) whose group ``g`` has an object header failing its checksum:
    h5py raises RuntimeError for it, not OSError."""
    p = _write(tmp_path / "c.h5", libver="latest")
    data = bytearray(p.read_bytes())
    at = data.index(b"OHDR", data.index(b"OHDR") + 4)  # the second header: not the root's
    data[at + 12] ^= 0xFF
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize("trusted", [False, True])
def test_every_h5py_error_class_is_a_format_error(tmp_path, trusted):
    p = _checksum_broken(tmp_path)
    with pytest.raises(FormatError, match="h5py cannot open it") as ei:
        hdf5.open(p, trusted=trusted)
    assert ei.value.obj == str(p)
    report = hdf5.verify(p, trusted=trusted)
    assert not report.ok


def test_threads_and_a_forked_process_open_files(tmp_path):
    p = _write(tmp_path / "m.h5")

    def one(i):
        with hdf5.open(p) as r:
            return r["g.gz"].sum() + i * 0

    with ThreadPoolExecutor(4) as ex:
        assert set(ex.map(one, range(8))) == {VALUES["g.gz"].sum()}
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork start method on this platform")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with hdf5.open(p) as r:
        r["w"]  # the parent has used h5py before the fork
        proc = ctx.Process(target=_open_in_child, args=(str(p), q))
        proc.start()
        got = q.get(timeout=120)
        proc.join(120)
    assert proc.exitcode == 0 and got == float(VALUES["g.gz"].sum()), got


def _open_in_child(p, q):
    try:
        with hdf5.open(p) as r:
            q.put(float(r["g.gz"].sum()))
    except BaseException as exc:  # report, never hang the parent
        q.put(repr(exc))
        raise


def test_forked_dataloader_workers_open_files(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    p = str(_write(tmp_path / "m.h5"))

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 30

        def __getitem__(self, i):  # each worker opens the file (a check per open)
            with hdf5.open(p) as r:
                return torch.from_numpy(np.array(r.read("g.gz", (i,))))

    loader = torch.utils.data.DataLoader(
        Rows(), batch_size=10, num_workers=2, multiprocessing_context="fork"
    )
    got = torch.cat(list(loader)).numpy()
    assert np.array_equal(got, VALUES["g.gz"])


# -- Hypothesis: a mutated file is a tenfold error or h5py's own values -------------------

_REFERENCE = r"""
import json, sys, h5py, numpy as np
out, names = {}, []
f = h5py.File(sys.argv[1], "r")
found = []
h5py.h5o.visit(f.id, lambda p, i: found.append((p, i.type)), info=True)
for path, t in found:
    if t != h5py.h5o.TYPE_DATASET:
        continue
    name = path.decode().replace("/", ".")
    names.append(name)
    try:
        a = np.asarray(f[path.decode()][()])
        if a.dtype.kind in "biufc" and a.dtype.fields is None:
            out[name] = a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a
    except Exception:
        pass
np.savez(sys.argv[2], **out)
print(json.dumps(names))
"""


def _reference(path, out):
    """h5py's read in another process (libhdf5 may crash on these files): ``(names, values)``
    or None when h5py cannot list the file."""
    proc = subprocess.run(
        [sys.executable, "-c", _REFERENCE, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        return None
    with np.load(out) as z:
        return json.loads(proc.stdout.splitlines()[-1]), {k: z[k] for k in z.files}


SEEDS: dict[str, bytes] = {}


def _seed(tmp_path_factory, libver):
    if libver not in SEEDS:
        d = tmp_path_factory.mktemp("seeds")
        SEEDS[libver] = _write(d / f"{libver}.h5", libver).read_bytes()
    return SEEDS[libver]


@settings(
    max_examples=int(os.environ.get("TENFOLD_HDF5_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mutated_files_are_tenfold_errors_or_h5pys_values(tmp_path_factory, data):
    seed = bytearray(_seed(tmp_path_factory, data.draw(st.sampled_from(["earliest", "latest"]))))
    kind = data.draw(st.sampled_from(["bytes", "int", "cut"]))
    if kind == "cut":
        seed = seed[: data.draw(st.integers(0, len(seed) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(seed) - 8))
            size = data.draw(st.sampled_from([1, 2, 4, 8])) if kind == "int" else 1
            seed[at : at + size] = data.draw(st.binary(min_size=size, max_size=size))
    d = tmp_path_factory.mktemp("case")
    p = d / "case.h5"
    p.write_bytes(bytes(seed))
    ref = _reference(p, d / "ref.npz")
    try:
        with hdf5.open(p) as r:
            names = list(r)
            got = {}
            for n in names:
                try:
                    got[n] = np.array(r[n])
                except TenfoldError as exc:
                    assert exc.fmt == "hdf5" and exc.obj, exc
    except TenfoldError as exc:
        assert exc.fmt in ("hdf5", "tenfold") and exc.obj, exc
        return
    # tenfold read the file: h5py (in its own process) must have listed the same datasets,
    # and every value both read must be the same
    assert ref is not None, "tenfold read a file h5py cannot list"
    ref_names, ref_values = ref
    assert names == ref_names
    for n, v in got.items():
        if n in ref_values:
            want = ref_values[n]
            assert v.dtype == want.dtype and v.shape == want.shape, n
            assert v.tobytes() == want.tobytes(), n
