"""An OpenAI SDK tool loop with memstrata memory.

    OPENAI_API_KEY=... python examples/openai_tool_loop.py "I'm Priya; we ship v2.4 on Friday."

Each call is one agent turn: memstrata injects the working memory and the shared-memory section
into the prompt, offers its tools next to yours, answers the model's memory tool calls, and
keeps everything in a SQLite file, so the next turn (or the next process) remembers.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from memstrata import MemoryStack, SharedMemory, SQLiteStore, WorkingMemory

SYSTEM = "You are a release assistant. Keep your working memory current."
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")


def make_stack(path: str = "agent-memory.db") -> MemoryStack:
    store = SQLiteStore(path)
    # scope="thread": each conversation gets its own shared memory, so one user's writes never
    # reach another's when a server runs this turn for many users.
    return MemoryStack(
        [WorkingMemory(schema={"type": "object"}), SharedMemory(store=store, scope="thread")],
        store=store,
    )


def agent_turn(
    client: Any, stack: MemoryStack, user_text: str, *, thread_id: str, max_steps: int = 8
) -> str:
    """Runs the model until it answers without tool calls; returns its answer."""
    history: list[dict[str, Any]] = [{"role": "user", "content": user_text}]
    with stack.run(thread_id=thread_id) as run:
        for _ in range(max_steps):
            response = client.chat.completions.create(
                model=MODEL,
                messages=run.prepare([{"role": "system", "content": SYSTEM}, *history]),
                tools=run.tool_specs("openai"),
            )
            message = response.choices[0].message.model_dump(exclude_none=True)
            history.append(message)
            run.observe(message)  # also applies legacy updateWorkingMemory calls
            calls = message.get("tool_calls") or []
            if not calls:
                return str(message.get("content") or "")
            for call in calls:
                result = run.call_tool(call["function"]["name"], call["function"]["arguments"])
                history.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
    return "(stopped: too many tool steps)"


def main() -> int:
    from openai import OpenAI

    print(agent_turn(OpenAI(), make_stack(), " ".join(sys.argv[1:]) or "Hi!", thread_id="cli"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
