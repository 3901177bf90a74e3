"""scripts/fuzz.py's kinds with a directory per case: zTensor v2 files (``ztensor2``), sharded
indexes (``sharded``) and remote reads through a misbehaving HTTP server (``remote``).

These tests check the harness, not the library: each kind runs cases, its mutations reach past
the checks they aim at, the server misbehaves as it says, and the oracle reports a planted bug
(a reader that follows a link out of the directory, one that mixes two versions of an object)
as a finding. Whether today's library passes the fuzzer is ``python scripts/fuzz.py``'s job.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tenfold
from tenfold.errors import FormatError

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "scripts" / "fuzz.py"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(sys.path),
    "TENFOLD_FUZZ_TORCH": "0",
    "TENFOLD_FUZZ_BOMB": "0",
}


@pytest.fixture(scope="module")
def fz():
    spec = importlib.util.spec_from_file_location("tenfold_fuzz_script", FUZZ)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules[spec.name]


def _run(code: str, out: Path, env: dict | None = None) -> tuple[dict, str]:
    """Run ``code`` (which ends by calling the fuzzer's main) in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        env={**ENV, **(env or {})},
    )
    text = proc.stdout + proc.stderr[-3000:]
    assert (out / "summary.json").exists(), text
    return json.loads((out / "summary.json").read_text()), text


def _main_code(fmt: str, out: Path, cases: int, plant: str = "") -> str:
    return (
        "import importlib.util, random, sys, tenfold\n"
        "from pathlib import Path\n"
        f"spec = importlib.util.spec_from_file_location('fz', {str(FUZZ)!r})\n"
        "fz = sys.modules['fz'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(fz)\n"
        f"{plant}\n"
        f"sys.exit(fz.main(['--cases', '{cases}', '--seed', '21', '--format', '{fmt}', "
        f"'--round-robin', '--out', {str(out)!r}, '--subprocess-rate', '0', "
        "'--timeout', '60']))\n"
    )


@pytest.mark.fuzz
def test_each_new_kind_runs_cases(tmp_path):
    out = tmp_path / "findings"
    summary, text = _run(_main_code("ztensor2,sharded,remote", out, 3), out)
    assert summary["total_cases"] == 3, text
    for kind in ("ztensor2", "sharded", "remote"):
        assert summary["cases"][kind] == 1, text
        outcomes = summary["outcomes"][kind]
        assert sum(outcomes.values()) >= 3, (kind, outcomes)  # every operation gave a record
        assert not {"signal", "memory"} & set(outcomes), (kind, outcomes, text)


@pytest.mark.fuzz
def test_a_reader_following_a_link_out_of_the_directory_is_reported(tmp_path, fz):
    # plant a reader that follows the shard link (as the library did before its fix) and one
    # that refuses naming the link: only the first is a finding, and the case is kept as a tar
    plant = (
        "seed = dict(fz.sharded_seeds(Path(fz.tempfile.mkdtemp())))['plain.safetensors']\n"
        "for i in range(2000):\n"
        "    case = fz.build_sharded(seed, random.Random(i))\n"
        "    if 'moved out' in case[1] and 'abs' not in case[1]:\n"
        "        break\n"
        "fz.BUILDERS['sharded'] = lambda s, r: (case[0].copy(), case[1], dict(case[2]))\n"
        "def follow(p):\n"
        "    with tenfold.open(p) as r:\n"
        "        return fz.read_all(r)\n"
        "def ops(p, work):\n"
        "    shard = fz.json.loads(Path(p).read_bytes())['weight_map']\n"
        "    first = next(s for s in shard.values() if (Path(p).parent / s).is_symlink())\n"
        "    def follows():\n"
        "        return len(open(Path(p).parent / first, 'rb').read())\n"
        "    def refuses():\n"
        "        raise tenfold.errors.FormatError(f'shard {first!r} is a link out of the dir')\n"
        "    return [('open', follows, {'shards'}), ('verify', refuses, {'shards'})]\n"
        "fz.ops_sharded = ops\n"
    )
    out = tmp_path / "findings"
    summary, text = _run(_main_code("sharded", out, 1, plant), out)
    found = summary["findings"]
    assert [(f["op"], f["exc"]) for f in found] == [("open", "LinkFollowed")], text
    assert summary["outcomes"]["sharded"] == {"other": 1, "tenfold": 1}, text
    bundle, ctx = fz.bundle_from_tar(out / found[0]["id"] / "case.tar")
    assert ctx["escapes"] and any(isinstance(v, fz.Link) for v in bundle.files.values())


@pytest.mark.fuzz
def test_a_read_mixing_two_versions_of_a_remote_object_is_reported(tmp_path):
    # the object changes between requests; a planted reader returns half of each version
    plant = (
        "def ops(url, ctx):\n"
        "    work = Path(ctx['work'])\n"
        "    a, b = (tenfold.load(work / r) for r in ctx['refs'])\n"
        "    mixed = {n: (a if i % 2 else b)[n] for i, n in enumerate(sorted(a))}\n"
        "    def consistent():\n"
        "        return fz.read_all(b)\n"
        "    def mixes():\n"
        "        return fz.read_all(mixed)\n"
        "    return [('remote.open', mixes, {'reads'}), ('remote.load', consistent, {'reads'})]\n"
        "fz.ops_remote = ops\n"
    )
    out = tmp_path / "findings"
    env = {"TENFOLD_FUZZ_REMOTE_MODES": "change"}
    summary, text = _run(_main_code("remote", out, 1, plant), out, env)
    found = summary["findings"]
    assert [(f["op"], f["exc"]) for f in found] == [("remote.open", "MixedVersions")], text
    assert summary["outcomes"]["remote"] == {"other": 1, "ok": 1}, text


def test_the_oracle_rules(fz, tmp_path):
    url = "http://127.0.0.1:1/c0/"

    def judge(fn, tags=frozenset({"reads", "shards"}), **ctx):
        return fz.run_op("op", fn, set(tags), {"url": url, **ctx}, None)

    def raises(exc):
        def fn():
            raise exc

        return fn

    esc = {"escapes": ["model-00001.safetensors", "sub"]}
    link_named = FormatError("shard 'model-00001.safetensors': link leaves the directory")
    assert judge(lambda: 1, **esc)["exc"] == "LinkFollowed"
    assert judge(lambda: 1, tags=set(), **esc)["outcome"] == "ok"  # detect reads no shard
    assert judge(raises(link_named), **esc)["outcome"] == "tenfold"
    assert judge(raises(FormatError("bad header")), **esc)["exc"] == "RefusalNotNamingLink"
    leak = FormatError("sub: bad magic b'root:x:0'")
    assert judge(raises(leak), **esc)["exc"] == "LinkFollowed"
    assert judge(raises(FormatError("x")), must_read=True)["exc"] == "RefusedValid"
    assert judge(raises(FormatError("x")))["outcome"] == "tenfold"
    assert judge(raises(OSError(5, f"{url}case.zt: timed out")))["outcome"] == "oserror"
    assert judge(raises(TimeoutError()))["outcome"] == "other"  # an OSError naming no URL
    assert judge(raises(KeyError("k")))["outcome"] == "other"

    def warns(category, filename):
        def fn():
            warnings.warn_explicit("unclosed reader", category, filename, 1)

        return fn

    leak_fd = warns(ResourceWarning, "/x/tenfold/core/reader.py")
    assert judge(leak_fd)["exc"] == "ResourceWarning"
    allowed = judge(warns(UserWarning, "/x/tenfold/core/source.py"))  # e.g. no validators
    assert allowed["outcome"] == "ok" and allowed["warnings"] == ["UserWarning"]
    assert fz.run_op("op", lambda: 1, set(), None, None) == {"op": "op", "outcome": "ok"}


def test_reads_are_compared_with_the_reference_versions(fz, tmp_path):
    import numpy as np

    for i, v in enumerate((1, 2)):
        tenfold.save(tmp_path / f"{i}.safetensors", {"a": np.full(3, v), "b": np.full(2, v)})
    ctx = {"refs": ["0.safetensors", "1.safetensors"], "changed": True}
    refs = fz.Refs(ctx, tmp_path)
    one = fz.read_all(tenfold.load(tmp_path / "1.safetensors"))
    assert fz.run_op("op", lambda: one, {"reads"}, ctx, refs)["outcome"] == "ok"
    mixed = dict(one, a=fz.fingerprint(np.full(3, 1)))
    assert fz.run_op("op", lambda: mixed, {"reads"}, ctx, refs)["exc"] == "MixedVersions"
    stable = {**ctx, "changed": False}
    assert fz.run_op("op", lambda: mixed, {"reads"}, stable, refs)["exc"] == "WrongValues"


def test_the_server_misbehaves_as_it_says(fz):
    data = bytes(range(256)) * 64
    other = data[::-1]
    server = fz.MisbehavingServer()
    try:

        def get(mode, rng=None, method="GET", start=1, extra=None, n=1):
            cfg = {"mode": mode, "from": start, "shift": 8, "object": "/o.bin"}
            base = server.add(f"t{mode}{method}{n}", fz.RemoteCase({"/o.bin": [data, other]}, cfg))
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1)
            answers = []
            try:
                for _ in range(n):
                    headers = {"Range": rng} if rng else {}
                    headers.update(extra or {})
                    conn.request(method, base.split(str(server.port))[1] + "o.bin", headers=headers)
                    resp = conn.getresponse()
                    answers.append((resp.status, dict(resp.getheaders()), resp.read()))
            finally:
                conn.close()
            return answers[-1]

        status, hdr, body = get("honest", "bytes=10-19")
        assert (status, body, hdr["Content-Range"]) == (
            206,
            data[10:20],
            f"bytes 10-19/{len(data)}",
        )
        assert hdr["ETag"].startswith('"')
        assert get("ignore-range", "bytes=10-19")[::2] == (200, data)
        status, hdr, body = get("shift", "bytes=10-19")
        assert body == data[18:28] and hdr["Content-Range"] == f"bytes 18-27/{len(data)}"
        assert len(get("short", "bytes=0-99")[2]) == 50
        assert get("weak-etag", "bytes=0-9")[1]["ETag"].startswith('W/"')
        weak = get("weak-etag", "bytes=0-9", extra={"If-Match": 'W/"x"'})
        assert weak[0] == 412  # a weak tag never matches If-Match
        assert "ETag" not in get("no-validators", "bytes=0-9")[1]
        assert get("chunked", "bytes=0-9")[1].get("Transfer-Encoding") == "chunked"
        assert "Content-Length" not in get("no-length", method="HEAD")[1]
        assert get("change", "bytes=0-9", start=2, n=2)[2] == other[:10]
        assert get("error-500", "bytes=0-9")[0] == 500
        with pytest.raises(TimeoutError):
            get("stall-body", "bytes=0-9")
    finally:
        server.close()  # wakes the stalled handler
    assert not server.thread.is_alive()


def test_v2_mutations_reach_past_the_manifest_hash(fz, tmp_path):
    # the manifest is re-encoded with its hash recomputed, so most lies meet the schema,
    # layout and digest rules behind it rather than the footer's hash check
    seed = dict(fz.v2_seeds(tmp_path / "seeds"))
    rules = set()
    for i in range(60):
        name = ("dense", "sparse", "zstd", "dedup")[i % 4]
        data, _ = fz.mut_ztensor2(seed[name].files["case/case.zt"], random.Random(i))
        p = tmp_path / f"{i}.zt"
        p.write_bytes(data)
        try:
            tenfold.load(p, copy=True)
        except tenfold.errors.TenfoldError as exc:
            rules.add(getattr(exc, "rule", None))
    assert len(rules - {None, "manifest-hash"}) >= 6, rules


def test_an_append_cut_short_must_read_as_the_old_generation(fz, tmp_path):
    seed = dict(fz.v2_seeds(tmp_path / "seeds"))["append"]
    seen = set()
    for i in range(200):
        b, desc, ctx = fz.build_ztensor2(seed, random.Random(i))
        if "append cut short" not in desc or "anywhere" in desc:
            continue
        seen.add(desc)
        work = tmp_path / f"w{i}"
        path = fz.materialize(b, work)
        assert ctx == {"must_read": True, "refs": ["ref/old.zt"]}
        got = fz.read_all(tenfold.load(path, copy=True))
        assert got == fz.read_all(tenfold.load(work / "ref" / "old.zt")), desc
    assert len(seen) == 3, seen


def test_a_case_tar_keeps_links_and_fifos(fz, tmp_path):
    b = fz.Bundle(
        {
            "case/i.json": b"{}",
            "case/a": fz.Link("../outside/x"),
            "case/b": fz.Link(fz.WORK + "/outside/x"),
            "case/p": fz.Fifo(),
            "outside/x": b"data",
        },
        "case/i.json",
    )
    tar = tmp_path / "case.tar"
    tar.write_bytes(fz.bundle_tar(b, {"escapes": ["a"]}))
    back, ctx = fz.bundle_from_tar(tar)
    assert (back.files, back.entry, ctx) == (b.files, b.entry, {"escapes": ["a"]})
    work = tmp_path / "w"
    fz.materialize(back, work)
    assert (work / "case" / "b").read_bytes() == b"data"
    assert os.readlink(work / "case" / "b") == str(work / "outside" / "x")
