"""LangGraph: memstrata stores as a LangGraph ``BaseStore``, and the layers as LangChain tools.

Install with ``pip install 'memstrata[langgraph]'``.

:class:`MemstrataStore` (defined in :mod:`memstrata.integrations.langgraph_store`) puts any
memstrata store behind LangGraph's store interface. :func:`memstrata_tools` turns the layers'
tools into LangChain tools and :func:`memory_prompt` / :func:`react_prompt` give the layers'
prompt text to an agent: bound to one :class:`~memstrata.Run`, or, for an agent compiled once,
to whichever run of the stack the server opened around the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, cast

import orjson
from langchain_core.messages import AnyMessage, SystemMessage
from langchain_core.tools import BaseTool, StructuredTool

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.integrations.langgraph_store import MemstrataStore
from memstrata.stack import MemoryStack, Run
from memstrata.tools import error_payload

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


# The probe run that learns a stack's tool shapes names no real conversation, user or agent.
_SHAPES = "memstrata-tool-shapes"
_NO_RUN = (
    "no memory run is open for this call: the server opens one around the graph's invoke"
    " (`with stack.run(thread_id=..., resource_id=...)`)"
)

RunFinder = Callable[[], "Run | None"]


def memstrata_tools(source: Run | MemoryStack) -> list[BaseTool]:
    """The layers' tools as LangChain tools, for ``create_react_agent``.

    Given a :class:`~memstrata.Run`, the tools are bound to it: build the agent inside the run
    of each request. Given the :class:`~memstrata.MemoryStack`, they serve an agent compiled
    once: each call goes to the run of the stack open in the calling context
    (:meth:`MemoryStack.current_run`), which the server opens with ``with stack.run(...)``
    around the graph's ``invoke``; a call with none open gets an error payload and is logged.
    Their names and schemas are learnt here from one run of the stack opened and closed on
    placeholder ids (it reads; it writes nothing).

    Each tool keeps the wire-safe name and JSON Schema of ``run.tool_specs("openai")`` and
    answers with ``run.call_tool``'s JSON result (an error payload the model can read, never an
    exception), whatever its arguments are named and whether they come as a dict or as the
    JSON text the model sent.
    """
    find = _finder(source, "memstrata_tools")
    if isinstance(source, Run):
        specs = source.tool_specs("openai")
    else:
        with source.run(thread_id=_SHAPES, resource_id=_SHAPES, agent=_SHAPES) as probe:
            specs = probe.tool_specs("openai")
    tools: list[BaseTool] = []
    for spec in specs:
        fn = spec["function"]
        name = str(fn["name"])
        call, acall = _callers(find, name)
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


def _finder(source: Run | MemoryStack, caller: str) -> RunFinder:
    if isinstance(source, Run):
        return lambda: source
    if isinstance(source, MemoryStack):
        return source.current_run
    raise InvalidInputError(f"{caller} takes a Run or a MemoryStack, got {type(source).__name__}")


def _no_run(name: str) -> str:
    logger.error("memory tool %s called with no run of its stack open: %s", name, _NO_RUN)
    return orjson.dumps(error_payload(name, ToolError(_NO_RUN, code="no_run"))).decode()


def _callers(
    find: RunFinder, name: str
) -> tuple[Callable[[Any], str], Callable[[Any], Coroutine[Any, Any, str]]]:
    """The sync and async functions of one tool. The name is closed over, never a parameter:
    no argument the model sends can name another tool."""

    def call(arguments: Any) -> str:
        run = find()
        if run is None:
            return _no_run(name)
        return orjson.dumps(run.call_tool(name, arguments)).decode()

    async def acall(arguments: Any) -> str:
        run = find()
        if run is None:
            return _no_run(name)
        return orjson.dumps(await run.acall_tool(name, arguments)).decode()

    return call, acall


def memory_prompt(source: Run | MemoryStack, *, system: str = "") -> str:
    """``system`` followed by the layers' prompt blocks, as :meth:`Run.prepare` injects them.

    Given the stack, the blocks are those of the run open in the calling context (see
    :func:`memstrata_tools`); with none open it raises, since a prompt without the user's
    memory would pass for one with it."""
    run = _finder(source, "memory_prompt")()
    if run is None:
        raise InvalidInputError(_NO_RUN)
    prepared = run.prepare([{"role": "system", "content": system}] if system else [])
    return "\n\n".join(
        str(m.get("content") or "") for m in prepared if m.get("role") in ("system", "developer")
    )


def react_prompt(
    source: Run | MemoryStack, *, system: str = ""
) -> Callable[[Mapping[str, Any]], Sequence[AnyMessage]]:
    """A ``prompt`` for ``create_react_agent``: the system text with the layers' blocks, rebuilt
    before every model call so a memory the model just wrote is in its next prompt. Given the
    stack, each call takes the blocks of the run open in the calling context, as
    :func:`memstrata_tools` does."""
    _finder(source, "react_prompt")  # a wrong source is refused now, not at the first call

    def prompt(state: Mapping[str, Any]) -> Sequence[AnyMessage]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        return [SystemMessage(content=memory_prompt(source, system=system)), *messages]

    return prompt
