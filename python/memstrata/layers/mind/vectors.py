"""The mind's vectors held once: unit rows in blocks of one float32 matrix, decoded on load.

A namespace's stored vectors (base64 float32 in each entry's payload) are decoded straight into
:class:`VectorRows` as the store streams the entries, then normalised a block at a time: no
per-entry arrays, no second copy. Recall's ranker reads its rows from here (in bias order, a
chunk at a time), and so does the exact re-score of the belief dedup check. Rows are only ever
appended; a row an entry no longer uses is left behind until :meth:`VectorRows.compacted`
copies the live ones out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata._core import decode_vectors_b64

_SHIFT = 13
BLOCK_ROWS = 1 << _SHIFT  # 8,192 rows: 12 MB a block at dim 384
# The rows a block is made with; it doubles as rows come, up to BLOCK_ROWS. A mind of a few
# entries (one per user, the layer keeping hundreds) holds a few rows' room, not 12 MB each,
# which the allocator then hands out again in pieces it cannot give back.
FIRST_BLOCK_ROWS = 16


class VectorRows:
    """Append-only unit vectors of one dimension, addressed by row number.

    Rows are appended raw (:meth:`append_encoded`, :meth:`append`) and normalised by
    :meth:`seal`; a row that cannot be normalised (zero, NaN, infinite) is marked unusable.

    One set of rows is shared by the copies of a namespace's committed entries that runs on
    several threads bring up to date at once: an append (which numbers its rows) and a seal
    each hold the set's lock, so two appends never number the same rows and a seal never
    normalises a row still being copied in.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.size = 0
        self._blocks: list[npt.NDArray[np.float32]] = []
        self._usable: list[npt.NDArray[np.bool_]] = []
        self._sealed = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of vector storage allocated."""
        return sum(b.nbytes for b in self._blocks)

    def _next_rows(self, count: int) -> int:
        """Makes room for up to ``count`` rows in the block the next row goes to (as many as
        fit there) and counts the first; returns its number."""
        row = self.size
        b, offset = row >> _SHIFT, row & (BLOCK_ROWS - 1)
        if b == len(self._blocks):
            self._blocks.append(np.empty((0, self.dim), dtype=np.float32))
            self._usable.append(np.zeros(BLOCK_ROWS, dtype=np.bool_))
        block = self._blocks[b]
        need = min(BLOCK_ROWS, offset + count)
        if len(block) < need:
            # Grown into a new array: a reader holding the old one still finds every row it
            # could see there (rows are only appended, and a sealed row is never written again).
            rows = max(FIRST_BLOCK_ROWS, 1 << (need - 1).bit_length())
            grown = np.empty((min(BLOCK_ROWS, rows), self.dim), dtype=np.float32)
            grown[:offset] = block[:offset]
            self._blocks[b] = grown
        self.size += 1
        return row

    def append(self, vectors: npt.NDArray[np.float32]) -> list[int]:
        """Appends the rows of ``vectors`` (shape ``(n, dim)``), normalised by :meth:`seal`,
        and returns their row numbers: read them from here, never from ``size`` around the
        call, which another thread's append may have moved.

        The caller gives ``vectors`` up: a matrix of exactly a block's rows landing at the
        start of a block becomes that block, as it is (a full read decodes its entries a block
        at a time, and copying 150 MB of vectors again cost a tenth of the load).
        """
        with self._lock:
            return self._append(vectors)

    def _append(self, vectors: npt.NDArray[np.float32]) -> list[int]:
        if (
            len(vectors) == BLOCK_ROWS
            and not self.size & (BLOCK_ROWS - 1)
            and vectors.dtype == np.float32
            and vectors.shape[1:] == (self.dim,)
            and vectors.flags.c_contiguous
            and vectors.flags.writeable
        ):
            first = self.size
            self._blocks.append(vectors)
            self._usable.append(np.zeros(BLOCK_ROWS, dtype=np.bool_))
            self.size += BLOCK_ROWS
            return list(range(first, self.size))
        first, done = self.size, 0
        while done < len(vectors):
            row = self._next_rows(len(vectors) - done)  # the block the next rows go to
            offset = row & (BLOCK_ROWS - 1)
            take = min(len(vectors) - done, BLOCK_ROWS - offset)
            self._blocks[row >> _SHIFT][offset : offset + take] = vectors[done : done + take]
            self.size += take - 1
            done += take
        return list(range(first, self.size))

    def seal(self) -> None:
        """Normalises the rows appended since the last call and marks which are usable."""
        with self._lock:
            self._seal()

    def _seal(self) -> None:
        start, end = self._sealed, self.size
        while start < end:
            b, first = start >> _SHIFT, start & (BLOCK_ROWS - 1)
            last = min(BLOCK_ROWS, first + end - start)
            block = self._blocks[b][first:last]
            with np.errstate(all="ignore"):
                norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
                usable = np.isfinite(norms) & (norms > 0)
                block /= np.where(usable, norms, 1.0).astype(np.float32)[:, None]
            self._usable[b][first:last] = usable
            start += last - first
        self._sealed = end

    def blocks(self) -> list[npt.NDArray[np.float32]]:
        """The blocks holding the rows, ``BLOCK_ROWS`` rows each but the last, which may hold
        fewer (room for the rows appended so far): row ``r`` is row ``r % BLOCK_ROWS`` of
        block ``r // BLOCK_ROWS``. A sealed row is never written again, so a reader may keep
        the blocks and read sealed rows in place."""
        return list(self._blocks)

    def usable(self, row: int) -> bool:
        return 0 <= row < self._sealed and bool(self._usable[row >> _SHIFT][row & (BLOCK_ROWS - 1)])

    def usable_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """:meth:`usable` of each row in ``rows``."""
        out = np.zeros(len(rows), dtype=np.bool_)
        inside = (rows >= 0) & (rows < self._sealed)
        if not inside.any():
            return out
        flags = np.concatenate(self._usable)
        out[inside] = flags[rows[inside]]
        return out

    def gather(self, rows: Iterable[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The given rows, in order, as one new ``(len(rows), dim)`` matrix."""
        index = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), dtype=np.int64)
        out = np.empty((len(index), self.dim), dtype=np.float32)
        if not len(index):
            return out
        blocks = index >> _SHIFT
        offsets = index & (BLOCK_ROWS - 1)
        for b in np.unique(blocks):
            where = blocks == b
            out[where] = self._blocks[int(b)][offsets[where]]
        return out

    def dots(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Every row's dot product with ``query``, shape ``(size,)``: one matrix-vector product
        a block at a time (rows not usable give NaN or garbage: callers index the usable)."""
        size, blocks = self.size, list(self._blocks)
        out = np.empty(size, dtype=np.float32)
        for b, block in enumerate(blocks):
            first = b << _SHIFT
            if first >= size:
                break
            count = min(BLOCK_ROWS, size - first)
            # einsum's own loop, not BLAS: a threaded BLAS matrix-vector product was 5x slower
            # on a busy 2-core machine (its threads spin against the set's build).
            np.einsum("ij,j->i", block[:count], query, out=out[first : first + count])
        return out

    def compacted(self, rows: dict[str, int]) -> tuple[VectorRows, dict[str, int]]:
        """A new store holding only ``rows`` (id -> row), and the ids' rows in it."""
        fresh = VectorRows(self.dim)
        ids = list(rows)
        for start in range(0, len(ids), BLOCK_ROWS):
            chunk = ids[start : start + BLOCK_ROWS]
            fresh.append(self.gather([rows[i] for i in chunk]))
        fresh.seal()
        return fresh, {i: n for n, i in enumerate(ids)}


def vector_dim(text: Any) -> int:
    """The dimension of the vector ``encode_vector`` would write as ``text``, judged by its
    length alone (each dimension has its own length), or 0 when no vector has that length."""
    if type(text) is not str:
        return 0
    dim = 3 * len(text) // 16
    return dim if dim and 4 * -(-4 * dim // 3) == len(text) else 0


def append_encoded(
    rows: dict[int, VectorRows], texts: Sequence[Any]
) -> tuple[list[int], list[int]]:
    """Decodes stored vectors into ``rows[dim]`` (made when missing), a dimension at a time.

    ``texts`` are stored ``embedding`` values: base64 text as ``encode_vector`` writes it, or
    anything else. Returns ``(dims, rows)``: for each text the dimension of its vector and its
    row in ``rows[dim]``, or ``0`` and ``-1`` when it is not a vector. Call
    :meth:`VectorRows.seal` afterwards, as after ``append``.

    One native call (:func:`memstrata._core.decode_vectors_b64`) per dimension present, and no
    Python work per text when they share one: the dimension is read off the first vector, and
    only the texts that fail at it are looked at again. Decoding is strict about the form:
    stray characters or whitespace make a text not a vector.
    """
    count = len(texts)
    dims = np.zeros(count, dtype=np.int64)
    placed = np.full(count, -1, dtype=np.int64)
    todo: list[int] | range = range(count)
    while todo:
        dim, skip = 0, 0
        for skip, n in enumerate(todo):  # noqa: B007 (skip is where the first vector is)
            dim = vector_dim(texts[n])
            if dim:
                break
        if not dim:
            break
        todo = todo[skip:]
        chosen = texts if len(todo) == count else [texts[n] for n in todo]
        matrix, ok = decode_vectors_b64(chosen, dim)
        where = np.asarray(todo, dtype=np.int64)
        target = rows.get(dim)
        if target is None:
            target = rows[dim] = VectorRows(dim)
        if ok.all():
            dims[where], placed[where] = dim, target.append(matrix)
            break
        dims[where[ok]], placed[where[ok]] = dim, target.append(matrix[ok])
        # A text of this dimension's length that failed is not a vector; the others may be
        # vectors of another dimension.
        todo = [n for n in where[~ok].tolist() if vector_dim(texts[n]) != dim]
    return dims.tolist(), placed.tolist()
