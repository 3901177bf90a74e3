"""tenfold's DCP storage under fsspec URLs (issue #26), one process: a save uploads each
rank's file under the checkpoint's prefix (named by its attempt) and the document last; a
prefix without its document is incomplete; a load fetches the document and only the byte
ranges it needs. memory:// and S3 (moto's server on 127.0.0.1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _run import LIB, single_process, skip_without_distributed

skip_without_distributed()
fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

from tenfold.errors import EncodeError, FormatError  # noqa: E402
from tenfold.interop import dcp_files  # noqa: E402
from tenfold.interop.dcp_files import META_NAME  # noqa: E402
from tenfold.torch import dcp as tdcp  # noqa: E402


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(6, 4, generator=g),
        "b": torch.randn(5, generator=g).bfloat16(),
        "step": torch.tensor(seed + 1),
        "epoch": 7 + seed,
    }


def _zeros(sd):
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in sd.items()}


def _save(sd, url, **kw):
    with single_process():
        dcp.save(sd, storage_writer=tdcp.TenfoldStorageWriter(url, **kw), no_dist=True)


def _load(url, like, **kw):
    out = _zeros(like)
    with single_process():
        dcp.load(out, storage_reader=tdcp.TenfoldStorageReader(url, **kw), no_dist=True)
    return out


def _same(a, b):
    for k, v in a.items():
        assert torch.equal(b[k], v) if isinstance(v, torch.Tensor) else b[k] == v, k


def _failure(exc):
    ((err, _trace),) = exc.failures.values()
    return err


@pytest.fixture
def mem():
    fs = fsspec.filesystem("memory")
    root = f"/dcp-test-{id(fs):x}-{len(fs.store)}"
    yield fs, f"memory://{root}"
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _names(fs, url):
    return sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url.removeprefix("memory://"), detail=False))


def test_memory_save_load_and_the_document_last(mem):
    fs, root = mem
    url = root + "/ck"
    _save(_state(), url)
    names = _names(fs, url)
    assert names[0] == META_NAME and len(names) == 2
    assert names[1].startswith("dcp-rank-00000.") and names[1].endswith(".zt")
    _same(_state(), _load(url, _state()))
    with dcp_files.open(url) as r:  # the consolidated reader takes the URL too
        assert sorted(r) == ["b", "step", "w"] and torch.equal(
            torch.from_numpy(r["w"]), _state()["w"]
        )
        assert r.verify().ok


def test_a_prefix_without_its_document_is_incomplete(mem):
    fs, root = mem
    url = root + "/ck"
    with pytest.raises(FileNotFoundError):
        tdcp.TenfoldStorageReader(url).read_metadata()
    _save(_state(), url)
    fs.rm(url.removeprefix("memory://") + "/" + META_NAME)  # as if the commit never came
    with pytest.raises(FormatError, match="incomplete: no dcp-metadata.json"):
        tdcp.TenfoldStorageReader(url).read_metadata()
    _save(_state(), root + "/ck2")
    prefix = root.removeprefix("memory://") + "/ck2/"
    fs.pipe_file(prefix + "dcp-rank-00000.0123456789ab.zt", b"ZT")  # a dead attempt's object
    report = dcp_files.verify(root + "/ck2")
    assert report.ok and [f.obj for f in report.findings if f.status == "warning"] == [
        "object 'dcp-rank-00000.0123456789ab.zt'"
    ]


def test_an_existing_checkpoint_is_refused_or_replaced_whole(mem):
    fs, root = mem
    url = root + "/ck"
    _save(_state(0), url)
    before = _names(fs, url)
    with pytest.raises(CheckpointException) as e:
        _save(_state(1), url)
    assert isinstance(_failure(e.value), EncodeError) and "exists" in str(_failure(e.value))
    assert _names(fs, url) == before  # nothing uploaded
    _save(_state(1), url, overwrite=True)
    after = _names(fs, url)
    assert len(after) == 2 and after[1] != before[1]  # the old rank object is gone
    _same(_state(1), _load(url, _state(1)))
    fs.pipe_file(root.removeprefix("memory://") + "/other/notes.txt", b"mine")
    with pytest.raises(CheckpointException) as e:
        _save(_state(1), root + "/other", overwrite=True)
    assert "not a tenfold checkpoint's" in str(_failure(e.value))


class _Failing(tdcp.TenfoldStorageWriter):
    def write_data(self, plan, planner):
        resolve = planner.resolve_data

        def failing(item):
            raise OSError(28, "No space left on device (injected)")

        planner.resolve_data = failing
        del resolve
        return super().write_data(plan, planner)


def test_a_failed_save_over_a_remote_checkpoint_leaves_it_as_it_was(mem):
    fs, root = mem
    url = root + "/ck"
    _save(_state(0), url)
    before = _names(fs, url)
    with single_process(), pytest.raises(CheckpointException):
        dcp.save(_state(1), storage_writer=_Failing(url, overwrite=True), no_dist=True)
    assert _names(fs, url) == before
    _same(_state(0), _load(url, _state(0)))


def test_s3_save_and_load_fetch_only_the_ranges_needed():
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    from _servers import S3Server

    big = torch.randn(512, 1024)  # 2 MiB: far more than a load of "small" needs
    sd = {"big": big, "small": torch.arange(10.0)}
    with S3Server() as s3:
        s3.filesystem().mkdir("dcp-ckpts")
        so = s3.storage_options()
        _save(sd, "s3://dcp-ckpts/run/step-1", storage_options=so)
        keys = sorted(s3.filesystem().ls("dcp-ckpts/run/step-1", detail=False))
        assert keys[0].endswith(META_NAME) and len(keys) == 2
        put = [row for row in s3.log if row[0] == "PUT"]
        assert put[-1][1].endswith(META_NAME)  # the document is written last
        full = _load("s3://dcp-ckpts/run/step-1", sd, storage_options=so)
        assert torch.equal(full["big"], big) and torch.equal(full["small"], sd["small"])
        del s3.log[:]
        only = {"small": torch.zeros(10)}
        with single_process():
            dcp.load(
                only,
                storage_reader=tdcp.TenfoldStorageReader(
                    "s3://dcp-ckpts/run/step-1", storage_options=so
                ),
                no_dist=True,
            )
        assert torch.equal(only["small"], sd["small"])
        rank = [row for row in s3.log if row[0] == "GET" and "dcp-rank-" in row[1]]
        assert rank and all(row[2] for row in rank)  # every GET of it a range request
        assert sum(row[3] for row in rank) < big.nbytes // 4  # far from the big tensor


def test_s3_listings_are_fresh_where_other_ranks_upload_through_their_own_clients():
    """The coordinator lists the prefix when it plans and again when it commits; objects
    other ranks uploaded in between (through other clients) must be seen even with s3fs's
    listing cache on (its default). Before, the second listing came from the cache."""
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    from _servers import S3Server

    with S3Server() as s3:
        s3.filesystem().mkdir("dcp-ckpts-cached")  # moto keeps buckets for the process
        so = {**s3.storage_options(), "use_listings_cache": True}
        del so["skip_instance_cache"]  # one client, reused, as in a rank's process
        url = "s3://dcp-ckpts-cached/step-1"
        s3.filesystem().pipe("dcp-ckpts-cached/step-1/dcp-rank-00000.0123456789ab.zt", b"ZT")
        dcp_files.remote.check_target(url, False, so)  # lists (and caches) the prefix
        s3.filesystem().pipe("dcp-ckpts-cached/step-1/notes.txt", b"another client's")
        with pytest.raises(EncodeError, match="not a tenfold checkpoint's"):
            dcp_files.remote.check_target(url, False, so)


_NO_EXTRA = """
import sys
sys.modules[sys.argv[1]] = None  # as if it were not installed
from tenfold.torch import dcp as tdcp
try:
    tdcp.TenfoldStorageWriter(sys.argv[2])
except ImportError as exc:
    print("refused:", exc)
try:
    tdcp.TenfoldStorageReader(sys.argv[2])
except ImportError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [("s3fs", "s3://bucket/ck", "tenfold[s3]"), ("fsspec", "memory://ck", "tenfold[remote]")],
)
def test_a_missing_extra_is_one_line_naming_it(module, url, extra):
    got = subprocess.run(
        [sys.executable, "-c", _NO_EXTRA, module, url],
        env={"PYTHONPATH": str(LIB), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert len(lines) == 2 and all(extra in line for line in lines), got.stdout


def test_the_front_door_opens_a_checkpoint_under_a_url(mem, capsys):
    """``tenfold.open / load / detect`` and the CLI take a checkpoint's URL as they take its
    local directory (before: "the file is empty (0 bytes)", the prefix read as a file)."""
    import tenfold
    from tenfold import cli

    fs, root = mem
    url = root + "/ck"
    _save(_state(), url)
    assert tenfold.detect(url) == "torch_dcp"
    for u in (url, url + "/"):
        with tenfold.open(u) as r:
            assert sorted(r) == ["b", "step", "w"]
            assert torch.equal(torch.tensor(r["w"]), _state()["w"])
    got = tenfold.load(url)
    assert torch.equal(torch.tensor(got["w"]), _state()["w"])
    for args in (["inspect", url], ["verify", url]):
        assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "torch_dcp, 4 objects" in out and "OK: 4 checked, 0 errors" in out
    fs.pipe_file(root.removeprefix("memory://") + "/other/notes.txt", b"not a checkpoint")
    with pytest.raises(IsADirectoryError, match="a directory .object prefix., not a file"):
        tenfold.open(root + "/other")
    fs.rm(url.removeprefix("memory://") + "/" + META_NAME)  # rank files, no document
    with pytest.raises(FormatError, match="incomplete: no dcp-metadata.json"):
        tenfold.open(url)


def test_convert_and_diff_from_a_checkpoint_under_a_url(mem, tmp_path, capsys):
    import tenfold
    from tenfold import cli

    _fs, root = mem
    url = root + "/ck"
    _save(_state(), url)
    out = tmp_path / "flat.safetensors"
    assert cli.main(["convert", url, str(out)]) == 1  # 'epoch' is no tensor: said, not dropped
    assert "non-tensor entries pickled by DCP ('epoch')" in capsys.readouterr().err
    assert cli.main(["convert", url, str(out), "--no-metadata"]) == 0
    flat = tenfold.load(out)
    assert sorted(flat) == ["b", "step", "w"]
    assert torch.equal(torch.tensor(flat["w"]), _state()["w"])
    assert cli.main(["diff", url, str(out)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out


def test_s3_checkpoint_through_the_front_door():
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    from _servers import S3Server

    import tenfold

    with S3Server() as s3:
        s3.filesystem().mkdir("dcp-front")
        so = s3.storage_options()
        _save(_state(), "s3://dcp-front/run/step-1", storage_options=so)
        with tenfold.open("s3://dcp-front/run/step-1", storage_options=so) as r:
            assert r.verify().ok
            assert torch.equal(torch.tensor(r["w"]), _state()["w"])
        s3.filesystem().pipe("dcp-front/run/plain/a.bin", b"x")
        with pytest.raises(IsADirectoryError):
            tenfold.open("s3://dcp-front/run/plain", storage_options=so)
