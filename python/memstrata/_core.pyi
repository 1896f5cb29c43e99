"""Types of the native module ``memstrata._core`` (built from ``rust/src/python``)."""

from collections.abc import Iterable
from typing import Any, Literal, TypeVar

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
            (kept as it is) followed by the patch values not equal to a value already present,
            by JSON equality (equal objects and arrays count; ``True`` is not ``1``; ``1`` is
            ``1.0``).
        nulls: What ``None`` under a key of a patch object does, at every depth: ``"keep"``
            stores it, ``"delete"`` removes the key, ``"ignore"`` leaves the old value (for
            OpenAI strict-mode tools that pad optional fields with null). ``None`` inside
            arrays is a value.
        unsafe_keys: Keys removed at every depth of what the merge produces.
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
    """Returns ``value`` without ``keys`` at any depth; ``value`` is not mutated.

    Containers in which nothing had to change are shared with the result (the very same
    object when nothing changed at all); dict subclasses become plain dicts and tuples lists.

    Raises:
        NestingTooDeepError: ``value`` nests deeper than :data:`MAX_DEPTH`.
        UnsupportedTypeError: Something in ``value`` is not JSON data.
        NonFiniteNumberError: A float is NaN or infinite and ``allow_nan`` is false.
        InvalidOptionError: ``keys`` is not an iterable of str.
    """

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

# --- tokens (estimate_tokens, estimate_messages, count_tokens, fits_within) ---

# --- vectors (cosine_top_k, VectorSet) ---

# --- embed (hash_embed) ---
