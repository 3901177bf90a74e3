"""Epoch orders for training: :func:`epoch_order` and the resumable :class:`EpochSampler`.

The order of an epoch depends only on ``(seed, epoch)``, the number of samples and the world
size, so every rank computes its share without talking to the others, and a rerun gives the
same order. :class:`EpochSampler` also remembers how far the current epoch has gone
(``state_dict``/``load_state_dict``, the protocol of torchdata's ``StatefulDataLoader``), so a
job stopped after ``k`` batches and restarted yields exactly the samples it had not yet seen.
"""

from __future__ import annotations

import hashlib
import operator
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...errors import FormatError, IntegrityError, describe

__all__ = ["EpochSampler", "epoch_order", "STATE_VERSION"]

#: Version of :meth:`EpochSampler.state_dict`'s layout.
STATE_VERSION = 1


def epoch_order(
    n: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
    block: int = 1,
) -> np.ndarray:
    """Sample numbers one rank visits in one epoch (deterministic in seed and epoch).

    The epoch's permutation (or ``arange`` without shuffle) is padded by wrapping around to a
    multiple of ``world_size`` (or cut, with ``drop_last``) and dealt round-robin: rank ``r``
    takes positions ``r, r + world_size, ...``. All ranks get the same count; padding repeats
    at most ``world_size - 1`` samples of the epoch's start, as PyTorch's
    ``DistributedSampler`` does.

    ``block > 1`` (locality, for remote shards): the samples are cut into runs of ``block``
    consecutive sample numbers (neighbours in their shard, since sample numbers follow the
    rows' order); the runs are shuffled, and the samples within each run, and each rank takes
    one stretch of the padded order (rank ``r`` positions ``r * m`` to ``(r + 1) * m - 1``,
    ``m`` the per-rank count), so runs stay whole except where the stretches meet. A batch
    then holds a few runs, each fetched as one range (see ``Dataset.__getitems__``), instead
    of one request per sample. ``block=1`` is the plain per-sample shuffle.
    """
    n, rank, world_size, block = (
        _count("n", n),
        _count("rank", rank, None),
        _count("world_size", world_size, None),
        _count("block", block, None),
    )
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} not in [0, world_size={world_size})")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    seed, epoch = _count("seed", seed), _count("epoch", epoch)
    rng = np.random.default_rng([seed, epoch])
    if not shuffle:
        order = np.arange(n)
    elif block == 1:
        order = rng.permutation(n)
    else:
        n_runs = -(-n // block)
        runs = rng.permutation(n_runs)
        within = rng.permuted(np.arange(n_runs * block).reshape(n_runs, block), axis=1)
        order = within[runs].ravel()
        order = order[order < n]
    if drop_last:
        order = order[: (n // world_size) * world_size]
    elif n and n % world_size:
        pad = world_size - n % world_size
        order = np.concatenate([order, np.resize(order, pad)])
    if block == 1:
        return order[rank::world_size]
    per = order.size // world_size  # runs stay together: each rank takes one stretch
    return order[rank * per : (rank + 1) * per]


def _count(name: str, value: Any, low: int | None = 0) -> int:
    """``value`` as an int of at least ``low`` (None: any); TypeError for what is not an
    integer (a bool or a float included), ValueError below ``low``."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if low is not None and v < low:
        raise ValueError(f"{name} must be >= {low}, got {v}")
    return v


def _dist() -> tuple[int, int] | None:
    """``(rank, world_size)`` from ``torch.distributed`` when a process group is initialised."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except (RuntimeError, ValueError):
        return None
    return None


def _fingerprint(data: Any) -> str:
    """What identifies the samples: the index's bytes (a Dataset) or the count (an int)."""
    if isinstance(data, (int, np.integer)):
        return f"n={int(data)}"
    fp = getattr(data, "fingerprint", None)
    if callable(fp):
        return str(fp())
    return f"n={len(data)}"


class EpochSampler:
    """A sampler (iterable of sample numbers) for ``DataLoader(sampler=...)``, resumable.

    Parameters
    ----------
    data
        The :class:`Dataset` (or the number of samples).
    shuffle, seed, drop_last, block
        See :func:`epoch_order`. ``drop_last=False`` (default) pads each rank to the same
        length by repeating samples from the epoch's start; ``True`` drops the remainder
        instead, so no sample is seen twice in an epoch.
    rank, world_size
        This process's share. ``None`` (default): from ``torch.distributed`` when a process
        group is initialised, else rank 0 of 1.

    Call :meth:`set_epoch` before each epoch to reshuffle. :meth:`state_dict` gives the
    position in the current epoch (with what the order depends on: the dataset's fingerprint,
    seed, world size, rank, shuffling); :meth:`load_state_dict` restores it, and the next
    iteration yields the rest of that epoch. A state from another dataset, seed, world size,
    rank or setting is refused (``IntegrityError`` naming the field). Works with torchdata's
    ``StatefulDataLoader``, which saves and restores it with the loader's own state.
    """

    def __init__(
        self,
        data: Any,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        block: int = 1,
    ) -> None:
        self.n = _count("n", data) if isinstance(data, (int, np.integer)) else len(data)
        self._data = data
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.seed = _count("seed", seed)
        self.block = _count("block", block, None)
        got = _dist() if rank is None or world_size is None else None
        if rank is None:
            rank = got[0] if got is not None else 0
        if world_size is None:
            world_size = got[1] if got is not None else 1
        self.rank, self.world_size = (
            _count("rank", rank, None),
            _count("world_size", world_size, None),
        )
        self.epoch = 0
        #: samples of the current epoch this rank has yielded
        self.position = 0
        self._resume: int | None = None
        self._fp: str | None = None
        epoch_order(0, rank=self.rank, world_size=self.world_size, block=self.block)  # validates

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (from its beginning unless a loaded state is for this epoch)."""
        epoch = _count("epoch", epoch)
        if epoch != self.epoch:
            self._resume = None
            self.position = 0
        self.epoch = epoch

    def indices(self) -> np.ndarray:
        """This rank's sample numbers for the current epoch, in order (all of them)."""
        return epoch_order(
            self.n,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            rank=self.rank,
            world_size=self.world_size,
            drop_last=self.drop_last,
            block=self.block,
        )

    def __iter__(self) -> Iterator[int]:
        start = self._resume if self._resume is not None else 0
        self._resume = None
        order = self.indices().tolist()
        self.position = start
        for i in order[start:]:
            self.position += 1
            yield i

    def __len__(self) -> int:
        if self.drop_last:
            return self.n // self.world_size
        return -(-self.n // self.world_size)

    # -- resumable state ----------------------------------------------------------------------
    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = _fingerprint(self._data)
        return self._fp

    def state_dict(self) -> dict[str, Any]:
        """Plain ints, strings and bools (JSON-safe): where this rank is, and what fixes the
        order."""
        return {
            "version": STATE_VERSION,
            "fingerprint": self.fingerprint(),
            "n": self.n,
            "seed": self.seed,
            "world_size": self.world_size,
            "rank": self.rank,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "block": self.block,
            "epoch": self.epoch,
            "position": self.position,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (see :meth:`state_dict`); the next iteration yields the
        rest of its epoch."""
        what = "sampler state"
        _check_state(state, what)
        mine = self.state_dict()
        for key, detail in (
            ("fingerprint", "saved for another dataset"),
            ("n", "saved for another number of samples"),
            ("world_size", "saved with another world size"),
            ("rank", "saved by another rank"),
            ("seed", "saved with another seed"),
            ("shuffle", "saved with another shuffle setting"),
            ("drop_last", "saved with another drop_last"),
            ("block", "saved with another block size"),
        ):
            if state[key] != mine[key]:
                raise IntegrityError(
                    describe(
                        "taridx",
                        what,
                        field=key,
                        detail=detail,
                        expected=mine[key],
                        got=state[key],
                    )
                )
        if not 0 <= state["position"] <= len(self):
            raise FormatError(
                describe(
                    "taridx",
                    what,
                    field="position",
                    detail="out of range",
                    expected=f"0 <= position <= {len(self)}",
                    got=state["position"],
                )
            )
        self.epoch = state["epoch"]
        self.position = state["position"]
        self._resume = state["position"]


def _check_state(state: Any, what: str) -> None:
    """Every field of a sampler state has its type and range (FormatError naming it)."""
    if not isinstance(state, Mapping):
        raise FormatError(describe("taridx", what, expected="a mapping", got=type(state)))
    for key, typ in (
        ("version", int),
        ("fingerprint", str),
        ("n", int),
        ("seed", int),
        ("world_size", int),
        ("rank", int),
        ("shuffle", bool),
        ("drop_last", bool),
        ("block", int),
        ("epoch", int),
        ("position", int),
    ):
        v = state.get(key)
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise FormatError(
                describe(
                    "taridx", what, field=key, detail="wrong type", expected=typ.__name__, got=v
                )
            )
    if state["version"] != STATE_VERSION:
        raise FormatError(
            describe("taridx", what, field="version", expected=STATE_VERSION, got=state["version"])
        )
    # ranges, before any comparison: a malformed state is a FormatError naming its field
    for key, ok, expected in (
        ("n", state["n"] >= 0, ">= 0"),
        ("seed", state["seed"] >= 0, ">= 0"),
        ("world_size", state["world_size"] >= 1, ">= 1"),
        (
            "rank",
            0 <= state["rank"] < state["world_size"],
            f"0 <= rank < {state['world_size']}",
        ),
        ("block", state["block"] >= 1, ">= 1"),
        ("epoch", state["epoch"] >= 0, ">= 0"),
    ):
        if not ok:
            raise FormatError(
                describe(
                    "taridx",
                    what,
                    field=key,
                    detail="out of range",
                    expected=expected,
                    got=state[key],
                )
            )


def index_fingerprint(buf: Any) -> str:
    """A short digest of an index's bytes (BLAKE2b, 128 bits, hex)."""
    return hashlib.blake2b(memoryview(buf).cast("B"), digest_size=16).hexdigest()
