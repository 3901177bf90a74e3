"""OINF tables: the header and the sizevar, metadata and tensor tables of a file, parsed and
validated (:func:`parse_tables`, what the reader opens with)."""

from __future__ import annotations

from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.mapped import MappedFile
from ._metadata import parse_metadata, parse_sizevars
from ._parse import Tables, check_counts, parse_header
from ._tensors import parse_tensors


def parse_tables(mf: MappedFile, limits: Limits = DEFAULT_LIMITS) -> Tables:
    """Parse and validate the header and the three tables of ``mf``."""
    h = parse_header(mf)
    check_counts(h, limits)
    blob = mf.bytes(0, h.offset_data, "tables")
    sv, end0 = parse_sizevars(blob, h)
    md, end1 = parse_metadata(mf, blob, h, limits)
    tensors, end2 = parse_tensors(mf, blob, h, limits)
    return Tables(h, sv, md, tensors, (end0, end1, end2))
