"""``verify_checksums=`` is a front-door option every format takes (``Format.checks_optional``):
a format whose checksums may be skipped gets it (zTensor, a sharded index, a DCP directory pass
it on to the files they open), the others have it dropped (nothing to skip, or checks they always
do). Before, ``tenfold.load(x.safetensors, verify_checksums=False)`` and the same for OINF, FOLD,
WTXT and npz raised a bare ``TypeError`` from the reader's constructor."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
from tenfold import registry
from tenfold.errors import IntegrityError

MODEL = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float32)}
SAVED = [f for f in registry.formats() if f.suffixes and "convert_target" in f.hooks]


@pytest.mark.parametrize("fmt", SAVED, ids=lambda f: f.name)
@pytest.mark.parametrize("verify", [False, True])
def test_every_saved_format_takes_verify_checksums(tmp_path, fmt, verify):
    path = tmp_path / f"m{fmt.suffixes[0]}"
    tenfold.save(path, MODEL)
    got = tenfold.load(path, verify_checksums=verify)
    for k, a in MODEL.items():
        assert np.array_equal(np.asarray(got[k]), a), (fmt.name, k)
    with tenfold.open(path, verify_checksums=verify) as r:
        assert sorted(r.keys()) == sorted(MODEL)


@pytest.mark.parametrize("suffix", [".safetensors", ".zt"])
def test_a_sharded_index_passes_it_to_its_shards(tmp_path, suffix):
    path = tmp_path / f"m{suffix}"
    big = {"a": np.arange(1000, dtype=np.float32), "b": np.arange(1000, dtype=np.float32) * 2}
    tenfold.save(path, big, max_shard_size=5000)
    index = tmp_path / f"m{suffix}.index.json"
    assert index.exists()
    for verify in (False, True):
        got = tenfold.load(index, verify_checksums=verify)
        assert np.array_equal(got["b"], big["b"])


def test_the_option_still_reaches_a_format_that_skips_checks(tmp_path):
    path = tmp_path / "m.zt"
    tenfold.save(path, MODEL, checksum="crc32c")
    with tenfold.open(path) as r:
        at = r.info("w").offset + 2
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError):
        tenfold.load(path)
    got = tenfold.load(path, verify_checksums=False)  # passed on, not dropped
    assert not np.array_equal(got["w"], MODEL["w"])


def test_a_read_only_format_takes_it_too(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "m.pt"
    torch.save({k: torch.from_numpy(v) for k, v in MODEL.items()}, path)
    for verify in (False, True):
        got = tenfold.load(path, verify_checksums=verify)
        assert np.array_equal(got["w"], MODEL["w"])


@pytest.mark.parametrize("file_format", ["ztensor", "safetensors"])
def test_a_dcp_directory_passes_it_to_its_rank_files(tmp_path, file_format):
    from tenfold.interop.dcp_files import from_file

    src = tmp_path / "m.safetensors"
    tenfold.save(src, MODEL)
    ckpt = tmp_path / "ckpt"
    from_file(src, ckpt, world_size=2, file_format=file_format, fsync=False)
    for verify in (False, True):
        got = tenfold.load(ckpt, verify_checksums=verify)
        assert np.array_equal(np.asarray(got["w"]), MODEL["w"])
