"""A basic slice of a checkpoint's tensor (``DcpReader.read(name, index)``) reads only the
chunks it touches and assembles only the selected region: the same values as the whole
tensor sliced by NumPy for any basic index, chunks split along any dimension (DCP's
``Shard(1)`` and 2-D meshes store chunks at non-zero offsets of later dimensions); a chunk
needed in part is checked against its digest when ``verify_partial`` (default), a chunk
covered whole always is. Needs no torch."""

from __future__ import annotations

import itertools
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tenfold
from tenfold.errors import FormatError, IntegrityError
from tenfold.interop import dcp_files
from tenfold.interop.dcp_files import Chunk, Document, Entry

#: name -> (array, cut points along each dimension): every cell of the grid is one chunk
_RNG = np.random.default_rng(22)
_GRID = {
    "cube": (_RNG.standard_normal((6, 7, 5)).astype(np.float32), ([], [3], [2, 4])),
    "rows": (np.arange(36, dtype=np.int64).reshape(9, 4), ([2, 5], [])),
    "cols": (_RNG.standard_normal((4, 9)).astype(ml_dtypes.bfloat16), ([], [1, 6])),
    "both": (np.arange(70, dtype=np.int16).reshape(7, 10), ([4], [3, 8])),
    "vec": (np.arange(11, dtype=np.uint8), ([5],)),
    "empty": (np.zeros((0, 3), np.float32), ([], [])),
    "scalar": (np.array(2.5, np.float64), ()),
}


def _cells(shape, cuts):
    """(offsets, sizes) of each cell of the grid ``cuts`` makes of ``shape``."""
    axes = []
    for n, cut in zip(shape, cuts, strict=True):
        edges = [0, *cut, n]
        axes.append([(lo, hi - lo) for lo, hi in itertools.pairwise(edges)])
    for cell in itertools.product(*axes):
        yield tuple(o for o, _ in cell), tuple(s for _, s in cell)


def _grid_checkpoint(final, file_format=None, world_size=2):
    """Write ``_GRID`` as a checkpoint whose chunks are the grid's cells, dealt to the ranks
    in turn, with the package's own writing steps (rank files, document, commit)."""
    placed = {r: [] for r in range(world_size)}
    turn = 0
    for name, (arr, cuts) in _GRID.items():
        for offsets, sizes in _cells(arr.shape, cuts):
            obj = f"{name}@" + ",".join(map(str, offsets))
            part = arr[tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))]
            placed[turn % world_size].append((name, obj, offsets, sizes, part))
            turn += 1
    staging = dcp_files.staging_path(str(final), "test")
    os.makedirs(staging)
    entries = {n: Entry(n, "tensor", [], str(a.dtype), a.shape) for n, (a, _) in _GRID.items()}
    files = {}
    for rank, items in placed.items():
        file = dcp_files.rank_file_name(rank, file_format)
        path = os.path.join(staging, file)
        got = dcp_files.write_rank_file(path, ((o, p) for _, o, _, _, p in items), file_format)
        files[file] = {"rank": rank, "size": os.path.getsize(path)}
        for name, obj, offsets, sizes, _ in items:
            entries[name].chunks.append(Chunk(offsets, sizes, file, obj, *got[obj]))
    doc = Document(world_size, files, entries, {n: [n] for n in entries})
    dcp_files.commit(staging, str(final), doc, fsync=False)
    return final


@pytest.fixture(scope="module", params=[None, "safetensors"])
def grid(request, tmp_path_factory):
    return _grid_checkpoint(tmp_path_factory.mktemp("grid") / "ck", request.param)


def _same(got, want):
    assert type(got) is type(want)
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_the_grid_stores_chunks_split_along_later_dimensions(grid):
    doc = dcp_files.read_document(grid)
    offsets = {tuple(c.offsets) for c in doc.entries["cube"].chunks}
    assert offsets == {(0, a, b) for a in (0, 3) for b in (0, 2, 4)}
    assert len(doc.entries["both"].chunks) == 6
    with tenfold.open(grid) as r:
        for name, (arr, _) in _GRID.items():
            _same(r[name], arr)


@st.composite
def _name_and_index(draw):
    name = draw(st.sampled_from(sorted(_GRID)))
    shape = _GRID[name][0].shape
    return name, draw(hnp.basic_indices(shape, allow_newaxis=False, allow_ellipsis=True))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=_name_and_index(), verify_partial=st.booleans())
def test_a_slice_equals_the_whole_tensor_sliced_by_numpy(grid, case, verify_partial):
    name, index = case
    with dcp_files.open(grid, verify_partial=verify_partial) as r:
        _same(r.read(name, index), _GRID[name][0][index])


@pytest.mark.parametrize(
    "index",
    [
        (slice(None), 1, 3),
        (-1, slice(None, None, -2), slice(1, None, 3)),
        (Ellipsis, 0),
        (2, 4, 1),
        (slice(5, 1, -1), Ellipsis),
        (slice(3, 3),),
    ],
)
def test_fixed_slices_across_chunk_edges(grid, index):
    with tenfold.open(grid) as r:
        _same(r.read("cube", index), _GRID["cube"][0][index])


def _rank_of(doc, name, point):
    for c in doc.entries[name].chunks:
        if all(o <= p < o + s for o, s, p in zip(c.offsets, c.sizes, point, strict=True)):
            return doc.files[c.file]["rank"], c
    raise AssertionError(point)


def test_a_slice_reads_only_the_chunks_it_touches(tmp_path):
    ck = _grid_checkpoint(tmp_path / "ck")
    doc = dcp_files.read_document(ck)
    rank, chunk = _rank_of(doc, "cube", (0, 0, 0))  # the chunk at [0, 0, 0]: sizes [6, 3, 2]
    assert tuple(chunk.offsets) == (0, 0, 0)
    other = next(f for f, info in doc.files.items() if info["rank"] != rank)
    os.unlink(ck / other)
    want = _GRID["cube"][0]
    with tenfold.open(ck) as r:
        _same(r.read("cube", (slice(1, 5), slice(0, 3), 1)), want[1:5, 0:3, 1])
        _same(r.read("cube", (slice(None), slice(0, 3), slice(0, 2))), want[:, 0:3, 0:2])
        with pytest.raises(FormatError, match=f"rank {1 - rank} file .*'cube'.*missing file"):
            r.read("cube", (0, slice(2, 4), 0))  # crosses into the next chunk along dim 1


def _flip_last_byte(ck, chunk):
    with open(ck / chunk.file, "r+b") as f:
        f.seek(chunk.byte_range[1] - 1)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x5A]))


@pytest.mark.parametrize("file_format", [None, "safetensors"])
def test_verify_partial_decides_whether_a_chunk_read_in_part_is_digest_checked(
    tmp_path, file_format
):
    ck = _grid_checkpoint(tmp_path / "ck", file_format)
    _, chunk = _rank_of(dcp_files.read_document(ck), "rows", (0, 0))  # rows [0, 2)
    _flip_last_byte(ck, chunk)  # element [1, 3]
    want = _GRID["rows"][0]
    part = (slice(0, 1), slice(1, 3))  # row 0 of that chunk only: the damage is not in it
    with dcp_files.open(ck, verify_partial=False) as r:
        _same(r.read("rows", part), want[part])  # only the part is read: no digest to check
        _same(r.read("rows", (slice(2, 9), 0)), want[2:9, 0])  # other chunks: not touched
        with pytest.raises(IntegrityError, match=r"tensor 'rows' chunk at \[0, 0\]: .*digest"):
            r.read("rows", (slice(0, 2),))  # covers the chunk whole: always checked
    with tenfold.open(ck) as r, pytest.raises(IntegrityError, match="tensor 'rows'.*digest"):
        r.read("rows", part)  # verify_partial (default): the chunk is read whole and checked
