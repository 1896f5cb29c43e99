"""Types of the native module ``memstrata._core`` (built from ``rust/src/python``)."""

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__version__: str

# --- merge (deep_merge, merge_json, strip_unsafe_keys) ---

# --- prune (prune_sliding_window) ---

# --- tokens (estimate_tokens, estimate_messages, count_tokens, fits_within) ---

# --- vectors (cosine_top_k, VectorSet) ---

def cosine_top_k(
    matrix: npt.ArrayLike,
    query: npt.ArrayLike,
    k: int,
    *,
    threshold: float | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The ``k`` rows of ``matrix`` most cosine-similar to ``query``, best first.

    Rows need not be normalised: each row's norm is computed in the same pass as its dot
    product. Scores are float32 cosine similarities clamped to ``[-1, 1]``; ties go to the lower
    row index. Rows whose norm is zero have no direction and are skipped (never returned).
    The scan runs without the GIL (on both cores from 4 MB of data); do not modify the arrays
    from another thread while it runs.

    Args:
        matrix: Shape ``(n, d)``. A float32 C-contiguous array is read in place; any other
            real-valued array-like is converted with
            ``np.ascontiguousarray(matrix, dtype=np.float32)`` (a copy).
        query: Shape ``(d,)``, converted the same way.
        k: How many rows to return at most (``>= 1``; fewer when fewer rows qualify).
        threshold: When given, only rows scoring at least this are returned.

    Returns:
        ``(indices, scores)``: int64 row indices and their float32 similarities, best first.

    Raises:
        DimensionMismatchError: ``query`` does not have ``d`` elements.
        ZeroVectorError: ``query`` is all zeros.
        NonFiniteNumberError: NaN or infinity in ``matrix`` or ``query`` (``path`` names it,
            e.g. ``matrix[3, 17]``; the lowest row is reported).
        InvalidInputError: ``k < 1``, a NaN threshold, or an array of the wrong rank.
        UnsupportedTypeError: an array that does not hold real numbers.
    """

class VectorSet:
    """A growable set of unit vectors keyed by string ids, for dedup-on-insert and recall.

    Vectors are stored normalised. Searches are exact: an int8 copy of the vectors prefilters
    the candidates with a proven error bound, and the survivors are re-scored in float32, so
    results equal an exhaustive float32 scan. Searches release the GIL; calls from other
    threads that modify the set wait for a running search to finish.
    """

    def __init__(self, dim: int) -> None:
        """Creates an empty set.

        Args:
            dim: The vectors' dimension, between 1 and 65536.

        Raises:
            InvalidInputError: ``dim`` is out of range.
        """
    @property
    def dim(self) -> int:
        """The vectors' dimension."""
    def add(self, ids: Iterable[str], vectors: npt.ArrayLike) -> None:
        """Adds ``ids[i]`` with ``vectors[i]``; an id already present gets the new vector.

        Within one call a repeated id keeps its last vector. The call is all-or-nothing: every
        vector is checked before the set changes.

        Args:
            ids: The ids (a list of str; a lone str is refused).
            vectors: Shape ``(len(ids), dim)``, converted to float32 like ``cosine_top_k``'s.

        Raises:
            ZeroVectorError: A vector is all zeros (the message names its id).
            NonFiniteNumberError: A vector holds NaN or infinity (the message names its id).
            DimensionMismatchError: ``vectors`` does not have ``dim`` columns.
            InvalidInputError: ``vectors`` does not have one row per id.
            UnsupportedTypeError: ``ids`` is not a list of str.
        """
    def remove(self, ids: Iterable[str]) -> int:
        """Removes the given ids (O(1) each); ids not in the set are ignored.

        Returns:
            How many ids were removed.
        """
    def top_k(
        self, query: npt.ArrayLike, k: int, *, threshold: float | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` ids most cosine-similar to ``query``, best first, with their similarity.

        Ties go to the id stored first (removal moves the last stored id into the hole).

        Args:
            query: Shape ``(dim,)``.
            k: How many ids to return at most (``>= 1``).
            threshold: When given, only ids scoring at least this are returned.

        Raises:
            DimensionMismatchError, ZeroVectorError, NonFiniteNumberError, InvalidInputError:
                as for ``cosine_top_k``.
        """
    def find_duplicate(self, vector: npt.ArrayLike, threshold: float) -> tuple[str, float] | None:
        """The id most similar to ``vector`` if its similarity is at least ``threshold``.

        Raises:
            DimensionMismatchError, ZeroVectorError, NonFiniteNumberError, InvalidInputError:
                as for ``cosine_top_k``.
        """
    def __len__(self) -> int: ...
    def __contains__(self, id: object) -> bool: ...

# --- embed (hash_embed) ---

def hash_embed(texts: Iterable[str], dim: int = 384) -> npt.NDArray[np.float32]:
    """Embeds texts offline with deterministic feature hashing.

    Each text is lowercased and split into words at whitespace and punctuation; every word and
    the character 3- to 5-grams of ``<word>`` are hashed (64-bit FNV-1a plus the murmur3
    finaliser, fixed and platform independent) into a signed bucket. Rows are L2-normalised, so
    the same text gives the same vector on every machine and process.

    Args:
        texts: The texts (a list of str; a lone str is refused).
        dim: The embedding dimension, between 1 and 65536.

    Returns:
        A float32 array of shape ``(len(texts), dim)``. A text without any word (empty,
        whitespace or punctuation only) gives a zero row, which ``VectorSet`` refuses with
        ``ZeroVectorError``.

    Raises:
        InvalidInputError: ``dim`` is out of range, or a text holds a lone surrogate.
        UnsupportedTypeError: ``texts`` is not a list of str.
    """
