"""Memory layers: one file per layer, each knowing nothing of the others."""

from __future__ import annotations

from memstrata.layers.agent_mind import AgentMind, AgentMindHandle, MindTtlDefaults, ScoreWeights
from memstrata.layers.shared_memory import (
    MemoryEntry,
    SharedMemory,
    SharedMemoryHandle,
    memory_keys,
)
from memstrata.layers.working_memory import WorkingMemory, WorkingMemoryHandle

__all__ = [
    "AgentMind",
    "AgentMindHandle",
    "MemoryEntry",
    "MindTtlDefaults",
    "ScoreWeights",
    "SharedMemory",
    "SharedMemoryHandle",
    "WorkingMemory",
    "WorkingMemoryHandle",
    "memory_keys",
]
