"""A command with several inputs names the one whose read failed, and never another one."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
from tenfold.cli import main
from tenfold.errors import EncodeError, FormatError


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tenfold.save("good.wtxt", {"w": np.ones(300, np.float32)})
    tenfold.save("new.wtxt", {"w": np.full(300, 2, np.float32)})
    tenfold.save("good.zt", {"w": np.ones(300, np.float32)})
    for name in ("good.zt", "good.wtxt"):
        data = (tmp_path / name).read_bytes()
        (tmp_path / ("trunc" + name[4:])).write_bytes(data[: len(data) // 2])
    assert main(["delta", "good.wtxt", "new.wtxt", "d.wtxt"]) == 0
    return tmp_path


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("tenfold: error: ") and "\n" not in err, err
    return err[len("tenfold: error: ") :]


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (["apply", "good.wtxt", "trunc.zt", "o.wtxt"], "trunc.zt"),  # the delta
        (["apply", "trunc.wtxt", "d.wtxt", "o.wtxt"], "trunc.wtxt"),  # the base
        (["delta", "trunc.wtxt", "new.wtxt", "o.wtxt"], "trunc.wtxt"),  # the base
        (["delta", "good.wtxt", "trunc.zt", "o.wtxt"], "trunc.zt"),  # the new snapshot
        (["convert", "trunc.zt", "o.safetensors"], "trunc.zt"),
    ],
)
def test_the_input_at_fault_leads_the_message(files, capsys, argv, culprit):
    assert main(argv) == 1
    err = _error(capsys)
    assert err.startswith(f"{culprit}: "), err
    others = [a for a in argv[1:] if a != culprit]
    assert not any(o in err for o in others), err
    assert not (files / "o.wtxt").exists() and not (files / "o.safetensors").exists()


@pytest.mark.parametrize(
    ("delta", "says"),
    [("trunc.zt", "bad delta magic"), ("good.wtxt", "a WTXT snapshot, not a delta")],
)
def test_apply_names_a_file_that_is_no_delta_as_such(files, capsys, delta, says):
    # the raw bytes are checked before the line rules: it said "control byte 0x00 not allowed"
    # or "file ends inside a line" for a .zt, and nothing of a snapshot given as the delta
    assert main(["apply", "good.wtxt", delta, "o.wtxt"]) == 1
    err = _error(capsys)
    assert err.startswith(f"{delta}: wtxt: line 1 at offset 0x0: {says}"), err


def test_convert_does_not_blame_the_source_for_the_target(files, capsys):
    # a refusal of the target format is no fault of the (good) source
    tenfold.save("c.zt", {"c": np.array([1 + 2j])}, zt_generation=2)
    assert main(["convert", "c.zt", "o.npz"]) == 1
    err = _error(capsys)
    assert not err.startswith("c.zt"), err
    assert err.startswith("npz: "), err


def test_reading_notes_the_innermost_file():
    from tenfold.core.cli_support import failed_source, reading

    with pytest.raises(FormatError) as ei:
        with reading("outer.zt"):
            with reading("inner.zt"):
                raise FormatError("zt: header: bad")
    assert failed_source(ei.value) == "inner.zt"


def test_reading_leaves_out_what_it_is_told_to():
    from tenfold.core.cli_support import failed_source, reading

    with pytest.raises(EncodeError) as ei:
        with reading("src.zt", unless=(EncodeError,)):
            raise EncodeError("npz: array 'c': cannot hold complex64")
    assert failed_source(ei.value) is None


def test_a_bad_key_file_is_not_blamed_on_the_file_signed(files, capsys):
    (files / "bad.key").write_text("junk")
    assert main(["sign", "good.wtxt", "--key", "bad.key"]) == 1
    err = _error(capsys)
    assert "good.wtxt" not in err and "'bad.key'" in err, err
