"""PyTorch checkpoints' descriptor in the registry (:mod:`tenfold.registry`): what
``torch.save`` writes, recognised by content (:func:`sniff`), never by suffix.

Two layouts:

* the zip layout (``torch.save`` since PyTorch 1.6): a zip whose first member is
  ``<archive>/data.pkl``, the pickle of the saved object, beside ``<archive>/data/<key>``
  (each storage's raw bytes), ``<archive>/byteorder`` and ``<archive>/version``;
* the legacy layout (``_use_new_zipfile_serialization=False``): a pickle of the magic number
  :data:`LEGACY_MAGIC_NUMBER`, then pickles of the protocol version, the system info, the saved
  object and the list of storage keys, then each storage as an 8-byte element count and its
  bytes.
"""

from __future__ import annotations

from ...registry import Format, register

#: A zip's local file header (the first bytes of a zip-layout checkpoint).
ZIP_LOCAL = b"PK\x03\x04"
#: The number a legacy checkpoint's first pickle holds (``torch.serialization.MAGIC_NUMBER``).
LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
#: That pickle's ``LONG1`` opcode, as it follows ``PROTO`` (and, from protocol 4, a frame).
LEGACY_MAGIC = b"\x8a\x0a" + LEGACY_MAGIC_NUMBER.to_bytes(10, "little") + b"."
#: The zip member that holds the pickle, after ``<archive>/``.
DATA_PKL = "data.pkl"

FMT = "torchpickle"


def zip_prefix(name: bytes) -> bytes | None:
    """The archive name of a first zip member called ``<archive>/data.pkl``, else None."""
    prefix, sep, rest = name.partition(b"/")
    if not sep or not prefix or rest != DATA_PKL.encode():
        return None
    return prefix


def sniff(head: bytes) -> bool:
    """True when ``head`` starts a PyTorch checkpoint: a zip whose first member is
    ``<archive>/data.pkl`` (an npz's first member is a ``.npy``: it is not claimed), or a
    pickle (protocol 2 to 5) of the legacy magic number."""
    if head[:4] == ZIP_LOCAL:
        if len(head) < 30:
            return False
        n = int.from_bytes(head[26:28], "little")
        name = head[30 : 30 + n]
        return len(name) == n and zip_prefix(name) is not None
    if head[:1] != b"\x80" or head[1:2] not in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return False
    at = 2
    if head[at : at + 1] == b"\x95":  # FRAME: 8-byte length, then the frame's opcodes
        at += 9
    return head[at : at + len(LEGACY_MAGIC)] == LEGACY_MAGIC


FORMAT = register(
    Format(
        name=FMT,
        description="PyTorch checkpoint (torch.save; read without unpickling)",
        # not ".bin" (pytorch_model.bin): so generic a name says nothing; such files are
        # recognised by content like every other
        suffixes=(".pt", ".pth"),
        sniff=sniff,
        package="tenfold.formats.torchpickle.reader",
        metadata="json",
        hooks={
            "convert_source": "tenfold.formats.torchpickle._convert:source",
            "convert_fallback": "tenfold.formats.torchpickle._convert:claims",
        },
    )
)
