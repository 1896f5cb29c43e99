"""LangGraph: store search against LangGraph's own InMemoryStore, and an agent turn.

Search: 10,000 memories (one user each holding 1,000, in ten namespaces under
``("memories",)``), the same 384-dimension embeddings in both stores (memstrata's hashing
embedder, as a function of texts, so neither store pays for embedding in the timed part but
the query), the same query, ``limit=10``. Both stores answer through LangGraph's ``search``;
the adapter's cost includes asking the memstrata store what changed since the last search, so
writes from other processes are seen. Target: >= 5x.

Agent turn: a ReAct agent with the memory tools compiled once, against the agent built inside
each request's run (``test_agent_turn_compiled_once``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from benchkit import compare

pytest.importorskip("langgraph.store.memory")

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.store.memory import InMemoryStore as LangGraphInMemoryStore

from memstrata import hash_embed
from memstrata.integrations.langgraph import MemstrataStore
from memstrata.stores import InMemoryStore, SQLiteStore

DIMS = 384
N = 10_000
TOPICS = ["hiking", "peanuts", "python", "release", "coffee", "music", "budget", "travel"]


def embed(texts: Sequence[str]) -> list[list[float]]:
    return hash_embed(list(texts), DIMS).tolist()  # type: ignore[no-any-return]


def fill(store: object) -> None:
    for i in range(N):
        topic = TOPICS[i % len(TOPICS)]
        store.put(  # type: ignore[attr-defined]
            ("memories", f"user-{i % 10}"),
            f"m{i}",
            {"text": f"note {i}: the user mentioned {topic} and item {i * 7 % 1000}"},
        )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_search_10k(benchmark: object, backend: str, tmp_path: object) -> None:
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    inner = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "bench.db")  # type: ignore[operator]
    ours = MemstrataStore(inner, index=index)  # type: ignore[arg-type]
    peer = LangGraphInMemoryStore(index=index)  # type: ignore[arg-type]
    fill(ours)
    fill(peer)
    query = "what did the user say about peanuts"
    mine = [(r.key, round(r.score or 0, 4)) for r in ours.search(("memories",), query=query)]
    theirs = [(r.key, round(r.score or 0, 4)) for r in peer.search(("memories",), query=query)]
    assert [s for _, s in mine] == [s for _, s in theirs]  # the same ranking's scores
    compare(
        benchmark,
        f"langgraph search, 10k items, {backend} store",
        lambda: ours.search(("memories",), query=query, limit=10),
        {"langgraph InMemoryStore": lambda: peer.search(("memories",), query=query, limit=10)},
        target=">= 5x",
    )
    inner.close()


class _Scripted(BaseChatModel):
    """A model that answers the user with one working-memory update, and the tool's answer
    with "done": a turn of two model calls and one memory write, no network."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _Scripted:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if messages[-1].type == "tool":
            answer = AIMessage(content="done")
        else:
            call = {"name": "working-memory_update", "args": {"step": len(messages)}, "id": "c"}
            answer = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=answer)])


def test_agent_turn_compiled_once(benchmark: object) -> None:
    """One request through a LangGraph ReAct agent with memory tools and the memory prompt:
    the agent compiled once at start-up (``memstrata_tools(stack)``, the run found in the
    request's context) against the agent built inside each request's run
    (``memstrata_tools(run)``). The difference is LangGraph compiling the graph."""
    from langgraph.prebuilt import create_react_agent

    from memstrata import MemoryStack, WorkingMemory
    from memstrata.integrations.langgraph import memstrata_tools, react_prompt

    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=InMemoryStore())
    model = _Scripted()
    request = {"messages": [("user", "note the step")]}
    compiled = create_react_agent(model, memstrata_tools(stack), prompt=react_prompt(stack))

    def once() -> None:
        with stack.run(thread_id="t", resource_id="u"):
            compiled.invoke(request)

    def per_request() -> None:
        with stack.run(thread_id="t", resource_id="u") as run:
            agent = create_react_agent(model, memstrata_tools(run), prompt=react_prompt(run))
            agent.invoke(request)

    compare(
        benchmark,
        "langgraph agent turn with memory tools, compiled once",
        once,
        {"built inside each request's run": per_request},
    )
