"""Where a file of a checkpoint directory may lead: the symbolic-link rule.

A multi-file checkpoint (a sharded index and its shards, a zTensor v2 file and its data shards)
names its other files relative to one directory. A shard that is a symbolic link, or lies under
one, is followed only when its target resolves inside that directory or, in the Hugging Face
cache layout (``<repo>/snapshots/<rev>/x -> ../../blobs/<sha>``), inside that repository's cache
folder. Anything else is refused naming the link, unless the caller trusts the tree
(``trust_links=True``): an untrusted directory (a clone, an extracted tar) must not make tenfold
read any readable file on the machine.
"""

from __future__ import annotations

import os
import re

__all__ = ["roots", "escape", "link_of", "hf_repo", "inside"]

#: The folder of one repository in the Hugging Face cache (``models--org--name``...).
_HF_REPO = re.compile(r"(models|datasets|spaces)--.+")


def inside(path: str, root: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or lies under it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def hf_repo(real_dir: str) -> str | None:
    """The repository's cache folder when ``real_dir`` (a resolved path) lies in a snapshot of
    the Hugging Face cache layout (``<repo>/snapshots/<rev>[/sub...]``), else None."""
    d = real_dir
    while True:
        up = os.path.dirname(d)
        if up == d:
            return None
        if os.path.basename(up) == "snapshots":
            repo = os.path.dirname(up)
            return repo if _HF_REPO.fullmatch(os.path.basename(repo)) else None
        d = up


def roots(base: str) -> list[str]:
    """Where files named relative to the directory ``base`` may resolve: ``base`` itself
    (resolved) and, in the Hugging Face cache layout, its repository's folder."""
    real_dir = os.path.realpath(base)
    repo = hf_repo(real_dir)
    return [real_dir] if repo is None else [real_dir, repo]


def link_of(base: str, rel: str) -> str:
    """The first part of ``rel`` (``a``, ``a/b``...) that is a symbolic link under ``base``
    (what an error names), or ``rel`` itself."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        if os.path.islink(os.path.join(base, sub)):
            return sub
    return rel


def escape(base: str, rel: str, allowed: list[str]) -> str | None:
    """None when ``base/rel`` resolves inside one of ``allowed`` (see :func:`roots`), else a
    description of the escape for an error: ``'rel' (under the link 'a') -> '/real/path'``."""
    real = os.path.realpath(os.path.join(base, rel))
    if any(inside(real, r) for r in allowed):
        return None
    link = link_of(base, rel)
    what = "" if link == rel else f" (under the link {link!r})"
    return f"{rel!r}{what} -> {real!r}"
