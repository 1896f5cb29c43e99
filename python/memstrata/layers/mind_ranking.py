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

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet


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
        # The smallest bias: no entry scores under ``weight * cosine + min_bias``.
        self.min_bias = float(np.min(biases)) if self.size else 0.0
        if self.size:
            bias32 = np.asarray(biases, dtype=np.float32)
            # Stored by descending bias: the scan's floor rises fastest on the rows most likely
            # to rank, and the later, low-bias rows are dropped after their first 128 columns.
            order = np.argsort(-bias32, kind="stable")
            self._set = VectorSet(self.dim)
            self._set.add(
                [ids[int(i)] for i in order],
                np.ascontiguousarray(unit_vectors[order]),
                biases=bias32[order],
            )

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
