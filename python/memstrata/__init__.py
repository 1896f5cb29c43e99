"""memstrata: memory layers for LLM agents, with a Rust core.

The kernels (``deep_merge``, ``estimate_tokens``, ``cosine_top_k``...) are pure functions on
plain data; none mutates its inputs. The stack (``MemoryStack``) composes layers such as
``WorkingMemory`` over a store (``open_store``: SQLite by default).
"""

from __future__ import annotations

from memstrata import exceptions
from memstrata._bridge import TaskLock
from memstrata._core import (
    DEFAULT_UNSAFE_KEYS,
    MAX_DEPTH,
    VectorSet,
    __version__,
    cosine_top_k,
    deep_merge,
    hash_embed,
    merge_json,
    prune_sliding_window,
    strip_unsafe_keys,
)
from memstrata.embedders import Embedder, HashingEmbedder, OpenAIEmbedder
from memstrata.exceptions import RecoverableContextError
from memstrata.layers import (
    AgentMind,
    ContextGate,
    MemoryEntry,
    SharedMemory,
    StateEntry,
    TeamState,
    ToolResults,
    WorkingMemory,
    extract_claim,
    memory_keys,
    prune_messages_sliding_window,
)
from memstrata.repo_map import repo_map
from memstrata.stack import Budget, Layer, MemoryStack, Run, RunContext
from memstrata.stores import InMemoryStore, Item, SQLiteStore, Store, open_store
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
from memstrata.tools import Tool

__all__ = [
    "DEFAULT_UNSAFE_KEYS",
    "MAX_DEPTH",
    "AgentMind",
    "Budget",
    "ContextGate",
    "Embedder",
    "EstimatingCounter",
    "ExactCounter",
    "HashingEmbedder",
    "InMemoryStore",
    "Item",
    "Layer",
    "MemoryEntry",
    "MemoryStack",
    "OpenAIEmbedder",
    "RecoverableContextError",
    "Run",
    "RunContext",
    "SQLiteStore",
    "SharedMemory",
    "StateEntry",
    "Store",
    "TaskLock",
    "TeamState",
    "TokenCounter",
    "Tool",
    "ToolResults",
    "VectorSet",
    "WorkingMemory",
    "__version__",
    "cosine_top_k",
    "count_message_tokens",
    "count_tokens",
    "deep_merge",
    "estimate_messages",
    "estimate_tokens",
    "exceptions",
    "extract_claim",
    "fits_within",
    "hash_embed",
    "memory_keys",
    "merge_json",
    "open_store",
    "prune_messages_sliding_window",
    "prune_sliding_window",
    "repo_map",
    "strip_unsafe_keys",
]
