"""tenfold as a drop-in for safetensors (issue #23): the behaviours safetensors' own API has,
run through ``tenfold.numpy``, ``tenfold.torch`` and ``tenfold.safe_open`` and through the real
``safetensors`` package on the same inputs. Each comparison wants the same result, or an
exception of a class the safetensors user's ``except`` catches (``safetensors.SafetensorError``
-> ``tenfold.SafetensorError``, a builtin class -> the same builtin class).

The remaining differences are listed in docs/frameworks.md ("Switching from safetensors"); the
tests at the end pin each one, so a change in either library shows up here.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

safetensors = pytest.importorskip(
    "safetensors", reason="the safetensors package (the reference) is not installed"
)
import safetensors.numpy as snp  # noqa: E402
from safetensors import SafetensorError as TheirError  # noqa: E402

import tenfold  # noqa: E402
import tenfold.numpy as tnp  # noqa: E402
import tenfold.torch  # noqa: E402
from tenfold import SafetensorError  # noqa: E402
from tenfold.errors import (  # noqa: E402
    ClosedError,
    EncodeError,
    MissingTensorError,
    SliceError,
    TenfoldError,
)

try:
    import safetensors.torch as stt
    import torch
except ImportError:  # the NumPy comparisons still run; the torch ones skip with the reason
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None, reason="PyTorch is not installed (extra: tenfold[torch])"
)


# -- the comparison --------------------------------------------------------------------------
def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - what was raised is the result compared
        return "raise", exc


def _plain(x: Any, flags: bool = True) -> Any:
    """``x`` as comparable values: arrays and tensors as (kind, dtype, shape, bytes, writable
    when ``flags``), dicts as their items in order."""
    if isinstance(x, dict):
        return [(k, _plain(v, flags)) for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v, flags) for v in x)
    if isinstance(x, np.ndarray):
        return ("np", str(x.dtype), x.shape, x.tobytes(), x.flags.writeable if flags else None)
    if torch is not None and isinstance(x, torch.Tensor):
        raw = x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return ("pt", str(x.dtype), tuple(x.shape), raw)
    return x


def caught_alike(ours: BaseException, theirs: BaseException) -> bool:
    """Whether the ``except`` clause that catches ``theirs`` catches ``ours``."""
    if isinstance(theirs, TheirError):
        return isinstance(ours, SafetensorError)
    return isinstance(ours, type(theirs))


def same(ours: Any, theirs: Any, ordered: bool = True, flags: bool = True) -> Any:
    """Run both; the same result (see :func:`_plain`; a dict's order too when ``ordered``,
    NumPy's writeable flag when ``flags``) or alike exceptions. Returns ours."""
    got, want = _outcome(ours), _outcome(theirs)
    if want[0] == "raise":
        assert got[0] == "raise", f"safetensors raised {want[1]!r}; tenfold gave {got[1]!r}"
        assert caught_alike(got[1], want[1]), (got[1], want[1])
        return got[1]
    if got[0] == "raise":
        raise AssertionError(f"safetensors gave a result; tenfold raised {got[1]!r}")
    if ordered:
        assert _plain(got[1], flags) == _plain(want[1], flags)
    else:
        assert sorted(_plain(got[1], flags)) == sorted(_plain(want[1], flags))
    return got[1]


# -- inputs -------------------------------------------------------------------------------------
def _np_cases() -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(23)
    every = {
        f"t_{dt}": (rng.standard_normal(6) * 50).astype(dt)
        for dt in ("f8", "f4", "f2", "i8", "i4", "i2", "i1", "u8", "u4", "u2", "u1", "c8")
    }
    every["t_bool"] = rng.standard_normal(6) > 0
    return {
        "basic": {"w": rng.standard_normal((3, 4)).astype(np.float32), "ids": np.arange(5)},
        "every_dtype": every,
        "scalar": {"s": np.array(3.5)},
        "empty_dict": {},
        "zero_size": {"z": np.zeros((0, 3), np.float32), "y": np.zeros((2, 0), np.int8)},
        "big_endian": {"a": np.arange(4, dtype=">f4"), "b": np.arange(3, dtype=">i8")},
        "unicode": {"ä/ß.weight": np.ones(2, np.float32), "z": np.ones(1, np.int8)},
        "offset_order": {"a": np.ones(3, np.int8), "b": np.ones(2, np.float64),
                         "c": np.ones((0, 3), np.float32), "d": np.arange(10, dtype=np.int16)},
    }  # fmt: skip


NP = _np_cases()
META = {"none": None, "one": {"format": "np"}}


def _st_file(tmp_path, tensors, metadata=None, name="m.safetensors") -> str:
    """A file written by the safetensors package."""
    p = str(tmp_path / name)
    snp.save_file(tensors, p, metadata=metadata)
    return p


# -- tenfold.numpy against safetensors.numpy ------------------------------------------------------
@pytest.mark.parametrize("md", list(META))
@pytest.mark.parametrize("case", list(NP))
def test_numpy_save_gives_the_same_bytes(case, md):
    same(lambda: tnp.save(NP[case], META[md]), lambda: snp.save(NP[case], META[md]))


@pytest.mark.parametrize("case", list(NP))
def test_numpy_save_file_writes_the_same_file(tmp_path, case):
    ours, theirs = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    same(lambda: tnp.save_file(NP[case], ours), lambda: snp.save_file(NP[case], theirs))
    assert ours.read_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("case", list(NP))
def test_numpy_load_gives_the_same_writable_arrays(case):
    data = snp.save(NP[case])
    # safetensors' load(bytes) gives its names in hash order (it varies); tenfold's in the
    # file's order
    same(lambda: tnp.load(data), lambda: snp.load(data), ordered=False)


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("case", list(NP))
def test_numpy_load_file_gives_the_same_writable_arrays(tmp_path, case, backend):
    p = _st_file(tmp_path, NP[case])
    # empty tensors at one offset come in hash order from safetensors (it varies); tenfold
    # keeps the header's order for them
    same(lambda: tnp.load_file(p, backend=backend), lambda: snp.load_file(p, backend=backend),
         ordered=case != "zero_size")  # fmt: skip


def _header(text: bytes) -> bytes:
    return len(text).to_bytes(8, "little") + text


GOOD = snp.save({"a": np.ones(3, np.int8), "b": np.ones(2, np.float64)})
BAD_BYTES = {
    "empty": b"",
    "shorter_than_the_length": b"12",
    "zeros": b"\0" * 16,
    "bad_json": _header(b"{abc}"),
    "not_an_object": _header(b"[]      "),
    "length_past_the_end": (1 << 20).to_bytes(8, "little") + b"{}",
    "truncated_data": GOOD[:-1],
    "trailing_byte": GOOD + b"\0",
    "offsets_reversed": _header(b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}}  ') + b"xx",
    "shape_and_size_disagree": _header(b'{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,2]}}')
    + b"xx",
    "unknown_dtype": _header(b'{"a":{"dtype":"X9","shape":[2],"data_offsets":[0,2]}}') + b"xx",
    "gap_between_tensors": _header(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}'
    )
    + b"xxx",
}


@pytest.mark.parametrize("case", list(BAD_BYTES))
def test_numpy_load_of_malformed_bytes_is_a_safetensor_error(case):
    exc = same(lambda: tnp.load(BAD_BYTES[case]), lambda: snp.load(BAD_BYTES[case]))
    assert isinstance(exc, SafetensorError) and isinstance(exc, TenfoldError)


@pytest.mark.parametrize("case", list(BAD_BYTES))
def test_safe_open_of_a_malformed_file_is_a_safetensor_error(tmp_path, case):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(BAD_BYTES[case])
    same(lambda: tenfold.safe_open(p, "np"), lambda: safetensors.safe_open(str(p), "np"))


def test_numpy_load_of_a_path_is_a_type_error(tmp_path):
    p = _st_file(tmp_path, NP["basic"])
    same(lambda: tnp.load(p), lambda: snp.load(p))


@pytest.mark.parametrize("dtype", [object, np.complex128, np.float128])
def test_numpy_save_of_a_dtype_safetensors_has_not(dtype):
    x = {"a": np.array([1, 2], dtype=dtype)}
    exc = same(lambda: tnp.save(x), lambda: snp.save(x))
    assert isinstance(exc, EncodeError) and "'a'" in str(exc)


def test_a_missing_file_is_file_not_found(tmp_path):
    p = str(tmp_path / "nope.safetensors")
    same(lambda: tnp.load_file(p), lambda: snp.load_file(p))
    same(lambda: tenfold.safe_open(p, "np"), lambda: safetensors.safe_open(p, "np"))


def test_bf16_and_fp8_load_as_ml_dtypes_where_safetensors_numpy_cannot(tmp_path):
    x = {"h": np.arange(4).astype(ml_dtypes.bfloat16), "f": np.ones(3, ml_dtypes.float8_e4m3fn)}
    p = _st_file(tmp_path, x)  # safetensors writes them...
    for load in (lambda: snp.load_file(p), lambda: snp.load(snp.save(x))):
        with pytest.raises((KeyError, AttributeError)):  # ...but its numpy loader cannot read
            load()
    for got in (tnp.load_file(p), tnp.load(tnp.save(x))):
        assert {k: (v.dtype, v.tobytes(), v.flags.writeable) for k, v in got.items()} == {
            k: (v.dtype, v.tobytes(), True) for k, v in x.items()
        }


# -- safe_open --------------------------------------------------------------------------------
FRAMEWORKS = ["np", "pt"]


def _fw(fw: str) -> None:
    if fw == "pt" and torch is None:
        pytest.skip("PyTorch is not installed (extra: tenfold[torch])")


@pytest.mark.parametrize("md", list(META))
@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize(
    "what",
    ["keys", "offset_keys", "metadata", "get_tensors", "get_tensor", "get_slice_shape_dtype"],
)
def test_safe_open_answers_as_safetensors(tmp_path, fw, what, md):
    _fw(fw)
    p = _st_file(tmp_path, NP["offset_order"], META[md])

    def ask(f):
        if what == "get_tensor":
            return {n: f.get_tensor(n) for n in ("d", "a", "c")}
        if what == "get_slice_shape_dtype":
            return [(f.get_slice(n).get_shape(), f.get_slice(n).get_dtype()) for n in "abcd"]
        return getattr(f, what)()

    def run(open_):
        with open_(p, framework=fw) as f:
            return ask(f)

    # safe_open(framework="np") gives read-only views of the map (a difference, pinned below)
    same(lambda: run(tenfold.safe_open), lambda: run(safetensors.safe_open), flags=False)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("method", ["get_tensor", "get_slice"])
def test_a_missing_name_is_a_safetensor_error(tmp_path, fw, method):
    _fw(fw)
    p = _st_file(tmp_path, NP["basic"])
    with tenfold.safe_open(p, fw) as ours, safetensors.safe_open(p, fw) as theirs:
        exc = same(lambda: getattr(ours, method)("nope"), lambda: getattr(theirs, method)("nope"))
    assert isinstance(exc, MissingTensorError) and isinstance(exc, KeyError)
    assert "'nope'" in str(exc)


CLOSED_CALLS = {
    "keys": lambda f: f.keys(),
    "offset_keys": lambda f: f.offset_keys(),
    "metadata": lambda f: f.metadata(),
    "get_tensors": lambda f: f.get_tensors(),
    "get_tensor": lambda f: f.get_tensor("w"),
    "get_slice": lambda f: f.get_slice("w"),
}


@pytest.mark.parametrize("call", list(CLOSED_CALLS))
def test_a_handle_used_after_its_with_block_raises(tmp_path, call):
    p = _st_file(tmp_path, NP["basic"], {"k": "v"})
    with tenfold.safe_open(p, "np") as ours, safetensors.safe_open(p, "np") as theirs:
        pass
    exc = same(lambda: CLOSED_CALLS[call](ours), lambda: CLOSED_CALLS[call](theirs))
    assert isinstance(exc, ClosedError)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_backends_give_the_same_tensors(tmp_path, fw):
    _fw(fw)
    p = _st_file(tmp_path, NP["offset_order"])
    for backend in ("mmap", "pread"):

        def run(open_, backend=backend):
            with open_(p, framework=fw, backend=backend) as f:
                return f.get_tensors()

        same(lambda: run(tenfold.safe_open), lambda: run(safetensors.safe_open), flags=False)


@pytest.mark.parametrize("bad", [{"backend": "bogus"}, {"framework": "bogus"}])
def test_an_unknown_backend_or_framework_is_a_safetensor_error(tmp_path, bad):
    p = _st_file(tmp_path, NP["basic"])
    kw = {"framework": "np", **bad}
    same(lambda: tenfold.safe_open(p, **kw), lambda: safetensors.safe_open(p, **kw))


# Indexes of a (10, 3) tensor: where Python and safetensors agree, and where safetensors'
# rules differ from Python's (bounds outside the axis, steps below 1, lists). safetensors
# slices NumPy arrays by its own rules and PyTorch tensors by torch's (bounds clipped).
INDEXES = {
    "[:20]": np.s_[:20],
    "[:11]": np.s_[:11],
    "[:10]": np.s_[:10],
    "[10:]": np.s_[10:],
    "[9:]": np.s_[9:],
    "[4:4]": np.s_[4:4],
    "[0:0]": np.s_[0:0],
    "[:0]": np.s_[:0],
    "[2:2]": np.s_[2:2],
    "[0:10:20]": np.s_[0:10:20],
    "[8:20:5]": np.s_[8:20:5],
    "[::2]": np.s_[::2],
    "[1::3]": np.s_[1::3],
    "[2**40:]": np.s_[2**40 :],
    "[::-1]": np.s_[::-1],
    "[::0]": np.s_[::0],
    "[10]": 10,
    "[-1]": -1,
    "[-10]": -10,
    "[-11]": -11,
    "[np.int64(3)]": np.int64(3),
    "[1, 2]": np.s_[1, 2],
    "[1, 2, 0]": np.s_[1, 2, 0],
    "[:, :, :]": np.s_[:, :, :],
    "[..., 1]": np.s_[..., 1],
    "[1, ...]": np.s_[1, ...],
    "[...]": Ellipsis,
    "[()]": (),
    "[:, 0:3]": np.s_[:, 0:3],
    "[:, 0:4]": np.s_[:, 0:4],
    "[[]]": [],
    "[[0]]": [0],
    "[[1, 2]]": [1, 2],
    "[([],)]": ([],),
    "[1.0]": 1.0,
    "[None]": None,
    "['a']": "a",
}


#: advanced indexes torch takes on the whole tensor safetensors builds; tenfold reads lazily
#: and takes basic indexes only (pinned by test_difference_pytorch_advanced_indexes)
PT_ADVANCED = {"[[0]]", "[[1, 2]]", "[([],)]", "[None]", "['a']"}


@pytest.mark.parametrize(
    "fw, index",
    [("np", i) for i in INDEXES] + [("pt", i) for i in INDEXES if i not in PT_ADVANCED],
)
def test_slices_follow_safetensors_rules(tmp_path, fw, index):
    _fw(fw)
    p = _st_file(tmp_path, {"x": np.arange(30, dtype=np.float32).reshape(10, 3)})
    with tenfold.safe_open(p, fw) as ours, safetensors.safe_open(p, fw) as theirs:
        exc = same(
            lambda: ours.get_slice("x")[INDEXES[index]],
            lambda: theirs.get_slice("x")[INDEXES[index]],
            flags=False,
        )
    if isinstance(exc, BaseException):
        assert isinstance(exc, SliceError) and "(10, 3)" in str(exc)


SCALAR_INDEXES = {"[()]": (), "[...]": Ellipsis, "[0]": 0, "[:]": np.s_[:], "[[]]": []}


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("index", list(SCALAR_INDEXES))
def test_slices_of_a_0d_tensor(tmp_path, fw, index):
    _fw(fw)
    p = _st_file(tmp_path, {"s": np.array(2.5, np.float32)})
    with tenfold.safe_open(p, fw) as ours, safetensors.safe_open(p, fw) as theirs:
        same(
            lambda: ours.get_slice("s")[SCALAR_INDEXES[index]],
            lambda: theirs.get_slice("s")[SCALAR_INDEXES[index]],
            flags=False,
        )


# -- tenfold.torch against safetensors.torch -----------------------------------------------------
def _pt_cases() -> dict[str, dict[str, Any]]:
    g = torch.Generator().manual_seed(23)
    return {
        "basic": {"w": torch.randn(3, 4, generator=g), "ids": torch.arange(5)},
        "low_precision": {
            "h": torch.randn(4, 6, generator=g).to(torch.bfloat16),
            "f8": torch.randn(8, generator=g).to(torch.float8_e4m3fn),
            "f8b": torch.randn(8, generator=g).to(torch.float8_e5m2),
            "half": torch.randn(3, generator=g).half(),
        },
        "scalar": {"s": torch.tensor(1.5)},
        "zero_size": {"z": torch.zeros(0, 3)},
        "mixed": {"b": torch.ones(2, dtype=torch.bool), "u": torch.arange(4, dtype=torch.uint8),
                  "i": torch.arange(3, dtype=torch.int16),
                  "c": torch.ones(2, dtype=torch.complex64)},
    }  # fmt: skip


PT = ["basic", "low_precision", "scalar", "zero_size", "mixed"]


@needs_torch
@pytest.mark.parametrize("md", list(META))
@pytest.mark.parametrize("case", PT)
def test_torch_save_gives_the_same_bytes(case, md):
    x = _pt_cases()[case]
    same(lambda: tenfold.torch.save(x, META[md]), lambda: stt.save(x, META[md]))


@needs_torch
@pytest.mark.parametrize("case", PT)
def test_torch_load_and_load_file_give_the_same_tensors(tmp_path, case):
    x = _pt_cases()[case]
    data = stt.save(x)
    same(lambda: tenfold.torch.load(data), lambda: stt.load(data), ordered=False)
    p = str(tmp_path / "m.safetensors")
    stt.save_file(x, p)
    same(lambda: tenfold.torch.load_file(p), lambda: stt.load_file(p))
    same(lambda: tenfold.torch.load_file(p, backend="pread"), lambda: stt.load_file(p))


@needs_torch
def test_torch_save_file_of_a_sparse_tensor_is_a_value_error_naming_it(tmp_path):
    x = {"dense": torch.ones(2), "adj": torch.eye(3).to_sparse()}
    p = tmp_path / "m.safetensors"
    exc = same(lambda: tenfold.torch.save_file(x, p), lambda: stt.save_file(x, str(p)))
    assert isinstance(exc, EncodeError) and "'adj'" in str(exc) and "to_dense" in str(exc)
    assert not p.exists()
    same(lambda: tenfold.torch.save(x), lambda: stt.save(x))


# -- tied weights: save_model / load_model on a real torch.nn model ------------------------------
if torch is not None:

    class TiedLM(torch.nn.Module):
        """An embedding tied to the language-model head (one Parameter, two names)."""

        def __init__(self, vocab: int = 11, dim: int = 4, extra: bool = False) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, dim)
            self.norm = torch.nn.LayerNorm(dim)
            self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
            self.lm_head.weight = self.embed.weight
            if extra:
                self.proj = torch.nn.Linear(dim, dim)

    class Overlapping(torch.nn.Module):
        """Two buffers over overlapping parts of one storage, neither covering all of it."""

        def __init__(self) -> None:
            super().__init__()
            base = torch.arange(10.0)
            self.register_buffer("lo", base[0:6])
            self.register_buffer("hi", base[3:9])


def _models(seed: int = 0, **kw: Any) -> Any:
    torch.manual_seed(seed)
    return TiedLM(**kw)


@needs_torch
def test_save_model_writes_what_safetensors_writes(tmp_path):
    m = _models()
    ours, theirs = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    same(lambda: tenfold.torch.save_model(m, ours), lambda: stt.save_model(m, str(theirs)))
    assert ours.read_bytes() == theirs.read_bytes()  # one copy of the tied weight
    with tenfold.safe_open(ours, "pt") as f:
        assert f.keys() == ["embed.weight", "norm.bias", "norm.weight"]
        assert f.metadata() == {"lm_head.weight": "embed.weight"}


@needs_torch
@pytest.mark.parametrize("writer", ["tenfold", "safetensors"])
def test_load_model_restores_tied_weights(tmp_path, writer):
    src = _models(seed=1)
    p = str(tmp_path / "m.safetensors")
    (tenfold.torch.save_model if writer == "tenfold" else stt.save_model)(src, p)
    ours, theirs = _models(seed=2), _models(seed=3)
    same(lambda: tenfold.torch.load_model(ours, p), lambda: stt.load_model(theirs, p))
    for m in (ours, theirs):
        assert m.lm_head.weight is m.embed.weight  # still tied
        assert torch.equal(m.lm_head.weight, src.embed.weight)
        assert torch.equal(m.norm.weight, src.norm.weight)


@needs_torch
def test_save_model_keeps_the_callers_metadata_keys(tmp_path):
    m = _models()
    md = {"lm_head.weight": "mine", "note": "x"}
    ours, theirs = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    same(lambda: tenfold.torch.save_model(m, ours, dict(md)),
         lambda: stt.save_model(m, str(theirs), dict(md)))  # fmt: skip
    with tenfold.safe_open(ours) as a, safetensors.safe_open(str(theirs), "np") as b:
        assert a.metadata() == b.metadata() == md


@needs_torch
@pytest.mark.parametrize("suffix", [".npz", ".wtxt", ".safetensors", ".zt"])
@pytest.mark.parametrize("md", [None, False])
def test_save_model_to_any_format_and_without_metadata(tmp_path, suffix, md):
    # before: a tied model into .npz / .wtxt was refused for the alias records (formats with
    # no file metadata), and the metadata=False its message advised was a TypeError
    src = _models(seed=1)
    p = tmp_path / f"m{suffix}"
    tenfold.torch.save_model(src, p, md)
    with tenfold.open(p) as r:
        assert "lm_head.weight" not in r  # one copy of the tied weight
        kept = {k: v for k, v in r.metadata.items() if k == "lm_head.weight"}
        assert kept == (
            {"lm_head.weight": "embed.weight"}
            if md is None and suffix in (".safetensors", ".zt")
            else {}
        )
    dst = _models(seed=2)
    assert tenfold.torch.load_model(dst, p) == (set(), [])
    assert dst.lm_head.weight is dst.embed.weight  # the ties come from the model
    assert torch.equal(dst.lm_head.weight, src.embed.weight)


@needs_torch
def test_save_model_refuses_the_callers_metadata_where_the_format_has_none(tmp_path):
    with pytest.raises(tenfold.errors.EncodeError, match="npz has no file metadata"):
        tenfold.torch.save_model(_models(), tmp_path / "m.npz", {"note": "x"})
    assert list(tmp_path.iterdir()) == []


@needs_torch
@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("saved, loaded", [("small", "big"), ("big", "small")])
def test_load_model_missing_and_unexpected_keys(tmp_path, strict, saved, loaded):
    p = str(tmp_path / "m.safetensors")
    stt.save_model(_models(extra=saved == "big"), p)

    def load(fn):
        return fn(_models(seed=5, extra=loaded == "big"), p, strict=strict)

    exc = same(lambda: load(tenfold.torch.load_model), lambda: load(stt.load_model))
    if strict:  # the same words as safetensors (and torch)
        theirs = _outcome(lambda: load(stt.load_model))[1]
        assert type(exc) is RuntimeError and str(exc) == str(theirs)


@needs_torch
@pytest.mark.parametrize("strict", [True, False])
def test_load_model_of_a_file_holding_both_tied_names(tmp_path, strict):
    """A file holding the alias too (tenfold.torch.save_file writes copies): the alias is
    reported unexpected, as safetensors reports it."""
    m = _models()
    p = str(tmp_path / "m.safetensors")
    tenfold.torch.save_file(m.state_dict(), p)

    def load(fn):
        return fn(_models(seed=6), p, strict=strict)

    same(lambda: load(tenfold.torch.load_model), lambda: load(stt.load_model))


@needs_torch
def test_save_model_refuses_shared_memory_no_tensor_covers(tmp_path):
    m = Overlapping()
    ours, theirs = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    exc = same(lambda: tenfold.torch.save_model(m, ours), lambda: stt.save_model(m, str(theirs)))
    assert isinstance(exc, RuntimeError) and "hi" in str(exc) and not ours.exists()


@needs_torch
def test_difference_save_model_of_views_of_part_of_a_storage(tmp_path):
    """Two buffers over parts of one storage that do not overlap share nothing: tenfold
    stores each (only its own elements); safetensors refuses any tensor that does not cover
    its whole storage, in save_model and load_model."""
    m = torch.nn.Module()
    base = torch.arange(8.0)
    m.register_buffer("a", base[:4])
    m.register_buffer("b", base[4:])
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):
        stt.save_model(m, str(tmp_path / "s.safetensors"))
    p = tmp_path / "t.safetensors"
    tenfold.torch.save_model(m, p)
    assert p.read_bytes() == stt.save({"a": base[:4].clone(), "b": base[4:].clone()})
    m2 = torch.nn.Module()
    m2.register_buffer("a", torch.zeros(4))
    m2.register_buffer("b", torch.zeros(4))
    assert tenfold.torch.load_model(m2, p) == (set(), [])
    assert torch.equal(torch.cat([m2.a, m2.b]), base)
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):
        stt.load_model(m, str(p))


@needs_torch
@pytest.mark.parametrize("index", sorted(PT_ADVANCED))
def test_difference_pytorch_advanced_indexes(tmp_path, index):
    p = _st_file(tmp_path, {"x": np.arange(30, dtype=np.float32).reshape(10, 3)})
    with safetensors.safe_open(p, "pt") as f:
        theirs = _outcome(lambda: f.get_slice("x")[INDEXES[index]])
    assert theirs[0] == "ok" or isinstance(theirs[1], TypeError)  # torch's indexing
    with tenfold.safe_open(p, "pt") as f, pytest.raises(SliceError, match="basic indexing"):
        f.get_slice("x")[INDEXES[index]]


def test_difference_numpy_safe_open_gives_read_only_views(tmp_path):
    p = _st_file(tmp_path, NP["basic"])
    with safetensors.safe_open(p, "np") as f:
        assert f.get_tensor("w").flags.writeable
    with tenfold.safe_open(p, "np") as f:
        assert not f.get_tensor("w").flags.writeable  # zero-copy view of the map
    assert tnp.load_file(p)["w"].flags.writeable  # load_file: writable, as safetensors'


# -- the differences docs/frameworks.md lists ----------------------------------------------------
@needs_torch
def test_difference_save_file_of_shared_tensors_writes_copies(tmp_path):
    t = torch.arange(4.0)
    x = {"a": t, "b": t}
    with pytest.raises(RuntimeError):
        stt.save_file(x, str(tmp_path / "s.safetensors"))
    p = tmp_path / "t.safetensors"
    tenfold.torch.save_file(x, p)
    got = tenfold.torch.load_file(p)
    assert torch.equal(got["a"], t) and torch.equal(got["b"], t)
    assert got["a"].data_ptr() != got["b"].data_ptr()


@needs_torch
def test_difference_non_contiguous_tensors_are_written_in_c_order(tmp_path):
    x = {"t": torch.arange(6.0).reshape(2, 3).T}
    with pytest.raises(ValueError):
        stt.save(x)
    assert torch.equal(tenfold.torch.load(tenfold.torch.save(x))["t"], x["t"])
    m = torch.nn.Module()
    m.register_buffer("t", x["t"])
    with pytest.raises(ValueError):
        stt.save_model(m, str(tmp_path / "s.safetensors"), force_contiguous=False)
    tenfold.torch.save_model(m, tmp_path / "t.safetensors", force_contiguous=False)


@needs_torch
def test_difference_tensors_not_in_a_dict_are_a_type_error():
    with pytest.raises(ValueError):
        stt.save([torch.ones(2)])
    with pytest.raises(AttributeError):
        snp.save([np.ones(2)])
    with pytest.raises(TypeError, match="argument 'tensors'"):
        tenfold.torch.save([torch.ones(2)])
    with pytest.raises(TypeError, match="argument 'tensor_dict'"):
        tnp.save([np.ones(2)])


def test_difference_metadata_that_is_not_strings_is_an_encode_error():
    x = {"a": np.ones(2)}
    with pytest.raises(TypeError):
        snp.save(x, metadata={"k": 1})
    with pytest.raises(EncodeError, match="metadata 'k'.*expected str, got int"):
        tnp.save(x, metadata={"k": 1})


def test_difference_load_takes_any_buffer_and_any_format(tmp_path):
    data = snp.save(NP["basic"])
    with pytest.raises(TypeError):
        snp.load(bytearray(data))
    assert sorted(_plain(tnp.load(bytearray(data)))) == sorted(_plain(snp.load(data)))
    p = tmp_path / "m.zt"
    tenfold.save(p, NP["basic"])
    assert _plain(tnp.load(p.read_bytes())) == _plain(tnp.load_file(p))


def test_difference_numpy_save_takes_what_numpy_asarray_takes():
    with pytest.raises(AttributeError):
        snp.save({"a": [1.0, 2.0]})
    assert tnp.load(tnp.save({"a": [1.0, 2.0]}))["a"].tolist() == [1.0, 2.0]


DIFFERENT_SLICES = {  # index -> (what safetensors 0.8.0 raises, what tenfold gives)
    "[3:1]": (np.s_[3:1], SystemError),
    "[-3:]": (np.s_[-3:], OverflowError),
    "[:-1]": (np.s_[:-1], OverflowError),
}


@pytest.mark.parametrize("index", list(DIFFERENT_SLICES))
def test_difference_slices_where_safetensors_fails_by_accident(tmp_path, index):
    idx, theirs = DIFFERENT_SLICES[index]
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    p = _st_file(tmp_path, {"x": x})
    with safetensors.safe_open(p, "np") as f, pytest.raises(theirs):
        f.get_slice("x")[idx]
    with tenfold.safe_open(p, "np") as f:
        assert np.array_equal(f.get_slice("x")[idx], x[idx])  # Python's rule


def test_difference_omitted_bounds_on_an_axis_of_length_0(tmp_path):
    x = np.zeros((0, 3), np.float32)
    p = _st_file(tmp_path, {"z": x})
    for idx in (np.s_[:], [], np.s_[:, 1:]):
        with safetensors.safe_open(p, "np") as f, pytest.raises(TheirError):
            f.get_slice("z")[idx]
        with tenfold.safe_open(p, "np") as f:
            assert f.get_slice("z")[idx].shape == x[idx if idx != [] else np.s_[:0]].shape
    with tenfold.safe_open(p, "np") as f, pytest.raises(SliceError):
        f.get_slice("z")[0:0]  # a bound given is checked as safetensors checks it


def test_difference_booleans_are_not_indexes(tmp_path):
    p = _st_file(tmp_path, {"x": np.arange(4, dtype=np.int8)})
    with safetensors.safe_open(p, "np") as f:
        assert f.get_slice("x")[True].tolist() == 1
    with tenfold.safe_open(p, "np") as f, pytest.raises(SliceError):
        f.get_slice("x")[True]


def test_difference_a_slice_handle_closes_with_its_file(tmp_path):
    p = _st_file(tmp_path, {"x": np.arange(4, dtype=np.int8)})
    with safetensors.safe_open(p, "np") as f:
        theirs = f.get_slice("x")
    with tenfold.safe_open(p, "np") as f:
        ours = f.get_slice("x")
    assert theirs[1:3].tolist() == [1, 2]
    with pytest.raises(ClosedError):
        ours[1:3]
    with pytest.raises(ClosedError):
        ours.get_shape()


@needs_torch
def test_difference_save_model_leaves_the_callers_metadata_alone(tmp_path):
    m = _models()
    mine, theirs = {"note": "x"}, {"note": "x"}
    tenfold.torch.save_model(m, tmp_path / "a.safetensors", mine)
    stt.save_model(m, str(tmp_path / "b.safetensors"), theirs)
    assert mine == {"note": "x"} and theirs == {"note": "x", "lm_head.weight": "embed.weight"}


def test_difference_safetensor_error_is_tenfolds_own_class(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(BAD_BYTES["bad_json"])
    with pytest.raises(SafetensorError) as info:
        tnp.load_file(p)
    assert not isinstance(info.value, TheirError)
    assert tnp.SafetensorError is tenfold.torch.SafetensorError is tenfold.SafetensorError


def test_difference_other_formats_open_too(tmp_path):
    p = tmp_path / "m.zt"
    tenfold.save(p, NP["offset_order"], metadata={"k": "v"})
    with tenfold.safe_open(p) as f:
        assert f.keys() == sorted(NP["offset_order"]) and f.metadata()["k"] == "v"
        got = f.get_tensors()
        assert list(got) == f.offset_keys()
        assert {k: v.tobytes() for k, v in got.items()} == {
            k: v.tobytes() for k, v in NP["offset_order"].items()
        }
    got = tnp.load_file(p)
    assert all(v.flags.writeable for v in got.values())
    assert {k: v.tobytes() for k, v in got.items()} == {
        k: v.tobytes() for k, v in NP["offset_order"].items()
    }


# -- what load_file hands out -------------------------------------------------------------------
def test_numpy_load_file_arrays_share_nothing_and_never_reach_the_file(tmp_path):
    p = tmp_path / "m.safetensors"
    tnp.save_file(NP["basic"], p)
    before = p.read_bytes()
    got = tnp.load_file(p)
    for a in got.values():
        a[...] = 0
    assert p.read_bytes() == before
    assert not np.shares_memory(got["w"], got["ids"])
    again = tnp.load_file(p)
    assert np.array_equal(again["w"], NP["basic"]["w"])


def test_every_error_class_is_a_tenfold_error_and_its_builtin():
    for cls, builtin in [(MissingTensorError, KeyError), (ClosedError, ValueError),
                         (SliceError, IndexError), (EncodeError, ValueError)]:  # fmt: skip
        assert issubclass(cls, TenfoldError) and issubclass(cls, builtin)
        assert issubclass(cls, SafetensorError)
    exc = MissingTensorError(fmt="zt", obj="tensor 'w'", detail="no such tensor")
    assert str(exc) == "zt: tensor 'w': no such tensor"  # not quoted as KeyError quotes
