"""A LangGraph ReAct agent with memstrata memory.

    pip install langchain-openai && python examples/langgraph_agent.py "I'm Priya."

The agent gets the working memory's tools and sees the memory in its system prompt; the graph
gets a LangGraph store over the same SQLite file, so nodes can ``put``/``search`` memories too.
Run it twice: the second run remembers. ``main(model=...)`` takes any LangChain chat model (the
tests pass a scripted fake, so the example runs without network).
"""

from __future__ import annotations

import sys
from typing import Any

from langgraph.prebuilt import create_react_agent

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata.integrations.langgraph import MemstrataStore, memstrata_tools, react_prompt


def main(text: str, *, model: Any = None, path: str = "langgraph-memory.db") -> str:
    if model is None:
        from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]

        model = ChatOpenAI(model="gpt-4o-mini")
    store = SQLiteStore(path)
    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=store)
    # Compiled once (a server does this at start-up): the tools and the prompt use whichever
    # run of the stack is open around the call.
    agent = create_react_agent(
        model,
        memstrata_tools(stack),
        prompt=react_prompt(stack, system="Keep your working memory current."),
        store=MemstrataStore(store),
    )
    # One run per request, for its conversation and user.
    with stack.run(thread_id="cli", resource_id="me"):
        answer = agent.invoke({"messages": [("user", text)]})["messages"][-1].content
    store.close()
    return str(answer)


if __name__ == "__main__":
    print(main(" ".join(sys.argv[1:]) or "Hi!"))
