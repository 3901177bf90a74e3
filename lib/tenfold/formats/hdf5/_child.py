"""The checking process of :mod:`tenfold.formats.hdf5._isolate`: run as ``python -c`` (its
source text, then ``main()``), it imports only the standard library, NumPy and h5py, never
tenfold, and makes every libhdf5 call the reader will make on the file, so that a file which
crashes libhdf5, hangs it or makes it allocate without bound does so here and not in the
process that opened it.

Arguments: ``<memory cap in bytes, 0: none> <max decoded bytes of one dataset> <path or "-">``;
``-`` reads the file's bytes from stdin. What it walks, in the reader's order: the root group's
attributes, every object ``h5o.visit`` finds and the attributes of those that count some, and
of every dataset its type, shape, storage (virtual, external, chunks, filters, offset, stored
size) and, where the reader decodes rather than maps it (chunked, filtered, or never
written), every element, read in slabs of at most :data:`SLAB` bytes along the first axis.
Python exceptions are expected (the reader meets them too, as errors) and are counted, not
fatal. The last line of stdout is one JSON object: ``{"stat": [dev, ino, size, mtime_ns] or
null, "datasets": n, "errors": n}``, or ``{"memory": true}`` when an allocation failed under
the cap (exit status 3).
"""

from __future__ import annotations

import io
import json
import math
import os
import resource
import sys

#: the most bytes one read of the check holds (rows of the first axis, whole chunks)
SLAB = 64 << 20


def _vmsize() -> int:
    """This process's address space (Linux), or 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _attrs(obj, counts):
    for key in list(obj.attrs):
        try:
            obj.attrs[key]
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - the reader meets (and skips) the same
            counts["errors"] += 1


def _numeric(dt) -> bool:
    return dt.kind in "biufc" and dt.fields is None and dt.subdtype is None


def _decode(dset, shape, itemsize) -> None:
    """Every element, in slabs of whole chunks along the first axis."""
    if not shape:
        dset[()]
        return
    row = math.prod(shape[1:]) * itemsize
    rows = max(1, SLAB // max(row, 1))
    if dset.chunks is not None:
        c = dset.chunks[0]
        rows = max(c, rows // c * c)
    for start in range(0, shape[0], rows):
        dset[start : start + rows]


def _dataset(h5py, f, path, counts, max_bytes) -> None:
    d = h5py.Dataset(h5py.h5o.open(f.id, path), readonly=True)
    counts["datasets"] += 1
    props = {}
    for name in ("dtype", "shape", "is_virtual", "external", "chunks", "compression",
                 "shuffle", "fletcher32"):  # fmt: skip
        try:
            props[name] = getattr(d, name)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001
            counts["errors"] += 1
            return
    for fn in ("get_offset", "get_storage_size"):
        try:
            props[fn] = getattr(d.id, fn)()
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001
            counts["errors"] += 1
            return
    dt, shape = props["dtype"], props["shape"]
    if dt.kind not in "biufc":
        for check in (h5py.check_string_dtype, h5py.check_vlen_dtype, h5py.check_ref_dtype):
            check(dt)
    if shape is None or props["is_virtual"] or props["external"] or not _numeric(dt):
        return  # refused by the reader before any read
    mapped = props["chunks"] is None and props["compression"] is None
    if mapped and props["get_offset"] is not None:
        return  # the reader maps these bytes itself
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes > max_bytes:
        return  # refused by the reader's limits before any read
    try:
        _decode(d, tuple(int(n) for n in shape), dt.itemsize)
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001
        counts["errors"] += 1


def _walk(h5py, f, counts, max_bytes) -> None:
    _attrs(f, counts)
    found = []
    h5py.h5o.visit(f.id, lambda p, i: found.append((p, i.type, i.num_attrs)), info=True)
    for path, otype, num_attrs in found:
        try:
            path.decode("utf-8")
        except UnicodeDecodeError:
            return  # the reader refuses the file here
        if otype == h5py.h5o.TYPE_DATASET:
            try:
                _dataset(h5py, f, path, counts, max_bytes)
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001
                counts["errors"] += 1
        if num_attrs:
            try:
                _attrs(f[path.decode("utf-8")], counts)
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001
                counts["errors"] += 1


def _check(h5py, source, counts, max_bytes) -> list | None:
    try:
        f = h5py.File(source, "r")
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - the reader refuses the file with h5py's reason
        counts["errors"] += 1
        return None
    with f:
        stat = None
        if isinstance(source, str):
            st = os.fstat(f.id.get_vfd_handle())
            stat = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
        try:
            _walk(h5py, f, counts, max_bytes)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001
            counts["errors"] += 1
    return stat


def main() -> None:
    cap, max_bytes, where = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import h5py  # noqa: F401 - before the cap: imports map their libraries

    source = io.BytesIO(sys.stdin.buffer.read()) if where == "-" else where
    size = _vmsize()
    if cap and size:
        limit = size + cap
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)  # inherited from a parent that capped itself
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (OSError, ValueError):
            pass  # a system that does not enforce it (macOS): the time limit still holds
    counts = {"datasets": 0, "errors": 0}
    try:
        stat = _check(h5py, source, counts, max_bytes)
    except MemoryError:
        sys.stdout.write(json.dumps({"memory": True}) + "\n")
        sys.stdout.flush()
        os._exit(3)
    sys.stdout.write(json.dumps({"stat": stat, **counts}) + "\n")
    sys.stdout.flush()
    os._exit(0)  # no teardown of h5py's objects: it has nothing left to tell
