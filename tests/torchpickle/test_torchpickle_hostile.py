"""Hostile pickles, written by hand (no torch needed): every global outside the state-dict
set, every opcode that builds objects or reaches outside the pickle, recursion and sharing
bombs, huge memo indices and lengths, truncation. Each is refused with a tenfold error naming
what and where, and nothing the pickle names is ever run (a payload that would create a file
leaves none)."""

from __future__ import annotations

import os
import pickle
import struct
import sys
import zipfile

import pytest
from _tp_build import (
    EMPTY_DICT,
    EMPTY_LIST,
    EMPTY_TUPLE,
    MARK,
    PROTO2,
    REDUCE,
    SETITEMS,
    STOP,
    TUPLE,
    glob,
    odict,
    stack_glob,
    state_dict,
    tensor,
    text,
    write_zip,
)  # fmt: skip

import tenfold
import tenfold.convert
from tenfold.cli import main as cli
from tenfold.errors import FormatError, LimitError, TenfoldError, TruncatedError, UnsupportedError
from tenfold.formats.torchpickle import _pickle, reader
from tenfold.formats.torchpickle._pickle import Unpickler

F32 = struct.pack("<4f", 1, 2, 3, 4)


def _data_offset(path) -> int:
    with zipfile.ZipFile(path) as z:
        zi = z.infolist()[0]
    raw = path.read_bytes()
    n, e = struct.unpack("<HH", raw[zi.header_offset + 26 : zi.header_offset + 30])
    return zi.header_offset + 30 + n + e


def _open(tmp_path, pkl, storages=None):
    p = write_zip(tmp_path / "hostile.pt", pkl, storages)
    return p, tenfold.open(p)


def _payloads(marker: str) -> dict[str, bytes]:
    """Pickles that create ``marker`` when Python's pickle loads them, each hidden among
    real tensors of a state dict."""
    shell = f"touch {marker}"
    calls = {
        "builtins.open": glob("builtins", "open") + MARK + text(marker) + text("w") + TUPLE,
        "os.system": glob("os", "system") + MARK + text(shell) + TUPLE,
        "posix.system": glob("posix", "system") + MARK + text(shell) + TUPLE,
        "builtins.eval": glob("builtins", "eval")
        + MARK + text(f"open({marker!r}, 'w')") + TUPLE,
        "builtins.exec": stack_glob("builtins", "exec")
        + MARK + text(f"open({marker!r}, 'w').close()") + TUPLE,
        "subprocess.Popen": stack_glob("subprocess", "Popen")
        + MARK + EMPTY_LIST + MARK + text("touch") + text(marker) + b"e" + TUPLE,
    }  # fmt: skip
    out = {}
    for name, call in calls.items():
        out[name] = state_dict(
            {
                "w": tensor("0", 4, 0, (4,), (1,)),
                "evil": call + REDUCE,
                "b": tensor("0", 4, 1, (3,), (1,)),
            }
        )
    return out


MARKER_NAMES = list(_payloads("x"))


@pytest.mark.parametrize("name", MARKER_NAMES)
def test_a_global_that_would_run_code_is_refused_by_name_and_never_run(tmp_path, name):
    marker = tmp_path / "pwned"
    pkl = _payloads(str(marker))[name]
    p = write_zip(tmp_path / "evil.pt", pkl, {"0": F32})
    with pytest.raises(UnsupportedError) as e:
        tenfold.open(p)
    assert f"global {name} refused" in str(e.value)
    assert e.value.got == name
    # the offset is the file offset of the opcode that names the global
    at = pkl.index(b"c" + name.replace(".", "\n").encode() + b"\n") if b"\x93" not in pkl else None
    if at is not None:
        assert e.value.offset == _data_offset(p) + at
    assert not marker.exists()
    with pytest.raises(UnsupportedError):
        tenfold.load(p)
    assert cli(["inspect", str(p)]) != 0 and cli(["verify", str(p)]) != 0
    assert not marker.exists()


def test_the_payloads_are_live(tmp_path):
    # the control: Python's own pickle does run them (so the test above can fail)
    marker = tmp_path / "pwned"
    pkl = _payloads(str(marker))["builtins.open"]

    class Tensors(pickle.Unpickler):
        def find_class(self, module, name):
            if module.startswith("torch") or module == "collections":
                return lambda *a, **k: None
            return super().find_class(module, name)

        def persistent_load(self, pid):
            return None

    import io

    Tensors(io.BytesIO(pkl)).load()["evil"].close()
    assert marker.exists()


def test_a_whole_model_object_is_refused_by_its_class_name(tmp_path):
    pkl = (PROTO2 + glob("torch.nn.modules.linear", "Linear") + EMPTY_TUPLE
           + glob("copyreg", "__newobj__") + b"." )  # fmt: skip
    with pytest.raises(UnsupportedError, match=r"torch\.nn\.modules\.linear\.Linear refused"):
        _open(tmp_path, pkl)


@pytest.mark.parametrize(
    "module, name",
    [("numpy.core.multiarray", "_reconstruct"), ("torch._tensor", "_rebuild_from_type_v2"),
     ("torch", "load"), ("torch.serialization", "load"), ("builtins", "getattr"),
     ("torch._utils", "_rebuild_qtensor"), ("torch", "QInt8Storage"), ("__main__", "Evil")],
)  # fmt: skip
def test_other_globals_are_refused_by_name(tmp_path, module, name):
    pkl = state_dict({"x": glob(module, name) + EMPTY_TUPLE + REDUCE})
    with pytest.raises(UnsupportedError, match=f"global {module}.{name} refused"):
        _open(tmp_path, pkl)


def _raw(body: bytes) -> bytes:
    return PROTO2 + body + STOP


REFUSED_OPCODES = {
    "INST": MARK + text("touch x") + b"ios\nsystem\n",
    "OBJ": MARK + glob("collections", "OrderedDict") + b"o",
    "NEWOBJ": glob("collections", "OrderedDict") + EMPTY_TUPLE + b"\x81",
    "NEWOBJ_EX": glob("collections", "OrderedDict") + EMPTY_TUPLE + EMPTY_DICT + b"\x92",
    "EXT1": b"\x82\x01",
    "EXT2": b"\x83\x01\x00",
    "EXT4": b"\x84\x01\x00\x00\x00",
    "PERSID": b"Pstorage\n",
    "NEXT_BUFFER": b"\x97",
    "READONLY_BUFFER": b"N\x98",
    "INT": b"I1\n",
    "LONG": b"L1L\n",
    "FLOAT": b"F1.0\n",
    "STRING": b"S'a'\n",
    "BINSTRING": b"T\x01\x00\x00\x00a",
    "SHORT_BINSTRING": b"U\x01a",
    "UNICODE": b"Va\n",
    "GET": b"g0\n",
    "PUT": b"Np0\n",
}


@pytest.mark.parametrize("name", list(REFUSED_OPCODES))
def test_dangerous_and_text_opcodes_are_refused(tmp_path, name):
    pkl = _raw(REFUSED_OPCODES[name])
    with pytest.raises(UnsupportedError, match=f"opcode {name} refused") as e:
        _open(tmp_path, pkl)
    assert e.value.offset is not None


@pytest.mark.parametrize(
    "body, cls, words",
    [
        (EMPTY_LIST + EMPTY_DICT + b"b", UnsupportedError, "BUILD on a list refused"),
        (odict() + EMPTY_LIST + b"b", UnsupportedError, "BUILD on a ODict refused"),
        (glob("torch", "FloatStorage") + EMPTY_TUPLE + REDUCE, UnsupportedError,
         "torch.FloatStorage is not callable"),
        (glob("_codecs", "encode") + MARK + text("x") + text("rot13") + TUPLE + REDUCE,
         UnsupportedError, "_codecs.encode other than"),
        (glob("collections", "OrderedDict") + MARK + EMPTY_LIST + TUPLE + REDUCE, FormatError,
         "OrderedDict with arguments"),
        (text("x") + EMPTY_TUPLE + REDUCE, FormatError, "REDUCE of a str"),
        (b"\x80\x06", UnsupportedError, "pickle protocol 6"),
        (b"\xff", FormatError, "unknown opcode 0xff"),
        (b"a", FormatError, "stack underflow"),
        (b"h\x05", FormatError, "memo entry 5 was never stored"),
        (b"N" + MARK, FormatError, "unbalanced stack"),
        (b"NN", FormatError, "unbalanced stack"),
        (EMPTY_DICT + MARK + EMPTY_LIST + b"N" + SETITEMS, UnsupportedError,
         "dict key of type list refused"),
        (EMPTY_DICT + MARK + text("k") + SETITEMS, FormatError, "odd number"),
        (b"\x8a\x40" + b"\x01" * 64, LimitError, "integer too long"),
        (b"\x8b\x00\x00\x00\x80", LimitError, "integer too long"),
        (MARK + text("storage") + text("x") + text("0") + text("cpu") + b"K\x01" + TUPLE + b"Q",
         UnsupportedError, "persistent id refused"),
        (b"X\x02\x00\x00\x00\xff\xfe", FormatError, "not UTF-8"),
    ],
)  # fmt: skip
def test_malformed_and_misused_opcodes(tmp_path, body, cls, words):
    with pytest.raises(cls, match=words.replace(".", r"\.").replace("(", r"\(")):
        _open(tmp_path, _raw(body))


def test_a_tensor_rebuilt_over_something_else_is_refused(tmp_path):
    fake = glob("torch._utils", "_rebuild_tensor_v2") + MARK + EMPTY_LIST + b"K\x00"
    fake += MARK + b"K\x02" + TUPLE + MARK + b"K\x01" + TUPLE + b"\x89" + odict() + TUPLE + REDUCE
    with pytest.raises(FormatError, match="its storage is a list"):
        _open(tmp_path, state_dict({"x": fake}))
    hooks = tensor("0", 4, 0, (4,), (1,)).replace(
        odict(), glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE
        + MARK + b"K\x01" + text("hook") + b"u"
    )  # fmt: skip
    with pytest.raises(UnsupportedError, match="backward hooks refused"):
        _open(tmp_path, state_dict({"x": hooks}), {"0": F32})


def test_nothing_is_imported_for_a_named_module(tmp_path):
    name = "tenfold_torchpickle_never_imported"
    assert name not in sys.modules
    with pytest.raises(UnsupportedError):
        _open(tmp_path, state_dict({"x": glob(name, "f") + EMPTY_TUPLE + REDUCE}))
    assert name not in sys.modules


# -- bounds ---------------------------------------------------------------------------------
def test_marks_nested_too_deeply(tmp_path):
    with pytest.raises(LimitError, match="MARKs nested too deeply"):
        _open(tmp_path, _raw(MARK * (_pickle.MAX_MARKS + 1)))


def test_a_deep_list_is_refused_without_recursion(tmp_path):
    depth = 20000
    pkl = _raw(EMPTY_LIST * depth + b"a" * (depth - 1))
    with pytest.raises(LimitError, match="nesting"):
        _open(tmp_path, pkl)


def test_a_deep_tuple_key_is_refused(tmp_path):
    key = EMPTY_TUPLE + b"\x85" * 50  # ((((),),),) ...
    with pytest.raises(UnsupportedError, match="dict key of type tuple"):
        _open(tmp_path, _raw(EMPTY_DICT + key + b"N" + b"s"))


@pytest.mark.parametrize("with_tensor", [False, True])
def test_shared_lists_that_unfold_exponentially_are_refused(tmp_path, with_tensor):
    leaf = tensor("0", 4, 0, (4,), (1,)) if with_tensor else b"K\x07"
    body = EMPTY_LIST + MARK + leaf + b"e" + b"q\x00"
    for i in range(1, 60):  # L_i = [L_{i-1}, L_{i-1}]: 2**60 leaves, 60 lists
        body += b"0" + EMPTY_LIST + MARK + b"h" + bytes([i - 1]) * 1 + b"h" + bytes([i - 1])
        body += b"e" + b"q" + bytes([i])
    pkl = PROTO2 + body + STOP
    with pytest.raises(LimitError, match="shared parts unfold"):
        _open(tmp_path, pkl, {"0": F32})


@pytest.mark.parametrize(
    "body",
    [EMPTY_LIST + b"q\x00" + b"h\x00" + b"a",  # a list that holds itself
     EMPTY_DICT + b"q\x00" + text("me") + b"h\x00" + b"s",  # a dict that holds itself
     EMPTY_LIST + b"q\x00" + MARK + b"h\x00" + TUPLE + b"a"],  # list -> tuple -> list
)  # fmt: skip
def test_cycles_are_refused(tmp_path, body):
    with pytest.raises(FormatError, match="contains itself"):
        _open(tmp_path, _raw(body))


def test_huge_memo_indices_allocate_nothing():
    u = Unpickler(_raw(b"N" + b"r\xff\xff\xff\xff" + b"0" + b"j\xff\xff\xff\xff"))
    assert u.load()[0] is None and list(u.memo) == [2**32 - 1]


def test_the_opcode_count_is_bounded(monkeypatch):
    monkeypatch.setattr(_pickle, "MAX_OPS", 1000)
    with pytest.raises(LimitError, match="too many opcodes"):
        Unpickler(_raw(b"N0" * 600)).load()


@pytest.mark.parametrize(
    "body",
    [b"X\xff\xff\xff\xff", b"\x8d" + b"\xff" * 8, b"\x8e" + b"\xff" * 8, b"B\xff\xff\xff\x7f",
     b"\x96" + b"\x00" * 7 + b"\x80", b"\x95" + b"\xff" * 8, b"\x8c\x10abc",
     b"cmodule_without_newline"],
)  # fmt: skip
def test_lengths_past_the_pickle_are_truncation_not_allocation(body):
    with pytest.raises(TruncatedError):
        Unpickler(PROTO2 + body).load()


def test_every_prefix_of_a_real_pickle_is_refused_cleanly(tmp_path):
    import numpy as np

    from tenfold.formats.torchpickle._demo import pickle_of

    pkl, _ = pickle_of({"a": np.zeros((2, 3), np.float32), "b": [1, 2.5, "x", None, (True,)]})
    for n in range(len(pkl)):
        with pytest.raises(TruncatedError):
            Unpickler(pkl[:n]).load()
    assert Unpickler(pkl).load()[1] == len(pkl)


def test_a_refused_file_raises_tenfold_errors_from_every_entry_point(tmp_path):
    p = write_zip(tmp_path / "evil.bin", _payloads(str(tmp_path / "m"))["os.system"], {"0": F32})
    for op in (tenfold.open, tenfold.load, lambda x: tenfold.convert.convert(x, tmp_path / "o.zt"),
               lambda x: tenfold.safe_open(x, "np")):  # fmt: skip
        with pytest.raises(TenfoldError):
            op(p)
    assert not reader.verify(p).ok
    assert os.listdir(tmp_path) == ["evil.bin"]  # nothing made, nothing left behind
