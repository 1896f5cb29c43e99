"""MemoryStack and Run: compose layers into one agent turn.

A :class:`MemoryStack` is configuration: the layers, the store, the token counter and the total
prompt budget. ``stack.run(thread_id=..., resource_id=..., agent=...)`` opens a :class:`Run`,
one agent turn or task, as a context manager::

    stack = MemoryStack([WorkingMemory(schema=Profile)], store="sqlite:///agent.db")
    with stack.run(thread_id="t1", resource_id="user-42") as run:
        messages = run.prepare(messages)              # layer blocks injected, by slot
        response = client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=run.tool_specs("openai"))
        for call in response.choices[0].message.tool_calls or []:
            result = run.call_tool(call.function.name, call.function.arguments)
        run.observe(response.choices[0].message.model_dump())
    # leaving the block closes the run: layers flush (an exception inside = an error close)

Layers know nothing of each other; the run only orders them by slot, splits the token budget
and routes tool calls to the layer that offered them.

Writing a layer: anything with the attributes and methods of :class:`Layer`. A minimal one that
shows the time to the model::

    class Clock:
        name, slot, budget = "clock", 50, Budget(10, 20)
        def init(self, ctx): return None
        def recall(self, handle, budget):
            return [{"role": "system", "content": f"Now: {datetime.now():%Y-%m-%d %H:%M}"}]
        def observe(self, handle, message): pass
        def tools(self, handle): return []
        def on_spawn(self, handle, child): return None
        def close(self, handle, error): pass

A layer that reads the store when a run opens may also define ``opening_reads(ctx)``, the
reads its ``init`` starts with (:class:`~memstrata.stores.GetMany`,
:class:`~memstrata.stores.ChangesSince`): the run asks the store for every layer's together
(one round trip on PostgreSQL) and calls ``init(ctx, opened={read: answer})`` with that
layer's. A layer looks its read up there when it makes it, so an answer is only used for the
very read it answers (the mind's, for one, depends on what the layer held when it asked).

A layer that keeps data per conversation or per user may define ``forget(store, *,
resource_id, thread_id)``, which erases it and returns how many records went:
:meth:`MemoryStack.forget` calls it.

The async forms (``await run.aprepare(...)``) run a layer's methods on the event loop; a call
to the store that has to wait suspends them while other tasks run, other runs of the same layer
included. State a layer guards with a lock across a store call takes a
:class:`memstrata.TaskLock`, which tells those tasks apart (a ``threading`` lock would let the
second in, or block the loop).
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from memstrata._bridge import TaskLock, run_sync
from memstrata.exceptions import (
    InvalidInputError,
    InvalidJSONError,
    LimitExceededError,
    MemstrataError,
    ToolError,
)
from memstrata.redaction import redacted_for_log
from memstrata.stores import Store, open_store
from memstrata.stores.base import Answer, Read, validate_label
from memstrata.tokens import EstimatingCounter, TokenCounter, checked_counter
from memstrata.tools import (
    Tool,
    ToolFormat,
    clip_text,
    error_payload,
    parse_arguments,
    raise_problems,
    shown_value,
    store_failure,
    strip_null_padding,
    tool_spec,
)

logger = logging.getLogger("memstrata")

Message = dict[str, Any]

# Where the embedded default lives when no store is given; MEMSTRATA_STORE overrides it.
DEFAULT_STORE_URL = "sqlite:///memstrata.db"
DEFAULT_TOTAL_BUDGET = 4000
# Roles the stack injects prompt items as: instructions, never words put in a user's mouth.
PROMPT_ROLES = ("system", "developer")
# The runs entered with ``with``/``async with`` in this context (a thread, a task, and what it
# starts with the context copied), innermost last: how a graph compiled once finds the run of
# the request it serves (MemoryStack.current_run). A tuple: each context changes its own.
_ENTERED: contextvars.ContextVar[tuple[Run, ...]] = contextvars.ContextVar(
    "memstrata_entered_runs", default=()
)
_PLAIN_DICT = frozenset({dict})


@dataclass(frozen=True)
class Budget:
    """A layer's share of the prompt in tokens: guaranteed ``min``, at most ``max``."""

    min: int
    max: int

    def __post_init__(self) -> None:
        for bound in (self.min, self.max):
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise InvalidInputError(
                    f"budget bounds must be ints, got {self.min!r}, {self.max!r}"
                )
        if not 0 <= self.min <= self.max:
            raise InvalidInputError(
                f"budget needs 0 <= min <= max, got min={self.min}, max={self.max}"
            )


@dataclass(frozen=True, init=False)
class RunContext:
    """What a layer knows about the run it serves: its scope, the shared services, and the
    prompt tokens the stack gives each layer (``budgets``, by layer name; see
    :func:`allocate_budgets`)."""

    store: Store
    tokens: TokenCounter
    thread_id: str | None = None
    resource_id: str | None = None
    agent: str | None = None
    parent: RunContext | None = None
    budgets: Mapping[str, int] = field(default_factory=dict)

    def __init__(
        self,
        store: Store,
        tokens: TokenCounter,
        thread_id: str | None = None,
        resource_id: str | None = None,
        agent: str | None = None,
        parent: RunContext | None = None,
        budgets: Mapping[str, int] | None = None,
    ) -> None:
        # The fields in one update of the instance's dict: the __init__ a frozen dataclass
        # makes sets each through object.__setattr__, several times the cost, at every run.
        self.__dict__.update(
            store=store,
            tokens=tokens,
            thread_id=thread_id,
            resource_id=resource_id,
            agent=agent,
            parent=parent,
            budgets={} if budgets is None else budgets,
        )


@runtime_checkable
class Gate(Protocol):
    """What ``run.prepare()`` passes the final messages through (e.g.
    :class:`~memstrata.layers.ContextGate`): returns the messages to send, possibly compressed,
    or raises to refuse the call."""

    def check_and_compress(
        self, messages: Sequence[Message], call_id: str, *, run_id: str | None = None
    ) -> list[Message]: ...


@runtime_checkable
class ResultKeeper(Protocol):
    """A run handle that keeps tool-result bodies (the ToolResults layer's is one). The run
    finds it among its layers' handles: ``prepare`` offloads the conversation's large results
    through it, and a gate whose ``check_and_compress`` takes ``keep`` gets its ``keep``, to
    make a result readable before replacing it by a placeholder. The gate and the layer never
    see each other."""

    def offload_messages(self, messages: Sequence[Message]) -> list[Message]: ...

    def keep(self, call_id: str, body: Any) -> str | None: ...


@runtime_checkable
class Layer(Protocol):
    """The contract between the stack and a memory layer.

    A layer object is configuration; whatever it needs per run lives in the *handle* its
    ``init`` returns, which the run passes back to every other method and hands to users as
    ``run.layer(name)``.
    """

    name: str
    slot: int
    budget: Budget

    def init(self, ctx: RunContext) -> Any:
        """Loads what the run needs (e.g. the stored state) and returns the run's handle."""

    def recall(self, handle: Any, budget: int) -> list[Message]:
        """The prompt items to inject, within ``budget`` tokens; ``[]`` for none."""

    def observe(self, handle: Any, message: Message) -> None:
        """Store hook: sees each model response passed to ``run.observe``."""

    def tools(self, handle: Any) -> list[Tool]:
        """The tools this layer offers the model in this run."""

    def on_spawn(self, handle: Any, child: RunContext) -> Any:
        """The child run's handle, derived from the parent's (e.g. a cloned state)."""

    def close(self, handle: Any, error: BaseException | None) -> None:
        """Flushes at the end of the run; ``error`` is set when the run failed."""


def checked_scope_id(option: str, value: object) -> str | None:
    """A run's ``thread_id``, ``resource_id`` or ``agent``: None, or a string a store can
    keep as a namespace label. Checked where the caller passed it, so the error names the
    option rather than a label deep in some layer's namespace."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{option} must be a str or None, got {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{option} is empty; pass None for a run without one")
    return validate_label(value, option)


def _checked_layer(layer: object) -> Layer:
    """The layer, or InvalidInputError naming what about it the stack cannot use."""
    if isinstance(layer, Gate) and not isinstance(layer, Layer):
        raise InvalidInputError(
            f"{layer!r} is a gate, not a layer: pass it as MemoryStack(..., gate=...)"
        )
    if isinstance(layer, type):
        name = layer.__name__
        raise InvalidInputError(
            f"{name} is a class, not a layer: pass a layer object, e.g. {name}()"
        )
    if not isinstance(layer, Layer):
        raise InvalidInputError(f"{layer!r} does not implement the Layer protocol")
    if not isinstance(layer.name, str) or not layer.name:
        raise InvalidInputError(
            f"{layer!r} has name {layer.name!r}; a layer's name is a non-empty str"
        )
    if isinstance(layer.slot, bool) or not isinstance(layer.slot, int):
        raise InvalidInputError(f"layer {layer.name!r} has slot {layer.slot!r}; a slot is an int")
    if not isinstance(layer.budget, Budget):
        raise InvalidInputError(
            f"layer {layer.name!r} has budget {layer.budget!r}; a budget is a Budget(min, max)"
        )
    return layer


def _as_dict_hint(message: object) -> str:
    """How to pass an SDK's message object (a pydantic model, e.g. the OpenAI SDK's
    ``ChatCompletionMessage``) as the dict it stands for; "" for anything else."""
    if callable(getattr(message, "model_dump", None)):
        return ": pass message.model_dump(exclude_none=True)"
    return ""


def _parameters(fn: Any) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def allocate_budgets(
    layers: Sequence[Layer], total: int, tokens: TokenCounter | None = None
) -> dict[str, int]:
    """Splits ``total`` tokens: every layer's minimum first (in slot order while tokens last),
    then what remains in proportion to each layer's headroom (``max - min``), never past max.

    A layer may declare ``prompt_overhead``: tokens of fixed text it shows beside what its
    budget holds (the working memory's guidelines), or a method counting them with
    ``tokens`` (the stack's counter; the native estimator if None). Its max is raised by that
    much, so a share that covers the whole budget covers the text too, and the layer fits both
    in its share.

    Raises:
        InvalidInputError: A layer's ``prompt_overhead`` is not a non-negative int.
    """
    ordered = sorted(layers, key=lambda layer: layer.slot)
    counter = tokens if tokens is not None else EstimatingCounter()
    most = {layer.name: layer.budget.max + _prompt_overhead(layer, counter) for layer in ordered}
    shares: dict[str, int] = {}
    left = total
    for layer in ordered:
        shares[layer.name] = min(layer.budget.min, left)
        left -= shares[layer.name]
    headroom = {layer.name: most[layer.name] - shares[layer.name] for layer in ordered}
    room = sum(headroom.values())
    if left > 0 and room > 0:
        extra_total = min(left, room)
        given = 0
        for layer in ordered:
            extra = headroom[layer.name] * extra_total // room
            shares[layer.name] += extra
            given += extra
        # Integer division leaves a few tokens; hand them out in slot order, within max.
        for layer in ordered:
            if given >= extra_total:
                break
            spare = min(most[layer.name] - shares[layer.name], extra_total - given)
            shares[layer.name] += spare
            given += spare
    return shares


def _prompt_overhead(layer: Layer, tokens: TokenCounter) -> int:
    """The layer's ``prompt_overhead`` (0 if it has none), checked: it is added to its max."""
    overhead = getattr(layer, "prompt_overhead", 0)
    if callable(overhead):
        overhead = overhead(tokens)
    if isinstance(overhead, bool) or not isinstance(overhead, int) or overhead < 0:
        raise InvalidInputError(
            f"layer {layer.name!r}: prompt_overhead must be a non-negative int (or a method "
            f"returning one), got {overhead!r}"
        )
    return overhead


class MemoryStack:
    """The layers, the store and the token counter an agent's runs share.

    Use it in a ``with`` (or ``async with``) block, or call :meth:`close`, to close the store
    it opened from a URL.

    Args:
        layers: Layer objects; names must be unique. Their order does not matter: prompt items
            are injected by slot.
        store: A :class:`~memstrata.stores.Store`, a store URL, or None for the embedded default
            (``$MEMSTRATA_STORE``, else ``sqlite:///memstrata.db`` in the working directory).
        tokens: The counter layers use to stay within budget; the native estimator by default.
        total_budget: Tokens for all layers' prompt items together (4,000 by default).
        prompt_role: Role of injected prompt items (``"system"``, or ``"developer"`` for models
            that use it).
        gate: Checks every prepared prompt against the model's window (a ContextGate); None
            sends prompts as they are.
    """

    def __init__(
        self,
        layers: Iterable[Layer],
        *,
        store: Store | str | None = None,
        tokens: TokenCounter | None = None,
        total_budget: int = DEFAULT_TOTAL_BUDGET,
        prompt_role: str = "system",
        gate: Gate | None = None,
    ) -> None:
        if isinstance(layers, (str, bytes, Mapping)) or not isinstance(layers, Iterable):
            raise InvalidInputError(
                f"layers must be a list of layer objects, got {type(layers).__name__}"
            )
        given = [_checked_layer(layer) for layer in layers]
        self.layers: list[Layer] = sorted(given, key=lambda layer: layer.slot)
        names = [layer.name for layer in self.layers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InvalidInputError(f"layer names must be unique; repeated: {duplicates}")
        if isinstance(total_budget, bool) or not isinstance(total_budget, int) or total_budget < 0:
            raise InvalidInputError(
                f"total_budget must be a non-negative int, got {total_budget!r}"
            )
        if prompt_role not in PROMPT_ROLES:
            raise InvalidInputError(
                f"prompt_role must be 'system' or 'developer', got {prompt_role!r}"
            )
        if tokens is not None:
            checked_counter(tokens)
        if store is not None and not isinstance(store, (Store, str)):
            raise InvalidInputError(
                f"store must be a Store, a store URL or None, got {type(store).__name__}"
            )
        self.tokens: TokenCounter = tokens if tokens is not None else EstimatingCounter()
        # Before the store is opened: a layer refused here leaves nothing open.
        self.budgets = allocate_budgets(self.layers, total_budget, self.tokens)
        if store is None:
            store = os.environ.get("MEMSTRATA_STORE", DEFAULT_STORE_URL)
        # A store the stack opened from a URL is the stack's to close; one passed in is not.
        self._owns_store = isinstance(store, str)
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self.total_budget = total_budget
        self.prompt_role = prompt_role
        if gate is not None and not isinstance(gate, Gate):
            hint = f", e.g. gate=ContextGate(model={gate!r:.80})" if isinstance(gate, str) else ""
            raise InvalidInputError(
                "gate must be a ContextGate (or any object with a check_and_compress method) "
                f"or None, got {gate!r:.80}{hint}"
            )
        self.gate = gate
        self._gate_keeps = gate is not None and "keep" in _parameters(gate.check_and_compress)

    def run(
        self,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        agent: str | None = None,
    ) -> Run:
        """A run for one agent turn or task; use it as a context manager.

        Each scope id is None or a non-empty string of at most 256 characters."""
        ctx = RunContext(
            self.store,
            self.tokens,
            checked_scope_id("thread_id", thread_id),
            checked_scope_id("resource_id", resource_id),
            checked_scope_id("agent", agent),
            budgets=self.budgets,
        )
        return Run(self, ctx)

    def arun(
        self,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        agent: str | None = None,
    ) -> Run:
        """The same run, for ``async with`` (see :meth:`Run.aprepare` for what the async
        methods do)."""
        return self.run(thread_id=thread_id, resource_id=resource_id, agent=agent)

    def forget(
        self, *, resource_id: str | None = None, thread_id: str | None = None
    ) -> dict[str, int]:
        """Erases what the layers keep for runs with exactly these ids, as a run names them:

        * ``thread_id`` (with the ``resource_id`` its runs named, if any): that conversation:
          its thread-scoped working memories and the tool results its runs kept;
        * ``resource_id`` alone: that user: their resource-scoped working memories, and the
          thread-scoped working memories and tool results of every run that named them,
          whatever its thread.

        A conversation whose runs named a user is theirs: ``thread_id`` alone erases only
        what runs naming no user kept under that thread. The agent's mind, shared memory and
        team state belong to the agent or the workflow, not to a user, and are not touched
        (docs/privacy.md says where each layer keeps what, and what a deletion leaves in the
        store's files).

        Expired records (already invisible) are deleted too, everyone's. Safe to call again:
        a record written under these ids while it ran (a run still going) may stay, and a call
        that failed part way leaves what it had not reached. A layer whose ``forget`` fails
        does not keep the others from erasing theirs: its error is raised once every layer
        had its turn.

        Returns:
            How many records (or result files) each layer that keeps data per conversation or
            per user erased, by layer name.
        """
        resource = checked_scope_id("resource_id", resource_id)
        thread = checked_scope_id("thread_id", thread_id)
        if resource is None and thread is None:
            raise InvalidInputError("forget needs a thread_id, a resource_id or both")
        erased: dict[str, int] = {}
        failures: list[Exception] = []
        for layer in self.layers:
            forget = getattr(layer, "forget", None)
            if not callable(forget):
                continue
            try:
                erased[layer.name] = forget(self.store, resource_id=resource, thread_id=thread)
            except Exception as exc:
                # The other layers still erase theirs: a user's data must not stay in one
                # layer because another (the caller's own, say) failed.
                logger.exception("layer %r failed to forget", layer.name)
                failures.append(exc)
        try:
            self.store.purge_expired()
        except Exception:
            if not failures:
                raise
            logger.exception("purging expired records failed")
        if failures:
            raise failures[0]
        return erased

    async def aforget(
        self, *, resource_id: str | None = None, thread_id: str | None = None
    ) -> dict[str, int]:
        """:meth:`forget` for a coroutine."""
        return await run_sync(self.forget, resource_id=resource_id, thread_id=thread_id)

    def close(self) -> None:
        """Closes the store if the stack opened it (from a URL or the default); a store passed
        in as an object stays open, the caller's to close."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> MemoryStack:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.close()

    async def __aenter__(self) -> MemoryStack:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """:meth:`close`, awaiting the store's async close."""
        if self._owns_store:
            await self.store.aclose()

    def current_run(self) -> Run | None:
        """The innermost run of this stack entered with ``with`` or ``async with`` in the
        calling context and not closed: in the thread or task that entered it, and in what it
        starts with its context (a LangGraph node, an executor of ``asyncio.to_thread``).

        For code built once and serving every request, such as a LangGraph agent compiled at
        start-up (``memstrata_tools(stack)``): the server opens each request's run around
        the call, and nothing the request sends chooses the user. A run opened with ``open()``
        instead of ``with`` is not found.

        None, with an error logged, when the context holds open runs of this stack of other
        scopes (thread, user or agent) than the innermost and not its parents: two requests'
        runs, say, each held open across a ``yield`` by generators stepped on one pooled
        thread, whose context is the thread's own. Which request the call serves cannot be
        told then, so it gets no run rather than another user's."""
        entered = [run for run in _ENTERED.get() if run.stack is self and not run._closed]
        if not entered:
            return None
        innermost = entered[-1]
        ancestors = set()
        context: RunContext | None = innermost.context
        while context is not None:
            ancestors.add((context.thread_id, context.resource_id, context.agent))
            context = context.parent
        for run in entered[:-1]:
            ctx = run.context
            if (ctx.thread_id, ctx.resource_id, ctx.agent) not in ancestors:
                logger.error(
                    "runs of one stack for different conversations, users or agents are open "
                    "in one context (a run held open across a yield on a shared thread?): "
                    "no run is used"
                )
                return None
        return innermost


class Run:
    """One agent turn or task. Create it with :meth:`MemoryStack.run` and use it in a ``with``
    block (``async with`` for :meth:`MemoryStack.arun`), or call :meth:`close`: what the layers
    write when the run closes (the agent mind's draft) is written only then. A run used
    without either opens at its first call and is never closed; it logs a warning when it is
    collected."""

    def __init__(
        self, stack: MemoryStack, ctx: RunContext, parent: tuple[Run, dict[str, Any]] | None = None
    ) -> None:
        self.stack = stack
        self.context = ctx
        self._parent = parent
        self._handles: dict[str, Any] = {}
        self._keeper: ResultKeeper | None = None
        self._tools: dict[str, tuple[str, Tool]] = {}
        self._opened = False
        self._closed = False
        # Held while the run opens, and while it closes: another task or thread using the run
        # meanwhile (a model's parallel tool calls, the first of which opens it) waits for the
        # layers, instead of finding some missing. A TaskLock: the open may suspend.
        self._opening = TaskLock()
        self._in_open = False
        self._strip_null_padding = False
        # Names this run's call boundaries for the gate (checkpoint files, the once-per-run
        # warning).
        self.run_id = f"run-{os.urandom(6).hex()}"  # uuid4's object costs 4x, every run
        self._calls = itertools.count(1)

    # Lifecycle -------------------------------------------------------------------------------

    def open(self) -> Run:
        """Initialises every layer (done by ``with``); a layer failing closes those before it."""
        if self._opened:
            return self
        with self._opening:
            # Opened by another task or thread meanwhile, or by this one further up the stack;
            # or closed before it opened: nothing would close the layers.
            if self._opened or self._in_open or self._closed:
                return self
            self._in_open = True
            try:
                self._open_layers()
            finally:
                self._in_open = False
                self._opened = True
        return self

    def _open_layers(self) -> None:
        try:
            opened = self._opening_answers() if self._parent is None else {}
            for layer in self.stack.layers:
                if self._parent is not None:
                    parent_handle = self._parent[1][layer.name]
                    self._handles[layer.name] = layer.on_spawn(parent_handle, self.context)
                elif layer.name in opened:
                    init: Any = layer.init  # with opening_reads, init takes ``opened``
                    self._handles[layer.name] = init(self.context, opened=opened[layer.name])
                else:
                    self._handles[layer.name] = layer.init(self.context)
            self._index_tools()
            # What isinstance(h, ResultKeeper) checks, without a runtime protocol's cost per run.
            keepers = (
                h
                for h in self._handles.values()
                if callable(getattr(h, "offload_messages", None))
                and callable(getattr(h, "keep", None))
            )
            self._keeper = next(keepers, None)
        except BaseException as exc:
            self.close(exc)
            raise

    def _opening_answers(self) -> dict[str, dict[Read, Answer]]:
        """Every layer's ``opening_reads``, asked of the store together: by layer name, that
        layer's reads and their answers."""
        wanted: dict[str, list[Read]] = {}
        for layer in self.stack.layers:
            reads = getattr(layer, "opening_reads", None)
            if callable(reads):
                wanted[layer.name] = list(reads(self.context))
        try:
            answers = iter(self.context.store.read_many([r for rs in wanted.values() for r in rs]))
        except InvalidJSONError:
            # A record another program made unreadable: each layer then reads its own records
            # as it opens, and deals with it (a working memory moves it aside).
            return {}
        return {name: {read: next(answers) for read in reads} for name, reads in wanted.items()}

    def _index_tools(self) -> None:
        index = self._tools
        for layer in self.stack.layers:
            for tool in layer.tools(self._handles[layer.name]):
                entry = (layer.name, tool)
                name, wire = tool.name, tool.wire_name
                for key in (name,) if wire == name else (name, wire):
                    if key in index:
                        raise InvalidInputError(
                            f"tool name {key!r} is offered by both layer"
                            f" {index[key][0]!r} and layer {layer.name!r}"
                        )
                    index[key] = entry

    def close(self, error: BaseException | None = None) -> None:
        """Closes every opened layer, last slot first; idempotent. Re-raises a layer's failure
        only after all layers had their chance to flush. So is an interruption (a cancelled
        ``aclose``, KeyboardInterrupt) that reaches one layer's close: the layers after it
        still flush, and it is raised at the end whatever the run's error."""
        if self._closed:
            return
        if self._opened and not self._in_open:
            self._closed = True  # the open is over: no lock to wait for
            self._close_layers(error)
            return
        with self._opening:  # an open under way ends first: every layer it opens is closed
            if self._closed:
                return
            self._closed = True
            self._close_layers(error)

    def _close_layers(self, error: BaseException | None) -> None:
        failures: list[BaseException] = []
        interrupted: BaseException | None = None
        for layer in reversed(self.stack.layers):
            if layer.name not in self._handles:
                continue
            try:
                layer.close(self._handles[layer.name], error)
            except Exception as exc:
                logger.exception("layer %r failed to close", layer.name)
                failures.append(exc)
            except BaseException as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        if failures and error is None:
            raise failures[0]

    def __enter__(self) -> Run:
        self.open()
        _ENTERED.set((*_ENTERED.get(), self))
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._leave()
        self.close(exc)

    def __del__(self) -> None:
        # A run used without ``with`` opens on its first call and is never closed: what its
        # layers keep until the close (the mind's draft) is never written: say so.
        if getattr(self, "_opened", False) and not self._closed:
            ctx = self.context
            # Not contextlib.suppress: at interpreter exit, module globals may be gone.
            try:  # noqa: SIM105
                logger.warning(
                    "a run (thread_id=%r, resource_id=%r, agent=%r) was opened and never "
                    "closed: what its layers write at the close (the agent mind's draft) was "
                    "not written; use `with stack.run(...) as run:` (`async with stack.arun"
                    "(...)` in a coroutine), or call run.close()",
                    ctx.thread_id,
                    ctx.resource_id,
                    ctx.agent,
                )
            except Exception:
                pass

    def _leave(self) -> None:
        # Only this context's record changes: a run left in another context (a fixture ended
        # by another task) stays in the first one's, where current_run skips it once closed.
        entered = _ENTERED.get()
        if self in entered:
            _ENTERED.set(tuple(run for run in entered if run is not self))

    async def aopen(self) -> Run:
        """:meth:`open` for a coroutine (done by ``async with``)."""
        return await run_sync(self.open)

    async def aclose(self, error: BaseException | None = None) -> None:
        """:meth:`close` for a coroutine."""
        await run_sync(self.close, error)

    async def __aenter__(self) -> Run:
        await self.aopen()
        _ENTERED.set((*_ENTERED.get(), self))
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._leave()
        await self.aclose(exc)

    def _require_open(self) -> None:
        if not self._opened:
            self.open()
        if self._closed:
            raise InvalidInputError("this run is closed; start a new one with stack.run()")

    # The model's side ------------------------------------------------------------------------

    def prepare(self, messages: Sequence[Message], *, call_id: str | None = None) -> list[Message]:
        """The messages with each layer's prompt items injected, in slot order, right after the
        leading system/developer messages. The input list and its messages are not changed.

        With a gate on the stack, the result then passes it: it may come back pruned, or the
        gate raises (a ContextGate raises RecoverableContextError with a checkpoint). ``call_id``
        names this call boundary; by default ``<run_id>-call-<n>``.

        With a layer that keeps tool results (:class:`ResultKeeper`, e.g. ToolResults), the
        conversation's large tool results are offloaded first, and the gate keeps through it
        every result it prunes."""
        self._require_open()
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            raise InvalidInputError(
                f"messages must be a list of dicts, got {type(messages).__name__}"
            )
        # By the set of types first: a few µs for a 200-message conversation, a third of an
        # isinstance per message, on every call.
        if not _PLAIN_DICT.issuperset(map(type, messages)):
            for index, message in enumerate(messages):
                if not isinstance(message, dict):
                    raise InvalidInputError(
                        f"message {index} must be a dict, got {type(message).__name__}"
                        f"{_as_dict_hint(message)}"
                    )
        if call_id is not None and not isinstance(call_id, str):
            raise InvalidInputError(f"call_id must be a str or None, got {type(call_id).__name__}")
        injected: list[Message] = []
        for layer in self.stack.layers:
            for item in layer.recall(self._handles[layer.name], self.stack.budgets[layer.name]):
                injected.append({**item, "role": item.get("role", self.stack.prompt_role)})
        head = 0
        while head < len(messages) and messages[head].get("role") in PROMPT_ROLES:
            head += 1
        keeper = self._keeper
        if keeper is not None:
            messages = keeper.offload_messages(messages)
        prepared = [*messages[:head], *injected, *messages[head:]]
        if self.stack.gate is None:
            return prepared
        boundary = call_id if call_id is not None else f"{self.run_id}-call-{next(self._calls)}"
        if keeper is not None and self.stack._gate_keeps:
            return self.stack.gate.check_and_compress(  # type: ignore[call-arg]
                prepared, boundary, run_id=self.run_id, keep=keeper.keep
            )
        return self.stack.gate.check_and_compress(prepared, boundary, run_id=self.run_id)

    def prepare_anthropic(
        self, messages: Sequence[Message], *, system: str = "", call_id: str | None = None
    ) -> tuple[str, list[Message]]:
        """``prepare`` for Anthropic's Messages API, which takes the system prompt apart from
        the conversation: returns ``(system, messages)`` with the layers' prompt items appended
        to ``system``. Content blocks (``tool_use``, ``tool_result``) are counted by what they
        hold when a gate checks the prompt."""
        if not isinstance(system, str):
            raise InvalidInputError(f"system must be a str, got {type(system).__name__}")
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            raise InvalidInputError(
                f"messages must be a list of dicts, got {type(messages).__name__}"
            )
        head = [{"role": "system", "content": system}] if system else []
        prepared = self.prepare([*head, *messages], call_id=call_id)
        system_text = "\n\n".join(
            str(m.get("content", "")) for m in prepared if m.get("role") in PROMPT_ROLES
        )
        rest = [m for m in prepared if m.get("role") not in PROMPT_ROLES]
        return system_text, rest

    def tool_specs(
        self, fmt: ToolFormat = "openai", *, strict: bool = False
    ) -> list[dict[str, Any]]:
        """Every layer's tools as JSON Schema, for ``openai`` (chat completions),
        ``responses`` (OpenAI's Responses API), ``anthropic`` or ``mcp``.

        ``strict=True`` gives OpenAI's strict form (all properties required, optional ones
        nullable); the run remembers it and removes that null padding from later tool calls,
        so a padded null never overwrites or deletes anything.
        """
        self._require_open()
        if not isinstance(strict, bool):
            raise InvalidInputError(f"strict must be a bool, got {type(strict).__name__}")
        if strict:
            self._strip_null_padding = True
        seen: set[str] = set()
        specs = []
        for _layer, tool in self._tools.values():
            if tool.listed and tool.name not in seen:
                seen.add(tool.name)
                specs.append(tool_spec(tool, fmt, strict=strict))
        return specs

    def call_tool(self, name: str, arguments: Any = None) -> dict[str, Any]:
        """Runs a tool call the model made; never raises for anything the model sent.

        Args:
            name: The tool's own name (``working-memory/update``) or its wire-safe form.
            arguments: A dict, or the JSON text the model sent.

        Returns:
            The tool's JSON result, or ``{"ok": False, "tool": name, "error": {...}}`` naming
            what was wrong (unknown tool, malformed JSON, wrong types, schema violation...).
            Results keep their system's shape: most are ``{"ok": True, ...}``, the mind's
            writes ``{"status": "ok", ...}`` (docs/tools.md); ``result.get("ok") is False``
            tells a failure of any tool.
        """
        shown = clip_text(name) if isinstance(name, str) else shown_value(name)
        try:
            if self._closed:
                raise ToolError("this run is closed", code="run_closed")
            self._require_open()
            entry = self._tools.get(name) if isinstance(name, str) else None
            if entry is None:
                listed = {t.wire_name for _, t in self._tools.values() if t.listed}
                available = ", ".join(sorted(listed))
                raise ToolError(
                    f"unknown tool {shown}; available: {available or 'none'}", code="unknown_tool"
                )
            tool = entry[1]
            args = parse_arguments(arguments)
            if self._strip_null_padding:
                args = strip_null_padding(tool.parameters, args)
            if tool.validate:
                raise_problems(tool.check, args)
            result = tool.handler(args)
            return result if isinstance(result, dict) else {"ok": True, "result": result}
        except ToolError as exc:
            return error_payload(shown, exc)
        except LimitExceededError as exc:
            return error_payload(shown, ToolError(str(exc), code="limit_exceeded"))
        except Exception as exc:
            # The store failing (locked, unreachable, full) is the memory's failure, not a
            # mistake in the model's arguments nor a bug: told so, and whether to call again.
            failure = store_failure(exc)
            if failure is not None:
                logger.warning(
                    "tool %s: the store failed: %s",
                    shown,
                    redacted_for_log(f"{type(exc).__name__}: {exc}"),
                )
                return error_payload(shown, failure.tool_error())
            if isinstance(exc, (MemstrataError, ValueError, TypeError, RecursionError)):
                text = (
                    str(exc) if isinstance(exc, MemstrataError) else f"{type(exc).__name__}: {exc}"
                )
                return error_payload(shown, ToolError(text, code="invalid_arguments"))
            logger.exception("tool %s failed", shown)
            return error_payload(
                shown, ToolError(f"the tool failed: {type(exc).__name__}", code="internal_error")
            )

    def observe(self, message: Message) -> list[str]:
        """Runs every layer's store hook on a model response. A layer that cannot apply what the
        model wrote logs a diagnostic and leaves its state as it was; the diagnostics are also
        returned, one line each."""
        self._require_open()
        if not isinstance(message, dict):
            raise InvalidInputError(
                f"message must be a dict (one model response), got {type(message).__name__}"
                f"{_as_dict_hint(message)}"
            )
        diagnostics: list[str] = []
        for layer in self.stack.layers:
            try:
                layer.observe(self._handles[layer.name], message)
            except Exception as exc:
                text = f"{layer.name}: {type(exc).__name__}: {exc}"
                # The error echoes what the model wrote, which may hold what a user told it.
                logger.warning("observe dropped an update: %s", redacted_for_log(text))
                diagnostics.append(text)
        return diagnostics

    # Async forms. Each runs its sync form on the event loop's thread (memstrata._bridge):
    # work that takes microseconds (an in-memory store, an SQLite statement that need not
    # wait, the Rust kernels) runs inline, with no thread hop, and only a wait (a PostgreSQL
    # round trip, an HTTP embedder, a locked SQLite file, a file written and synced to disk)
    # is awaited, through the store's or the embedder's async method or a worker thread, so
    # other tasks run meanwhile. Same results, same stored state as the sync forms.

    async def aprepare(
        self, messages: Sequence[Message], *, call_id: str | None = None
    ) -> list[Message]:
        """:meth:`prepare` for a coroutine."""
        return await run_sync(self.prepare, messages, call_id=call_id)

    async def aprepare_anthropic(
        self, messages: Sequence[Message], *, system: str = "", call_id: str | None = None
    ) -> tuple[str, list[Message]]:
        """:meth:`prepare_anthropic` for a coroutine."""
        return await run_sync(self.prepare_anthropic, messages, system=system, call_id=call_id)

    async def acall_tool(self, name: str, arguments: Any = None) -> dict[str, Any]:
        """:meth:`call_tool` for a coroutine."""
        return await run_sync(self.call_tool, name, arguments)

    async def aobserve(self, message: Message) -> list[str]:
        """:meth:`observe` for a coroutine."""
        return await run_sync(self.observe, message)

    # Composition -----------------------------------------------------------------------------

    def spawn(
        self,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        agent: str | None = None,
    ) -> Run:
        """A child run (a sub-agent): each layer's ``on_spawn`` derives the child's handle.
        Unset scope ids are inherited from this run."""
        self._require_open()
        thread_id = checked_scope_id("thread_id", thread_id)
        resource_id = checked_scope_id("resource_id", resource_id)
        agent = checked_scope_id("agent", agent)
        ctx = replace(
            self.context,
            thread_id=thread_id if thread_id is not None else self.context.thread_id,
            resource_id=resource_id if resource_id is not None else self.context.resource_id,
            agent=agent if agent is not None else self.context.agent,
            parent=self.context,
        )
        return Run(self.stack, ctx, parent=(self, self._handles))

    def layer(self, name: str) -> Any:
        """A layer's handle bound to this run, e.g. ``run.layer("working-memory").snapshot``."""
        self._require_open()
        try:
            return self._handles[name]
        except (KeyError, TypeError):
            raise InvalidInputError(
                f"no layer named {name!r}; layers: {', '.join(self._handles) or 'none'}"
            ) from None

    def alayer(self, name: str) -> AsyncHandle:
        """A layer's handle for a coroutine: each of its methods is awaited, run as the async
        forms of the run's methods are (``await run.alayer("working-memory").update(...)``);
        its other attributes read as they are."""
        return AsyncHandle(self.layer(name))


class AsyncHandle:
    """A layer handle whose methods are coroutines (see :meth:`Run.alayer`)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.handle, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await run_sync(attribute, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = attribute.__doc__
        return call
