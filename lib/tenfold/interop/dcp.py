"""tenfold as the storage of ``torch.distributed.checkpoint`` (DCP): ``tenfold.torch.dcp``.

>>> import torch.distributed.checkpoint as dcp  # doctest: +SKIP
>>> from tenfold.torch import dcp as tdcp  # doctest: +SKIP
>>> w = tdcp.TenfoldStorageWriter("ckpt/step-100")  # doctest: +SKIP
>>> dcp.save(state_dict, storage_writer=w)  # doctest: +SKIP
>>> dcp.load(state_dict, storage_reader=tdcp.TenfoldStorageReader(w.path))  # doctest: +SKIP

* :class:`TenfoldStorageWriter`: every rank writes its chunks as one tenfold file (zTensor v2,
  an xxh3 digest per object, by default; ``file_format="safetensors"`` or another registered
  tensor format) into a staging directory beside the checkpoint; the coordinator's ``finish``
  checks every rank's results against DCP's metadata, writes the checkpoint's document
  (JSON: :mod:`tenfold.interop.dcp_files` describes it) and renames the staging directory into
  place. A checkpoint directory is complete or absent.
* :class:`TenfoldStorageReader`: reads the document (no pickle), and for each item DCP plans
  reads the chunk from its rank's file (any world size: DCP's planner reshards) and checks it.
* :func:`from_file`: one file (``model.safetensors``, ``model.zt``, a sharded index...) as a
  checkpoint DCP loads.

Pickle: tenfold's document and tensor data involve none. Entries that are not tensors (e.g. an
``int`` epoch or a learning-rate schedule in the state dict) reach a storage writer as bytes
DCP itself pickled with ``torch.save``; tenfold stores those bytes as they are and hands them
back, and DCP's planner unpickles them on load (``torch.load(..., weights_only=False)`` in
DCP's ``DefaultLoadPlanner.load_bytes``): that part is DCP's.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import uuid
from typing import Any

import numpy as np

from ..core.optional import require
from ..core.source import filesystem, is_remote
from ..errors import factory
from .dcp_files import (
    META_NAME,
    Attempt,
    Chunk,
    Document,
    Entry,
    RankFiles,
    check_target,
    commit,
    from_file,
    rank_file_name,
    read_document,
    staging_path,
    write_rank_file,
)
from .dcp_files import remote as _remote

try:  # torch is optional: without it this module imports and the classes refuse to start
    import torch
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
    )
    from torch.distributed.checkpoint.planner import (
        LoadItemType,
        LoadPlan,
        LoadPlanner,
        ReadItem,
        SavePlan,
        SavePlanner,
        WriteItem,
        WriteItemType,
    )
    from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
    from torch.futures import Future
except ImportError:  # pragma: no cover - a base install
    torch = None  # type: ignore[assignment]
    StorageReader = StorageWriter = object  # type: ignore[assignment,misc]

from ._torch import from_torch

__all__ = ["TenfoldStorageWriter", "TenfoldStorageReader", "from_file", "metadata_of"]

FMT = "dcp"
E = factory(FMT)


def _need_torch() -> None:
    """torch and its ``torch.distributed.checkpoint``, or one line naming what is missing."""
    require("torch", extra="torch", what="tenfold.torch.dcp")
    if torch is None:
        raise E.unsupported("tenfold.torch.dcp", detail="this torch has no torch.distributed")


def _bytes_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of CPU tensor ``t``'s elements as opaque items of its element size
    (``V2`` for bfloat16, ``V16`` for complex128...), with its shape and strides: any dtype
    (NumPy knows no bfloat16, torch no 128-bit integer), any layout, no copy."""
    size = t.element_size()
    storage = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    return np.ndarray(
        tuple(t.shape),
        np.dtype((np.void, size)),
        buffer=storage.numpy(),
        offset=t.storage_offset() * size,
        strides=tuple(s * size for s in t.stride()),
    )


def _done(value: Any) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


def _object_name(item: WriteItem) -> str:
    """``fqn`` for a whole tensor or bytes; ``fqn@o0,o1`` for a chunk at those offsets."""
    fqn = item.index.fqn
    td = item.tensor_data
    if td is None:
        return fqn
    offsets = tuple(td.chunk.offsets)
    if not any(offsets) and tuple(td.chunk.sizes) == tuple(td.size):
        return fqn
    return f"{fqn}@" + ",".join(map(str, offsets))


def _array(data: Any, item: WriteItem) -> np.ndarray:
    if item.type == WriteItemType.BYTE_IO:
        return np.frombuffer(data.getvalue(), np.uint8)
    return from_torch(data, item.index.fqn)


class TenfoldStorageWriter(StorageWriter):
    """A DCP ``StorageWriter`` writing tenfold files (see the module doc).

    Parameters
    ----------
    path
        The checkpoint directory (created by the commit; its parent must exist). DCP's
        ``checkpoint_id=`` replaces it.
    file_format
        A registered single-file tensor format for the rank files (``"safetensors"``...);
        None (default): zTensor v2 with an xxh3 digest per object.
    overwrite
        ``False`` (default): a save to an existing path is refused before any rank writes.
        ``True``: an existing tenfold checkpoint (or an empty directory) there is replaced when
        the new one is complete, atomically where the system can exchange two paths (Linux),
        else moved aside first: the path holds the old checkpoint, the new one, or (a moment,
        on other systems) nothing; never a mix.
    fsync
        Flush every file and directory to stable storage before the commit (default True;
        a URL's objects are durable when their upload ends).
    storage_options
        For an fsspec URL ``path`` (``s3://bucket/ckpt``): the filesystem's options. Each
        rank writes its file in a local temporary directory and uploads it under the URL; the
        coordinator uploads the document last (:mod:`tenfold.interop.dcp_files._remote`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        file_format: str | None = None,
        overwrite: bool = False,
        fsync: bool = True,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        _need_torch()
        super().__init__()
        rank_file_name(0, file_format)  # an unknown or unfit format is refused here
        self.path = os.fspath(path)
        self.file_format, self.overwrite, self.fsync = file_format, overwrite, fsync
        self.storage_options = storage_options
        if self._remote:
            filesystem(self.path, fmt=FMT, storage_options=storage_options)  # extra missing?
        self.save_id = uuid.uuid4().hex
        self.rank, self.is_coordinator = 0, True
        self._attempt: Attempt | None = None  # the coordinator's, from planning to commit
        self._solo = False  # one rank: its own failure ends the attempt

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self._release()  # the previous attempt (if any) can no longer commit
        self.save_id = uuid.uuid4().hex

    def _release(self) -> None:
        if self._attempt is not None:
            self._attempt.release()
            self._attempt = None

    @property
    def _remote(self) -> bool:
        return is_remote(self.path)

    @property
    def _tag(self) -> str:
        """This attempt's tag in its rank objects' names under a URL."""
        return self.save_id[:12]

    def _abandon(self) -> None:
        """Remove what this attempt wrote: only when no other rank can write any more (one
        rank, or after every rank's results reached the coordinator)."""
        if self._remote:
            _remote.remove_attempt(self.path, self._tag, self.storage_options)
        else:
            shutil.rmtree(staging_path(self.path, self.save_id), ignore_errors=True)
        self._release()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_attempt": None}  # a lock stays with its process

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.rank = int(kwargs.get("rank") or 0)
        if not kwargs.get("use_collectives", True):
            raise E.unsupported(
                f"checkpoint {self.path!r}",
                detail="use_collectives=False: "
                "the coordinator must see every rank's results to commit",
            )

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if not self._remote:  # every rank refuses before anything is written
            check_target(self.path, self.overwrite)
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        self._solo = len(plans) == 1
        if self._remote:  # one listing, by the coordinator; its refusal reaches every rank
            _remote.check_target(self.path, self.overwrite, self.storage_options)
            data: dict[str, Any] = {"staging": self.path, "attempt": self._tag}
        else:
            data = {"staging": staging_path(self.path, self.save_id), "attempt": None}
            if self._attempt is None:  # its directory and record, before any rank writes
                self._attempt = Attempt(data["staging"], self.save_id)
        return [
            dataclasses.replace(p, storage_data={**data, "rank": i}) for i, p in enumerate(plans)
        ]

    def _write(self, where: str, file: str, items: Any) -> tuple[dict[str, Any], int]:
        """Write rank file ``file`` of ``items`` into the staging directory ``where``, or
        upload it under the URL ``where``; its objects' ranges and digests, and its size."""
        if self._remote:
            return _remote.put_rank_file(where, file, items, self.file_format, self.storage_options)
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, file)
        got = write_rank_file(path, items, self.file_format, self.fsync)
        return got, os.path.getsize(path)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        staging, rank = plan.storage_data["staging"], plan.storage_data["rank"]
        if not plan.items:
            return _done([])
        file = rank_file_name(rank, self.file_format, plan.storage_data.get("attempt"))
        placed: list[tuple[WriteItem, str, str, tuple[int, ...]]] = []

        def items() -> Any:
            for item in plan.items:  # resolved one at a time: a copy made for one is dropped
                arr = _array(planner.resolve_data(item), item)
                obj = _object_name(item)
                placed.append((item, obj, _canonical(arr), tuple(arr.shape)))
                yield obj, arr

        try:
            got, size = self._write(staging, file, items())
        except BaseException:
            if self._solo and self.is_coordinator:
                self._abandon()  # no other rank: nothing of this attempt is live any more
            raise
        results = []
        for item, obj, dtype, shape in placed:
            (lo, hi), digest = got[obj]
            record = {
                "file": file,
                "rank": rank,
                "file_size": size,
                "object": obj,
                "byte_range": (lo, hi),
                "digest": digest,
                "dtype": dtype,
                "shape": shape,
            }
            results.append(
                WriteResult(index=item.index, size_in_bytes=hi - lo, storage_data=record)
            )
        return _done(results)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        try:
            doc = document_of(metadata, results, self.storage_meta())
            if self._remote:
                _remote.commit(
                    self.path, doc, overwrite=self.overwrite, storage_options=self.storage_options
                )
            else:
                commit(
                    staging_path(self.path, self.save_id),
                    self.path,
                    doc,
                    overwrite=self.overwrite,
                    fsync=self.fsync,
                )
        except BaseException:
            self._abandon()  # every rank's results are in: nobody writes there any more
            raise
        self._release()
        metadata.storage_data = _storage_data(doc)
        metadata.storage_meta = self.storage_meta()
        metadata.version = doc.dcp_version

    @property
    def checkpoint_id(self) -> str:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))


def _canonical(arr: np.ndarray) -> str:
    from ..core.dtypes import canonical

    return canonical(arr.dtype)


def _torch_dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def document_of(
    metadata: Metadata, results: list[list[WriteResult]], storage_meta: StorageMeta | None
) -> Document:
    """The checkpoint's document from DCP's global ``metadata`` and every rank's results,
    each chunk DCP planned matched to the one rank result that stored it (shape and dtype
    checked); a chunk no rank stored, or a result DCP did not plan, is refused."""
    by_index: dict[MetadataIndex, dict[str, Any]] = {}
    files: dict[str, dict[str, int]] = {}
    for wrs in results:
        for wr in wrs:
            rec = wr.storage_data
            by_index[wr.index] = rec
            files[rec["file"]] = {"rank": rec["rank"], "size": rec["file_size"]}
    entries = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            rec = _take(by_index, MetadataIndex(fqn), f"entry {fqn!r}")
            entries[fqn] = Entry(fqn, "bytes", [_chunk((), (), rec)])
            continue
        dtype = _torch_dtype_name(md.properties.dtype)
        chunks = []
        for c in md.chunks:
            where = f"tensor {fqn!r} chunk at {list(c.offsets)}"
            rec = _take(by_index, MetadataIndex(fqn, c.offsets), where)
            if tuple(rec["shape"]) != tuple(c.sizes) or rec["dtype"] != dtype:
                raise E.format(
                    where,
                    detail="stored chunk differs from DCP's plan",
                    expected=f"{dtype} {list(c.sizes)}",
                    got=f"{rec['dtype']} {list(rec['shape'])}",
                )
            chunks.append(_chunk(tuple(c.offsets), tuple(c.sizes), rec))
        entries[fqn] = Entry(
            fqn,
            "tensor",
            chunks,
            dtype,
            tuple(md.size),
            bool(md.properties.requires_grad),
            bool(md.properties.pin_memory),
        )
    if by_index:
        extra = ", ".join(repr(i.fqn) for i in list(by_index)[:5])
        raise E.format("rank results", detail=f"entries DCP's metadata does not name: {extra}")
    sm = (
        None
        if storage_meta is None
        else {
            "checkpoint_id": None
            if storage_meta.checkpoint_id is None
            else os.fspath(storage_meta.checkpoint_id),
            "save_id": storage_meta.save_id,
            "modules": list(storage_meta.modules),
        }
    )
    return Document(
        max(len(results), 1),
        files,
        entries,
        _planner_data(metadata.planner_data),
        sm,
        metadata.version or "1.0.0",
    )


def _take(by_index: dict[MetadataIndex, dict[str, Any]], key: MetadataIndex, where: str) -> Any:
    try:
        return by_index.pop(key)
    except KeyError:
        raise E.format(where, detail="no rank stored it") from None


def _chunk(offsets: tuple[int, ...], sizes: tuple[int, ...], rec: dict[str, Any]) -> Chunk:
    return Chunk(
        offsets, sizes, rec["file"], rec["object"], tuple(rec["byte_range"]), rec["digest"]
    )


def _planner_data(pd: Any) -> dict[str, list[Any]] | None:
    """DCP's default planner data (each flattened key's path: strings and list indexes) as
    JSON; anything else is refused (tenfold would have to pickle it)."""
    if pd is None:
        return None
    ok = isinstance(pd, dict) and all(
        isinstance(k, str)
        and isinstance(v, (tuple, list))
        and all(type(x) in (str, int) for x in v)
        for k, v in pd.items()
    )
    if not ok:
        raise E.unsupported(
            "planner_data",
            detail="not the default planner's key paths; tenfold stores no pickled planner data",
        )
    return {k: list(v) for k, v in pd.items()}


def _storage_data(doc: Document) -> dict[MetadataIndex, Chunk]:
    out: dict[MetadataIndex, Chunk] = {}
    for name, e in doc.entries.items():
        for c in e.chunks:
            out[MetadataIndex(name, c.offsets) if e.is_tensor else MetadataIndex(name)] = c
    return out


def metadata_of(doc: Document, load_id: str | None = None) -> Metadata:
    """DCP's ``Metadata`` for a checkpoint's document (``storage_data``: each chunk's
    :class:`~tenfold.interop.dcp_files.Chunk` by its ``MetadataIndex``)."""
    sdm: dict[str, Any] = {}
    for name, e in doc.entries.items():
        if not e.is_tensor:
            sdm[name] = BytesStorageMetadata()
            continue
        dtype = getattr(torch, e.dtype or "", None)
        if not isinstance(dtype, torch.dtype):
            raise E.unsupported(f"entry {name!r}", detail=f"dtype {e.dtype!r} is not torch's")
        props = TensorProperties(
            dtype=dtype, requires_grad=e.requires_grad, pin_memory=e.pin_memory
        )
        chunks = [
            ChunkStorageMetadata(torch.Size(c.offsets), torch.Size(c.sizes)) for c in e.chunks
        ]
        sdm[name] = TensorStorageMetadata(props, torch.Size(e.shape), chunks)
    sm = doc.storage_meta or {}
    meta = StorageMeta(
        checkpoint_id=sm.get("checkpoint_id"),
        save_id=sm.get("save_id"),
        load_id=load_id,
        modules=list(sm.get("modules") or []),
    )
    pd = None if doc.planner_data is None else {k: tuple(v) for k, v in doc.planner_data.items()}
    return Metadata(sdm, pd, _storage_data(doc), meta, doc.dcp_version)


class TenfoldStorageReader(StorageReader):
    """A DCP ``StorageReader`` of a checkpoint :class:`TenfoldStorageWriter` (or
    :func:`from_file`) wrote; any world size loads it (DCP plans the resharding).

    Parameters
    ----------
    path
        The checkpoint directory (DCP's ``checkpoint_id=`` replaces it). One without its
        document (an unfinished save) is refused as incomplete.
    verify_partial
        A read item that needs part of a stored chunk (resharding): ``True`` (default) reads
        the whole chunk from the page cache and checks its digest before copying the part
        out; ``False`` reads only the rows the part touches, checked for bounds, shape and
        dtype but not against the digest (which covers the whole chunk). Items that need a
        whole chunk are always checked.
    max_open_files
        Rank files kept open at once by one rank.
    storage_options
        For an fsspec URL ``path``: the filesystem's options. Only the document and the byte
        ranges each rank needs are fetched (tenfold's remote range reader).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        verify_partial: bool = True,
        max_open_files: int = 32,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        _need_torch()
        super().__init__()
        self.path = os.fspath(path)
        self.verify_partial, self.max_open_files = verify_partial, max_open_files
        self.storage_options = storage_options
        if is_remote(self.path):
            filesystem(self.path, fmt=FMT, storage_options=storage_options)  # extra missing?
        self.load_id = uuid.uuid4().hex
        self.doc: Document | None = None
        self.storage_data: dict[MetadataIndex, Chunk] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.load_id = uuid.uuid4().hex
        self.doc, self.storage_data = None, {}

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self.doc = read_document(self.path, self.storage_options)
        return metadata_of(self.doc, self.load_id)

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        if self.doc is None:
            self.doc = read_document(self.path, self.storage_options)
        self.storage_data = _storage_data(self.doc)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        if self.doc is None:
            self.doc = read_document(self.path, self.storage_options)
            self.storage_data = _storage_data(self.doc)
        options = {} if self.storage_options is None else {"storage_options": self.storage_options}
        files = RankFiles(self.path, self.doc, options, max_open=self.max_open_files)
        try:
            order = sorted(plan.items, key=lambda r: self._chunk(r).file)  # file by file
            for req in order:
                self._read_item(files, req, planner)
        finally:
            files.close()
        return _done(None)

    def _chunk(self, req: ReadItem) -> Chunk:
        try:
            return self.storage_data[req.storage_index]
        except KeyError:
            raise E.format(
                f"checkpoint {self.path!r}",
                detail=f"DCP asked for an entry the document lacks: {req.storage_index}",
            ) from None

    def _read_item(self, files: RankFiles, req: ReadItem, planner: LoadPlanner) -> None:
        chunk, fqn = self._chunk(req), req.storage_index.fqn
        if req.type == LoadItemType.BYTE_IO:
            data = files.read(fqn, chunk)
            planner.load_bytes(req, io.BytesIO(np.ascontiguousarray(data).tobytes()))
            return
        offsets, lengths = tuple(req.storage_offsets), tuple(req.lengths)
        whole = not any(offsets) and lengths == chunk.sizes
        index = (
            None if whole else tuple(slice(o, o + n) for o, n in zip(offsets, lengths, strict=True))
        )
        target = planner.resolve_tensor(req).detach()
        if not (whole and _read_into(files, fqn, chunk, target)):
            arr = files.read(fqn, chunk, index, verify=self.verify_partial)
            _copy_into(target, np.asarray(arr))
        planner.commit_tensor(req, target)

    @property
    def checkpoint_id(self) -> str:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        # a URL cannot be checked without its storage options: pass this reader explicitly
        return (
            isinstance(checkpoint_id, (str, os.PathLike))
            and not is_remote(checkpoint_id)
            and os.path.isfile(os.path.join(checkpoint_id, META_NAME))
        )


def _read_into(files: RankFiles, fqn: str, chunk: Chunk, target: torch.Tensor) -> bool:
    """Read ``chunk`` whole straight into ``target`` when it is a contiguous CPU tensor of
    the chunk's shape (its digest checked in the same pass: :meth:`RankFiles.read_into`);
    False when it is not, or the rank file cannot (the caller reads and copies)."""
    if (
        target.device.type != "cpu"
        or not target.is_contiguous()
        or tuple(target.shape) != tuple(chunk.sizes)
    ):
        return False
    return files.read_into(fqn, chunk, _bytes_view(target))


def _copy_into(target: torch.Tensor, arr: np.ndarray) -> None:
    """Copy ``arr`` into ``target`` (any strides, any device, any element size) through an
    opaque same-size item view of both (:func:`_bytes_view`): no dtype conversion, no
    read-only buffer handed to torch."""
    if tuple(target.shape) != arr.shape:
        raise E.format("read item", field="shape", expected=tuple(target.shape), got=arr.shape)
    if target.element_size() != arr.dtype.itemsize:
        raise E.format(
            "read item", field="item size", expected=target.element_size(), got=arr.dtype.itemsize
        )
    dst = target if target.device.type == "cpu" else torch.empty_like(target, device="cpu")
    item = np.dtype((np.void, arr.dtype.itemsize))
    np.copyto(_bytes_view(dst), arr.view(item).reshape(arr.shape), casting="no")
    if dst is not target:
        target.copy_(dst)
