"""The OpenAI Agents SDK with memstrata memory.

    pip install "memstrata[openai-agents]"
    OPENAI_API_KEY=... python examples/openai_agents_sdk.py "I'm Priya; we ship v2.4 on Friday."

The agent gets memstrata's tools as FunctionTools, its working memory in the instructions and
its history from a Session on the same SQLite file, so the next run (or the next process)
remembers. Without OPENAI_API_KEY it runs against a scripted stand-in model.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from agents import Agent, Model, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from memstrata import MemoryStack, WorkingMemory
from memstrata.integrations.openai_agents import AgentsMemory

PROFILE = {"type": "object", "properties": {"name": {"type": "string"}, "ship": {"type": "string"}}}


class ScriptedModel(Model):
    """Stands in for a model: first writes working memory, then answers from it."""

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        if not any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input):
            patch = {"name": "Priya", "ship": "v2.4 on Friday"}
            item: Any = ResponseFunctionToolCall(
                type="function_call", call_id="call_1", name="working-memory_update",
                arguments=json.dumps(patch),
            )  # fmt: skip
        else:
            memory = system_instructions.split("\n\n", 1)[1]
            text = "Noted. My instructions now hold: " + " ".join(memory.split()[:12])
            item = ResponseOutputMessage(
                type="message", id="msg_1", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )  # fmt: skip
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main(text: str, path: str = "agent-memory.db") -> str:
    memory = AgentsMemory(
        MemoryStack([WorkingMemory(schema=PROFILE)], store=f"sqlite:///{path}"), thread_id="cli"
    )
    agent = Agent(
        name="release-assistant",
        instructions=memory.instructions("You are a release assistant. Keep your memory current."),
        tools=memory.tools(),
        model=None if os.environ.get("OPENAI_API_KEY") else ScriptedModel(),
    )
    try:
        result = await memory.run(agent, text, session=memory.session())
    finally:
        memory.stack.close()
    return str(result.final_output)


if __name__ == "__main__":
    if not os.environ.get("OPENAI_API_KEY"):
        from agents import set_tracing_disabled

        set_tracing_disabled(True)
    print(asyncio.run(main(" ".join(sys.argv[1:]) or "Hi! I'm Priya.")))
