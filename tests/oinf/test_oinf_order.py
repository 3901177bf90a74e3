"""OINF names come back in the file's order (#24), not sorted: a file whose tables are not
sorted (``write(..., sort=False)``, as openinfer-oinf writes renamed tensors) read through
every entry point, and converted OINF -> OINF."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tenfold
from tenfold import oinf
from tenfold.cli import main

NAMES = ["zeta", "alpha", "Mid", "beta"]  # file order, not sorted (nor sorted by case)
META = {"z_mode": "fast", "a_mode": "slow"}
SIZEVARS = {"Z": 1, "A": 2}


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "m.oinf"
    tensors = {n: np.full(3, i, np.float32) for i, n in enumerate(NAMES)}
    oinf.write(p, tensors=tensors, metadata=META, sizevars=SIZEVARS, sort=False)
    return p


def test_file_order_through_every_reader(path):
    assert NAMES != sorted(NAMES)
    with tenfold.open(path) as r:
        assert list(r.keys()) == NAMES and list(r) == NAMES
        assert list(r.metadata) == list(META) and list(r.sizevars) == list(SIZEVARS)
    assert list(tenfold.load(path)) == NAMES
    with tenfold.safe_open(path, framework="numpy") as f:
        # safetensors' API: keys() sorted, offset_keys() in the file's order (#23)
        assert list(f.offset_keys()) == NAMES and list(f.keys()) == sorted(NAMES)


def test_file_order_in_the_cli_listing(path, capsys):
    assert main(["inspect", str(path)]) == 0
    rows = capsys.readouterr().out.splitlines()[3:]
    assert [r.split()[0] for r in rows[: len(NAMES)]] == NAMES
    assert main(["inspect", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in doc["objects"]] == NAMES


def test_convert_oinf_to_oinf_keeps_the_file_order(path, tmp_path):
    out = tmp_path / "copy.oinf"
    assert main(["convert", "-q", str(path), str(out)]) == 0
    with tenfold.open(out) as r:
        assert list(r) == NAMES
        assert list(r.metadata) == list(META) and list(r.sizevars) == list(SIZEVARS)
    assert out.read_bytes() == path.read_bytes()  # the same tables, the same bytes


def test_convert_of_a_sorted_oinf_stays_sorted(tmp_path):
    src, out = tmp_path / "s.oinf", tmp_path / "c.oinf"
    tenfold.save(src, {n: np.zeros(2, np.float32) for n in NAMES})  # the writer sorts
    with tenfold.open(src) as r:
        assert list(r) == sorted(NAMES)
    assert main(["convert", "-q", str(src), str(out)]) == 0
    assert out.read_bytes() == src.read_bytes()
