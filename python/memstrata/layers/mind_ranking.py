"""Exact top-k by a composite score ``w · cos(u_i, q) + b_i`` through the Rust ``VectorSet``.

AgentMind ranks recall hits by ``0.6·similarity + 0.2·recency + 0.2·confidence``: the last two
terms are a per-entry bias ``b_i``, up to 0.4, large enough that ranking by similarity and
re-scoring would have to look deep into the list. Instead each unit vector ``u_i`` is stored
augmented as ``[b_i, c_i, w·u_i]`` with ``c_i = sqrt(C - w² - b_i²)``, so every stored row has the
same norm ``sqrt(C)``, and the query as ``[1, 0, q]`` (norm ``sqrt(2)``, ``q`` a unit vector).
Then ``cos(row_i, query) = (w·u_i·q + b_i) / sqrt(2C)``. (In the code the bias coordinate is
split as ``b_i/g`` in the row and ``g`` in the query, which changes the constant, not the order.)
The cosine is the composite score times a constant, so ``VectorSet``'s exact search (int8
prefilter with proven bounds, float32 re-score, no GIL) returns exactly the top-k by composite
score in one pass. The bias comes first because ``VectorSet`` scores a high-floor search in stages
of leading columns and bounds the rest: the bias must be in the first stage to count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet

BIAS_SPLIT = 0.5


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
        dim = int(unit_vectors.shape[1]) if unit_vectors.ndim == 2 else 0
        self.dim = dim
        b = np.asarray(biases, dtype=np.float64)
        # The bias coordinate is split between row and query (b/g and g, g = BIAS_SPLIT) so
        # that neither holds one coordinate far larger than the others: the int8 prefilter
        # quantizes each vector by its largest coordinate, and its bounds are only tight when
        # that is not an outlier.
        self._gamma = gamma = BIAS_SPLIT
        bg = b / gamma
        # Any C at least every row's w² + (b/g)² works; the smallest keeps c_i small too.
        self._c = self.weight**2 + (float(np.max(bg * bg)) if self.size else 0.0) + 1e-9
        self._scale = math.sqrt(self._c * (1.0 + gamma * gamma))
        self._set: VectorSet | None = None
        if self.size:
            rows = np.empty((self.size, dim + 2), dtype=np.float32)
            rows[:, 0] = bg
            rows[:, 1] = np.sqrt(np.maximum(self._c - self.weight**2 - bg * bg, 0.0))
            rows[:, 2:] = unit_vectors * np.float32(self.weight)
            self._set = VectorSet(dim + 2)
            self._set.add(list(ids), rows)

    def top(
        self, query_unit: npt.NDArray[np.float32], k: int, *, threshold: float | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` best ``(id, composite score)``, best first, scoring at least ``threshold``."""
        if self._set is None:
            return []
        query = np.empty(self.dim + 2, dtype=np.float32)
        query[0] = self._gamma
        query[1] = 0.0
        query[2:] = query_unit
        scale = self._scale
        cut = None if threshold is None else threshold / scale - 1e-6
        found = self._set.top_k(query, min(k, self.size), threshold=cut)
        return [(i, s * scale) for i, s in found]
