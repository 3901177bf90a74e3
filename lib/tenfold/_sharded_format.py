"""The sharded checkpoint's descriptor in the registry (:mod:`tenfold.registry`): a JSON
index (Hugging Face layout) naming the shard files that hold the tensors (:mod:`tenfold.sharded`).
It is recognised by content like any format, but is no container of its own: it has no suffix
and no dtypes (``tenfold.save(..., max_shard_size=)`` writes one), and its reader takes the
index's path, whose directory its shards are named relative to."""

from __future__ import annotations

from .registry import Format, register, sniff_sharded

FORMAT = register(
    Format(
        name="sharded",
        description="sharded checkpoint (JSON index and shard files)",
        sniff=sniff_sharded,
        package="tenfold.sharded",
        metadata="json",
        opens_path=True,
        follows_links=True,
        checks_optional=True,
        url_suffixes=(".index.json",),
        hooks={"convert_source": "tenfold.sharded:convert_source"},
    )
)
