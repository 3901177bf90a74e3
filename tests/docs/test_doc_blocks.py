"""Every Python and shell block of README.md and docs/**/*.md runs as written (issue 24).

The convention for code fences (also in README.md, Development):

* ```` ```python ```` blocks are run; ```` ```sh ```` (or ``bash``, ``shell``) blocks are run
  with ``bash -e -o pipefail``, with ``tenfold`` on ``PATH``.
* What is shown, not run, says so by its fence: ```` ```console ```` for a terminal session
  (``$ command`` lines and their output), ```` ```text ```` for other output, messages and
  diagrams, ```` ```json ````, ```` ```toml ````, ```` ```abnf ```` for what they name,
  ```` ```{directive} ```` for MyST directives. A bare ```` ``` ```` fence is refused, so that
  every block says which it is.
* Per file: a fresh empty working directory; the blocks run in the order of the file, the
  Python blocks in one interpreter session (one namespace, as if pasted in order), the shell
  blocks in the same directory between them. A block may use only what the blocks before it
  in the same file made, so each page starts from what a new user has.
* A block that needs what a test machine has not got says so in a comment, and is run against
  a local stand-in: a line whose comment says ``needs a GPU`` has its ``"cuda"`` replaced by
  ``"cpu"``; a block with a comment saying ``needs S3`` runs against moto's S3 server on
  127.0.0.1 (``AWS_ENDPOINT_URL_S3``), whose buckets named in the block hold the working
  directory's files under the same paths; a block with a comment saying ``needs a web server``
  has its ``http(s)://host`` replaced by a server on 127.0.0.1 that serves the working
  directory (a URL's path names the file its longest existing tail names).
* A block that uses ``tenfold.torch``, ``tenfold.jax`` or Ray Data (``read_ray``) is skipped,
  with a printed reason naming the extra, when that extra is not installed; so later blocks
  must not need what such a block defines. ``TENFOLD_DOCS_WITHOUT=torch,jax,ray`` makes the
  test treat those extras as missing (to check a page without them).
* A block that cannot run anywhere a test runs (the install itself) is preceded by
  ``<!-- docs-test: skip: <reason> -->``; it is counted and its reason printed.

The counts of blocks run (and skipped, with reasons) are printed per file and in total.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tenfold

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "_run_blocks.py"
RUN = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
SHOWN = {"text", "console", "json", "toml", "abnf", "yaml", "ini", "diff", "c", "cython"}
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
SKIP = re.compile(r"^\s*<!--\s*docs-test:\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")
TIMEOUT_S = 300


@dataclass
class Block:
    lang: str  # the fence's first word ("" for a bare fence)
    line: int  # 1-based line of the first line of code
    code: str
    skip: str | None  # the reason of a docs-test: skip marker


def docs() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if "_build" not in p.relative_to(ROOT).parts]


def _fence(line: str) -> re.Match[str] | None:
    m = FENCE.match(line)
    if m and m["fence"][0] == "`" and "`" in m["info"]:
        return None  # inline code at the start of a line (CommonMark: not a fence)
    return m


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file (CommonMark fences, indented up to 3 spaces)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = _fence(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        lang = m["info"].strip().split(" ")[0] if m["info"].strip() else ""
        marker = SKIP.match(lines[i - 1]) if i else None
        body, j = [], i + 1
        while j < len(lines):
            c = _fence(lines[j])
            if c and c["fence"][0] == fence[0] and len(c["fence"]) >= len(fence):
                if not c["info"].strip():
                    break
            text = lines[j]
            body.append(text[indent:] if text[:indent].strip() == "" else text.lstrip())
            j += 1
        out.append(Block(lang, i + 2, "\n".join(body), marker["reason"] if marker else None))
        i = j + 1
    return out


def convention_errors(path: Path) -> list[str]:
    rel = path.relative_to(ROOT)
    errors = []
    for b in blocks(path):
        where = f"{rel}:{b.line - 1}"
        if not b.lang:
            errors.append(f"{where}: a bare fence; say python/sh (run) or text/console (shown)")
        elif b.lang not in RUN and b.lang not in SHOWN and not b.lang.startswith("{"):
            errors.append(f"{where}: fence language {b.lang!r} is neither run nor shown")
    return errors


@pytest.fixture(scope="module")
def totals(request: pytest.FixtureRequest) -> Any:
    counts = {"ran": 0, "skipped": 0, "files": 0}
    yield counts
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is not None and counts["files"]:
        with capture.global_and_fixture_disabled():
            print(
                f"\ndocs: {counts['ran']} blocks run, {counts['skipped']} skipped, "
                f"in {counts['files']} files",
                end="",
            )


def test_every_fence_says_whether_it_runs():
    errors = [e for p in docs() for e in convention_errors(p)]
    assert not errors, "\n".join(errors)


def test_the_extractor_finds_the_blocks(tmp_path: Path):
    # guards the extraction itself: a parser that found nothing would make every page pass
    md = tmp_path / "x.md"
    md.write_text(
        "# t\n\n```python\nx = 1\n```\n\n<!-- docs-test: skip: why -->\n```sh\necho\n```\n"
        "  ```text\n  out\n  ```\n  ```` ```python ```` is inline code\n"
    )
    got = [(b.lang, b.line, b.code, b.skip) for b in blocks(md)]
    assert got == [
        ("python", 4, "x = 1", None),
        ("sh", 9, "echo", "why"),
        ("text", 12, "out", None),
    ]
    assert sum(1 for p in docs() for b in blocks(p) if b.lang in RUN) >= 15


def _drive(tmp_path: Path, blocks: list[tuple[str, str]]) -> subprocess.CompletedProcess[str]:
    """The runner on ``blocks`` ((lang, code), one per line of a pretend file x.md)."""
    (tmp_path / "work").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    doc = {
        "file": "x.md",
        "blocks": [{"lang": la, "line": i + 1, "code": c} for i, (la, c) in enumerate(blocks)],
    }
    return subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        cwd=tmp_path / "work",
        env=_env(tmp_path, str(tmp_path)),
        timeout=120,
    )


def test_blocks_share_one_session_and_directory(tmp_path: Path):
    got = _drive(
        tmp_path,
        [
            ("python", "from pathlib import Path\na = 1"),
            ("sh", "echo hi > f.txt && tenfold --version > v.txt"),
            ("python", "assert a == 1 and Path('f.txt').read_text() == 'hi\\n'"),
            ("python", "assert Path('v.txt').read_text().startswith('tenfold')"),
        ],
    )
    assert got.returncode == 0, got.stdout + got.stderr
    ran = [ln.split()[:2] for ln in got.stdout.splitlines()]
    assert ran == [["RAN", str(i)] for i in (1, 2, 3, 4)]


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("undefined_name", "NameError"),
        ("open('x.zt', 'wb')  # never closed", "ResourceWarning"),
    ],
)
def test_a_failing_block_is_named_by_its_line(tmp_path: Path, code: str, why: str):
    got = _drive(tmp_path, [("python", "x = 1"), ("python", code), ("python", "pass")])
    assert got.returncode == 1
    assert "FAILED x.md:2 (python block)" in got.stdout and why in got.stdout
    assert "RAN 3" not in got.stdout
    got = _drive(tmp_path / "sh", [("sh", "true\nfalse\necho not reached")])
    assert got.returncode == 1 and "FAILED x.md:1 (sh block)" in got.stdout


def test_stand_in_markers():
    import _run_blocks as runner

    gpu = 'load_file("m.zt", device="cuda")   # needs a GPU: pinned memory\nx = "cuda"'
    assert runner.on_cpu(gpu) == gpu.replace('"cuda"', '"cpu"', 1)
    assert runner.S3_MARK.search("# needs S3 and a web server") and runner.HTTP_MARK.search(
        "# needs S3 and a web server"
    )
    assert not runner.S3_MARK.search('open("s3://bucket/x")')
    os.environ["TENFOLD_DOCS_WITHOUT"] = "torch"
    try:
        assert runner.missing_extra("import tenfold.torch\n") == "torch"
        assert runner.missing_extra("import tenfold\n") is None
    finally:
        del os.environ["TENFOLD_DOCS_WITHOUT"]


def test_an_extra_that_is_there_but_cannot_import_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """An install cut short (the disk full halfway) leaves a package find_spec finds and
    import fails on: its blocks are skipped with the extra named, not run to a traceback."""
    import _run_blocks as runner

    pkg = tmp_path / "halfinstalled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import _missing_part\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    extras = {"half": ("halfinstalled", re.compile(r"\bhalfinstalled\b"))}
    monkeypatch.setattr(runner, "EXTRAS", extras)
    monkeypatch.setattr(runner, "BROKEN", {})
    assert runner.missing_extra("import halfinstalled\n") == "half"
    assert "_missing_part" in runner.BROKEN["half"]  # said where the block is skipped
    (pkg / "_missing_part.py").write_text("")
    monkeypatch.delitem(sys.modules, "halfinstalled", raising=False)
    importlib.invalidate_caches()
    assert runner.missing_extra("import halfinstalled\n") is None


def _env(tmp_path: Path, ray_tmp: str) -> dict[str, str]:
    """``tenfold`` on PATH (this interpreter's ``python -m tenfold``), the package importable."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "tenfold"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tenfold "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]])
    lib = str(Path(tenfold.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [lib, env.get("PYTHONPATH")]))
    # nothing from the machine's own AWS setup; the S3 stand-in sets what it needs
    for key in [k for k in env if k.startswith("AWS_")]:
        del env[key]
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "no-aws")
    env["HOME"] = str(tmp_path / "home")  # what tools keep in a home folder stays here
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["RAY_TMPDIR"] = ray_tmp  # a Ray cluster a block starts keeps its session files there
    env.pop("PYTHONWARNINGS", None)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("doc", docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_blocks_run(doc: Path, tmp_path: Path, totals: Any, capsys: pytest.CaptureFixture):
    rel = doc.relative_to(ROOT)
    assert not convention_errors(doc), convention_errors(doc)
    all_blocks = [b for b in blocks(doc) if b.lang in RUN]
    marked = [b for b in all_blocks if b.skip]
    todo = [b for b in all_blocks if not b.skip]
    notes = [f"line {b.line - 1}: {b.skip}" for b in marked]  # the fence's line
    ran, took = 0, ""
    if todo:
        work = tmp_path / "work"
        work.mkdir()
        (tmp_path / "home").mkdir()
        doc_in = {
            "file": str(doc),
            "blocks": [{"lang": RUN[b.lang], "line": b.line, "code": b.code} for b in todo],
        }
        t0 = time.monotonic()
        ray_tmp = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths must stay short
        try:
            proc = subprocess.run(
                [sys.executable, str(RUNNER)],
                input=json.dumps(doc_in),
                capture_output=True,
                text=True,
                cwd=work,
                env=_env(tmp_path, ray_tmp),
                timeout=TIMEOUT_S,
            )
        finally:
            shutil.rmtree(ray_tmp, ignore_errors=True)
        out = proc.stdout
        took = f" in {time.monotonic() - t0:.0f} s"
        if proc.returncode != 0:
            pytest.fail(f"{rel}: a block failed\n{out}\n{proc.stderr[-4000:]}", pytrace=False)
        ran = sum(1 for ln in out.splitlines() if ln.startswith("RAN "))
        notes += [ln[len("SKIPPED ") :] for ln in out.splitlines() if ln.startswith("SKIPPED ")]
        assert ran + len(notes) == len(all_blocks), out
    totals["ran"] += ran
    totals["skipped"] += len(notes)
    totals["files"] += 1
    if not all_blocks:
        return
    with capsys.disabled():
        print(f"\ndocs: {rel}: {ran} blocks run, {len(notes)} skipped{took}", end="")
        for note in notes:
            print(f"\n  skipped {note}", end="")
