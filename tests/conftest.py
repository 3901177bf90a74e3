"""Common fixtures: the kernel ``impl`` switch, conformance vectors, Hypothesis profiles."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tenfold import _kernels

# pyfolds 1.0.2 (the FOLD peer) probes cryptography with importlib.util.find_spec when it is
# imported, which raises once cryptography's serialization module (its __spec__ is None) has
# been imported, as tenfold's WTXT code does. Import the peer first, while the probe works.
try:
    import pyfolds.serialization.foldio  # noqa: F401
except ImportError:  # not installed: its tests skip with a reason
    pass

settings.register_profile(
    "default",
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=150,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

#: The reference implementations' vectors, committed with the tests (see its README.md).
CONFORMANCE = Path(__file__).resolve().parent / "conformance"

#: Kernel implementations under test: both, unless TENFOLD_PUREPYTHON=1 removes the compiled one.
IMPLS = ["reference"] if _kernels.pure_python() else ["compiled", "reference"]


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest) -> str:
    """Runs a test once per kernel implementation ("compiled", "reference")."""
    return request.param


@pytest.fixture
def kernels(impl: str):
    """``kernels("scan")`` -> the kernel module of the current ``impl``."""
    return lambda family: _kernels.load(family, impl)


@pytest.fixture(scope="session")
def conformance() -> Path:
    """The conformance vectors in ``tests/conformance``, read in place (never modified)."""
    if not (CONFORMANCE / "README.md").is_file():
        raise RuntimeError(f"conformance vectors not found at {CONFORMANCE}")
    return CONFORMANCE


@pytest.fixture(scope="session", autouse=True)
def _suite_tempdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every ``tempfile`` directory of the run (the docs' ``tempfile.mkdtemp()`` examples,
    ``tenfold demo`` without a directory, subprocesses through ``TMPDIR``) goes into one
    directory under pytest's own base, removed when the session ends: the suite leaves nothing
    of its own in the system's temporary directory."""
    base = tmp_path_factory.getbasetemp()  # pytest's base stays where pytest puts it
    d = Path(tempfile.mkdtemp(prefix="tempfile-", dir=base))
    mp = pytest.MonkeyPatch()
    mp.setattr(tempfile, "tempdir", str(d))
    mp.setenv("TMPDIR", str(d))
    try:
        yield d
    finally:
        mp.undo()
        shutil.rmtree(d, ignore_errors=True)
