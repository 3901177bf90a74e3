"""TARIDX: an index over the tar shards of a dataset fold (placeholder, completed below)."""
from .build import build, scan_shard, shard_paths, stale_shards
from .reader import Index
from .writer import index_bytes, write_index, write_rows
