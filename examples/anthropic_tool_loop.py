"""An Anthropic SDK tool loop with memstrata memory.

    ANTHROPIC_API_KEY=... python examples/anthropic_tool_loop.py "Remember: I prefer short answers."

Anthropic takes the system prompt apart from the messages: ``run.prepare_anthropic`` puts the
prompt items memstrata injects into ``system``. Tools come in Anthropic's format from the same
definitions, ``tool_use`` blocks are answered with ``tool_result`` blocks, and ``run.observe``
reads Anthropic responses as it reads OpenAI's.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from memstrata import MemoryStack, SQLiteStore, WorkingMemory

SYSTEM = "You are a helpful assistant. Keep your working memory current."
MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-5")


def agent_turn(
    client: Any, stack: MemoryStack, user_text: str, *, thread_id: str, max_steps: int = 8
) -> str:
    history: list[dict[str, Any]] = [{"role": "user", "content": user_text}]
    with stack.run(thread_id=thread_id) as run:
        for _ in range(max_steps):
            system, messages = run.prepare_anthropic(history, system=SYSTEM)
            response = client.messages.create(
                model=MODEL,
                max_tokens=1024,
                system=system,
                messages=messages,
                tools=run.tool_specs("anthropic"),
            )
            message = {"role": "assistant", "content": [b.model_dump() for b in response.content]}
            history.append(message)
            run.observe(message)
            uses = [b for b in message["content"] if b["type"] == "tool_use"]
            if not uses:
                return "".join(b.get("text", "") for b in message["content"])
            history.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": use["id"],
                            "content": json.dumps(run.call_tool(use["name"], use["input"])),
                        }
                        for use in uses
                    ],
                }
            )
    return "(stopped: too many tool steps)"


def main() -> int:
    from anthropic import Anthropic

    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=SQLiteStore("mem.db"))
    print(agent_turn(Anthropic(), stack, " ".join(sys.argv[1:]) or "Hi!", thread_id="cli"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
