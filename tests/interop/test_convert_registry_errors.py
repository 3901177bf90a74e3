"""``tenfold convert`` reads the registry when called, not when imported (a format registered
later is known to it), and its errors name their format and object (issue #22)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tenfold
import tenfold.convert
import tenfold.registry as reg
from tenfold.errors import EncodeError, UnsupportedError


# -- convert reads the registry when called ----------------------------------------------------
@pytest.fixture
def late_formats():
    """A non-tensor format and a target, registered after ``tenfold.convert`` was imported."""
    late = [
        reg.Format(name="latething", description="late things", suffixes=(".latething",),
                   tensors=False, holds="late things"),
        reg.Format(name="latetarget", description="late target", suffixes=(".latetarget",),
                   dtypes=frozenset({"float32"}), package="tenfold_test_no_such_package"),
    ]  # fmt: skip
    for f in late:
        reg.register(f)
    try:
        yield late
    finally:
        for f in late:
            reg.unregister(f.name)


def test_a_format_registered_after_import_is_known_to_convert(tmp_path, late_formats):
    # Before: convert took the tables of non-tensor formats and of targets when imported.
    assert "tenfold.convert" in sys.modules
    src = tmp_path / "a.zt"
    tenfold.save(src, {"x": np.arange(3.0)})
    with pytest.raises(UnsupportedError, match=r"\.latething is not a tensor format \(late"):
        tenfold.convert.convert(src, tmp_path / "b.latething")
    with pytest.raises(UnsupportedError, match="unknown suffix") as info:
        tenfold.convert.convert(src, tmp_path / "b.nothing")
    assert ".latetarget" in str(info.value) and ".zt" in str(info.value)


# -- errors name their format and object --------------------------------------------------------
def test_convert_errors_name_their_format_and_object(tmp_path):
    src = tmp_path / "a.zt"
    tenfold.save(src, {"x": np.arange(3.0)})
    with pytest.raises(UnsupportedError, match="unknown suffix; expected one of") as info:
        tenfold.convert.convert(src, tmp_path / "b.unknown")
    e = info.value
    assert (e.fmt, e.obj, e.field, e.got) == ("tenfold", str(tmp_path / "b.unknown"), "suffix",
                                              ".unknown")  # fmt: skip
    with pytest.raises(
        EncodeError, match="compress must be None, 'zstd', 'deflate' or 'keep'"
    ) as info:
        tenfold.convert.convert(src, tmp_path / "b.zt", compress="lz4")
    assert (info.value.fmt, info.value.obj, info.value.got) == ("convert", "compress", "lz4")
    with pytest.raises(UnsupportedError, match="not a tensor format") as info:
        tenfold.convert.convert(src, tmp_path / "b.taridx")
    assert (info.value.fmt, info.value.obj) == ("tenfold", str(tmp_path / "b.taridx"))


def test_a_source_refusal_names_the_target_and_the_source(tmp_path):
    from tenfold import fold

    src = tmp_path / "a.fold"
    with fold.Writer(src) as w:
        w.add_json("cfg", {"a": 1})
        w.add_state_dict("tensors", {"x": np.ones(2)})
        w.finalize()
    with pytest.raises(EncodeError, match="also holds chunk 'cfg' \\(JSON\\)") as info:
        tenfold.convert.convert(src, tmp_path / "b.zt")
    assert (info.value.fmt, info.value.obj) == ("ztensor", str(src))
