"""Exact top-k by a composite score ``w · cos(u_i, q) + b_i``: an exact scan of the mind's rows
at once, and the Rust ``VectorSet`` (int8 prefilter) once it is built.

AgentMind ranks recall hits by ``0.6·similarity + 0.2·recency + 0.2·confidence``: the last two
terms are a per-entry bias ``b_i``, up to 0.4, large enough that ranking by similarity and
re-scoring would have to look deep into the list. ``VectorSet`` takes the bias per row and the
weight per search and carries its int8 bounds through ``w·x + b``, so its exact search (int8
prefilter with proven bounds, float32 re-score, no GIL) returns exactly the top-k by composite
score in one pass over the plain vectors.

Building that set takes about half a second at 100,000 entries (each row is checked,
quantised and summarised), while one exact pass of dot products over the rows takes tens of
milliseconds. A large ranker therefore answers from the exact scan at once and builds its set in
a background thread (the heavy part runs without the GIL); searches move to the set when it is
ready. Both give the same answer: the top ``k`` by score, ties broken by the higher bias's order.
The thread is not a daemon: a daemon thread stopped by the interpreter's exit in the middle of
native code can crash the process, so an exiting process waits for the build instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet

if TYPE_CHECKING:
    from memstrata.layers.mind.vectors import VectorRows

logger = logging.getLogger("memstrata.agent_mind")

# Rows handed to the VectorSet per call: its working memory (it quantises each call's rows)
# stays this small.
_BUILD_CHUNK = 4096
# From this many rows the set is built in a background thread (about 0.1 s of work here).
BACKGROUND_MIN_ROWS = 16_384
# How much more the similarity weighs than the biases' spread in a search by similarity alone.
_SIMILARITY_ONLY = 1024.0


def unit_query(query: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """``query`` scaled to norm 1 in float64, as the ``VectorSet`` does (a zero or non-finite
    query gives a non-finite vector, which matches nothing)."""
    wide = np.asarray(query, dtype=np.float64).reshape(-1)
    with np.errstate(all="ignore"):
        unit: npt.NDArray[np.float32] = (wide / np.sqrt(wide @ wide)).astype(np.float32)
    return unit


def exact_top(
    cosines: npt.NDArray[np.float32],
    biases: npt.NDArray[np.float32],
    rank: npt.NDArray[np.int64],
    weight: float,
    k: int,
    threshold: float | None,
) -> npt.NDArray[np.int64]:
    """The positions of the ``k`` best ``weight · cosine + bias`` (the cosine clamped to
    [-1, 1], in float32 as the set scores), at least ``threshold``, best first; ties go to the
    lower ``rank``."""
    scores = np.float32(weight) * np.clip(cosines, -1.0, 1.0) + biases
    keep = np.arange(len(scores)) if threshold is None else np.flatnonzero(scores >= threshold)
    if len(keep) > k:
        # Everything tied with the k-th best stays in: the tie-break below picks among them.
        kth = -np.partition(-scores[keep], k - 1)[k - 1]
        keep = keep[scores[keep] >= kth]
    order = np.lexsort((rank[keep], -scores[keep]))
    top: npt.NDArray[np.int64] = keep[order[:k]]
    return top


class CompositeRanker:
    """Entries ranked by ``weight · cosine(vector, query) + bias``.

    Args:
        ids: Entry ids.
        vectors: The rows holding the entries' unit vectors (read, never copied whole).
        rows: ``ids[i]``'s row in ``vectors``.
        biases: One finite bias per entry.
        weight: The similarity weight (``>= 0``).
        background_min_rows: From this many entries the ``VectorSet`` is built in a
            background thread, and searches scan the rows exactly until it is ready
            (``BACKGROUND_MIN_ROWS`` when None).
    """

    def __init__(
        self,
        ids: Sequence[str],
        vectors: VectorRows,
        rows: Sequence[int] | npt.NDArray[np.int64],
        biases: npt.NDArray[np.float64],
        weight: float,
        *,
        background_min_rows: int | None = None,
    ) -> None:
        self.size = len(ids)
        self.weight = float(weight)
        self.dim = vectors.dim
        self._ids = list(ids)
        self._vectors = vectors
        self._rows = np.asarray(rows, dtype=np.int64)
        self._bias = np.asarray(biases, dtype=np.float32)
        self._bias_low = float(self._bias.min()) if self.size else 0.0
        self._bias_high = float(self._bias.max()) if self.size else 0.0
        # Stored by descending bias: the scan's floor rises fastest on the rows most likely
        # to rank, and the later, low-bias rows are dropped after their first 128 columns.
        self._order = np.argsort(-self._bias, kind="stable")
        self._rank = np.empty(self.size, dtype=np.int64)
        self._rank[self._order] = np.arange(self.size)
        self._set: VectorSet | None = None
        self._built = threading.Event()
        if not self.size:
            self._built.set()
        elif self.size < (
            BACKGROUND_MIN_ROWS if background_min_rows is None else background_min_rows
        ):
            self._build()
        else:
            threading.Thread(target=self._build, name="memstrata-ranker", daemon=False).start()

    def _build(self) -> None:
        try:
            built = VectorSet(self.dim)
            # The set reads the unit rows in place (they are sealed, and never written again):
            # one float32 copy of the vectors, the mind's.
            blocks = self._vectors.blocks()
            for start in range(0, self.size, _BUILD_CHUNK):
                part = self._order[start : start + _BUILD_CHUNK]
                built.add_rows(
                    [self._ids[int(i)] for i in part],
                    blocks,
                    self._rows[part],
                    biases=self._bias[part],
                )
            self._set = built
        except Exception:  # the exact scan still answers every search
            logger.warning("building a recall index failed; recall scans exactly", exc_info=True)
        finally:
            self._built.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits for the ``VectorSet`` build; True once it is over."""
        return self._built.wait(timeout)

    @property
    def min_bias(self) -> float:
        """The smallest bias: no entry scores under ``weight * cosine + min_bias``."""
        return self._bias_low

    def _cosines(self, query: npt.ArrayLike) -> npt.NDArray[np.float32]:
        cosines: npt.NDArray[np.float32] = self._vectors.dots(unit_query(query))[self._rows]
        return cosines

    def top(
        self, query: npt.NDArray[np.float32], k: int, *, threshold: float | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` best ``(id, composite score)``, best first, scoring at least ``threshold``;
        ``query`` need not be normalised."""
        if not self.size:
            return []
        # A hair under the threshold: the peer computes the score in float64, this in float32.
        cut = None if threshold is None else threshold - 1e-6
        k = min(k, self.size)
        built = self._set
        if built is not None:
            return built.top_k(query, k, threshold=cut, weight=self.weight)
        cosines = self._cosines(query)
        best = exact_top(cosines, self._bias, self._rank, self.weight, k, cut)
        scores = np.float32(self.weight) * np.clip(cosines[best], -1.0, 1.0) + self._bias[best]
        return [(self._ids[i], float(s)) for i, s in zip(best.tolist(), scores.tolist())]

    def candidates(self, unit_query: npt.NDArray[np.float32], threshold: float) -> list[str]:
        """Every id whose cosine similarity to ``unit_query`` may be at least ``threshold``
        (a few just under it too), found by similarity alone: re-score them to decide.

        The set's biases cannot be switched off, so the search weighs the similarity
        ``_SIMILARITY_ONLY`` times the biases' spread: a row at or above the threshold then
        scores at least ``W·threshold + lowest bias``, and a row passing that cut is within
        ``spread / W`` (plus rounding) of the threshold.
        """
        if not self.size:
            return []
        built = self._set
        if built is None:
            near = np.flatnonzero(self._cosines(unit_query) >= threshold - 1e-4)
            return [self._ids[i] for i in near.tolist()]
        spread = self._bias_high - self._bias_low
        weight = _SIMILARITY_ONLY * max(1.0, spread)
        # Float32 rounding of the scores is far below this margin (1e-4 of the similarity).
        cut = weight * (threshold - 1e-4) + self._bias_low
        k = 16
        while True:
            found = built.top_k(unit_query, min(k, self.size), threshold=cut, weight=weight)
            if len(found) < k or k >= self.size:
                return [i for i, _ in found]
            k *= 4
