"""zTensor v2 manifest validation (spec §3.6): the decoded manifest checked against the schema,
the blob placement rules and the shard table, and turned into the records of :mod:`._v2spec`.

:func:`decode_manifest` is the reader's entry: the ``ztplan`` kernel checks and records the
plain dense objects while it decodes; every other object goes through :func:`_object` here and
:func:`._v2layout.check_layout`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ... import _kernels
from ...errors import LimitError
from . import _dcbor
from ._v2layout import check_layout, check_open
from ._v2spec import (
    ALIGN,
    DIGESTS,
    DTYPES,
    FOOTER_SIZE,
    LOGICAL,
    MAX_NAME_BYTES,
    MAX_RANK,
    U64,
    DensePlan,
    Manifest,
    ObjectInfo,
    ObjectTable,
    PartInfo,
    PlanMap,
    ShardInfo,
    check_name,
    check_shard_name,
    reject,
)

_DIGEST = re.compile(r"([a-z0-9][a-z0-9._-]*):([0-9a-f]+)\Z")


def _u64(v: object) -> bool:
    return type(v) is int and 0 <= v <= U64


def _attributes(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise reject(
            "schema", what, field="attributes", detail="not a map", got=type(value).__name__
        )
    for k in value:
        check_name(k, what, "attribute key")
    return value


def _digest(value: object, what: str) -> str:
    m = _DIGEST.match(value) if isinstance(value, str) else None
    if m is None:
        raise reject(
            "schema",
            what,
            field="digest",
            detail="not '<algorithm>:<lowercase hex>'",
            got=repr(value)[:80],
        )
    want = DIGESTS.get(m.group(1))
    if want is not None and len(m.group(2)) != want:
        raise reject(
            "schema",
            what,
            field="digest",
            detail=f"{m.group(1)} needs {want} hex digits",
            got=value,
        )
    return value  # type: ignore[return-value]


#: ``ztplan.scan_table``, looked up once (``_kernels.load`` chooses once per process anyway)
scan_table = _kernels.load("ztplan").scan_table


def decode_manifest(
    raw: bytes, *, file_size: int, manifest: tuple[int, int], moff: int, max_objects: int
) -> Manifest:
    """Decode the manifest bytes ``raw`` (at ``moff``) and validate them (spec §3.6 items 2-6).

    The commonest objects (plain dense ones) are recognised, checked and recorded by the
    ``ztplan`` kernel while it decodes; every other object is decoded in full and checked by
    :func:`_object` and :func:`check_layout`, which name the rule an object breaks.
    """
    try:
        scan = scan_table(
            raw,
            _dcbor.MAX_DEPTH,
            file_size - FOOTER_SIZE,
            ALIGN,
            MAX_RANK,
            MAX_NAME_BYTES,
            DTYPES,
            DIGESTS,
        )
    except _dcbor.CborReject as exc:
        raise reject(exc.rule, "manifest", offset=moff + exc.offset, detail=exc.detail) from None
    if scan is None:  # not a map, or no "objects" map: the generic checks say which
        return parse_manifest(
            _dcbor.decode(raw),
            file_size=file_size,
            manifest=manifest,
            moff=moff,
            max_objects=max_objects,
        )
    return finish_scan(
        scan, file_size=file_size, manifest=manifest, moff=moff, max_objects=max_objects
    )


def finish_scan(
    scan: tuple[Any, dict[Any, Any], dict[Any, Any], bool, int, int],
    *,
    file_size: int,
    manifest: tuple[int, int],
    moff: int,
    max_objects: int,
) -> Manifest:
    """The checks after ``ztplan.scan_table`` (its result ``scan``), as in
    :func:`decode_manifest`."""
    table, others, rest, in_order, lo, hi = scan
    return _validate(
        rest,
        PlanMap(table),
        others,
        blobs_disjoint(in_order, lo, hi, manifest),
        file_size=file_size,
        manifest=manifest,
        moff=moff,
        max_objects=max_objects,
    )


def blobs_disjoint(in_order: bool, lo: int, hi: int, manifest: tuple[int, int]) -> bool:
    """True when the scan found the plans' blobs in order (so not overlapping each other) and
    the manifest blob outside ``[lo, hi)``, their span (``lo < 0``: no blob)."""
    return in_order and (lo < 0 or not manifest[1] or manifest[0] >= hi or sum(manifest) <= lo)


def parse_manifest(
    root: object, *, file_size: int, manifest: tuple[int, int], moff: int, max_objects: int
) -> Manifest:
    """Validate a decoded manifest (spec §3.6 items 3-6) and build the records."""
    where = "manifest"
    if not isinstance(root, dict):
        raise reject(
            "schema", where, offset=moff, detail="root is not a map", got=type(root).__name__
        )
    if "objects" not in root:
        raise reject("schema", where, offset=moff, field="objects", detail="missing")
    objects = root["objects"]
    if not isinstance(objects, dict):
        raise reject("schema", where, offset=moff, field="objects", detail="not a map")
    return _validate(
        root,
        {},
        objects,
        False,
        file_size=file_size,
        manifest=manifest,
        moff=moff,
        max_objects=max_objects,
    )


def _validate(
    root: dict[Any, Any],
    plans: Mapping[str, DensePlan],
    others: dict[Any, Any],
    disjoint: bool,
    *,
    file_size: int,
    manifest: tuple[int, int],
    moff: int,
    max_objects: int,
) -> Manifest:
    """The checks after decoding: ``plans`` are objects ``ztplan`` accepted, ``others`` the
    objects left to check here (in manifest order); ``disjoint`` says that every blob is known
    not to overlap another (so the overlap check is skipped)."""
    where = "manifest"
    count = len(plans) + len(others)
    if count > max_objects:
        raise reject(
            "schema",
            where,
            offset=moff,
            field="objects",
            detail="too many objects",
            expected=f"<= {max_objects}",
            got=count,
            cls=LimitError,
        )
    attributes = None
    if "attributes" in root:
        attributes = _attributes(root["attributes"], "file attributes")
    shards: dict[str, ShardInfo] | None = None
    if "shards" in root:
        table = root["shards"]
        if not isinstance(table, dict):
            raise reject("schema", "shard table", offset=moff, detail="not a map")
        shards = {}
        for key, entry in table.items():
            name = check_shard_name(key)
            w = f"shard {name!r}"
            if not isinstance(entry, dict):
                raise reject("schema", w, detail="entry is not a map")
            size: Any = entry.get("size")
            if not _u64(size):
                raise reject(
                    "schema", w, field="size", detail="missing or not a u64", got=repr(size)[:40]
                )
            if "digest" not in entry:
                raise reject("schema", w, field="digest", detail="missing")
            shards[name] = ShardInfo(name, size, _digest(entry["digest"], w))
    built: dict[str, ObjectInfo] = {}
    for oname, obj in others.items():
        built[check_name(oname, "object", "object name")] = _object(oname, obj, shards, file_size)
    if not disjoint and _overlapping(plans, built, manifest):
        _overlaps(ObjectTable(plans, built), manifest, shards)  # raises, naming the culprits
    for info in built.values():
        check_open(info)
    return Manifest(ObjectTable(plans, built), shards, attributes)


def check_entry(name: str, entry: object) -> ObjectInfo:
    """The checks the reader makes on one object of a manifest (its name, the schema, shape,
    part names and types, blob alignment, the layout rules of :func:`check_layout`: those made
    at open and those made when a sparse object is assembled), applied to ``entry``; the writer
    runs them on every object before writing it, so that it never writes what the reader
    refuses. Blob bounds are not checked (no file size)."""
    check_name(name, "object", "object name")
    info = _object(name, entry, None, U64)
    check_layout(info)
    return info


def _object(
    name: str, obj: object, shards: dict[str, ShardInfo] | None, file_size: int
) -> ObjectInfo:
    what = f"object {name!r}"
    if not isinstance(obj, dict):
        raise reject("schema", what, detail="not a map", got=type(obj).__name__)
    shape = obj.get("shape")
    if not isinstance(shape, list) or not all(_u64(d) for d in shape):
        raise reject(
            "schema",
            what,
            field="shape",
            detail="missing or not an array of u64",
            got=repr(shape)[:80],
        )
    if len(shape) > MAX_RANK:
        raise reject(
            "shape", what, field="rank", detail="above 64", expected="<= 64", got=len(shape)
        )
    if math.prod(shape) > U64:
        raise reject("shape", what, field="shape", detail="element count overflows u64", got=shape)
    layout = obj.get("layout")
    if not isinstance(layout, str):
        raise reject(
            "schema", what, field="layout", detail="missing or not text", got=repr(layout)[:60]
        )
    parts_in = obj.get("parts")
    if not isinstance(parts_in, dict) or not parts_in:
        raise reject("schema", what, field="parts", detail="missing, not a map, or empty")
    attributes = None
    if "attributes" in obj:
        attributes = _attributes(obj["attributes"], what)
    parts: dict[str, PartInfo] = {}
    for role, p in parts_in.items():
        check_name(role, what, "part name")
        parts[role] = _part(name, role, p, shards, file_size)
    return ObjectInfo(name, tuple(shape), layout, parts, attributes)


def _part(
    oname: str, role: str, p: object, shards: dict[str, ShardInfo] | None, file_size: int
) -> PartInfo:
    what = f"object {oname!r} part {role!r}"
    if not isinstance(p, dict):
        raise reject("schema", what, detail="not a map", got=type(p).__name__)
    dtype, ltype = _part_types(what, p)
    offset, length, shard = _part_blob(what, p, shards)
    encoding, decoded = _part_encoding(what, p)
    digest = None
    if "digest" in p:
        digest = _digest(p["digest"], what)
    _check_placement(what, offset, length, shard, shards, file_size)
    return PartInfo(role, dtype, ltype, offset, length, shard, encoding, decoded, digest)


def _part_types(what: str, p: dict[Any, Any]) -> tuple[str, str | None]:
    """A part's storage type (``dtype``) and logical type (``type``, or None)."""
    dtype = p.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise reject(
            "schema",
            what,
            field="dtype",
            detail="unknown storage type",
            expected=" | ".join(DTYPES),
            got=repr(dtype)[:40],
        )
    ltype = p.get("type")
    if ltype is not None or "type" in p:
        if not isinstance(ltype, str):
            raise reject("schema", what, field="type", detail="not text", got=repr(ltype)[:40])
        reg = LOGICAL.get(ltype)
        if reg is not None and reg.dtype != dtype:
            raise reject(
                "schema",
                what,
                field="type",
                detail=f"{ltype} is stored as {reg.dtype}",
                expected=reg.dtype,
                got=dtype,
            )
    return dtype, ltype


def _part_blob(
    what: str, p: dict[Any, Any], shards: dict[str, ShardInfo] | None
) -> tuple[int, int, str | None]:
    """A part's ``[offset, length]`` and the shard holding it (None: this file)."""
    blob = p.get("blob")
    if not isinstance(blob, list) or len(blob) != 2 or not all(_u64(v) for v in blob):
        raise reject(
            "schema", what, field="blob", detail="not [u64 offset, u64 length]", got=repr(blob)[:60]
        )
    offset, length = blob
    shard = None
    if "shard" in p:
        shard = p["shard"]
        if not isinstance(shard, str):
            raise reject("schema", what, field="shard", detail="not text", got=repr(shard)[:40])
        if shards is None or shard not in shards:
            raise reject(
                "shard-ref", what, field="shard", detail="not in the shard table", got=shard[:80]
            )
    return offset, length, shard


def _part_encoding(what: str, p: dict[Any, Any]) -> tuple[str | None, int | None]:
    """A part's ``encoding`` and ``decoded_length`` (both None for a raw part)."""
    if "encoding" not in p:
        if "decoded_length" in p:
            raise reject("schema", what, field="decoded_length", detail="present without encoding")
        return None, None
    encoding = p["encoding"]
    if not isinstance(encoding, str):
        raise reject("schema", what, field="encoding", detail="not text")
    decoded = p.get("decoded_length")
    if not _u64(decoded):
        raise reject(
            "schema",
            what,
            field="decoded_length",
            detail="required (a u64) when encoding is present",
            got=decoded,
        )
    return encoding, decoded


def _check_placement(
    what: str,
    offset: int,
    length: int,
    shard: str | None,
    shards: dict[str, ShardInfo] | None,
    file_size: int,
) -> None:
    """A blob starts at a multiple of 4096 (not in the header) and ends before the footer of
    the file (or shard) holding it."""
    if offset % ALIGN or offset < ALIGN:
        raise reject(
            "blob-alignment",
            what,
            offset=offset,
            field="blob offset",
            detail="not a multiple of 4096 at or after 4096",
            got=offset,
        )
    region = (shards[shard].size if shard is not None else file_size) - FOOTER_SIZE  # type: ignore[index]
    if offset + length > region:
        raise reject(
            "blob-bounds",
            what,
            offset=offset,
            field="blob",
            detail="runs into the footer or past the end of "
            + (f"shard {shard!r}" if shard else "the file"),
            expected=f"end <= {region}",
            got=offset + length,
        )


def _overlapping(
    plans: Mapping[str, DensePlan], built: dict[str, ObjectInfo], manifest: tuple[int, int]
) -> bool:
    """True when two blobs of one file partly overlap (:func:`_overlaps` then names them)."""
    groups: dict[str | None, list[tuple[int, int]]] = {None: []}
    local = groups[None]
    if manifest[1]:
        local.append((manifest[0], manifest[0] + manifest[1]))
    for plan in plans.values():
        if plan[1]:
            local.append((plan[0], plan[0] + plan[1]))
    for o in built.values():
        for p in o.parts.values():
            if p.length:
                groups.setdefault(p.shard, []).append((p.offset, p.offset + p.length))
    for spans in groups.values():
        spans.sort()
        end = start = -1
        for s, e in spans:
            if s < end and not (s == start and e == end):
                return True
            if e > end:
                end, start = e, s
    return False


def _overlaps(objects: Mapping[str, ObjectInfo], manifest: tuple[int, int], shards: object) -> None:
    groups: dict[str | None, list[tuple[int, int, str]]] = {None: []}
    if manifest[1]:
        groups[None].append((manifest[0], manifest[0] + manifest[1], "the manifest"))
    for o in objects.values():
        for r, p in o.parts.items():
            if p.length:
                groups.setdefault(p.shard, []).append(
                    (p.offset, p.offset + p.length, f"object {o.name!r} part {r!r}")
                )
    for shard, spans in groups.items():
        spans.sort()
        end, who, start = -1, "", -1
        for s, e, w in spans:
            if s < end and not (s == start and e == end):
                where = f" in shard {shard!r}" if shard else ""
                raise reject(
                    "blob-overlap",
                    w,
                    offset=s,
                    field="blob",
                    detail=f"partly overlaps {who}{where}",
                    expected=f"start >= {end} or identical",
                    got=[s, e - s],
                )
            if e > end:
                end, who, start = e, w, s
