"""``zt_generation``: one option, one spelling, for every writer that can produce ``.zt``
(``tenfold.save``, ``tenfold.torch.save_file``, ``tenfold.jax.save_file``, ``write_any``,
``convert``, ``tenfold convert``, sharded saves); 0.1.0 stays the default; ztensor 2.1.2
opens and verifies what each writes with v2 selected; ``tenfold inspect`` shows the generation.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.ztensor as zt
from tenfold.cli import main
from tenfold.convert import convert, write_any
from tenfold.errors import UnsupportedError

PEER_SCRIPT = Path(__file__).with_name("_zt2_peer.py")
#: an interpreter with ztensor==2.1.2 (see test_ztensor_v2_writer.py)
PEER = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")

TENSORS = {
    "b.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
    "a.bias": np.array([1, -2, 3], np.int16),
    "c.mask": np.array([True, False, True, True]),
}


def _torch():
    torch = pytest.importorskip("torch", reason="torch not installed")
    import tenfold.torch  # noqa: F401  (the attribute used below)

    return torch


def _save(tmp: Path, gen, **kw) -> Path:
    p = tmp / "save.zt"
    tenfold.save(p, TENSORS, zt_generation=gen, **kw)
    return p


def _torch_save_file(tmp: Path, gen, **kw) -> Path:
    torch = _torch()
    p = tmp / "torch.zt"
    tenfold.torch.save_file({k: torch.from_numpy(v) for k, v in TENSORS.items()}, p,
                            zt_generation=gen, **kw)  # fmt: skip
    return p


def _jax_save_file(tmp: Path, gen, **kw) -> Path:
    pytest.importorskip("jax", reason="jax not installed")
    import tenfold.jax

    p = tmp / "jax.zt"
    tenfold.jax.save_file(TENSORS, p, zt_generation=gen, **kw)
    return p


def _write_any(tmp: Path, gen, **kw) -> Path:
    p = tmp / "any.zt"
    write_any(p, TENSORS, zt_generation=gen, **kw)
    return p


def _source(tmp: Path) -> Path:
    src = tmp / "src.safetensors"
    tenfold.save(src, TENSORS)
    return src


def _convert(tmp: Path, gen, **kw) -> Path:
    p = tmp / "convert.zt"
    convert(_source(tmp), p, zt_generation=gen, **kw)
    return p


def _cli_convert(tmp: Path, gen, **kw) -> Path:
    p = tmp / "cli.zt"
    args = [] if gen is None else ["--zt-generation", str(gen)]
    assert main(["convert", str(_source(tmp)), str(p), *args]) == 0
    return p


WRITERS = {
    "save": _save,
    "torch.save_file": _torch_save_file,
    "jax.save_file": _jax_save_file,
    "write_any": _write_any,
    "convert": _convert,
    "cli convert": _cli_convert,
}


def _same(back: dict, want: dict = TENSORS) -> None:
    assert sorted(back) == sorted(want)
    for k, v in want.items():
        got = np.asarray(back[k])
        assert got.dtype == v.dtype and got.shape == v.shape, k
        np.testing.assert_array_equal(got, v)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_writes_v2_when_asked_and_0_1_0_by_default(tmp_path, writer):
    # Before: tenfold.save and write_any had no such option (save passed it on to
    # ztensor.save, a TypeError), torch/jax save_file raised "write_any() got an unexpected
    # keyword argument 'zt_generation'".
    (tmp_path / "v2").mkdir()
    (tmp_path / "default").mkdir()
    p2 = WRITERS[writer](tmp_path / "v2", 2)
    assert zt.detect(p2) == "v2"
    _same(tenfold.load(p2))
    p0 = WRITERS[writer](tmp_path / "default", None)
    assert zt.detect(p0) == "0.1.0"
    _same(tenfold.load(p0))


@pytest.mark.parametrize("gen", [0, "0", "0.1.0"])
def test_zero_names_the_default(tmp_path, gen):
    assert zt.detect(_save(tmp_path, gen)) == "0.1.0"
    assert zt.detect(_write_any(tmp_path, gen)) == "0.1.0"


@pytest.mark.parametrize("gen", [2, "2", "v2"])
def test_every_spelling_of_v2(tmp_path, gen):
    assert zt.detect(_save(tmp_path, gen)) == "v2"
    assert zt.detect(_write_any(tmp_path, gen)) == "v2"


def test_metadata_becomes_v2_file_attributes(tmp_path):
    p = _save(tmp_path, 2, metadata={"format": "pt"})
    with zt.open(p) as r:
        assert r.metadata == {"format": "pt"}
    q = _write_any(tmp_path, 2, metadata={"format": "np"})
    with zt.open(q) as r:
        assert r.metadata == {"format": "np"}


def test_v2_for_another_format_is_refused_before_writing(tmp_path):
    torch = _torch()
    for i, write in enumerate(
        [
            lambda p: tenfold.save(p, TENSORS, zt_generation=2),
            lambda p: write_any(p, TENSORS, zt_generation=2),
            lambda p: tenfold.torch.save_file(
                {k: torch.from_numpy(v) for k, v in TENSORS.items()}, p, zt_generation=2
            ),
        ]
    ):
        p = tmp_path / f"m{i}.safetensors"
        with pytest.raises(UnsupportedError, match=r"zt_generation\) needs a \.zt file"):
            write(p)
        assert not p.exists()
    # the default generation is no request: accepted for any format
    tenfold.save(tmp_path / "ok.safetensors", TENSORS, zt_generation=0)


@pytest.mark.parametrize("gen", [1, "v1", 3, "latest"])
def test_unknown_generation_is_refused_by_every_writer(tmp_path, gen):
    for write in (_save, _write_any, _torch_save_file):
        with pytest.raises(UnsupportedError, match="zt_generation must be 0.1.0 or 2"):
            write(tmp_path, gen)
    assert not list(tmp_path.glob("*.zt"))


def _big() -> dict[str, np.ndarray]:
    return {f"layer.{i}.w": np.full((64,), i, np.float32) for i in range(5)}


def _sharded_save(tmp: Path) -> list[Path]:
    tenfold.save(tmp / "save.zt", _big(), max_shard_size=600, zt_generation=2)
    return sorted(tmp.glob("save-*.zt"))


def _sharded_module_save(tmp: Path) -> list[Path]:
    import tenfold.sharded

    tenfold.sharded.save(tmp / "mod.zt", _big(), 600, zt_generation=2)
    return sorted(tmp.glob("mod-*.zt"))


def _sharded_torch(tmp: Path) -> list[Path]:
    torch = _torch()
    tenfold.torch.save_file({k: torch.from_numpy(v) for k, v in _big().items()}, tmp / "t.zt",
                            max_shard_size=600, zt_generation=2)  # fmt: skip
    return sorted(tmp.glob("t-*.zt"))


def _sharded_convert(tmp: Path) -> list[Path]:
    src = tmp / "src.safetensors"
    tenfold.save(src, _big())
    # Before: refused ("--max-shard-size writes zTensor 0.1.0 shards; it does not combine
    # with --zt-generation").
    convert(src, tmp / "c.zt", zt_generation=2, max_shard_size=600)
    return sorted(tmp.glob("c-*.zt"))


SHARDED = {
    "save": _sharded_save,
    "sharded.save": _sharded_module_save,
    "torch.save_file": _sharded_torch,
    "convert": _sharded_convert,
}


@pytest.mark.parametrize("writer", sorted(SHARDED))
def test_sharded_saves_write_v2_shards(tmp_path, writer):
    shards = SHARDED[writer](tmp_path)
    assert len(shards) >= 2
    assert all(zt.detect(p) == "v2" for p in shards)
    index = next(tmp_path.glob("*.index.json"))
    _same(tenfold.load(index), _big())


def test_inspect_shows_the_generation(tmp_path, capsys):
    # Before: nothing in `tenfold inspect` said which generation a .zt file is (an empty
    # 0.1.0 file and a v2 file listed alike).
    for gen, want in [(None, "0.1.0"), (2, "v2")]:
        p = tmp_path / f"g{gen}.zt"
        tenfold.save(p, TENSORS, zt_generation=gen)
        assert main(["inspect", str(p)]) == 0
        assert f", version {want}\n" in capsys.readouterr().out.splitlines(keepends=True)[0]
        assert main(["inspect", "--json", str(p)]) == 0
        assert json.loads(capsys.readouterr().out)["version"] == want
    empty = tmp_path / "empty.zt"
    tenfold.save(empty, {}, zt_generation=2)
    assert main(["inspect", str(empty)]) == 0
    assert "0 objects" in capsys.readouterr().out.splitlines()[0].split(", version v2")[0]


# -- ztensor 2.1.2 opens and verifies what every writer produces ---------------------------------
def _peer_verify(paths: list[Path]) -> dict:
    if not PEER:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    r = subprocess.run([PEER, str(PEER_SCRIPT), "verify", *map(str, paths)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _stored_sha(a: np.ndarray) -> str:
    """sha256 of the bytes v2 stores for ``a`` (bool as u8 0/1, little-endian)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _check_peer(found: dict, want: dict[str, np.ndarray]) -> None:
    assert found["verified"] == [len(want), 0]  # every part checked, none without a digest
    assert found["whole"] == [len(want), 0]
    assert sorted(found["objects"]) == sorted(want)
    for name, a in want.items():
        obj = found["objects"][name]
        assert obj["layout"] == "dense" and obj["shape"] == list(a.shape)
        assert obj["parts"] == {"data": _stored_sha(a)}


def test_ztensor_2_1_2_opens_what_every_writer_writes(tmp_path):
    paths = {}
    for writer, write in WRITERS.items():
        d = tmp_path / writer.replace(" ", "_")
        d.mkdir()
        try:
            paths[writer] = write(d, 2)
        except pytest.skip.Exception as exc:  # torch / jax missing: that writer only
            print(f"{writer}: skipped ({exc})")
    for writer, shards in SHARDED.items():
        d = tmp_path / ("sharded_" + writer)
        d.mkdir()
        try:
            for i, p in enumerate(shards(d)):
                paths[f"sharded {writer} {i}"] = p
        except pytest.skip.Exception as exc:
            print(f"sharded {writer}: skipped ({exc})")
    found = _peer_verify(list(paths.values()))
    big = _big()
    for writer, p in paths.items():
        if writer.startswith("sharded"):
            with zt.open(p) as r:
                names = list(r)
            _check_peer(found[str(p)], {n: big[n] for n in names})
        else:
            _check_peer(found[str(p)], TENSORS)
