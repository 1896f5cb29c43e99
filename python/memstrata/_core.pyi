"""Types of the native module ``memstrata._core`` (built from ``rust/src/python``)."""

__version__: str

# --- merge (deep_merge, merge_json, strip_unsafe_keys) ---

# --- prune (prune_sliding_window) ---

# --- tokens (estimate_tokens, estimate_messages, count_tokens, fits_within) ---

from collections.abc import Mapping, Sequence
from typing import Any

def estimate_tokens(text: str, *, model: str | None = None) -> int: ...
def estimate_messages(
    messages: Sequence[Mapping[str, Any]], *, model: str | None = None
) -> int: ...
def count_tokens(text: str, *, encoding: str = "o200k_base") -> int: ...
def count_message_tokens(
    messages: Sequence[Mapping[str, Any]], *, encoding: str = "o200k_base"
) -> int: ...
def fits_within(text: str, limit: int, *, encoding: str = "o200k_base") -> bool: ...
def encoding_for(model: str | None = None) -> str: ...
def _token_features(
    text: str, *, encoding: str = "o200k_base", via_utf8: bool = False
) -> list[int]: ...

# --- vectors (cosine_top_k, VectorSet) ---

# --- embed (hash_embed) ---
