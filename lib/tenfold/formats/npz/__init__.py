"""NumPy ``.npz``: :mod:`.reader` (never unpickled) and :mod:`.writer`, public as
``tenfold.interop.npz_reader`` and ``tenfold.interop.npz``."""
