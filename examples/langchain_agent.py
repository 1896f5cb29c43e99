"""A LangChain agent (``create_agent``) with memstrata memory, as a server builds it.

    pip install langchain-openai && python examples/langchain_agent.py "I'm Priya."

The agent is compiled once; ``MemstrataMiddleware`` gives it the working memory's tools and
puts the memory in its system prompt, from the run each request opens for its user. Run it
twice: the second run remembers. ``main(model=...)`` takes any LangChain chat model (the tests
pass a scripted fake, so the example runs without network).
"""

from __future__ import annotations

import sys
from typing import Any

from langchain.agents import create_agent

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata.integrations.langchain_agents import MemstrataMiddleware


def main(text: str, *, model: Any = None, path: str = "langchain-memory.db") -> str:
    if model is None:
        from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]

        model = ChatOpenAI(model="gpt-4o-mini")
    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=SQLiteStore(path))
    agent = create_agent(  # at start-up: one agent for every request
        model,
        system_prompt="You are a helpful assistant.",
        middleware=[MemstrataMiddleware(stack, system="Keep your working memory current.")],
    )
    # Each request: a run for its conversation and user, around the agent's invoke.
    with stack.run(thread_id="cli", resource_id="me"):
        answer = agent.invoke({"messages": [("user", text)]})["messages"][-1].content
    stack.store.close()
    return str(answer)


if __name__ == "__main__":
    print(main(" ".join(sys.argv[1:]) or "Hi!"))
