"""The descriptor in the registry (:mod:`tenfold.registry`) of a PyTorch distributed
checkpoint written through tenfold's storage (:mod:`tenfold.interop.dcp`): a directory that
holds each rank's tensors as tenfold files plus one JSON document describing the state dict
(:data:`META_NAME`). It is recognised by that document and is no container of its own: no
suffix, no dtypes (``torch.distributed.checkpoint.save`` with
:class:`~tenfold.interop.dcp.TenfoldStorageWriter`, or :func:`tenfold.interop.dcp_files.from_file`,
writes one), and its reader takes the directory's path. Light on purpose: recognising a
directory imports this module and nothing else."""

from __future__ import annotations

import os
from typing import Any

from .registry import Format, register

#: The document a complete checkpoint holds (written last, by the coordinator).
META_NAME = "dcp-metadata.json"
#: Rank files are named ``dcp-rank-<rank:05d><suffix>``.
RANK_PREFIX = "dcp-rank-"


def sniff_dir(path: str) -> bool:
    """Whether the directory ``path`` is such a checkpoint, or an unfinished one (rank files
    and no document: then opening it says it is incomplete)."""
    if os.path.isfile(os.path.join(path, META_NAME)):
        return True
    try:
        with os.scandir(path) as it:
            return any(e.name.startswith(RANK_PREFIX) for e in it)
    except OSError:
        return False


def sniff_url_dir(url: str, storage_options: dict[str, Any] | None) -> bool:
    """:func:`sniff_dir` of an fsspec URL naming a prefix (the document, or rank files)."""
    from .core.optional import require

    fsspec = require("fsspec", extra="remote", what="torch_dcp: a checkpoint under a URL")
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    root = root.rstrip("/")
    if fs.exists(f"{root}/{META_NAME}"):
        return True
    try:
        try:
            names = fs.ls(root, detail=False, refresh=True)  # not a cached listing
        except TypeError:  # a filesystem whose ls takes no refresh
            names = fs.ls(root, detail=False)
    except FileNotFoundError:
        return False
    return any(str(n).rstrip("/").rsplit("/", 1)[-1].startswith(RANK_PREFIX) for n in names)


FORMAT = register(
    Format(
        name="torch_dcp",
        description="PyTorch distributed checkpoint directory (tenfold storage)",
        sniff_dir=sniff_dir,
        sniff_url_dir=sniff_url_dir,
        package="tenfold.interop.dcp_files",
        checks_optional=True,
        metadata="json",
        opens_path=True,
        hooks={"convert_source": "tenfold.interop.dcp_files:convert_source"},
    )
)
