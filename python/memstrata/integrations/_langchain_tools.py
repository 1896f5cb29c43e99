"""The layers as LangChain tools, and their prompt text: what LangGraph's ``create_react_agent``
(:mod:`memstrata.integrations.langgraph`) and LangChain's ``create_agent``
(:mod:`memstrata.integrations.langchain_agents`) both give an agent.

It needs ``langchain-core`` only, which either extra installs. Each function takes a
:class:`~memstrata.Run`, bound to it, or the :class:`~memstrata.MemoryStack`, for an agent
compiled once: then each call uses the run of the stack open in the calling context
(:meth:`MemoryStack.current_run`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, cast

import orjson
from langchain_core.tools import BaseTool, StructuredTool

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.stack import MemoryStack, Message, Run
from memstrata.tools import error_payload

logger = logging.getLogger("memstrata.langchain")


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
NO_RUN = (
    "no memory run is open for this call: the server opens one around the graph's invoke"
    " (`with stack.run(thread_id=..., resource_id=...)`)"
)

RunFinder = Callable[[], "Run | None"]


def run_finder(source: Run | MemoryStack, caller: str) -> RunFinder:
    """How ``caller`` finds its run: the one it was given, or the stack's current one. Anything
    else is refused now, by the caller's name, rather than at the first model call."""
    if isinstance(source, Run):
        return lambda: source
    if isinstance(source, MemoryStack):
        return source.current_run
    raise InvalidInputError(f"{caller} takes a Run or a MemoryStack, got {type(source).__name__}")


def memstrata_tools(source: Run | MemoryStack) -> list[BaseTool]:
    """The layers' tools as LangChain tools, for ``create_react_agent`` or ``create_agent``.

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
    find = run_finder(source, "memstrata_tools")
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


def _no_run(name: str) -> str:
    logger.error("memory tool %s called with no run of its stack open: %s", name, NO_RUN)
    return orjson.dumps(error_payload(name, ToolError(NO_RUN, code="no_run"))).decode()


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
    return prompt_text(open_run(run_finder(source, "memory_prompt")), system)


def open_run(find: RunFinder) -> Run:
    """The run a prompt is rendered from; with none open, an error saying who opens it."""
    run = find()
    if run is None:
        raise InvalidInputError(NO_RUN)
    return run


def prompt_text(run: Run, system: str) -> str:
    """``system`` and the layers' blocks, one paragraph each, as ``run.prepare`` rendered (and
    escaped) them."""
    return _system_of(run.prepare(_head(system)))


async def aprompt_text(run: Run, system: str) -> str:
    """:func:`prompt_text` for a coroutine: the store reads go through ``run.aprepare``."""
    return _system_of(await run.aprepare(_head(system)))


def _head(system: str) -> list[Message]:
    return [{"role": "system", "content": system}] if system else []


def _system_of(prepared: list[Message]) -> str:
    return "\n\n".join(
        str(m.get("content") or "") for m in prepared if m.get("role") in ("system", "developer")
    )
