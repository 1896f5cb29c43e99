"""Memory layers: one file per layer, each knowing nothing of the others."""

from __future__ import annotations

from memstrata.layers.agent_mind import AgentMind, AgentMindHandle, MindTtlDefaults, ScoreWeights
from memstrata.layers.working_memory import WorkingMemory, WorkingMemoryHandle

__all__ = [
    "AgentMind",
    "AgentMindHandle",
    "MindTtlDefaults",
    "ScoreWeights",
    "WorkingMemory",
    "WorkingMemoryHandle",
]
