"""HDF5 datasets through ``h5py`` (the ``hdf5`` extra): :mod:`.reader` (the ``Mapping``: groups
flattened to dotted names, contiguous datasets as views of tenfold's own map) and
:mod:`._verify`."""

from __future__ import annotations

from ._verify import verify_reader
from .reader import Reader, inspect, load, open, save, verify

Reader.use_verifier(verify_reader)

__all__ = ["Reader", "open", "load", "save", "inspect", "verify"]
