"""VectorIndex: one interface over the exact Rust ``VectorSet`` and an hnswlib graph.

Small sets are searched exactly by :class:`memstrata.VectorSet` (an int8 prefilter then a float32
re-score, without the GIL). Past ``hnsw_threshold`` vectors a search over every vector costs
more than walking an HNSW graph, so the index is built with hnswlib instead (approximate: with
M=16, ef_construction=200, ef=128).

Crossover, measured by ``benches/test_vector_index.py`` on the 2-core AMD EPYC (Zen 3, AVX2)
box the README's benchmarks ran on (dim 384, ``hash_embed`` vectors of random 12-word texts,
top-10 queries, median of 50 queries)::

    vectors   VectorSet.top_k   hnswlib knn_query   hnswlib build   hnswlib recall@10
    10,000        138 µs             387 µs              4.2 s            0.92
    25,000        428 µs             637 µs             18.5 s            0.83
    50,000        929 µs             847 µs             43.4 s            0.77
   100,000       1.81 ms             822 µs             65.8 s            0.65

Query time crosses at about 50,000 vectors; below that the exact set is faster, needs no graph
build and never misses; hence :data:`DEFAULT_HNSW_THRESHOLD`. (Hashing vectors of unrelated
texts are nearly orthogonal, the hardest case for HNSW recall; real model embeddings cluster and
fare better.)

hnswlib is an optional dependency (``pip install memstrata[hnsw]``); it is only
imported when an index actually crosses the threshold, and its absence then raises an error
saying what to install, never a silent fallback to a slower path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet
from memstrata.exceptions import DimensionMismatchError, InvalidInputError, MemstrataError

__all__ = ["DEFAULT_HNSW_THRESHOLD", "VectorIndex"]

# From this many vectors the graph answers faster than the exact scan (see the table above).
DEFAULT_HNSW_THRESHOLD = 50_000

_HNSW_M = 16
_HNSW_EF_CONSTRUCTION = 200
_HNSW_EF_SEARCH = 128


class VectorIndex:
    """Unit vectors keyed by string ids: exact below ``hnsw_threshold`` vectors, HNSW above.

    Args:
        dim: The vectors' dimension.
        hnsw_threshold: Size from which the hnswlib backend is used. The backend is chosen when
            the index is built (:meth:`build`) and re-chosen when an :meth:`add` makes the set
            cross the threshold.
    """

    def __init__(self, dim: int, *, hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD) -> None:
        if isinstance(hnsw_threshold, bool) or not isinstance(hnsw_threshold, int):
            raise InvalidInputError(f"hnsw_threshold must be an int, got {hnsw_threshold!r}")
        if hnsw_threshold < 1:
            raise InvalidInputError(f"hnsw_threshold must be at least 1, got {hnsw_threshold}")
        self.hnsw_threshold = hnsw_threshold
        self._exact: VectorSet | None = VectorSet(dim)
        self._dim = dim
        self._hnsw: Any = None
        self._labels: dict[str, int] = {}
        self._ids: list[str | None] = []

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        vectors: npt.ArrayLike,
        *,
        dim: int,
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
    ) -> VectorIndex:
        """An index holding ``ids[i]`` with ``vectors[i]``, on the backend its size calls for."""
        index = cls(dim, hnsw_threshold=hnsw_threshold)
        index.add(ids, vectors)
        return index

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def backend(self) -> str:
        """``"exact"`` (VectorSet) or ``"hnsw"`` (hnswlib)."""
        return "exact" if self._exact is not None else "hnsw"

    def __len__(self) -> int:
        return len(self._exact) if self._exact is not None else len(self._labels)

    def __contains__(self, id: object) -> bool:
        return id in self._exact if self._exact is not None else id in self._labels

    def add(self, ids: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Adds (or replaces) ``ids[i]`` with ``vectors[i]``; all-or-nothing."""
        ids = list(ids)
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(ids):
            raise InvalidInputError(
                f"vectors must have shape ({len(ids)}, {self._dim}), got {matrix.shape}"
            )
        if matrix.shape[1] != self._dim:
            raise DimensionMismatchError(
                f"vectors have {matrix.shape[1]} columns, the index holds {self._dim}",
                expected=self._dim,
                got=matrix.shape[1],
            )
        if self._exact is not None:
            if len(self._exact) + len(ids) < self.hnsw_threshold:
                self._exact.add(ids, matrix)
                return
            # Crossing the threshold: the exact set does not give its vectors back, so the graph
            # is built from what the caller hands in now plus a rebuild by the owner (build()).
            if len(self._exact):
                raise InvalidInputError(
                    "this add would cross hnsw_threshold; rebuild with VectorIndex.build() from "
                    "all vectors"
                )
            self._exact = None
        self._hnsw_add(ids, matrix)

    def _hnsw_add(self, ids: list[str], matrix: npt.NDArray[np.float32]) -> None:
        # Validate like VectorSet does before anything changes.
        if not np.isfinite(matrix).all():
            raise InvalidInputError("vectors hold NaN or infinity")
        norms = np.linalg.norm(matrix, axis=1)
        if len(ids) and not norms.all():
            raise InvalidInputError(f"vector for id {ids[int(np.argmin(norms))]!r} is all zeros")
        if self._hnsw is None:
            self._hnsw = _new_hnsw(self._dim, max(len(ids), 1024))
        needed = len(self._ids) + len(ids)
        if needed > self._hnsw.get_max_elements():
            self._hnsw.resize_index(max(needed, 2 * self._hnsw.get_max_elements()))
        labels = []
        for id_ in ids:
            label = self._labels.get(id_)
            if label is None:
                label = len(self._ids)
                self._ids.append(id_)
                self._labels[id_] = label
            labels.append(label)
        if ids:
            self._hnsw.add_items(matrix, np.asarray(labels, dtype=np.int64), replace_deleted=False)

    def remove(self, ids: Iterable[str]) -> int:
        """Removes the given ids; unknown ids are ignored. Returns how many were removed."""
        if self._exact is not None:
            return self._exact.remove(list(ids))
        removed = 0
        for id_ in ids:
            label = self._labels.pop(id_, None)
            if label is not None:
                self._hnsw.mark_deleted(label)
                self._ids[label] = None
                removed += 1
        return removed

    def top_k(
        self, query: npt.ArrayLike, k: int, *, threshold: float | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` ids most cosine-similar to ``query``, best first, with their similarity."""
        if self._exact is not None:
            return self._exact.top_k(query, k, threshold=threshold)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be a positive int, got {k!r}")
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if q.shape[1] != self._dim:
            raise DimensionMismatchError(
                f"query has {q.shape[1]} elements, the index holds {self._dim}",
                expected=self._dim,
                got=q.shape[1],
            )
        live = len(self._labels)
        if live == 0:
            return []
        k = min(k, live)
        self._hnsw.set_ef(max(_HNSW_EF_SEARCH, k))
        labels, distances = self._hnsw.knn_query(q, k=k)
        out = []
        for label, distance in zip(labels[0], distances[0]):
            score = float(min(1.0, max(-1.0, 1.0 - float(distance))))
            id_ = self._ids[int(label)]
            if id_ is not None and (threshold is None or score >= threshold):
                out.append((id_, score))
        return out

    def find_duplicate(self, vector: npt.ArrayLike, threshold: float) -> tuple[str, float] | None:
        """The id most similar to ``vector`` if its similarity is at least ``threshold``."""
        if self._exact is not None:
            return self._exact.find_duplicate(vector, threshold)
        best = self.top_k(vector, 1, threshold=threshold)
        return best[0] if best else None


def _new_hnsw(dim: int, capacity: int) -> Any:
    try:
        import hnswlib  # type: ignore[import-untyped]
    except ImportError:
        raise MemstrataError(
            "this vector index is past hnsw_threshold and needs hnswlib: "
            "pip install 'memstrata[hnsw]' (or raise hnsw_threshold to keep the exact index)"
        ) from None
    index = hnswlib.Index(space="cosine", dim=dim)
    index.init_index(max_elements=capacity, M=_HNSW_M, ef_construction=_HNSW_EF_CONSTRUCTION)
    index.set_ef(_HNSW_EF_SEARCH)
    return index
