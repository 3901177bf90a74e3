"""zTensor v2 data shards: where a shard named in the manifest is read from, opening it
(size, footer, the link rule, its whole-file digest) and the file a part lies in.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from ...core import links
from ...core.mapped import MappedFile
from ...core.source import is_remote, open_file
from ._readerbase import ZtReader
from ._spec import TAIL_FIRST
from ._v2file import digest_hex, read_footer
from ._v2spec import DIGESTS, PartInfo, ShardInfo, reject

FMT = "zt"


class V2Shards(ZtReader):
    """The shard files of :class:`~tenfold.ztensor.v2reader.V2Reader` (a base class of it)."""

    shards: dict[str, ShardInfo]
    verify_shards: bool
    trust_links: bool
    _mmap: bool
    _shard_paths: Mapping[str, str | os.PathLike[str]]
    _shard_files: dict[str, MappedFile]
    _lock: threading.Lock

    # -- shards -------------------------------------------------------------------------------
    def shard_path(self, name: str) -> str:
        """Where shard ``name`` is read from (the name was validated at open)."""
        if name in self._shard_paths:
            return os.fspath(self._shard_paths[name])
        if self._mf.path is None:
            raise reject(
                "shard-file",
                f"shard {name!r}",
                detail="file opened from a buffer: pass shards={name: path}",
            )
        base = self._mf.path
        stem = base[:-3] if base.endswith(".zt") else base
        return f"{stem}-{name}.zt"

    def check_shard(self, name: str) -> None:
        """Open data shard ``name`` (checking its size) and check its whole-file digest."""
        self._check_shard_digest(name, self._shard(name))

    def _shard(self, name: str) -> MappedFile:
        with self._lock:
            mf = self._shard_files.get(name)
            if mf is not None:
                return mf
            entry = self.shards[name]
            path = self.shard_path(name)
            self._check_shard_link(name, path)
            try:
                # a URL when the manifest's is
                mf = open_file(path, fmt=FMT, mmap=self._mmap, tail_first=TAIL_FIRST)
            except FileNotFoundError as exc:
                raise reject(
                    "shard-file",
                    f"shard {name!r}",
                    detail=f"file {path} not found (a v2 data shard lies beside its root file)",
                ) from exc
            try:
                if mf.size != entry.size:
                    raise reject(
                        "shard-file",
                        f"shard {name!r}",
                        field="size",
                        detail=f"file {path} has the wrong size",
                        expected=entry.size,
                        got=mf.size,
                    )
                read_footer(mf)
                if self.verify_shards:
                    self._check_shard_digest(name, mf)
            except BaseException:
                mf.close()
                raise
            self._shard_files[name] = mf
            return mf

    def _check_shard_link(self, name: str, path: str) -> None:
        """A data shard found beside the root file (not named by the caller's ``shards=``)
        is followed through a symbolic link only where the link rule allows
        (:mod:`tenfold.core.links`; ``trust_links=True`` follows any)."""
        base = self._mf.path
        if self.trust_links or name in self._shard_paths or base is None or is_remote(base):
            return
        d = os.path.dirname(os.path.abspath(base))
        escaped = links.escape(d, os.path.basename(path), links.roots(d))
        if escaped is not None:
            raise reject(
                "shard-file",
                f"shard {name!r}",
                detail=f"a symbolic link leading outside the file's directory refused: {escaped}"
                "; pass trust_links=True to follow links in a tree you trust",
            )

    def _check_shard_digest(self, name: str, mf: MappedFile) -> None:
        entry = self.shards[name]
        algo, want = entry.digest.split(":", 1)
        if algo not in DIGESTS:
            raise reject(
                "unsupported",
                f"shard {name!r}",
                field="digest",
                detail="unknown algorithm",
                got=algo,
            )
        got = digest_hex(algo, mf.buffer())
        if got != want:
            raise reject(
                "digest", f"shard {name!r}", field=f"{algo} digest", expected=want, got=got
            )

    def _file(self, part: PartInfo) -> MappedFile:
        return self._mf if part.shard is None else self._shard(part.shard)
