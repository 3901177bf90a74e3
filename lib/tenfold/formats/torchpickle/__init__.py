"""PyTorch checkpoints (``torch.save``'s zip layout and its legacy layout), read without
unpickling: :mod:`.reader` (the reader), :mod:`._pickle` (the bounded opcode reader),
:mod:`._layout` (where the pickle and the storages are), :mod:`._tree` (names and metadata)."""
