"""Memory layers: one module (or, for a large one, a package) per layer, each knowing nothing of
the others."""

from __future__ import annotations

from memstrata.layers.context_gate import ContextGate, GateDecision
from memstrata.layers.mind import AgentMind, AgentMindHandle, MindTtlDefaults, ScoreWeights
from memstrata.layers.shared_memory import (
    MemoryEntry,
    SharedMemory,
    SharedMemoryHandle,
    memory_keys,
)
from memstrata.layers.team_state import StateEntry, TeamState, extract_claim
from memstrata.layers.tool_results import ToolResults, prune_messages_sliding_window
from memstrata.layers.working_memory import WorkingMemory, WorkingMemoryHandle

__all__ = [
    "AgentMind",
    "AgentMindHandle",
    "ContextGate",
    "GateDecision",
    "MemoryEntry",
    "MindTtlDefaults",
    "ScoreWeights",
    "SharedMemory",
    "SharedMemoryHandle",
    "StateEntry",
    "TeamState",
    "ToolResults",
    "WorkingMemory",
    "WorkingMemoryHandle",
    "extract_claim",
    "memory_keys",
    "prune_messages_sliding_window",
]
