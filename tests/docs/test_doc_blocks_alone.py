"""Blocks a reader copies on their own run on their own: their imports and the data they use
are in the block (test_doc_blocks runs every block in order, in one session, which hides a
block that leans on an earlier one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (file, a line that only the block meant has)
ALONE = [
    ("README.md", 'tenfold.save("llm.safetensors", tensors, max_shard_size="600KB")'),
    ("docs/sharded.md", "# tenfold.sharded.ShardedReader"),
]


def _python_block(path: Path, marker: str) -> str:
    lines = path.read_text(encoding="utf-8").split("\n")
    found, body, inside = [], [], False
    for line in lines:
        if not inside and line.strip() == "```python":
            inside, body = True, []
        elif inside and line.strip() == "```":
            inside = False
            if any(marker in b for b in body):
                found.append("\n".join(body))
        elif inside:
            body.append(line)
    assert len(found) == 1, f"{path}: {len(found)} python blocks hold {marker!r}"
    return found[0]


@pytest.mark.parametrize(("doc", "marker"), ALONE, ids=[d for d, _ in ALONE])
def test_block_runs_alone(doc, marker, tmp_path):
    code = _python_block(ROOT / doc, marker)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "lib"), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{doc}: the block fails alone:\n{proc.stderr[-2000:]}"
