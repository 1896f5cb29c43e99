"""Pydantic AI with memstrata memory.

    pip install "memstrata[pydantic-ai]" "pydantic-ai-slim[openai]"
    OPENAI_API_KEY=... python examples/pydantic_ai_agent.py "I'm Priya; we ship v2.4 on Friday."

One capability gives the agent memstrata's tools as a toolset, its working memory in the
instructions of every model request, and a memstrata run around each agent run; the memory
lives in a SQLite file, so the next run (or the next process) remembers. Without
OPENAI_API_KEY it runs against a scripted stand-in model (Pydantic AI's FunctionModel).
"""

from __future__ import annotations

import asyncio
import os
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memstrata import MemoryStack, WorkingMemory
from memstrata.integrations.pydantic_ai import MemoryCapability

PROFILE = {"type": "object", "properties": {"name": {"type": "string"}, "ship": {"type": "string"}}}


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for a model: first writes working memory, then answers from it."""
    if len(messages) == 1:  # the user's request, nothing answered yet
        patch = {"name": "Priya", "ship": "v2.4 on Friday"}
        return ModelResponse(parts=[ToolCallPart("working-memory_update", patch, "call_1")])
    memory = (info.instructions or "").split("\n\n", 1)[-1]
    return ModelResponse(
        parts=[TextPart("Noted. My instructions now hold: " + " ".join(memory.split()[:12]))]
    )


def model() -> Model | str:
    return "openai:gpt-4o-mini" if os.environ.get("OPENAI_API_KEY") else FunctionModel(scripted)


async def main(text: str, path: str = "agent-memory.db") -> str:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store=f"sqlite:///{path}")
    agent = Agent(
        model(),
        name="release-assistant",
        instructions="You are a release assistant. Keep your memory current.",
        capabilities=[MemoryCapability(stack, thread_id="cli")],
    )
    try:
        result = await agent.run(text)
    finally:
        stack.close()
    return result.output


if __name__ == "__main__":
    print(asyncio.run(main(" ".join(sys.argv[1:]) or "Hi! I'm Priya.")))
