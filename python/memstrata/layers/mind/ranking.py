"""Exact top-k by a composite score ``w · cos(u_i, q) + b_i`` through the Rust ``VectorSet``.

AgentMind ranks recall hits by ``0.6·similarity + 0.2·recency + 0.2·confidence``: the last two
terms are a per-entry bias ``b_i``, up to 0.4, large enough that ranking by similarity and
re-scoring would have to look deep into the list. ``VectorSet`` takes the bias per row and the
weight per search and carries its int8 bounds through ``w·x + b``, so its exact search (int8
prefilter with proven bounds, float32 re-score, no GIL) returns exactly the top-k by composite
score in one pass over the plain vectors.

The bias is native rather than two extra coordinates of each stored vector (``[b_i/g, c_i,
w·u_i]`` at a constant norm, which makes a cosine search rank by the composite score, as this
module once did): those two columns pushed a 384-dimensional row's int8 stride from 384 to 448
bytes, and a recall reads every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet

if TYPE_CHECKING:
    from memstrata.layers.mind.vectors import VectorRows

# Rows handed to the VectorSet per call when building from rows: the set's own working copy
# (it normalises and quantises each call's rows) stays this small.
_BUILD_CHUNK = 4096
# How much more the similarity weighs than the biases' spread in a search by similarity alone.
_SIMILARITY_ONLY = 1024.0


class CompositeRanker:
    """Entries ranked by ``weight · cosine(vector, query) + bias``.

    Args:
        ids: Entry ids.
        unit_vectors: Shape ``(len(ids), dim)``, rows of norm 1.
        biases: One finite bias per entry.
        weight: The similarity weight (``>= 0``).
    """

    def __init__(
        self,
        ids: Sequence[str],
        unit_vectors: npt.NDArray[np.float32],
        biases: npt.NDArray[np.float64],
        weight: float,
    ) -> None:
        self.size = len(ids)
        self.weight = float(weight)
        self.dim = int(unit_vectors.shape[1]) if unit_vectors.ndim == 2 else 0
        self._set: VectorSet | None = None
        self._bias_low = self._bias_high = 0.0
        if self.size:
            self._fill(ids, biases, lambda order: unit_vectors[order])

    @classmethod
    def from_rows(
        cls,
        ids: Sequence[str],
        vectors: VectorRows,
        rows: Sequence[int],
        biases: npt.NDArray[np.float64],
        weight: float,
    ) -> CompositeRanker:
        """A ranker over ``ids[i]`` with the unit vector in row ``rows[i]`` of ``vectors``,
        read a chunk at a time: no full copy of the vectors is made on the way."""
        ranker = cls([], np.zeros((0, vectors.dim), dtype=np.float32), biases[:0], weight)
        ranker.size, ranker.dim = len(ids), vectors.dim
        if ranker.size:
            index = np.asarray(rows, dtype=np.int64)
            ranker._fill(ids, biases, lambda order: vectors.gather(index[order]))
        return ranker

    def _fill(self, ids: Sequence[str], biases: npt.ArrayLike, rows_of: object) -> None:
        bias32 = np.asarray(biases, dtype=np.float32)
        self._bias_low, self._bias_high = float(bias32.min()), float(bias32.max())
        # Stored by descending bias: the scan's floor rises fastest on the rows most likely
        # to rank, and the later, low-bias rows are dropped after their first 128 columns.
        order = np.argsort(-bias32, kind="stable")
        self._set = VectorSet(self.dim)
        for start in range(0, len(order), _BUILD_CHUNK):
            part = order[start : start + _BUILD_CHUNK]
            self._set.add(
                [ids[int(i)] for i in part],
                np.ascontiguousarray(rows_of(part)),  # type: ignore[operator]
                biases=bias32[part],
            )

    @property
    def min_bias(self) -> float:
        """The smallest bias: no entry scores under ``weight * cosine + min_bias``."""
        return self._bias_low

    def top(
        self, query: npt.NDArray[np.float32], k: int, *, threshold: float | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` best ``(id, composite score)``, best first, scoring at least ``threshold``;
        ``query`` need not be normalised (``VectorSet`` does it)."""
        if self._set is None:
            return []
        # A hair under the threshold: the peer computes the score in float64, this in float32.
        cut = None if threshold is None else threshold - 1e-6
        return self._set.top_k(query, min(k, self.size), threshold=cut, weight=self.weight)

    def candidates(self, unit_query: npt.NDArray[np.float32], threshold: float) -> list[str]:
        """Every id whose cosine similarity to ``unit_query`` may be at least ``threshold``
        (a few just under it too), found by similarity alone: re-score them to decide.

        The set's biases cannot be switched off, so the search weighs the similarity
        ``_SIMILARITY_ONLY`` times the biases' spread: a row at or above the threshold then
        scores at least ``W·threshold + lowest bias``, and a row passing that cut is within
        ``spread / W`` (plus rounding) of the threshold.
        """
        if self._set is None:
            return []
        spread = self._bias_high - self._bias_low
        weight = _SIMILARITY_ONLY * max(1.0, spread)
        # Float32 rounding of the scores is far below this margin (1e-4 of the similarity).
        cut = weight * (threshold - 1e-4) + self._bias_low
        k = 16
        while True:
            found = self._set.top_k(unit_query, min(k, self.size), threshold=cut, weight=weight)
            if len(found) < k or k >= self.size:
                return [i for i, _ in found]
            k *= 4
