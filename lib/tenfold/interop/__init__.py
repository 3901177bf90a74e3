"""Other people's tensor files: safetensors and NumPy ``.npz``, for ``tenfold convert``."""

from ..formats.npz.writer import read_npz, write_npz
from ..formats.safetensors.writer import read_safetensors, write_safetensors

__all__ = ["read_npz", "write_npz", "read_safetensors", "write_safetensors"]
