"""memstrata: memory layers for LLM agents, with a Rust core.

The kernels (``deep_merge``, ``estimate_tokens``, ``cosine_top_k``...) are pure functions on
plain data; none mutates its inputs. The stack (``MemoryStack``) composes layers such as
``WorkingMemory`` over a store (``open_store``: SQLite by default).
"""

from __future__ import annotations

from memstrata import exceptions
from memstrata._core import __version__
from memstrata.layers import WorkingMemory
from memstrata.stack import Budget, Layer, MemoryStack, Run, RunContext
from memstrata.stores import InMemoryStore, Item, SQLiteStore, Store, open_store
from memstrata.tools import Tool

__all__ = [
    "Budget",
    "InMemoryStore",
    "Item",
    "Layer",
    "MemoryStack",
    "Run",
    "RunContext",
    "SQLiteStore",
    "Store",
    "Tool",
    "WorkingMemory",
    "__version__",
    "exceptions",
    "open_store",
]
