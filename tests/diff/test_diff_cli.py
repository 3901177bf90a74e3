"""``tenfold diff A B`` (issue 23): exit status 0 equal / 1 different / 2 usage or unreadable,
the table, ``--json`` against its schema, ``--atol/--rtol``, ``--no-metadata``, ``-q``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_diff import EXPECTED, A, B, _save, validate

import tenfold
from tenfold.cli import main
from tenfold.diff import SCHEMA


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture
def files(tmp_path):
    a = _save(tmp_path / "a.safetensors", A, {"step": "1"})
    b = _save(tmp_path / "b.v2.zt", B, {"step": "2"})
    same = _save(tmp_path / "c.fold", A, {"step": "1"})
    return a, b, same


def test_exit_status(files, capsys, tmp_path):
    a, b, same = files
    assert _run(capsys, "diff", a, same)[0] == 0
    assert _run(capsys, "diff", a, b)[0] == 1
    rc, out, err = _run(capsys, "diff", a, tmp_path / "missing.zt")
    assert (rc, out) == (2, "") and "missing.zt: no such file" in err
    rc, _, err = _run(capsys, "diff", a, tmp_path)
    assert rc == 2 and "is a directory" in err
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(a.read_bytes()[:40])  # cut inside the header
    rc, out, err = _run(capsys, "diff", a, damaged)
    assert rc == 2 and out == "" and err.count("\n") == 1  # one line, no traceback
    assert str(damaged) in err
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    assert _run(capsys, "diff", text, a)[0] == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["diff"],
        ["diff", "x.zt"],
        ["diff", "--atol", "-1", "a", "b"],
        ["diff", "--rtol", "nan", "a", "b"],
        ["diff", "--atol", "x", "a", "b"],
        ["diff", "--bogus", "a", "b"],
    ],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_the_table(files, capsys):
    a, b, same = files
    rc, out, err = _run(capsys, "diff", a, b)
    assert rc == 1 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"A: {a} (safetensors, {len(A)} tensors)"
    assert lines[1] == f"B: {b} (ztensor, {len(B)} tensors)"
    header = next(line for line in lines if line.startswith("name"))
    assert header.split()[:5] == ["name", "status", "dtype", "shape", "size"]
    rows = {line.split()[0]: line for line in lines[lines.index(header) + 2 :] if line}
    for name, status in EXPECTED.items():
        assert (name in rows) == (status != "identical"), name  # identical ones not listed
    assert "int32 -> int64" in rows["retyped"] and "(2, 3) -> (3, 2)" in rows["reshaped"]
    assert rows["moved"].split()[:5] == ["moved", "different", "float32", "(3,", "4)"]
    assert "48 B" in rows["moved"] and "0/1" in rows["moved"]  # size, NaN A/B
    assert "only in A: gone" in lines and "only in B: new" in lines
    assert "  step: '1' -> '2'" in lines
    assert lines[-1] == "DIFFERENT"
    assert "3 identical" in lines[-2] and "1 metadata key differs" in lines[-2]
    rc, out, _ = _run(capsys, "diff", "--all", a, b)
    assert all(any(line.startswith(name + " ") for line in out.splitlines()) for name in EXPECTED)
    rc, out, _ = _run(capsys, "diff", a, same)
    assert rc == 0 and out.splitlines()[-1] == "IDENTICAL" and "name" not in out


def test_tolerances_and_metadata(tmp_path, capsys):
    a = _save(tmp_path / "a.safetensors", {"w": np.ones(4, np.float32)}, {"step": "1"})
    b = _save(tmp_path / "b.npz", {"w": np.array([1, 1, 1, 1.001], np.float32)})
    assert _run(capsys, "diff", a, b)[0] == 1
    assert _run(capsys, "diff", "--no-metadata", a, b)[0] == 1
    rc, out, _ = _run(capsys, "diff", "--no-metadata", "--atol", "0.01", a, b)
    assert rc == 0 and out.splitlines()[-1] == "EQUAL within atol=0.01, rtol=0"
    assert _run(capsys, "diff", "--no-metadata", "--rtol", "1e-2", a, b)[0] == 0
    assert _run(capsys, "diff", "--no-metadata", "--rtol", "1e-5", a, b)[0] == 1
    assert _run(capsys, "diff", "--atol", "0.01", a, b)[0] == 1  # npz has no metadata


def test_json(files, capsys):
    a, b, same = files
    rc, out, err = _run(capsys, "diff", "--json", a, b)
    assert rc == 1 and err == ""
    doc = json.loads(out)
    validate(doc, SCHEMA)
    assert doc["exit_code"] == 1 and doc["equal"] is False
    assert {t["name"]: t["status"] for t in doc["tensors"]} == EXPECTED  # every tensor
    assert doc["only_in_a"] == ["gone"] and doc["only_in_b"] == ["new"]
    assert doc["metadata"] == [{"key": "step", "status": "changed", "a": "1", "b": "2"}]
    assert doc["a"] == {"path": str(a), "format": "safetensors", "tensors": len(A)}
    assert doc == json.loads(json.dumps(tenfold.diff(a, b).to_json(), indent=1))
    rc, out, _ = _run(capsys, "diff", "--json", "--no-metadata", "--rtol", "0.5", a, same)
    doc = json.loads(out)
    validate(doc, SCHEMA)
    assert (rc, doc["identical"], doc["metadata"], doc["rtol"], doc["atol"]) == (
        0,
        True,
        None,
        0.5,
        0.0,
    )
    assert doc["summary"]["metadata"] is None


def test_quiet(files, capsys):
    a, b, same = files
    assert _run(capsys, "diff", "-q", a, b) == (1, "", "")
    assert _run(capsys, "diff", "-q", a, same) == (0, "", "")


def test_help_documents_the_schema(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diff", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for word in ("tenfold.diff/1", "exit status", "only_in_a", "max_abs", "cosine", "--atol"):
        assert word in text, word
    for key in SCHEMA["properties"]["tensors"]["items"]["properties"]:
        assert key in text, key  # every field of a tensor row is described


def test_a_damaged_tensor_names_its_file(tmp_path, capsys):
    """A checksum mismatch found while reading a tensor (after both files opened) stops the
    comparison with one line naming the file: exit 2, not 1 ("different")."""
    w = np.arange(1024, dtype=np.float32)
    a = _save(tmp_path / "a.zt", {"w": w})
    b = tmp_path / "b.zt"
    data = bytearray(a.read_bytes())
    at = data.find(w.tobytes())
    assert at > 0
    data[at + 100] ^= 0xFF
    b.write_bytes(bytes(data))
    with tenfold.open(b) as r:  # it opens: the damage is in the tensor's bytes
        assert list(r) == ["w"]
    rc, out, err = _run(capsys, "diff", a, b)
    assert (rc, out) == (2, "") and err.count("\n") == 1
    assert str(b) in err and "checksum" in err.lower()
    with pytest.raises(tenfold.IntegrityError) as exc:
        tenfold.diff(a, b)
    from tenfold.diff import failed_source

    assert failed_source(exc.value) == str(b)


def test_a_taridx_diff_calls_its_entries_samples(capsys, conformance, files):
    # Before: the header and summary called a TARIDX index's samples "tensors"; the format's
    # descriptor now names its entries (Format.items)
    d = conformance / "taridx" / "basic_ustar"
    rc, out, _ = _run(capsys, "diff", d / "train.taridx", d / "val.taridx")
    assert rc == 1
    assert "(taridx, 10 samples)" in out and "(taridx, 3 samples)" in out
    assert "0 samples in both" in out and "tensors" not in out
    rc, out, _ = _run(capsys, "diff", d / "train.taridx", d / "train.taridx")
    assert rc == 0 and "10 samples in both: 10 identical" in out
    a, _, same = files
    rc, out, _ = _run(capsys, "diff", a, same)
    assert rc == 0 and "tensors)" in out and "tensors in both" in out


def test_one_tensor_is_singular(tmp_path, capsys):
    """Counts of one read "1 tensor" in the header and the summary (before: "1 tensors")."""
    a = _save(tmp_path / "a.safetensors", {"w": np.ones(3, np.float32)})
    b = _save(tmp_path / "b.zt", {"w": np.zeros(3, np.float32), "x": np.ones(1, np.float32)})
    rc, out, _ = _run(capsys, "diff", a, b)
    assert rc == 1 and "(safetensors, 1 tensor)" in out and "(ztensor, 2 tensors)" in out
    assert "1 tensor in both: 0 identical, 1 different; 1 only in B" in out
    assert "1 tensors" not in out
    from tenfold.core.cli_support import count as _count

    assert [_count(1, "entries"), _count(1, "samples"), _count(0, "tensors")] == [
        "1 entry",
        "1 sample",
        "0 tensors",
    ]
