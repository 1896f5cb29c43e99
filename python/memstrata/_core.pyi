"""Types of the native module ``memstrata._core`` (built from ``rust/src/python``)."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

_T = TypeVar("_T")

__version__: str

# --- merge (deep_merge, merge_json, strip_unsafe_keys) ---

MAX_DEPTH: int
"""The deepest nesting of objects and arrays the merge kernels accept (``[[1]]`` nests 2).

Deeper input raises ``NestingTooDeepError``. A walk at the limit needs under 400 KiB of the
calling thread's stack (tested with 512 KiB threads); ``merge_json`` parses deep text on a
thread of its own.
"""

DEFAULT_UNSAFE_KEYS: tuple[str, ...]
"""``("__proto__", "constructor")``: keys that pollute JavaScript prototypes."""

def deep_merge(
    base: Any,
    patch: Any,
    *,
    arrays: Literal["replace", "union"] = "replace",
    nulls: Literal["keep", "delete", "ignore"] = "keep",
    unsafe_keys: Iterable[str] = DEFAULT_UNSAFE_KEYS,
    allow_nan: bool = False,
) -> Any:
    """Deep-merges ``patch`` into ``base`` and returns the result; neither input is mutated.

    Objects merge recursively, primitives overwrite, and a patch object replacing a non-object
    is copied in. Untouched subtrees of ``base`` are shared with the result (the same objects),
    so the cost follows the size of the patch, not of the state.

    ``base`` is trusted to be JSON data already stripped of unsafe keys (stores strip on load
    with :func:`strip_unsafe_keys`); only the parts the patch reaches are inspected. Every
    object the merge creates or copies (patch subtrees, touched base objects) is stripped of
    ``unsafe_keys`` at every depth, and every patch value is checked to be JSON data. Values
    under an unsafe key are dropped without being inspected. Tuples are accepted as arrays and
    become lists; dict subclasses merge as dicts and produce plain dicts.

    Args:
        base: The current state (any JSON value).
        patch: The update. A top-level ``None`` gives ``None``, or ``base`` with
            ``nulls="ignore"``.
        arrays: ``"replace"``: a patch array replaces the old one. ``"union"``: the old array
            followed by the patch array, each value once, at its first occurrence (so
            duplicates already in the old array go too), by JSON equality (equal objects and
            arrays count; ``True`` is not ``1``; ``1`` is ``1.0``).
        nulls: What ``None`` under a key of a patch object does, at every depth: ``"keep"``
            stores it, ``"delete"`` removes the key, ``"ignore"`` leaves the old value (for
            OpenAI strict-mode tools that pad optional fields with null). An array is a value
            stored verbatim: ``None`` inside it, even under a key of an object in it, is kept
            in every mode.
        unsafe_keys: Keys removed at every depth of what the merge produces. They replace
            the defaults: to remove more keys, pass ``(*DEFAULT_UNSAFE_KEYS, "extra")``.
        allow_nan: Accept NaN and ±Infinity floats in the patch.

    Returns:
        The merged value.

    Raises:
        NestingTooDeepError: The patch nests deeper than :data:`MAX_DEPTH`.
        UnsupportedTypeError: A patch value is not JSON data (set, bytes, object, non-str key).
        NonFiniteNumberError: A patch float is NaN or infinite and ``allow_nan`` is false.
        InvalidOptionError: ``arrays``, ``nulls`` or ``unsafe_keys`` is not an allowed value.

    The errors carry the JSON path of the offending value in ``.path`` (``$.profile.tags[3]``).
    """

def merge_json(
    base: bytes | str,
    patch: bytes | str,
    *,
    arrays: Literal["replace", "union"] = "replace",
    nulls: Literal["keep", "delete", "ignore"] = "keep",
    unsafe_keys: Iterable[str] = DEFAULT_UNSAFE_KEYS,
) -> bytes:
    """:func:`deep_merge` on JSON text, for the storage path; returns compact UTF-8 JSON.

    Both texts are parsed in full, so the whole result is stripped of ``unsafe_keys``, base
    included. Key order is preserved, new keys come last. JSON text cannot hold NaN, so there
    is no ``allow_nan``. The GIL is released while merging.

    Raises:
        InvalidJSONError: ``base`` or ``patch`` (named in the message) is not valid JSON.
        NestingTooDeepError: A text nests deeper than :data:`MAX_DEPTH` (``.path`` says where).
        UnsupportedTypeError: An argument is neither ``bytes`` nor ``str``.
        InvalidOptionError: As for :func:`deep_merge`.
    """

def strip_unsafe_keys(
    value: _T, keys: Iterable[str] = DEFAULT_UNSAFE_KEYS, *, allow_nan: bool = False
) -> _T:
    """Returns ``value`` without ``keys`` at any depth; ``value`` is not mutated. ``keys``
    replace the defaults: to remove more keys, pass ``(*DEFAULT_UNSAFE_KEYS, "extra")``.

    Containers in which nothing had to change are shared with the result (the very same
    object when nothing changed at all); dict subclasses become plain dicts and tuples lists.

    Raises:
        NestingTooDeepError: ``value`` nests deeper than :data:`MAX_DEPTH`.
        UnsupportedTypeError: Something in ``value`` is not JSON data.
        NonFiniteNumberError: A float is NaN or infinite and ``allow_nan`` is false.
        InvalidOptionError: ``keys`` is not an iterable of str.
    """

# --- patterns (PatternReplacer) ---

class PatternReplacer:
    r"""Regex rules compiled once and applied in order, each to the text the ones before it made.

    A rule is ``(pattern, replacement[, before[, after[, requires]]])``. Patterns use the syntax
    of Rust's ``regex`` crate: no look-around or back-references, and every search takes time
    linear in the text it reads. In each match of ``pattern``, the longest beginning that
    ``before`` matches and the longest end that ``after`` matches stay, and the text between
    them is replaced by ``replacement``: so ``before`` stands for a kept prefix or a
    look-behind, ``after`` for a look-ahead or a kept suffix. When ``after`` took at most 4
    bytes, the next search starts where the replaced text ended, as after a look-ahead. A match
    where ``before`` or ``after`` finds nothing, or with nothing left to replace between them,
    stays as it is. ``requires``: patterns that must all be found in the text to replace.
    ``before`` and ``after`` cannot use Unicode word boundaries (``(?-u:\b)`` works).

    Raises:
        InvalidInputError: A pattern does not compile or is over a size limit (the message
            names it, ``rules[3].after``), or over 256 rules.
        UnsupportedTypeError: ``rules`` is not a list of such tuples.
    """

    def __init__(
        self,
        rules: Sequence[
            tuple[str, str]
            | tuple[str, str, str | None]
            | tuple[str, str, str | None, str | None]
            | tuple[str, str, str | None, str | None, Sequence[str]]
        ],
    ) -> None: ...
    def replace(self, text: str) -> tuple[str, int]:
        """``text`` rewritten by every rule in turn, and how many replacements were made
        (``text`` itself when none was). The GIL is released for long texts.

        Raises:
            UnsupportedTypeError: ``text`` is not a str.
            InvalidInputError: ``text`` holds a lone surrogate (it is not Unicode text).
        """
    def __len__(self) -> int: ...

# --- prune (prune_sliding_window) ---

def prune_sliding_window(
    messages: list[dict[str, Any]],
    *,
    keep_recent: int = 3,
    placeholder: str = "[summarized: call_id={call_id}]",
) -> tuple[list[dict[str, Any]], int]:
    """Replaces the content of older tool messages by a placeholder; ``messages`` is not mutated.

    The ``keep_recent`` most recent ``role == "tool"`` messages (by position, pruned or not)
    stay verbatim. Each older one becomes a new dict with the same keys whose ``content`` is
    ``placeholder`` with ``{call_id}`` replaced by its ``tool_call_id`` (only ``{call_id}`` is
    substituted; other braces are literal). A message whose content already equals its
    placeholder is left as it is and not counted, so pruning twice prunes nothing more. Every
    other message is the same object in the returned (new) list.

    Args:
        messages: OpenAI-style chat messages.
        keep_recent: How many of the latest tool messages to keep verbatim (``>= 0``).
        placeholder: Template of the replacement content; must contain ``{call_id}``.

    Returns:
        The new list and how many messages were replaced.

    Raises:
        UnsupportedTypeError: ``messages`` is not a list, or a message is not a dict.
        InvalidInputError: ``keep_recent < 0``, ``placeholder`` lacks ``{call_id}``, or a tool
            message to replace has no str ``tool_call_id`` (``.path`` names it).
    """

# --- tokens (estimate_tokens, estimate_messages, estimate_prefix, count_tokens, fits_within) ---

def estimate_tokens(text: str, *, model: str | None = None) -> int: ...
def estimate_messages(
    messages: Sequence[Mapping[str, Any]], *, model: str | None = None
) -> int: ...
def estimate_prefix(text: str, max_tokens: int, *, model: str | None = None) -> int: ...
def count_tokens(text: str, *, encoding: str = "o200k_base") -> int: ...
def count_message_tokens(
    messages: Sequence[Mapping[str, Any]], *, encoding: str = "o200k_base"
) -> int: ...
def fits_within(text: str, limit: int, *, encoding: str = "o200k_base") -> bool: ...
def encoding_for(model: str | None = None) -> str: ...
def _token_features(
    text: str, *, encoding: str = "o200k_base", via_utf8: bool = False
) -> list[int]: ...

# --- vectors (cosine_top_k, VectorSet, decode_vectors_b64) ---

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
    def add(
        self, ids: Iterable[str], vectors: npt.ArrayLike, *, biases: npt.ArrayLike | None = None
    ) -> None:
        """Adds ``ids[i]`` with ``vectors[i]``; an id already present gets the new vector.

        Within one call a repeated id keeps its last vector. The call is all-or-nothing: every
        vector is checked before the set changes.

        Args:
            ids: The ids (a list of str; a lone str is refused).
            vectors: Shape ``(len(ids), dim)``, converted to float32 like ``cosine_top_k``'s.
            biases: Shape ``(len(ids),)``, finite: what ``top_k`` adds to each id's weighted
                similarity (recency or confidence, say). Omitted: zero (a replaced id's bias
                is reset too).

        Raises:
            ZeroVectorError: A vector is all zeros (the message names its id).
            NonFiniteNumberError: A vector holds NaN or infinity (the message names its id).
            DimensionMismatchError: ``vectors`` does not have ``dim`` columns.
            InvalidInputError: ``vectors`` does not have one row per id, or ``biases`` one
                finite number per id.
            UnsupportedTypeError: ``ids`` is not a list of str.
        """
    def add_rows(
        self,
        ids: Iterable[str],
        blocks: Sequence[npt.NDArray[np.float32]],
        rows: npt.ArrayLike,
        *,
        biases: npt.ArrayLike | None = None,
    ) -> None:
        """Adds ``ids[i]`` with row ``rows[i]`` of ``blocks``, read in place rather than copied.

        The rows of ``blocks`` count end to end (the rows of ``blocks[1]`` follow those of
        ``blocks[0]``). The set keeps a reference to each block (a block given again is kept
        once) and only int8 codes and statistics of its own, so a caller that already holds
        its vectors normalised does not hold them twice. The rows must be unit vectors (norm
        within 1e-4 of 1) and must not be written while the set holds them. A set takes either
        ``add`` or ``add_rows``, not both. All-or-nothing, as ``add``.

        Args:
            ids: The ids (a list of str; a lone str is refused).
            blocks: float32 C-contiguous arrays of shape ``(n, dim)`` (never converted).
            rows: Row numbers into ``blocks``, one per id.
            biases: As ``add``'s.

        Raises:
            ZeroVectorError: A row is all zeros (the message names its id).
            NonFiniteNumberError: A row holds NaN or infinity (the message names its id).
            InvalidInputError: A block is not float32 C-contiguous with ``dim`` columns, a row
                number is negative or past the blocks' rows, a row is not a unit vector, the
                set holds vectors given to ``add``, or ``rows`` or ``biases`` is not one per id.
            UnsupportedTypeError: ``ids`` is not a list of str, or ``blocks`` is one array.
        """
    def remove(self, ids: Iterable[str]) -> int:
        """Removes the given ids (O(1) each); ids not in the set are ignored.

        Returns:
            How many ids were removed.
        """
    def top_k(
        self,
        query: npt.ArrayLike,
        k: int,
        *,
        threshold: float | None = None,
        weight: float = 1.0,
    ) -> list[tuple[str, float]]:
        """The ``k`` ids scoring highest against ``query``, best first, with their score.

        The score is ``weight * cosine + bias`` (float32, the cosine clamped to [-1, 1]; the
        bias given to ``add``, zero by default), so with the defaults it is the cosine
        similarity. The search is exact for any weight and biases, and reads the same bytes.
        Ties go to the id stored first (removal moves the last stored id into the hole).

        Args:
            query: Shape ``(dim,)``.
            k: How many ids to return at most (``>= 1``).
            threshold: When given, only ids scoring at least this are returned.
            weight: The similarity's weight, finite and ``>= 0``.

        Raises:
            DimensionMismatchError, ZeroVectorError, NonFiniteNumberError, InvalidInputError:
                as for ``cosine_top_k``; InvalidInputError also for a bad ``weight``.
        """
    def find_duplicate(self, vector: npt.ArrayLike, threshold: float) -> tuple[str, float] | None:
        """The id most similar to ``vector`` if its similarity is at least ``threshold``
        (``top_k(vector, 1, threshold=threshold)``: a set given biases adds them).

        Raises:
            DimensionMismatchError, ZeroVectorError, NonFiniteNumberError, InvalidInputError:
                as for ``cosine_top_k``.
        """
    def __len__(self) -> int: ...
    def __contains__(self, id: object) -> bool: ...

def decode_vectors_b64(
    texts: Sequence[object], dim: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Decodes stored vectors (base64 of little-endian float32, as ``encode_vector`` writes
    them) of dimension ``dim`` into one matrix, without the GIL (on both cores from 4 MB).

    Strict where the encoder is: the standard alphabet, ``=`` padding, no whitespace, exactly
    ``4 * dim`` bytes. Any other value (another length, a non-str, stray characters) is not a
    vector: its row is zero and its mask entry False.

    Args:
        texts: The stored values, in order (a lone str is refused).
        dim: The dimension, between 1 and 65536.

    Returns:
        ``(matrix, ok)``: float32 of shape ``(len(texts), dim)`` and bool of shape
        ``(len(texts),)``.

    Raises:
        InvalidInputError: ``dim`` out of range.
        UnsupportedTypeError: ``texts`` is a str or bytes, or not iterable.
    """

def split_vector_members(
    texts: Sequence[bytes | str], key: str, dim: int | None = None
) -> tuple[list[bytes | None], npt.NDArray[np.float32]]:
    """Cuts the stored vector member ``key`` out of JSON object texts, decoding it natively.

    For each text: when its top-level member ``key`` is a string holding a stored vector of
    dimension ``dim`` (as :func:`decode_vectors_b64` reads one), the text without that member
    (UTF-8 bytes; parsing it gives the parsed text without ``key``) and the vector in the row of
    the same number of the ``(len(texts), dim)`` matrix; else ``None`` and a zero row. The cut
    is declined (``None``) wherever it could differ from a parser's view: the key written
    twice or with an escape, an escaped value, brackets that do not pair, trailing text, and
    anywhere in the text a number with an exponent or twenty digits or more (one a parser may
    read past a double's range and refuse, where a parser of the rest may skip it). Runs
    without the GIL. Without ``dim``, the vector length most members share sets it (the first
    seen among equals; the matrix has no columns when none has a vector's length).

    Args:
        texts: JSON texts, as bytes or str (a lone bytes or str is refused; a str with no
            UTF-8 form, such as one holding a lone surrogate, is declined).
        key: The top-level member to cut out.
        dim: The vectors' dimension, between 1 and 65536, or None.

    Raises:
        InvalidInputError: ``dim`` is out of range.
        UnsupportedTypeError: ``texts`` is not a sequence of bytes and str.
    """

# --- embed (hash_embed) ---

def hash_embed(texts: Iterable[str], dim: int = 384) -> npt.NDArray[np.float32]:
    """Embeds texts offline with deterministic feature hashing.

    Each text is lowercased and split into tokens at whitespace and punctuation (``3.2``,
    ``5,000`` and ``v1.2`` stay whole). Numbers (digits or ``zero`` to ``twelve``) are whole
    features of weight 3; negations (``not``, ``never``, ``n't``...) one shared feature of
    weight 3; stop words weigh 0.2; other words give their stem (weight 1) and their character
    3- to 5-grams of ``<word>`` (weight 2 in all); each pair of consecutive non-stop tokens is a
    feature of weight 1, so word order counts. Features are hashed (64-bit FNV-1a plus the
    murmur3 finaliser, fixed and platform independent) into signed buckets. Rows are
    L2-normalised, so the same text gives the same vector on every machine and process. This
    is the vector space ``HashingEmbedder`` names ``memstrata-hash-v2-<dim>``.

    Args:
        texts: The texts (a list of str; a lone str is refused).
        dim: The embedding dimension, between 1 and 65536.

    Returns:
        A float32 array of shape ``(len(texts), dim)``. A text without any token (empty,
        whitespace or punctuation only) gives a zero row, which ``VectorSet`` refuses with
        ``ZeroVectorError``.

    Raises:
        InvalidInputError: ``dim`` is out of range, or a text holds a lone surrogate.
        UnsupportedTypeError: ``texts`` is not a list of str.
    """
