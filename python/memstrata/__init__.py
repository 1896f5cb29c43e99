"""memstrata: memory layers for LLM agents, with a Rust core.

The kernels (``deep_merge``, ``estimate_tokens``, ``cosine_top_k``...) are pure functions on
plain data; none mutates its inputs.
"""

from __future__ import annotations

from memstrata import exceptions
from memstrata._core import VectorSet, __version__, cosine_top_k, hash_embed

__all__ = [
    "VectorSet",
    "__version__",
    "cosine_top_k",
    "exceptions",
    "hash_embed",
]
