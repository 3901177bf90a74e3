"""Other people's tensor files: safetensors and NumPy ``.npz``, for ``tenfold convert``."""

from .npz import read_npz, write_npz
from .safetensors import read_safetensors, write_safetensors

__all__ = ["read_npz", "write_npz", "read_safetensors", "write_safetensors"]
