"""ONNX models' initializers, read without the ``onnx`` package: :mod:`.reader` (the
``Mapping``), :mod:`._model` and :mod:`._wire` (the protobuf walk), :mod:`._spec` (the
layout), :mod:`._decode` (typed fields, packed types, sparse tensors), :mod:`._verify`."""

from __future__ import annotations

from ._verify import verify_reader
from .reader import Reader, inspect, load, open, save, sniff, verify

Reader.use_verifier(verify_reader)

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "sniff"]
