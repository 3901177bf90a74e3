"""OINF in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (typed
metadata, sizevars, packed types and declarations without data travel to an OINF target) and
its target (names and metadata as ``[A-Za-z0-9._-]+`` tokens)."""

from __future__ import annotations

import re
from typing import Any

from ...capabilities import check_all
from ...conversion import Target, WriteOptions, meta_refusal, raw_or_lazy
from ...core.alloc import dense
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import Source, reader_source
from ._format import FORMAT
from ._spec import E


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of an OINF file (``convert_source``): its reader's, plus what only an
    OINF target keeps (typed metadata, packed element types, sizevars, declarations without
    data); the tensors the reader has a span for are copied as raw ranges of the file."""
    from . import OinfReader, Scalar, Tensor

    r = OinfReader(path, limits=limits)
    try:
        infos = {t.name: t for t in r.infos()}
        typed: dict[str, Any] = {}
        for key, value in r.metadata.items():
            tname = r.metadata_info(key).dtype
            if tname == "ndarray":
                typed[key] = Tensor(value)
            elif tname in ("str", "bitset"):
                typed[key] = value
            else:
                typed[key] = Scalar(value, tname)
        sizevars = r.sizevars
    except BaseException:
        r.close()
        raise

    src = reader_source(
        FORMAT, r, sizevars=sizevars,
        uninitialized={n: (t.dtype, tuple(t.shape)) for n, t in infos.items() if not t.has_data},
        native_types={n: t.dtype for n, t in infos.items() if t.has_data and t.packed},
        refuse=[f"tensor {n!r} carries OINF v2 quantization parameters"
                for n, t in infos.items() if t.quant is not None],
    )  # fmt: skip
    src.native_metadata = typed
    return src


def _token_ok(s: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]+", s))


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.oinf`` destination (``convert_target``)."""
    return OinfTarget(fmt, dst, generation)


class OinfTarget(Target):
    """OINF: names and string metadata are ``[A-Za-z0-9._-]+`` tokens; an OINF source keeps
    its typed metadata, sizevars, packed types and declarations without data."""

    def check(self, src: Source) -> None:
        check_all(self.name, ((n, src.spec(n)[0]) for n in src.names))
        for n in src.names:
            if not _token_ok(n):
                raise E.encode(
                    f"tensor {n!r}",
                    message=f"oinf: tensor {n!r}: name must match [A-Za-z0-9._-]+ (OINF's "
                    "rule); formats that can hold any name: .zt, .fold/.mind, .safetensors, "
                    ".npz, .wtxt (encoded)",
                )

    def metadata(self, src: Source) -> dict[str, Any]:
        if src.fmt == self.name:
            return dict(src.native_metadata or {})
        for k, v in src.metadata.items():
            if not isinstance(v, str):
                raise meta_refusal(self.name, k, f"value of type {type(v).__name__} (OINF "
                                   "metadata from other formats must be strings)")  # fmt: skip
            if not (_token_ok(k) and _token_ok(v)):
                raise meta_refusal(self.name, k, "key and value must match [A-Za-z0-9._-]+")
        return dict(src.metadata)

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from . import Tensor, Uninitialized, write

        tensors: dict[str, Any] = {}
        for n in s.names:  # packed OINF types come from OINF sources: views of their map
            if n in s.native_types:
                tensors[n] = Tensor(dense(s.get(n), n), s.native_types[n])
            else:
                tensors[n] = raw_or_lazy(s, n, bar)
        for n, (dtype, shape) in s.uninitialized.items():
            tensors[n] = Uninitialized(dtype, shape)
        # an OINF source keeps its tables' order (its names come in file order); a sorted
        # source comes out sorted as before, with or without data interleaved
        same = s.fmt == self.name and not _sorted(s.names, s.uninitialized, md, s.sizevars)
        write(dst, tensors=tensors, metadata=md, sizevars=s.sizevars, sort=not same,
              fsync=opts.fsync)  # fmt: skip


def _sorted(*tables: Any) -> bool:
    """True when every table's names are in sorted order (what the writer's default gives)."""
    return all(list(t) == sorted(t) for t in tables)
