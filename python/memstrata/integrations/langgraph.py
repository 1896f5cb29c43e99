"""LangGraph: memstrata stores as a LangGraph ``BaseStore``, and the layers as LangChain tools.

Install with ``pip install 'memstrata[langgraph]'``.

:class:`MemstrataStore` (defined in :mod:`memstrata.integrations.langgraph_store`) puts any
memstrata store behind LangGraph's store interface. :func:`memstrata_tools` turns a
:class:`~memstrata.Run`'s tools into LangChain tools and :func:`memory_prompt` /
:func:`react_prompt` give the layers' prompt text to an agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, cast

import orjson
from langchain_core.messages import AnyMessage, SystemMessage
from langchain_core.tools import BaseTool, StructuredTool

from memstrata.integrations.langgraph_store import MemstrataStore
from memstrata.stack import Run

__all__ = ["MemstrataStore", "memory_prompt", "memstrata_tools", "react_prompt"]

logger = logging.getLogger("memstrata.langgraph")


class _MemoryTool(StructuredTool):
    """A LangChain tool that hands its function the model's arguments whole, as one value.

    ``StructuredTool`` passes them as keyword arguments next to its own parameters, so an
    argument named ``config`` or ``run_manager`` (a working-memory field, say) was replaced by
    LangChain's value and never stored, and one named ``self`` raised. JSON text (what a model
    sends) is passed on too, for ``run.call_tool`` to parse and check.
    """

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (tool_input,), {}


def memstrata_tools(run: Run) -> list[BaseTool]:
    """The run's memory tools as LangChain tools, for ``create_react_agent``.

    Each tool keeps the wire-safe name and JSON Schema of ``run.tool_specs("openai")`` and
    answers with ``run.call_tool``'s JSON result (an error payload the model can read, never an
    exception), whatever its arguments are named and whether they come as a dict or as the
    JSON text the model sent. The run must be open while the agent runs.
    """
    tools: list[BaseTool] = []
    for spec in run.tool_specs("openai"):
        fn = spec["function"]
        name = str(fn["name"])
        call, acall = _callers(run, name)
        parameters = cast(dict[str, Any], fn.get("parameters") or {"type": "object"})
        # LangChain reads a JSON-schema tool's ``args`` from its "properties", which an open
        # schema ({"type": "object"}) need not have; an empty one means the same.
        parameters.setdefault("properties", {})
        tools.append(
            _MemoryTool(
                name=name,
                description=str(fn.get("description") or name),
                args_schema=parameters,
                func=call,
                coroutine=acall,
            )
        )
    return tools


def _callers(
    run: Run, name: str
) -> tuple[Callable[[Any], str], Callable[[Any], Coroutine[Any, Any, str]]]:
    """The sync and async functions of one tool. The name is closed over, never a parameter:
    no argument the model sends can name another tool."""

    def call(arguments: Any) -> str:
        return orjson.dumps(run.call_tool(name, arguments)).decode()

    async def acall(arguments: Any) -> str:
        return orjson.dumps(await run.acall_tool(name, arguments)).decode()

    return call, acall


def memory_prompt(run: Run, *, system: str = "") -> str:
    """``system`` followed by the layers' prompt blocks, as :meth:`Run.prepare` injects them."""
    prepared = run.prepare([{"role": "system", "content": system}] if system else [])
    return "\n\n".join(
        str(m.get("content") or "") for m in prepared if m.get("role") in ("system", "developer")
    )


def react_prompt(
    run: Run, *, system: str = ""
) -> Callable[[Mapping[str, Any]], Sequence[AnyMessage]]:
    """A ``prompt`` for ``create_react_agent``: the system text with the layers' blocks, rebuilt
    before every model call so a memory the model just wrote is in its next prompt."""

    def prompt(state: Mapping[str, Any]) -> Sequence[AnyMessage]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        return [SystemMessage(content=memory_prompt(run, system=system)), *messages]

    return prompt
