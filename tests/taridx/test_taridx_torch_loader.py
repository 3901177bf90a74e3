"""A webdataset user's DataLoader over ``tenfold.taridx.Dataset``: worker processes (fork and
spawn), the default collate, ``batch_size=None``, with and without decoders.

Samples used to hold memoryviews, which cannot be pickled: with ``num_workers=2`` and no
decoder for some extension each worker failed to send its batch back and the loader waited
forever; the default collate took a memoryview for a sequence of ints. Each case runs in a
child process under a timeout (and the loaders under ``DataLoader(timeout=60)``), so a
regression fails instead of hanging the run.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install torch)")

import tenfold

LIB = os.path.dirname(os.path.dirname(os.path.abspath(tenfold.__file__)))

SCRIPT = textwrap.dedent(
    """
    import io, sys, tarfile
    import torch
    from torch.utils.data import DataLoader
    import tenfold.taridx as tx

    def ident(batch):
        return batch

    def build(root):
        truth = {}
        for k in range(3):  # webdataset-style shards: stem.jpg + stem.cls
            with tarfile.open(f"{root}/train_{k:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
                for j in range(4):
                    stem = f"{k * 4 + j:06d}"
                    for ext, data in (("jpg", bytes([k, j]) * (50 + j)), ("cls", b"%d" % j)):
                        info = tarfile.TarInfo(f"{stem}.{ext}")
                        info.size = len(data)
                        tf.addfile(info, io.BytesIO(data))
                        truth.setdefault(stem, {})[ext] = data
        tx.build(root, "train", show_progress=False)
        return [truth[s] for s in sorted(truth)]

    def loader(ds, ctx, **kw):
        return DataLoader(ds, num_workers=2, multiprocessing_context=ctx, timeout=60, **kw)

    def main(root, ctx, case):
        want = build(root)
        if case == "views":  # the zero-copy opt-in refuses to serve a worker, loudly
            ds = tx.Dataset(root, "train", payload="memoryview")
            assert type(ds[0]["jpg"]) is memoryview  # read here first: a fork keeps that state
            try:
                list(loader(ds, ctx, batch_size=4, collate_fn=ident))
            except ValueError as e:
                assert "payload='memoryview'" in str(e) and "worker" in str(e), e
                print("OK")
                return
            raise AssertionError("memoryview samples were served in a worker")
        ds = tx.Dataset(root, "train")
        got = [s for b in loader(ds, ctx, batch_size=4, collate_fn=ident) for s in b]
        assert got == want, got[:1]
        # default collate: a batch of bytes stays a list of bytes (as with webdataset)
        batches = list(loader(ds, ctx, batch_size=4))
        assert [b["jpg"] for b in batches] == [[w["jpg"] for w in want[i : i + 4]]
                                              for i in range(0, 12, 4)], batches[0]
        assert [b["cls"] for b in batches] == [[w["cls"] for w in want[i : i + 4]]
                                              for i in range(0, 12, 4)], batches[0]
        # batch_size=None: each sample as it is, payloads still bytes (not lists of ints)
        got = list(loader(ds, ctx, batch_size=None))
        assert got == want and all(type(v) is bytes for s in got for v in s.values()), got[:1]
        # a decoder for one extension only: the other stays bytes; decoders get bytes
        dec = tx.Dataset(root, "train", decoders={"cls": int})
        batches = list(loader(dec, ctx, batch_size=4))
        assert [b["cls"].tolist() for b in batches] == [[0, 1, 2, 3]] * 3, batches[0]
        assert [b["jpg"] for b in batches] == [[w["jpg"] for w in want[i : i + 4]]
                                              for i in range(0, 12, 4)], batches[0]
        got = list(loader(dec, ctx, batch_size=None))
        assert [s["cls"] for s in got] == [0, 1, 2, 3] * 3, got[:1]
        print("OK")

    if __name__ == "__main__":
        main(*sys.argv[1:])
    """
)


def _run(tmp_path, ctx, case):
    if ctx not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {ctx} start method on this platform")
    script = tmp_path / "loader_case.py"
    script.write_text(SCRIPT)
    data = tmp_path / "wds"
    data.mkdir()
    env = dict(os.environ, PYTHONPATH=LIB)
    try:
        res = subprocess.run(
            [sys.executable, str(script), str(data), ctx, case],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as e:  # the loader hung (its own timeout did not fire)
        pytest.fail(f"DataLoader case {case!r} under {ctx} hung: {e.stderr!r}")
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), res.stderr[-3000:]


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_workers_default_collate_and_decoders(tmp_path, ctx):
    _run(tmp_path, ctx, "bytes")


def test_memoryview_payloads_refused_in_a_worker(tmp_path):
    _run(tmp_path, "fork", "views")
