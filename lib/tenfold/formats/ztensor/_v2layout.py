"""zTensor v2 layout rules: what each layout (dense, CSR, COO, MX, grouped quantisation) asks of
an object's parts, checked on the metadata at open (:func:`check_layout`), and the logical-type
rules on decoded data, checked when decoding or verifying (:func:`check_type_data`).

Two kinds of layout rule, as ztensor 2.1.2 (the reference) applies them:

* ``dense`` and ``zt.sparse_csr/1``: the reference refuses an object that breaks them when it
  writes and when it opens; :func:`check_open` raises (the reader at open), and so does
  :func:`check_layout` (the writer, before it writes a byte).
* ``zt.sparse_coo/1``: the reference checks none of its rules (it writes, opens and verifies a
  COO object with ``i64`` coordinates, or with no ``coords`` part). tenfold opens such a file
  and reads its other objects; :func:`check_assembly` refuses the object when it is assembled
  into a sparse tensor (read or verified), its parts stay readable one by one
  (``decoded``/``stored``), and :func:`check_layout` keeps the writer from writing it.
* the parametric profiles ``zt.mx/1`` and ``zt.quant_group/1``: the reference checks none of
  their attributes or part sizes (it writes, opens and verifies a ``zt.quant_group/1`` object
  whose only attribute is ``group_size``, and reads its parts as they are). tenfold reads such
  objects as their parts too (it does not decode these profiles), so :func:`check_layout`
  lets them through, for the writer as for the reader, and :func:`profile_finding` names the
  first profile rule an object breaks, which ``verify`` reports as a warning.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import FormatError
from ._v2spec import COO, CSR, DENSE, DTYPES, MX, QUANT, ObjectInfo, PartInfo, reject, size_of


# -- layout rules (metadata, at open) -----------------------------------------------------------
def _need(cond: bool, info: ObjectInfo, detail: str, **kw: Any) -> None:
    if not cond:
        raise reject(
            "layout-rule", f"object {info.name!r}", detail=f"{info.layout}: {detail}", **kw
        )


def _int_only(p: PartInfo) -> bool:
    return p.type is None and p.dtype in ("u32", "u64")


def check_layout(info: ObjectInfo) -> None:
    """Every metadata rule of the object's layout that tenfold enforces (dense and sparse): what
    a writer must meet before it writes the object; profiles the reference does not check
    (:data:`_PROFILE_CHECKS`) and unknown layouts are left structural."""
    check_open(info)
    check_assembly(info)


def check_open(info: ObjectInfo) -> None:
    """The metadata rules a file must meet to be opened at all: those of ``dense`` and
    ``zt.sparse_csr/1``, which the reference applies when it opens a file."""
    check = _LAYOUT_CHECKS.get(info.layout)
    if check is not None:
        check(info)


def check_assembly(info: ObjectInfo) -> None:
    """The metadata rules checked when the object is assembled (read as a sparse tensor, or
    verified), not at open: those of ``zt.sparse_coo/1``, which the reference never checks, so
    that a file it writes opens and its other objects read."""
    check = _ASSEMBLY_CHECKS.get(info.layout)
    if check is not None:
        check(info)


def profile_finding(info: ObjectInfo) -> str | None:
    """The first rule of its profile (``zt.mx/1``, ``zt.quant_group/1``) the object breaks, as
    text for a warning, or None when it meets them all or its layout has no such rules."""
    check = _PROFILE_CHECKS.get(info.layout)
    if check is None:
        return None
    try:
        check(info)
    except FormatError as exc:
        return exc.detail or str(exc)
    return None


def _check_dense(info: ObjectInfo) -> None:
    parts = info.parts
    _need(set(parts) == {"data"}, info, "exactly one part named 'data'", got=sorted(parts))
    p = parts["data"]
    want = size_of(p.dtype, p.type, info.numel)
    if want is not None and want != p.decoded_size:
        raise reject(
            "dense-size",
            f"object {info.name!r}",
            offset=p.offset,
            field="decoded size",
            detail="does not match shape and type",
            expected=want,
            got=p.decoded_size,
        )


def _values_size(info: ObjectInfo, val: PartInfo, nnz: int) -> None:
    """A sparse object's ``values`` part holds ``nnz`` elements of its type."""
    want = size_of(val.dtype, val.type, nnz)
    _need(
        want is None or want == val.decoded_size,
        info,
        "values size",
        expected=want,
        got=val.decoded_size,
    )


def _check_csr(info: ObjectInfo) -> None:
    parts, shape = info.parts, info.shape
    _need(len(shape) == 2, info, "rank must be 2", got=len(shape))
    _need(
        set(parts) == {"values", "indices", "indptr"},
        info,
        "parts must be values, indices, indptr",
        got=sorted(parts),
    )
    ind, ptr, val = parts["indices"], parts["indptr"], parts["values"]
    _need(_int_only(ind), info, "indices must be plain u32 or u64", got=ind.dtype)
    _need(
        ptr.type is None and ptr.dtype == ind.dtype,
        info,
        "indptr must have the dtype of indices",
        expected=ind.dtype,
        got=ptr.dtype,
    )
    w = ind.np_dtype.itemsize
    _need(ind.decoded_size % w == 0, info, "indices size not a whole number of elements")
    nnz = ind.decoded_size // w
    _need(
        ptr.decoded_size == (shape[0] + 1) * w,
        info,
        "indptr size",
        expected=(shape[0] + 1) * w,
        got=ptr.decoded_size,
    )
    _values_size(info, val, nnz)


def _check_coo(info: ObjectInfo) -> None:
    parts, shape = info.parts, info.shape
    _need(len(shape) >= 1, info, "rank must be at least 1")
    _need(
        set(parts) == {"values", "coords"},
        info,
        "parts must be values, coords",
        got=sorted(parts),
    )
    c, val = parts["coords"], parts["values"]
    _need(_int_only(c), info, "coords must be plain u32 or u64", got=c.dtype)
    w = c.np_dtype.itemsize * len(shape)
    _need(
        c.decoded_size % w == 0,
        info,
        "coords size not a multiple of width x ndim",
        got=c.decoded_size,
    )
    nnz = c.decoded_size // w
    _values_size(info, val, nnz)


def _attr(info: ObjectInfo, key: str) -> Any:
    a = info.attributes or {}
    return a.get(key)


def _check_mx(info: ObjectInfo) -> None:
    parts, shape = info.parts, info.shape
    _need(set(parts) == {"data", "scales"}, info, "parts must be data, scales", got=sorted(parts))
    d, s = parts["data"], parts["scales"]
    _need(s.dtype == "u8" and s.type == "f8_e8m0", info, "scales must be u8 / f8_e8m0")
    _need(
        (d.dtype == "u8" and d.type in ("f4_e2m1", "f8_e4m3fn", "f8_e5m2"))
        or (d.dtype == "i8" and d.type is None),
        info,
        "data type must be f4_e2m1, f8_e4m3fn, f8_e5m2 (u8) or plain i8",
        got=f"{d.dtype}/{d.type}",
    )
    _need(
        _attr(info, "scale_form") == "e8m0_exponent",
        info,
        "attribute scale_form must be 'e8m0_exponent'",
    )
    bs = _attr(info, "block_size")
    _need(type(bs) is int and bs >= 2, info, "attribute block_size must be an int >= 2", got=bs)
    _need(len(shape) >= 1, info, "rank must be at least 1")
    axis = _attr(info, "axis")
    if axis is None:
        axis = len(shape) - 1
    _need(type(axis) is int and 0 <= axis < len(shape), info, "axis out of range", got=axis)
    _need(shape[axis] % bs == 0, info, "block_size must divide shape[axis]", got=[shape[axis], bs])
    n = info.numel
    want = size_of(d.dtype, d.type, n)
    _need(want == d.decoded_size, info, "data size", expected=want, got=d.decoded_size)
    _need(s.decoded_size == n // bs, info, "scales size", expected=n // bs, got=s.decoded_size)


def _check_quant(info: ObjectInfo) -> None:
    zp, word, per = _quant_packing(info)
    _quant_sizes(info, zp, word, per)


def _quant_packing(info: ObjectInfo) -> tuple[dict[Any, Any], str, int]:
    """``zt.quant_group/1``: the zero point, parts, bits and packing attributes and the data
    part's type; returns ``(zero_point, packing.word, packing.per_word)``."""
    parts = info.parts
    zp = _attr(info, "zero_point")
    _need(
        isinstance(zp, dict) and zp.get("form") in ("none", "implied", "tensor"),
        info,
        "attribute zero_point.form must be none, implied or tensor",
    )
    form = zp["form"]  # type: ignore[index]
    want_parts = {"data", "scales"} | ({"zeros"} if form == "tensor" else set())
    _need(set(parts) == want_parts, info, f"parts must be {sorted(want_parts)}", got=sorted(parts))
    bits = _attr(info, "bits")
    _need(
        bits in (2, 3, 4, 5, 6, 8) and type(bits) is int, info, "bits must be 2,3,4,5,6,8", got=bits
    )
    pk = _attr(info, "packing")
    _need(isinstance(pk, dict), info, "attribute packing must be a map")
    word = pk.get("word")  # type: ignore[union-attr]
    _need(word in ("u8", "u16", "u32", "u64"), info, "packing.word", got=word)
    _need(pk.get("order") in ("lsb_first", "msb_first"), info, "packing.order")  # type: ignore[union-attr]
    wbits = 8 * DTYPES[word].itemsize
    _need(wbits % bits == 0, info, "bits must divide the word width")
    per = pk.get("per_word")  # type: ignore[union-attr]
    _need(
        per == wbits // bits and type(per) is int,
        info,
        "packing.per_word",
        expected=wbits // bits,
        got=per,
    )
    d = parts["data"]
    _need(
        d.type is None and d.dtype in (word, "i" + word[1:]),
        info,
        "data dtype must match packing.word",
        expected=word,
        got=d.dtype,
    )
    return zp, word, per  # type: ignore[return-value]


def _quant_sizes(info: ObjectInfo, zp: dict[Any, Any], word: str, per: int) -> None:
    """``zt.quant_group/1``: group size, axis, scale form and every part's size."""
    parts, shape = info.parts, info.shape
    form = zp["form"]
    d = parts["data"]
    gs = _attr(info, "group_size")
    axis = _attr(info, "axis")
    _need(type(gs) is int and gs >= 0, info, "group_size must be a non-negative int", got=gs)
    _need(type(axis) is int and 0 <= axis < len(shape), info, "axis out of range", got=axis)
    along = shape[axis]
    _need(gs == 0 or along % gs == 0, info, "group_size must divide shape[axis]")
    groups = along if gs == 0 else along // gs
    lanes = info.numel // along if along else 0
    sf = _attr(info, "scale_form")
    s = parts["scales"]
    if sf == "e8m0_exponent":
        _need(s.dtype == "u8" and s.type == "f8_e8m0", info, "scales must be u8 / f8_e8m0")
    else:
        _need(
            sf in ("f32_factors", "f16_factors") and s.dtype in ("f64", "f32", "f16", "bf16"),
            info,
            "scale_form and scales dtype",
            got=[sf, s.dtype],
        )
    wsize = DTYPES[word].itemsize
    _need(
        info.numel % per == 0 and d.decoded_size == info.numel // per * wsize,
        info,
        "data size",
        expected=info.numel // per * wsize,
        got=d.decoded_size,
    )
    _need(
        s.decoded_size == groups * lanes * s.np_dtype.itemsize,
        info,
        "scales size",
        expected=groups * lanes * s.np_dtype.itemsize,
        got=s.decoded_size,
    )
    if form == "implied":
        _need(type(zp.get("value")) is int, info, "zero_point.value required")  # type: ignore[union-attr]
    if form == "tensor":
        z = parts["zeros"]
        zpk = zp.get("packing")  # type: ignore[union-attr]
        if zpk == "plain":
            want = groups * lanes * z.np_dtype.itemsize
        else:
            _need(zpk == "same_as_data", info, "zero_point.packing", got=zpk)
            want = groups * lanes // per * wsize
        _need(z.decoded_size == want, info, "zeros size", expected=want, got=z.decoded_size)


#: layout -> its metadata check, enforced at open (see :func:`check_open`)
_LAYOUT_CHECKS: dict[str, Any] = {
    DENSE: _check_dense,
    CSR: _check_csr,
}
#: layout -> its metadata check, enforced on assembly (see :func:`check_assembly`)
_ASSEMBLY_CHECKS: dict[str, Any] = {
    COO: _check_coo,
}
#: profile -> its metadata check, reported (see :func:`profile_finding`)
_PROFILE_CHECKS: dict[str, Any] = {
    MX: _check_mx,
    QUANT: _check_quant,
}


# -- data rules (when decoding or verifying) ------------------------------------------------------
def check_type_data(
    info: ObjectInfo, part: PartInfo, raw: np.ndarray, count: int | None, start: int = 0
) -> None:
    """Logical-type data rules over decoded bytes ``raw`` (bool bytes 0/1, f4 final nibble).

    ``raw`` may be a piece of the part that starts ``start`` bytes in (the final-nibble rule
    is then checked on the last piece, given with ``count``)."""
    if part.type == "bool":
        if raw.size and int(raw.max()) > 1:
            bad = start + int(np.flatnonzero(raw > 1)[0])
            raise reject(
                "layout-data",
                f"object {info.name!r} part {part.name!r}",
                offset=part.offset + bad,
                detail="bool byte is not 0 or 1",
                expected="0 or 1",
                got=int(raw[bad - start]),
            )
    elif part.type == "f4_e2m1" and count is not None and count % 2 and raw.size:
        if int(raw[-1]) >> 4:
            raise reject(
                "layout-data",
                f"object {info.name!r} part {part.name!r}",
                offset=part.offset + start + raw.size - 1,
                detail="final odd f4 nibble is not zero",
                expected="high nibble 0",
                got=f"{int(raw[-1]):#04x}",
            )


def check_csr_data(
    what: str, info: ObjectInfo, indptr: np.ndarray, indices: np.ndarray, nnz: int
) -> None:
    rows, cols = info.shape
    ptr = indptr.astype(np.uint64)
    if int(ptr[0]) != 0:
        raise reject("layout-data", what, field="indptr[0]", expected=0, got=int(ptr[0]))
    if rows and np.any(ptr[1:] < ptr[:-1]):
        bad = int(np.argmax(ptr[1:] < ptr[:-1]))
        raise reject("layout-data", what, field="indptr", detail=f"decreases at row {bad}")
    if int(ptr[-1]) != nnz:
        raise reject("layout-data", what, field="indptr[R]", expected=nnz, got=int(ptr[-1]))
    if nnz:
        idx = indices.astype(np.uint64)
        if int(idx.max()) >= cols:
            raise reject(
                "layout-data",
                what,
                field="indices",
                detail="column index out of range",
                expected=f"< {cols}",
                got=int(idx.max()),
            )
        # strictly increasing within each row: a step that is not a row start must grow
        if nnz > 1:
            step_ok = idx[1:] > idx[:-1]
            starts = np.zeros(nnz, dtype=bool)
            starts[ptr[:-1][ptr[:-1] < nnz].astype(np.intp)] = True
            bad_step = ~step_ok & ~starts[1:]
            if np.any(bad_step):
                i = int(np.argmax(bad_step)) + 1
                raise reject(
                    "layout-data",
                    what,
                    field="indices",
                    detail=f"not strictly increasing within a row at position {i}",
                )


def check_coo_data(what: str, info: ObjectInfo, coords: np.ndarray) -> None:
    shape = info.shape
    if coords.shape[1] == 0:
        return
    top = coords.max(axis=1)
    for d, (m, n) in enumerate(zip(top.tolist(), shape, strict=True)):
        if m >= n:
            raise reject(
                "layout-data",
                what,
                field=f"coords[{d}]",
                detail="index out of range",
                expected=f"< {n}",
                got=m,
            )
    flat = (
        np.ravel_multi_index(tuple(coords.astype(np.intp)), shape)
        if all(s < (1 << 62) for s in shape) and np.prod([float(s) for s in shape]) < 2**62
        else None
    )
    if flat is not None:
        uniq = np.unique(flat)
        if uniq.size != flat.size:
            raise reject("layout-data", what, field="coords", detail="duplicate coordinates")
    else:
        view = np.ascontiguousarray(coords.T).view([("", coords.dtype)] * coords.shape[0])
        if np.unique(view).size != coords.shape[1]:
            raise reject("layout-data", what, field="coords", detail="duplicate coordinates")
