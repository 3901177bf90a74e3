"""Lossless or loud: ``checksum=`` given for a zTensor v2 file is refused, on every path that
writes one, before anything is written.

A v2 part's digest is always xxh3 (tenfold's v2 writer has no other), so no value of the
0.1.0 option maps: before, ``tenfold.save``, ``write_any`` and every ``save_file`` built on it
(numpy, torch, jax), sharded saves and ``tenfold.ztensor.save(generation=2)`` ignored it
silently and wrote xxh3 digests; only ``convert`` refused it. Leaving it out still writes v2
(each part with its xxh3 digest), and 0.1.0 keeps its defaults.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tenfold
import tenfold.numpy as tnp
import tenfold.ztensor as zt
from tenfold.convert import convert, write_any
from tenfold.errors import EncodeError

T = {"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 2), np.int16)}


def _torch_save(p, **kw):
    torch = pytest.importorskip("torch", reason="torch not installed")
    import tenfold.torch as tt

    tt.save_file({k: torch.from_numpy(v) for k, v in T.items()}, p, **kw)


def _jax_save(p, **kw):
    pytest.importorskip("jax", reason="jax not installed")
    import tenfold.jax as tj

    tj.save_file(T, p, **kw)


def _convert(p, **kw):
    src = os.path.join(os.path.dirname(p), "src.safetensors")
    tenfold.save(src, T)
    convert(src, p, **kw)


#: every path that writes a v2 .zt: (name, write(path, **checksum))
WRITERS = {
    "tenfold.save": lambda p, **kw: tenfold.save(p, T, zt_generation=2, **kw),
    "tenfold.save sharded": lambda p, **kw: tenfold.save(
        p, T, zt_generation=2, max_shard_size=16, **kw
    ),
    "tenfold.save generation=": lambda p, **kw: tenfold.save(p, T, generation=2, **kw),
    "write_any": lambda p, **kw: write_any(p, T, zt_generation=2, **kw),
    "tenfold.numpy.save_file": lambda p, **kw: tnp.save_file(T, p, zt_generation=2, **kw),
    "tenfold.torch.save_file": lambda p, **kw: _torch_save(p, zt_generation=2, **kw),
    "tenfold.jax.save_file": lambda p, **kw: _jax_save(p, zt_generation=2, **kw),
    "tenfold.ztensor.save": lambda p, **kw: zt.save(p, T, generation=2, **kw),
    "convert": lambda p, **kw: _convert(p, zt_generation=2, **kw),
}


@pytest.mark.parametrize("checksum", ["crc32c", "sha256", None, "xxh3"])
@pytest.mark.parametrize("path_kind", sorted(WRITERS))
def test_an_explicit_checksum_for_v2_is_refused_before_writing(tmp_path, path_kind, checksum):
    p = tmp_path / "m.zt"
    before = set(os.listdir(tmp_path))
    with pytest.raises(EncodeError, match=r"checksum.*does not apply to zTensor v2") as e:
        WRITERS[path_kind](str(p), checksum=checksum)
    assert repr(checksum) in str(e.value)
    left = set(os.listdir(tmp_path)) - before - {"src.safetensors"}
    assert left == set(), left  # nothing written: no file, no shard, no temporary


@pytest.mark.parametrize("path_kind", sorted(WRITERS))
def test_left_out_it_writes_v2_with_xxh3_digests(tmp_path, path_kind):
    p = tmp_path / "m.zt"
    WRITERS[path_kind](str(p))
    written = [tmp_path / f for f in os.listdir(tmp_path) if f.endswith(".zt")]
    assert written
    for f in written:
        assert zt.detect(f) == "v2"
        assert all(row["checksum"].startswith("xxh3:") for row in zt.inspect(f))


def test_the_0_1_0_defaults_are_unchanged(tmp_path):
    tenfold.save(tmp_path / "a.zt", T)  # tenfold.save: crc32c by default
    write_any(tmp_path / "b.zt", T)
    zt.save(tmp_path / "c.zt", T)  # the format's own save: none by default
    tenfold.save(tmp_path / "d.zt", T, checksum="sha256")
    for name, want in [("a", "crc32c"), ("b", "crc32c"), ("c", "-"), ("d", "sha256")]:
        rows = zt.inspect(tmp_path / f"{name}.zt")
        assert zt.detect(tmp_path / f"{name}.zt") == "0.1.0"
        assert {r["checksum"].split(":")[0] for r in rows} == {want}, name


def test_an_explicit_crc32c_is_told_from_the_default(tmp_path):
    """``tenfold.save``'s default ``"crc32c"`` was compared by identity with an explicit
    ``"crc32c"``, which Python interns: the same object, so an explicit one was taken for the
    default and ignored where the format has no checksum field (OINF)."""
    tenfold.save(tmp_path / "ok.oinf", T)  # the default: not applicable, not an error
    with pytest.raises(EncodeError, match="checksum 'crc32c'"):
        tenfold.save(tmp_path / "no.oinf", T, checksum="crc32c")
    assert not (tmp_path / "no.oinf").exists()
