"""The format packages, one folder each: ``ztensor``, ``oinf``, ``fold``, ``wtxt``, ``taridx``,
``safetensors`` and ``npz``.

Each package knows its own bytes and nothing of the others or of the layers above it (the front
door, the frameworks, the CLI): it registers one :class:`tenfold.registry.Format` descriptor
(its ``_format.py``) saying how files of the format are recognised, which suffixes and dtypes
it takes, what metadata and checksums it keeps, and where its reader, writer, verifier,
conversion hooks and command-line subcommands are. Users import the packages by their public
names (``tenfold.ztensor``, ``tenfold.oinf`` ...; :mod:`tenfold._aliases`).
"""
