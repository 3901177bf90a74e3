"""HDF5's descriptor in the registry (:mod:`tenfold.registry`): the HDF5 signature at offset 0.

HDF5 may also place its superblock at 512, 1024, 2048... bytes (after a *user block*); such
files are not recognised by content (detection reads the first 512 bytes only), but
``tenfold.formats.hdf5.open`` reads them, and ``tenfold convert`` takes them by their suffix.
Reading needs ``h5py`` (``pip install "tenfold[hdf5]"``); recognising a file does not."""

from __future__ import annotations

from ...registry import Format, register

#: the format signature at the start of the superblock
SIGNATURE = b"\x89HDF\r\n\x1a\n"

FORMAT = register(
    Format(
        name="hdf5",
        description="HDF5 (datasets, through h5py)",
        suffixes=(".h5", ".hdf5"),
        magics=(SIGNATURE,),
        package="tenfold.formats.hdf5",
        metadata="json",
        hooks={
            "convert_source": "tenfold.formats.hdf5._convert:source",
            "convert_fallback": "tenfold.formats.hdf5._convert:claims",
            "metadata": "tenfold.formats.hdf5._convert:metadata",
        },
    )
)
