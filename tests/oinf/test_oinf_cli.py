"""`tenfold verify / inspect` on OINF files."""

from __future__ import annotations

from _oinf_vectors import corrupt_path

from tenfold.cli import main


def test_cli_verify_valid_prints_summary(conformance, capsys):
    path = conformance / "oinf/v1/12_full_model.oinf"
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sizevar 'B'" in out and "B := 3" in out
    assert "metadata 'arch'" in out and "'mlp-v1'" in out
    assert "tensor 'a.weight'" in out and "f32[3, 5] 60 bytes min=" in out
    assert "nan=0 inf=0" in out and "std=" in out and "mean=" in out
    assert "no data (HAS_DATA=0)" in out
    assert out.rstrip().splitlines()[-1].startswith("OK")


def test_cli_verify_nonfinite_counts(conformance, capsys):
    path = conformance / "oinf/v1/91_valid_but_verifier_crashes_nonfinite.oinf"
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "nan=1" in out and "inf=2" in out


def test_cli_verify_corrupt_exits_1(conformance, capsys):
    assert main(["verify", str(corrupt_path(conformance, "v1", "c35"))]) == 1
    out = capsys.readouterr().out
    assert "[t2-code]" in out and "DAMAGED" in out


def test_cli_inspect(conformance, capsys):
    assert main(["inspect", str(conformance / "oinf/v1/08_tensors_packed.oinf")]) == 0
    out = capsys.readouterr().out
    assert "i4_9" in out and "bitpacked" in out
