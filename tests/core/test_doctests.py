"""The doctest examples in the public modules run and are right."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "tenfold.errors",
    "tenfold.core.bounds",
    "tenfold.core.records",
    "tenfold.core.checksums",
    "tenfold.core.cbor",
    "tenfold.core.mapped",
    "tenfold.core.atomic",
    "tenfold.core.dtypes",
    "tenfold.core.report",
    "tenfold.core.buffers", "tenfold.core.jsonio",
    "tenfold.ztensor",
    "tenfold.ztensor.reader",
    "tenfold.ztensor.writer",
    "tenfold.ztensor.sparse",
    "tenfold.core.reader",
    "tenfold.core.parallel",
    "tenfold.interop.safetensors_reader",
    "tenfold.interop.npz_reader",
    "tenfold.fold.reader",
    "tenfold.oinf",
    "tenfold.taridx.reader",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
