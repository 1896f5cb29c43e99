"""LangGraph: memstrata stores as a LangGraph ``BaseStore``, and the layers as LangChain tools.

Install with ``pip install 'memstrata[langgraph]'``.

:class:`MemstrataStore` (defined in :mod:`memstrata.integrations.langgraph_store`) puts any
memstrata store behind LangGraph's store interface. :func:`memstrata_tools` turns the layers'
tools into LangChain tools and :func:`memory_prompt` / :func:`react_prompt` give the layers'
prompt text to an agent: bound to one :class:`~memstrata.Run`, or, for an agent compiled once,
to whichever run of the stack the server opened around the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, SystemMessage

from memstrata.integrations._langchain_tools import memory_prompt, memstrata_tools, run_finder
from memstrata.integrations.langgraph_store import MemstrataStore
from memstrata.stack import MemoryStack, Run

__all__ = ["MemstrataStore", "memory_prompt", "memstrata_tools", "react_prompt"]


def react_prompt(
    source: Run | MemoryStack, *, system: str = ""
) -> Callable[[Mapping[str, Any]], Sequence[AnyMessage]]:
    """A ``prompt`` for ``create_react_agent``: the system text with the layers' blocks, rebuilt
    before every model call so a memory the model just wrote is in its next prompt. Given the
    stack, each call takes the blocks of the run open in the calling context, as
    :func:`memstrata_tools` does."""
    run_finder(source, "react_prompt")  # a wrong source is refused now, not at the first call

    def prompt(state: Mapping[str, Any]) -> Sequence[AnyMessage]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        return [SystemMessage(content=memory_prompt(source, system=system)), *messages]

    return prompt
