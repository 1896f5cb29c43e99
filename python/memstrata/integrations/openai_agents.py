"""The OpenAI Agents SDK (``openai-agents``) with memstrata memory.

``pip install "memstrata[openai-agents]"``. One :class:`AgentsMemory` per conversation
(``thread_id``) gives the SDK what it takes:

* ``memory.tools()``: the stack's tools as ``FunctionTool``\\ s (strict schemas where the tool's
  schema allows, see :func:`memstrata.tools.strict_schema`), each answering through
  ``run.call_tool`` with its JSON payload; a bad call comes back as an error payload the model
  reads, never as an exception;
* ``memory.instructions(base)``: the dynamic ``instructions`` callable: ``base`` followed by the
  layers' prompt blocks, rendered afresh for every model call, so a write made through a tool
  shows on the next call;
* ``memory.session()``: a ``Session`` on the stack's store whose history, when read for the
  model, passes the stack's ToolResults layer (large tool outputs offloaded, readable with
  ``read_tool_result``) and its ContextGate (old outputs pruned to recoverable placeholders);
* ``await memory.run(agent, input, ...)``: ``Runner.run`` inside one memstrata run: the run
  opens before the agent starts and closes when it ends, with an error close when it raises.

::

    memory = AgentsMemory(MemoryStack([WorkingMemory()], store="sqlite:///agent.db"),
                          thread_id="t1", resource_id="user-42")
    agent = Agent(name="assistant", instructions=memory.instructions("Be brief."),
                  tools=[*my_tools, *memory.tools()])
    result = await memory.run(agent, "I'm Priya.", session=memory.session())

Decisions where the SDK leaves a choice:

* The run is opened by a wrapper around ``Runner.run`` rather than by ``RunHooks``: the SDK
  calls no hook when an agent raises (``on_agent_end`` is for a final output only), so a run
  opened in ``on_agent_start`` could never be closed with the error; and hooks run in tasks of
  their own, so they cannot hand the run to the tools. ``async with memory.turn():`` is the
  same run for ``Runner.run_streamed`` or any other entry point; a streamed run's events are
  consumed inside the block, since its agent runs in a task of its own that outlives it.
* The run is found through a context variable set by ``run``/``turn``: the SDK's tools, the
  instructions callable and the session run in the caller's task or tasks copied from it, so
  concurrent turns never see each other's run. Called outside a turn (``Runner.run`` used
  directly), each tool call, instructions rendering and session read opens a short run of its
  own, with the same scope, so nothing is lost, but an AgentMind's drafts then flush per call.
* The memstrata ``agent`` scope is the one given to :class:`AgentsMemory`, else the starting
  agent's ``name``; after a handoff the run stays the starting agent's.
* The session stores every item as it came (one record per item, so no history meets the
  store's value limit); offloading and pruning happen when the history is read, so the stored
  history keeps every body, and what the model sees never grows past the window.
* The legacy ``updateWorkingMemory`` call, which ``run.observe`` applies in a chat tool loop,
  never reaches the stack: the SDK refuses a call to a tool it was not given. ``memory.run``
  has it answered to the model as an error (``RunConfig(tool_not_found_behavior=
  "return_error_to_model")``) unless the caller gives a ``run_config``; the SDK's default
  raises ``ModelBehaviorError`` out of the run.
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Union

import orjson

try:
    from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, Runner, RunResult
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "memstrata.integrations.openai_agents needs the OpenAI Agents SDK: "
        'pip install "memstrata[openai-agents]"'
    ) from exc

from memstrata._bridge import run_sync
from memstrata.exceptions import InvalidInputError
from memstrata.integrations import scope_error
from memstrata.stack import MemoryStack, Message, ResultKeeper, Run, checked_scope_id
from memstrata.tools import run_failure_payload

__all__ = ["AgentsMemory", "MemstrataSession"]

Instructions = Union[
    str, Callable[[RunContextWrapper[Any], Agent[Any]], Union[str, Awaitable[str]]], None
]

logger = logging.getLogger("memstrata.openai_agents")

_ANOTHER_MEMORY = (
    "the agent's memory tools, instructions or session come from another AgentsMemory than "
    "the one running this turn: build them from the AgentsMemory whose run() runs the agent"
)

SESSION_NAMESPACE = "openai-agents-session"
# The label of a session whose runs name a user: (SESSION_NAMESPACE, label, user, thread), apart
# from (SESSION_NAMESPACE, thread), as a thread-scoped working memory keeps them apart.
_USER_THREAD = "user-thread"
_HEAD = "head"
_ITEM = "item-"


# The AgentsMemory whose ``run`` runs the current task, and the ids of its starting agent and
# of the agents it hands off to: a tool or an instructions callable of another memory called
# by one of them was built from the wrong conversation (see AgentsMemory._using_run). An agent
# run as a tool is not among them: it keeps its own memory.
_RUNNING: contextvars.ContextVar[tuple[AgentsMemory, frozenset[int]] | None] = (
    contextvars.ContextVar("memstrata_openai_agents_running", default=None)
)


class AgentsMemory:
    """A memory stack bound to one conversation, in the shapes the Agents SDK takes.

    Args:
        stack: The layers and the store.
        thread_id: The conversation: the memstrata thread, and the session's id.
        resource_id: The user or resource the memory belongs to.
        agent: The memstrata agent scope; None: the starting agent's ``name``.
        strict: Offer strict schemas where a tool's schema can be strict; the null padding
            a strict model sends for optional fields is removed before the tool sees it.
    """

    def __init__(
        self,
        stack: MemoryStack,
        *,
        thread_id: str,
        resource_id: str | None = None,
        agent: str | None = None,
        strict: bool = True,
    ) -> None:
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidInputError(f"thread_id must be a non-empty str, got {thread_id!r}")
        self.stack = stack
        # Checked here: the session names its records by them without opening a run.
        self.thread_id: str = checked_scope_id("thread_id", thread_id)  # type: ignore[assignment]
        self.resource_id = checked_scope_id("resource_id", resource_id)
        self.agent = checked_scope_id("agent", agent)
        self.strict = strict
        self._current: contextvars.ContextVar[Run | None] = contextvars.ContextVar(
            f"memstrata_openai_agents_run_{thread_id}", default=None
        )

    # Runs -------------------------------------------------------------------------------------

    @asynccontextmanager
    async def turn(self, agent: str | None = None) -> AsyncIterator[Run]:
        """One memstrata run around whatever runs the agent inside the block; closed with the
        error when the block raises."""
        scope = self.agent if self.agent is not None else agent
        opening = self.stack.arun(
            thread_id=self.thread_id, resource_id=self.resource_id, agent=scope
        )
        try:
            await opening.aopen()
        except InvalidInputError as exc:
            raise scope_error(exc, "AgentsMemory", None) from None
        async with opening as run:
            if self.strict:
                run.tool_specs("responses", strict=True)  # null padding is stripped from now
            token = self._current.set(run)
            try:
                yield run
            finally:
                self._current.reset(token)

    async def run(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, **kwargs)`` inside one memstrata run.

        Without a ``run_config``, a call to a tool the agent was not given is answered to the
        model as an error (the SDK's ``tool_not_found_behavior="return_error_to_model"``)
        rather than raised out of the run: the SDK's default would let one made-up tool name
        end the turn. A ``run_config`` given keeps its own choice."""
        if "run_config" not in kwargs:
            kwargs["run_config"] = RunConfig(tool_not_found_behavior="return_error_to_model")
        session = kwargs.get("session")
        if isinstance(session, MemstrataSession) and session.memory is not self:
            raise InvalidInputError(_ANOTHER_MEMORY)
        async with self.turn(agent.name):
            token = _RUNNING.set((self, _handed_off(agent)))
            try:
                return await Runner.run(agent, input, **kwargs)
            finally:
                _RUNNING.reset(token)

    @asynccontextmanager
    async def _using_run(self, agent: Any = None) -> AsyncIterator[Run]:
        """The turn's run, or a short one of the same scope outside a turn; refused for the
        agent another memory's ``run`` started."""
        current = self._current.get()
        if current is not None:
            yield current
            return
        running = _RUNNING.get()
        if running is not None and running[0] is not self and id(agent) in running[1]:
            # The agent another memory runs was built from this one: its writes would land in
            # this memory's conversation, whoever the user is.
            logger.error(_ANOTHER_MEMORY)
            raise InvalidInputError(_ANOTHER_MEMORY)
        async with self.turn(getattr(agent, "name", None)) as run:
            yield run

    # Tools ------------------------------------------------------------------------------------

    def tools(self) -> list[FunctionTool]:
        """The stack's tools as ``FunctionTool``\\ s (listed from a run of this scope).

        They are listed before any agent runs, so a layer that stores under the agent scope
        (an ``AgentMind`` without a ``namespace``) needs ``AgentsMemory(agent=...)``.
        """
        try:
            with self.stack.run(
                thread_id=self.thread_id, resource_id=self.resource_id, agent=self.agent
            ) as run:
                specs = run.tool_specs("responses", strict=self.strict)
        except InvalidInputError as exc:
            hint = (
                None
                if self.agent is not None
                else "the tools are listed before any agent runs, so no agent's name can give "
                "the scope a layer needs ({exc}): give it as AgentsMemory(agent=...)"
            )
            raise scope_error(exc, "AgentsMemory", hint) from None
        return [
            FunctionTool(
                name=spec["name"],
                description=spec["description"],
                params_json_schema=spec["parameters"],
                on_invoke_tool=self._invoker(spec["name"]),
                strict_json_schema=bool(spec.get("strict", False)),
            )
            for spec in specs
        ]

    def _invoker(self, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            result: dict[str, Any] | None = None
            try:
                async with self._using_run(ctx.agent) as run:
                    result = await run.acall_tool(name, arguments)
            except Exception as exc:
                # Outside a turn the call has a short run of its own: one that cannot open, or
                # whose writes cannot be committed, is an error payload, as a bad call is.
                result = run_failure_payload(name, exc, answered=result is not None)
            return orjson.dumps(result).decode()

        return invoke

    # Instructions -----------------------------------------------------------------------------

    def instructions(
        self, base: Instructions = None
    ) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
        """The ``instructions`` callable: ``base`` (a string or the SDK's own callable form),
        then the layers' prompt blocks."""

        async def render(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
            head = base(ctx, agent) if callable(base) else base
            if inspect.isawaitable(head):
                head = await head
            async with self._using_run(agent) as run:
                blocks = await run.aprepare([])
            parts = [head] if head else []
            parts.extend(_text(block) for block in blocks)
            return "\n\n".join(part for part in parts if part)

        return render

    # Session ----------------------------------------------------------------------------------

    def session(self) -> MemstrataSession:
        """The conversation's history on the stack's store (``session_id`` is ``thread_id``)."""
        return MemstrataSession(self)


class MemstrataSession:
    """The Agents SDK's ``Session`` protocol on a memstrata store.

    Items are stored one record each under ``("openai-agents-session", session_id)``, or
    ``("openai-agents-session", "user-thread", resource_id, session_id)`` when the memory names
    a user (thread ids are the caller's and often short, so two users' conversations that share
    one keep their own history), in the order they were added; a new store object on the same
    database reads the same history.

    Its methods run on the event loop, as the stack's async forms do (see
    :meth:`~memstrata.stack.Run.aprepare`): no thread hop for a store call that need not wait,
    and a PostgreSQL store answers through its async connections.
    """

    session_settings: Any = None

    def __init__(self, memory: AgentsMemory) -> None:
        self.memory = memory
        self.session_id = memory.thread_id
        self._namespace: tuple[str, ...] = (
            (SESSION_NAMESPACE, memory.thread_id)
            if memory.resource_id is None
            else (SESSION_NAMESPACE, _USER_THREAD, memory.resource_id, memory.thread_id)
        )
        self._reads = itertools.count(1)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history (the latest ``limit`` items), as the model should see it: large tool
        outputs offloaded and, near the window, old ones pruned to placeholders, every one
        readable again with ``read_tool_result``."""
        items = await run_sync(self._stored)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        if not items:
            return []
        async with self.memory._using_run() as run:
            return await run_sync(self._for_model, run, [item for _, item in items])

    async def add_items(self, items: list[Any]) -> None:
        values = [_plain(item) for item in items]
        if values:
            await run_sync(self._append, values)

    async def pop_item(self) -> Any | None:
        return await run_sync(self._pop)

    async def clear_session(self) -> None:
        await run_sync(self._clear)

    # Storage ----------------------------------------------------------------------------------

    def _stored(self) -> list[tuple[str, Any]]:
        found = self.memory.stack.store.changes(self._namespace).items
        return sorted((i.key, i.value) for i in found if i.key.startswith(_ITEM))

    def _append(self, values: list[Any]) -> None:
        store = self.memory.stack.store
        head = store.update(
            self._namespace, _HEAD, lambda v: {"next": _next(v) + len(values)}
        ).value
        first = _next(head) - len(values)
        updates = {
            f"{_ITEM}{first + i:012d}": _new_item(value, self._namespace)
            for i, value in enumerate(values)
        }
        store.update_many(self._namespace, updates)

    def _pop(self) -> Any | None:
        store = self.memory.stack.store
        while True:
            items = self._stored()
            if not items:
                return None
            key, value = items[-1]
            if store.delete(self._namespace, key):
                return value
            # Another writer popped it first: take the next latest.

    def _clear(self) -> None:
        store = self.memory.stack.store
        for key, _ in self._stored():
            store.delete(self._namespace, key)

    def _for_model(self, run: Run, items: list[Any]) -> list[Any]:
        keeper = _keeper(run)
        if keeper is not None:
            items = keeper.offload_messages(items)
        gate = self.memory.stack.gate
        if gate is None:
            return items
        call_id = f"{run.run_id}-session-{next(self._reads)}"
        if keeper is not None and "keep" in inspect.signature(gate.check_and_compress).parameters:
            return gate.check_and_compress(  # type: ignore[call-arg]
                items, call_id, run_id=run.run_id, keep=keeper.keep
            )
        return gate.check_and_compress(items, call_id, run_id=run.run_id)


def _handed_off(agent: Agent[Any]) -> frozenset[int]:
    """The ids of ``agent`` and of every agent its handoffs reach (given as agents; a
    ``Handoff`` object names its agent only when it is invoked)."""
    seen: dict[int, Agent[Any]] = {}
    todo = [agent]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen[id(current)] = current
        todo.extend(h for h in getattr(current, "handoffs", ()) if isinstance(h, Agent))
    return frozenset(seen)


def _keeper(run: Run) -> ResultKeeper | None:
    for layer in run.stack.layers:
        handle = run.layer(layer.name)
        if isinstance(handle, ResultKeeper):
            return handle
    return None


def _next(head: Any) -> int:
    """Where the head record says the next item goes: 0 for a new session."""
    if head is None:
        return 0
    count = head.get("next") if isinstance(head, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidInputError(
            f"the session's head record holds {orjson.dumps(head).decode()[:200]}, not the"
            ' {"next": <count>} memstrata writes: it was written by another program'
        )
    return count


def _new_item(value: Any, namespace: tuple[str, ...]) -> Callable[[Any], Any]:
    """The writer of a new history item: it never replaces a stored one (a head record behind
    the history would otherwise write over it), and the whole append is then undone."""

    def write(old: Any) -> Any:
        if old is not None:
            raise InvalidInputError(
                f"the session's head record in {'/'.join(namespace)} is behind its history: an "
                "item is already stored where it says the next one goes; nothing was added"
            )
        return value

    return write


def _plain(item: Any) -> Any:
    """An SDK item as JSON data (input items are dicts; a model object is dumped)."""
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=True, mode="json") if callable(dump) else item


def _text(block: Message) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
