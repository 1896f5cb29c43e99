"""memstrata: memory layers for LLM agents, with a Rust core.

The kernels (``deep_merge``, ``estimate_tokens``, ``cosine_top_k``...) are pure functions on
plain data; none mutates its inputs.
"""

from __future__ import annotations

from memstrata import exceptions
from memstrata._core import __version__
from memstrata.tokens import (
    EstimatingCounter,
    ExactCounter,
    TokenCounter,
    count_message_tokens,
    count_tokens,
    estimate_messages,
    estimate_tokens,
    fits_within,
)

__all__ = [
    "EstimatingCounter",
    "ExactCounter",
    "TokenCounter",
    "__version__",
    "count_message_tokens",
    "count_tokens",
    "estimate_messages",
    "estimate_tokens",
    "exceptions",
    "fits_within",
]
