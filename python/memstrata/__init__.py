"""memstrata: memory layers for LLM agents, with a Rust core.

The kernels (``deep_merge``, ``estimate_tokens``, ``cosine_top_k``...) are pure functions on
plain data; none mutates its inputs.
"""

from __future__ import annotations

from memstrata import exceptions
from memstrata._core import (
    DEFAULT_UNSAFE_KEYS,
    MAX_DEPTH,
    __version__,
    deep_merge,
    merge_json,
    prune_sliding_window,
    strip_unsafe_keys,
)

__all__ = [
    "DEFAULT_UNSAFE_KEYS",
    "MAX_DEPTH",
    "__version__",
    "deep_merge",
    "exceptions",
    "merge_json",
    "prune_sliding_window",
    "strip_unsafe_keys",
]
