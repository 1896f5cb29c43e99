"""Small numpy references for ``cosine_top_k`` and ``VectorSet``, used by the property tests.

They compute in float64, so the kernel (float32) is compared with a tolerance.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def cosine_scores(matrix: npt.ArrayLike, query: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Cosine similarity of every row with ``query``; NaN for zero rows."""
    m = np.asarray(matrix, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = (m @ q) / (norms * np.linalg.norm(q))
    scores[norms == 0] = np.nan
    return np.clip(scores, -1.0, 1.0)


def top_k(
    matrix: npt.ArrayLike, query: npt.ArrayLike, k: int, threshold: float | None = None
) -> list[tuple[int, float]]:
    """Best ``k`` rows, best first, ties by lower index; zero rows skipped."""
    scores = cosine_scores(matrix, query)
    ranked = sorted(
        ((i, float(s)) for i, s in enumerate(scores) if not np.isnan(s)),
        key=lambda item: (-item[1], item[0]),
    )
    if threshold is not None:
        ranked = [item for item in ranked if item[1] >= threshold]
    return ranked[:k]


class ReferenceVectorSet:
    """The id -> unit-vector model that ``VectorSet`` must behave like."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.vectors: dict[str, npt.NDArray[np.float64]] = {}

    def add(self, ids: list[str], vectors: npt.ArrayLike) -> None:
        for i, row in zip(ids, np.asarray(vectors, dtype=np.float64)):
            self.vectors[i] = row / np.linalg.norm(row)

    def remove(self, ids: list[str]) -> int:
        return sum(self.vectors.pop(i, None) is not None for i in ids)

    def scores(self, query: npt.ArrayLike) -> dict[str, float]:
        q = np.asarray(query, dtype=np.float64)
        q = q / np.linalg.norm(q)
        return {i: float(np.clip(v @ q, -1.0, 1.0)) for i, v in self.vectors.items()}
