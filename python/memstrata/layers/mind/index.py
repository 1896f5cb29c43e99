"""A run's vector index: which committed rows serve its beliefs and reflections under the
current embedder, the belief dedup check's exact search, and embedding (a query, or the entries
stored without a vector of the current model, which are re-embedded and written back).

The index is kept by the layer between runs and synced with each new committed version; no
vector is copied into it (the rows live in :mod:`memstrata.layers.mind.vectors`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memstrata.embedders import embed_texts
from memstrata.exceptions import ToolError
from memstrata.layers.mind.entries import MindBelief, MindReflection, encode_vector
from memstrata.layers.mind.records import entry_key, stored_payload
from memstrata.layers.mind.vectors import VectorRows

if TYPE_CHECKING:
    from memstrata.embedders import Embedder
    from memstrata.layers.mind.handle import AgentMindHandle

logger = logging.getLogger("memstrata.agent_mind")

REEMBED_BATCH = 256
# An embedding's squared norm is below this, so float32 arithmetic on it (its squared norm,
# its dot product with another such vector) stays far from float32's limit, 3.4e38.
MAX_EMBEDDING_NORM2 = 1e30


def embed_one(embedder: Embedder, text: str) -> npt.NDArray[np.float32]:
    """``text``'s vector; refuses (as a tool error) a text the embedder cannot place."""
    vector: npt.NDArray[np.float32] = np.asarray(embed_texts(embedder, [text]), dtype=np.float32)[0]
    if not _placeable(vector):
        raise ToolError(
            "this text has no words the embedder can place; write it in words",
            code="invalid_arguments",
        )
    return vector


def checked_vector(vector: Any, dim: int) -> npt.NDArray[np.float32]:
    """A float32 copy of a vector a caller embedded itself, refused (as a tool error naming
    ``vector``) unless the mind can store and search it: ``dim`` numbers, finite, not all zero."""
    try:
        own = np.array(vector, dtype=np.float32)
    except (TypeError, ValueError):
        raise ToolError(
            f"vector must be {dim} numbers, got {type(vector).__name__}", code="invalid_arguments"
        ) from None
    if own.shape != (dim,):
        raise ToolError(
            f"vector has shape {own.shape}; the mind's embedder gives vectors of {dim} numbers",
            code="invalid_arguments",
        )
    if not _placeable(own):
        raise ToolError(
            "vector is all zeros, holds NaN or infinity, or is too large to normalise",
            code="invalid_arguments",
        )
    return own


def _placeable(vector: npt.NDArray[np.float32]) -> bool:
    # One dot product (in float64, which cannot overflow here) says it all: zero for a
    # zero vector, inf or NaN for a non-finite one, and past MAX_EMBEDDING_NORM2 for one
    # whose float32 norm would overflow in the index. np.any and np.isfinite took two
    # more numpy calls on every recall and belief.
    wide = vector.astype(np.float64)
    return 0.0 < float(wide @ wide) < MAX_EMBEDDING_NORM2


@dataclass
class _IndexCache:
    """Which rows of the committed vectors serve one namespace's beliefs and reflections under
    the current embedder, kept by the layer across runs. No vector is copied here: recall's
    ranker reads the rows, and the belief dedup check searches that ranker (see
    :class:`_KindIndex`)."""

    model: str
    dim: int
    vectors: VectorRows
    rows: dict[str, int] = field(default_factory=dict)  # id -> row in ``vectors``
    version: int = -1  # the committed version last synced in: the same again needs nothing


class _KindIndex:
    """One kind's indexed entries for the dedup check, as a run sees them: exact cosine
    similarity against the entries live when recall's ranker was built.

    It holds no vectors of its own: candidates come from the run's live ranker (a search by
    similarity alone, see :meth:`CompositeRanker.candidates`) and are re-scored from the rows.
    """

    def __init__(self, handle: AgentMindHandle, cache: _IndexCache, kind: str) -> None:
        self._handle = handle
        self._cache = cache
        self._entries = handle._beliefs if kind == "belief" else handle._reflections
        self._size: int | None = None

    def __len__(self) -> int:
        if self._size is None:
            # One set intersection in C: a pass in Python costs 0.1 s at 100,000 entries.
            self._size = len(self._entries.keys() & self._cache.rows.keys())
        return self._size

    def top_k(self, vector: npt.ArrayLike, k: int, *, threshold: float) -> list[tuple[str, float]]:
        """The ``k`` live entries most similar to ``vector``, at least ``threshold``."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.sqrt(query.astype(np.float64) @ query.astype(np.float64)))
        if not norm or not math.isfinite(norm):
            return []
        unit = query / np.float32(norm)
        ranker = self._handle._ranker(("belief", "reflection"), False)
        ids = [i for i in ranker.candidates(unit, threshold) if i in self._entries]
        if not ids:
            return []
        rows = self._cache.rows
        sims = self._cache.vectors.gather([rows[i] for i in ids]) @ unit
        found = [
            (i, min(1.0, max(-1.0, float(sim)))) for i, sim in zip(ids, sims) if sim >= threshold
        ]
        found.sort(key=lambda hit: (-hit[1], hit[0]))
        return found[:k]

    def find_duplicate(self, vector: npt.ArrayLike, threshold: float) -> tuple[str, float] | None:
        best = self.top_k(vector, 1, threshold=threshold)
        return best[0] if best else None


@dataclass
class _Index:
    """A run's view of its namespace's vector index."""

    cache: _IndexCache
    beliefs: _KindIndex
    reflections: _KindIndex

    @property
    def dim(self) -> int:
        return self.cache.dim

    @property
    def rows(self) -> dict[str, int]:
        return self.cache.rows

    @property
    def vectors(self) -> VectorRows:
        return self.cache.vectors


def open_index(handle: AgentMindHandle) -> _Index:
    """The run's index over its committed entries, synced with the layer's."""
    cache = _sync_index(handle)
    return _Index(
        cache, _KindIndex(handle, cache, "belief"), _KindIndex(handle, cache, "reflection")
    )


def _sync_index(handle: AgentMindHandle) -> _IndexCache:
    layer = handle.layer
    embedder = layer.embedder
    model, dim = embedder.model, embedder.dim
    committed = handle._committed
    cache = layer._indexes.get(handle.namespace)
    if (
        cache is not None
        and cache.version == committed.version
        and (cache.model, cache.dim) == (model, dim)
    ):
        return cache
    # setdefault: runs on two threads syncing at once share one set of rows, never each its own.
    vectors = committed.rows.setdefault(dim, VectorRows(dim))
    cache = _IndexCache(model, dim, vectors)
    # Read from the stored vectors a comprehension at a time: at 100,000 entries a look-up and
    # a branch per entry was most of the first recall.
    matching = {
        i: row
        for i, (stored_model, stored_dim, row) in handle._stored_vectors.items()
        if stored_dim == dim and stored_model == model
    }
    usable = vectors.usable_rows(
        np.fromiter(matching.values(), dtype=np.int64, count=len(matching))
    )
    if usable.all():  # the usual case
        cache.rows = matching
    else:
        cache.rows = {i: row for (i, row), ok in zip(matching.items(), usable.tolist()) if ok}
    rows = cache.rows
    stale = [i for held in (handle._beliefs, handle._reflections) for i in held if i not in rows]
    if stale:
        cache.rows.update(_reembed(handle, stale, {**handle._beliefs, **handle._reflections}))
    cache.version = committed.version
    layer._indexes[handle.namespace] = cache
    return cache


def _reembed(
    handle: AgentMindHandle,
    ids: list[str],
    entries: dict[str, MindBelief | MindReflection],
) -> dict[str, int]:
    """Embeds entries stored without a vector of the current model into the committed rows,
    shows progress, and writes the new vectors back in one transaction. Returns their rows."""
    layer = handle.layer
    total = len(ids)
    model = layer.embedder.model
    vectors = handle._committed.rows[layer.embedder.dim]
    logger.info("re-embedding %d mind entries with %s", total, model)
    out: dict[str, npt.NDArray[np.float32]] = {}
    for start in range(0, total, REEMBED_BATCH):
        batch = ids[start : start + REEMBED_BATCH]
        matrix = np.asarray(
            embed_texts(layer.embedder, [entries[i].content for i in batch]), dtype=np.float32
        )
        for i, vector in zip(batch, matrix):
            if np.any(vector) and np.isfinite(vector).all():
                out[i] = vector
        done = min(start + REEMBED_BATCH, total)
        logger.info("re-embedded %d/%d mind entries", done, total)
        if layer.on_progress is not None:
            layer.on_progress(done, total)

    def rewrite(entry: MindBelief | MindReflection, vector: npt.NDArray[np.float32]) -> Any:
        def fn(current: Any) -> Any:
            # Written meanwhile by another run: its own vector is the one to keep.
            if not isinstance(current, dict) or current.get("content") != entry.content:
                return current if current is not None else stored_payload(entry, vector, model)
            return {**current, "embedding": encode_vector(vector), "embeddingModel": model}

        return fn

    if not out:
        return {}
    handle.store.update_many(
        handle.namespace, {entry_key(entries[i]): rewrite(entries[i], v) for i, v in out.items()}
    )
    rows = dict(zip(out, vectors.append(np.stack(list(out.values())))))
    vectors.seal()
    handle._stored_vectors = {
        **handle._stored_vectors,
        **{i: (model, vectors.dim, row) for i, row in rows.items()},
    }
    return {i: row for i, row in rows.items() if vectors.usable(row)}
