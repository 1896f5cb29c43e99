"""Pydantic AI with memstrata memory.

``pip install "memstrata[pydantic-ai]"``. One :class:`MemoryCapability` per conversation
(``thread_id``) is a Pydantic AI capability that gives an agent:

* a toolset (:class:`MemstrataToolset`, from ``get_toolset``): the stack's tools, each with
  the tool's JSON schema as its parameters, answering through ``run.call_tool`` with its JSON
  payload; a bad call (wrong types, a schema violation, malformed JSON) comes back as an error
  payload the model reads, never as an exception or a retry;
* dynamic instructions (from ``get_instructions``): the layers' prompt blocks, rendered afresh
  for every model request, so a write made through a tool shows on the next request;
* one memstrata run per agent run (``wrap_run``): opened before the agent starts and closed when
  it ends, with an error close when it raises.

::

    memory = MemoryCapability(MemoryStack([WorkingMemory()], store="sqlite:///agent.db"),
                              thread_id="t1", resource_id="user-42")
    agent = Agent("openai:gpt-4o", instructions="Be brief.", capabilities=[memory])
    result = await agent.run("I'm Priya.")

An agent shared by many conversations takes the capability per run instead:
``agent.run(text, capabilities=[MemoryCapability(stack, thread_id=conversation,
resource_id=user)])`` (a conversation whose runs name no user is keyed by its thread id alone).

Decisions where the framework leaves a choice:

* The run is held by a capability rather than by the toolset's ``__aenter__``/``__aexit__``: an
  agent's toolsets are exited without the exception that ended the run, so a toolset could never
  close the run with the error. ``for_run`` gives each agent run a copy of the capability, and
  the copy holds that run's memstrata run, so concurrent runs never see each other's run.
* The memstrata ``agent`` scope is the one given to :class:`MemoryCapability`, else the Pydantic
  AI agent's ``name``.
* Arguments reach the stack as the model sent them (the JSON text, when it sent text): the
  toolset's validator refuses nothing, and the stack checks the call (JSON, size, the tool's
  schema), so the model reads the stack's own error payload instead of Pydantic AI's retry
  prompt. Pydantic AI's tool hooks see the arguments parsed (an empty dict when they are not
  a JSON object); a hook that returns new arguments hands the stack those.
* Used outside a run of the capability (the toolset given to an agent on its own), each tool
  listing, tool call and instructions rendering opens a short run of its own, with the same
  scope, so nothing is lost, but an AgentMind's drafts then flush per call.
* ``strict=True`` offers strict schemas where a tool's schema can be strict (see
  :func:`memstrata.tools.strict_schema`); the null padding a strict model sends for optional
  fields is removed before the tool sees it. The default, ``None``, leaves it to the model.
* The conversation's message history stays Pydantic AI's (``message_history=``): the capability
  keeps memory, not transcripts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import orjson

try:
    from pydantic_ai import RunContext, ToolDefinition
    from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'memstrata.integrations.pydantic_ai needs Pydantic AI: pip install "memstrata[pydantic-ai]"'
    ) from exc

from memstrata.exceptions import InvalidInputError
from memstrata.integrations import scope_error
from memstrata.stack import MemoryStack, Message, Run
from memstrata.tools import MAX_ARGUMENT_BYTES, run_failure_payload

__all__ = ["MemoryCapability", "MemstrataToolset"]


@dataclasses.dataclass(init=False)
class MemoryCapability(AbstractCapability[Any]):
    """A memory stack bound to one conversation, as a Pydantic AI capability.

    Args:
        stack: The layers and the store.
        thread_id: The conversation: the memstrata thread.
        resource_id: The user or resource the memory belongs to.
        agent: The memstrata agent scope; None: the Pydantic AI agent's ``name``.
        strict: Offer strict schemas where a tool's schema can be strict; None leaves it to
            the model.
        id: The capability's id, and its toolset's (``"memstrata"`` when None).
    """

    stack: MemoryStack
    thread_id: str
    resource_id: str | None
    agent: str | None
    strict: bool | None
    id: str | None
    _run: Run | None = dataclasses.field(repr=False, compare=False)

    def __init__(
        self,
        stack: MemoryStack,
        *,
        thread_id: str,
        resource_id: str | None = None,
        agent: str | None = None,
        strict: bool | None = None,
        id: str | None = None,
    ) -> None:
        if not isinstance(stack, MemoryStack):
            raise InvalidInputError(f"stack must be a MemoryStack, got {type(stack).__name__}")
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidInputError(f"thread_id must be a non-empty str, got {thread_id!r}")
        self.stack = stack
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.agent = agent
        self.strict = strict
        self.id = id
        self._run = None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # not spec-serializable: it holds a stack

    # Runs -------------------------------------------------------------------------------------

    async def for_run(self, ctx: RunContext[Any]) -> MemoryCapability:
        """A copy per agent run: it holds that run's memstrata run."""
        return MemoryCapability(
            self.stack,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            agent=self.agent,
            strict=self.strict,
            id=self.id,
        )

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """The agent run inside one memstrata run, closed with the error when the run raises."""
        async with self._open(getattr(ctx.agent, "name", None)) as run:
            self._run = run
            try:
                return await handler()
            finally:
                self._run = None

    @asynccontextmanager
    async def _open(self, agent: str | None) -> AsyncIterator[Run]:
        scope = self.agent if self.agent is not None else agent
        opening = self.stack.arun(
            thread_id=self.thread_id, resource_id=self.resource_id, agent=scope
        )
        try:
            await opening.aopen()
        except InvalidInputError as exc:
            hint = (
                None
                if scope is not None
                else "the Pydantic AI agent has no name to give the scope a layer needs ({exc}): "
                "give it as MemoryCapability(agent=...) or Agent(name=...)"
            )
            raise scope_error(exc, "MemoryCapability", hint) from None
        async with opening as run:
            if self.strict:
                run.tool_specs("responses", strict=True)  # null padding is stripped from now
            yield run

    @asynccontextmanager
    async def _using_run(self, ctx: RunContext[Any]) -> AsyncIterator[Run]:
        """The agent run's memstrata run, or a short one of the same scope outside it."""
        if self._run is not None:
            yield self._run
        else:
            async with self._open(getattr(ctx.agent, "name", None)) as run:
                yield run

    # Tools and instructions -------------------------------------------------------------------

    def get_toolset(self) -> MemstrataToolset:
        """The stack's tools (the capability's own toolset)."""
        return MemstrataToolset(self)

    def get_instructions(self) -> Callable[[RunContext[Any]], Awaitable[str]]:
        """The layers' prompt blocks, as a dynamic instruction."""
        return self._render

    async def _render(self, ctx: RunContext[Any]) -> str:
        async with self._using_run(ctx) as run:
            blocks = await run.aprepare([])
        return "\n\n".join(text for text in map(_text, blocks) if text)


class MemstrataToolset(AbstractToolset[Any]):
    """The stack's tools as a Pydantic AI toolset; get it from
    :meth:`MemoryCapability.get_toolset`."""

    def __init__(self, memory: MemoryCapability) -> None:
        self.memory = memory

    @property
    def id(self) -> str | None:
        return self.memory.id if self.memory.id is not None else "memstrata"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        async with self.memory._using_run(ctx) as run:
            specs = run.tool_specs("responses", strict=bool(self.memory.strict))
        tools: dict[str, ToolsetTool[Any]] = {}
        for spec in specs:
            strict = spec.get("strict") if self.memory.strict else None
            definition = ToolDefinition(
                name=spec["name"],
                description=spec["description"],
                parameters_json_schema=_open_maps_marked(spec["parameters"]),
                strict=strict,
            )
            tools[spec["name"]] = ToolsetTool(
                toolset=self, tool_def=definition, max_retries=1, args_validator=_ARGUMENTS
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> dict[str, Any]:
        arguments = tool_args.sent if isinstance(tool_args, _Sent) else tool_args
        result: dict[str, Any] | None = None
        try:
            async with self.memory._using_run(ctx) as run:
                result = await run.acall_tool(name, arguments)
        except Exception as exc:
            # Outside a run of the capability the call has a short run of its own: one that
            # cannot open, or whose writes cannot be committed, is an error payload.
            return run_failure_payload(name, exc, answered=result is not None)
        return result


# Keywords whose values map names to schemas, and keywords whose values are data.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})


def _open_maps_marked(schema: Any) -> Any:
    """``schema`` with each object of no declared properties saying ``additionalProperties:
    true``, which JSON Schema already means when it is absent: Pydantic AI's OpenAI profile
    closes an object that does not say so, and ``{"type": "object"}`` would reach the model as
    an object with no fields allowed (a working memory it could never write)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _open_maps_marked(sub) for name, sub in value.items()}
        elif key in _DATA_KEYWORDS:
            out[key] = value
        elif isinstance(value, list):
            out[key] = [_open_maps_marked(item) for item in value]
        else:
            out[key] = _open_maps_marked(value)
    kind = out.get("type")
    if (
        (kind == "object" or (isinstance(kind, list) and "object" in kind))
        and not out.get("properties")
        and "additionalProperties" not in out
        and "patternProperties" not in out
    ):
        out["additionalProperties"] = True
    return out


class _Sent(dict[str, Any]):
    """Arguments parsed for Pydantic AI's hooks, carrying what the model sent: that is what
    reaches ``call_tool``, which checks it itself (size, integers past 64 bits, an object)."""

    __slots__ = ("sent",)

    def __init__(self, parsed: dict[str, Any], sent: Any) -> None:
        super().__init__(parsed)
        self.sent = sent


class _Arguments:
    """The toolset's argument validator: it never refuses, so every call reaches the stack."""

    def validate_json(self, input: str | bytes | bytearray, **kwargs: Any) -> dict[str, Any]:
        parsed: Any = None
        if len(input) <= MAX_ARGUMENT_BYTES:
            with suppress(orjson.JSONDecodeError):
                parsed = orjson.loads(input)
        return _Sent(parsed if isinstance(parsed, dict) else {}, input)

    def validate_python(self, input: Any, **kwargs: Any) -> dict[str, Any]:
        return input if isinstance(input, dict) else _Sent({}, input)


_ARGUMENTS = _Arguments()


def _text(block: Message) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
