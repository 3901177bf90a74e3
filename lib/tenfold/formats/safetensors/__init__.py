"""safetensors: :mod:`.reader` (zero-copy views of a map) and :mod:`.writer` (byte-identical to
``safetensors.torch.save``), public as ``tenfold.interop.safetensors_reader`` and
``tenfold.interop.safetensors``."""
