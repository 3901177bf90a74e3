"""Common fixtures: the kernel ``impl`` switch, conformance vectors, Hypothesis profiles."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import _errcheck
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


@pytest.fixture
def tempdir_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile`` (and ``TMPDIR`` for subprocesses) point at the test's ``tmp_path``.

    The docs' examples make directories with ``tempfile.mkdtemp()`` and leave them (that keeps
    the examples short); run under this fixture they land in pytest's directory, not in the
    system's temporary directory, where CI piled up thousands of ``tmpXXXX``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


# Every tenfold error names its format and object (issue #22): see tests/_errcheck.py.
_errcheck.install()


@pytest.fixture(autouse=True)
def _errors_name_format_and_object() -> Iterator[None]:
    """Fails the test (at teardown) if tenfold built an error without ``fmt`` and ``obj``."""
    _errcheck.take()
    yield
    found = _errcheck.take()
    if found:
        pytest.fail("tenfold errors without fmt/obj:\n  " + "\n  ".join(found), pytrace=False)
