"""WorkingMemory: the scratchpad the model reads every turn and updates with a tool.

Implements noetic's working memory (``working-memory/update``, legacy ``updateWorkingMemory``
calls, deep merge with prototype-key stripping, thread/resource scope, the schema checked on the
merged state) and VoltAgent's (markdown templates, append/replace modes, conversation/user
scope, ``get_working_memory``/``update_working_memory``/``clear_working_memory``).

Decisions where the two are silent or disagree:

* State is text (no schema), markdown (``template``) or structured (``schema``). Append is the
  default; arrays replace in noetic's flavour and are a deduplicated union in VoltAgent's.
* The block and its guidelines are shown from the first turn, even while the state is empty,
  in both flavours: VoltAgent always shows its instructions, while noetic injects no block
  until the state holds something, which leaves the model nothing in the prompt saying the
  memory exists or how to fill it. An empty read-only layer (it has no tool) shows nothing.
* A write is refused when the block would pass the layer's token budget (``budget.max``, or its
  share of the stack's total less the guidelines shown after the block, if smaller), counted
  exactly, or ``max_state_bytes``; the error names the tool call that shortens the memory. The
  prompt item (block and guidelines) stays within the layer's share.
* One record in the store (:mod:`~memstrata.layers.wm_stored`), written with ``put_if_version``;
  a writer that lost a race merges into the winner's state inside one store transaction. A
  replace or a clear that lost one is refused (``conflict`` for the model) rather than drop the
  winner's change, and the run takes the winner's state.
* A stored state failing the schema is moved aside under ``quarantine/<time>`` and the layer
  starts over; a read-only layer never writes, shows nothing of it, and logs why.
* A spawned child in the parent's namespace gets a copy of its state (resource scope) or its
  own empty, unsaved one (thread scope); a child in another namespace loads its own state.
* Each layer's ``name`` labels its block and tools (``<human>``, ``human/update``), so several
  can share a stack; the default name keeps noetic's and VoltAgent's names and takes legacy calls,
  applied once when both ``call_tool`` and ``observe`` see one.
* Every state handed out is the caller's copy.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Literal, Union

import orjson

from memstrata._bridge import TaskLock
from memstrata._checks import checked_bool, checked_budget
from memstrata._core import deep_merge, strip_unsafe_keys
from memstrata.exceptions import (
    BudgetExceededError,
    InvalidInputError,
    InvalidJSONError,
    LimitExceededError,
    ReadOnlyError,
    SchemaViolationError,
    StorageRaceError,
    ToolError,
    WriteConflictError,
)
from memstrata.layers import wm_stored
from memstrata.layers.wm_tools import (
    DEFAULT_NAME,
    LEGACY_TOOL,
    tool_names,
    tool_schemas,
    tools_for,
)
from memstrata.messages import tool_calls
from memstrata.prompts import WORKING_MEMORY_TRUNCATED, in_tagged_block, tagged_block_floor
from memstrata.redaction import redacted_for_log
from memstrata.schemas import required_fields, state_checker
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import GetMany, Item, Namespace, Read, Store, codec, erase
from memstrata.stores.base import Answer, EncodedItem
from memstrata.tokens import TokenCounter, exact_count, exact_count_over, json_lines
from memstrata.tools import Tool, refuse_long_integers

logger = logging.getLogger("memstrata.working_memory")

Scope = Literal["thread", "resource", "conversation", "user"]
Mode = Literal["append", "replace"]
# A Union rather than ``|``: evaluated when the module loads, on Python 3.9 too.
State = Union[str, dict[str, Any]]

QUARANTINE_PREFIX = "quarantine/"
DEFAULT_MAX_STATE_BYTES = 1 << 20
# Reads that race a write, and stored states moved aside, are tried again this many times; plain
# contention never needs more than one.
MAX_WRITE_ATTEMPTS = 100
# The namespace label of a thread-scoped state whose runs name a user: (name, label, user,
# thread), apart from (name, "thread", thread) so that erasing a conversation that named no
# user never takes a user's conversation of the same id.
_USER_THREAD = "user-thread"
# The bodies of checked states a layer keeps by content (see WorkingMemory.known_body): a few
# users' or conversations' worth, and at most this many characters of keys and bodies together.
_BODIES_KEPT = 256
_BODIES_MAX_CHARS = 8 << 20
_SCOPES = {"thread": "thread", "conversation": "thread", "resource": "resource", "user": "resource"}


class WorkingMemory:
    """The working-memory layer.

    Args:
        scope: ``"thread"`` (one state per conversation) or ``"resource"`` (one per user,
            shared by their conversations); ``"conversation"``/``"user"`` are VoltAgent's names.
        schema: A pydantic model class or a JSON Schema dict: structured state, checked on the
            merged result of every update.
        template: Markdown the state starts from (markdown state).
        read_only: Blocks every write path; no tools are offered.
        arrays: ``"replace"`` or ``"union"`` (deduplicated concatenation) for structured
            appends; by default ``"replace"`` for ``tools="noetic"``, ``"union"`` for
            ``tools="voltagent"``.
        nulls: ``"keep"``, ``"delete"`` or ``"ignore"`` null values under a patch's keys.
        tools: ``"noetic"`` offers ``working-memory/update`` (and ``working-memory/replace``
            for structured state); ``"voltagent"`` offers ``get_working_memory``,
            ``update_working_memory`` and ``clear_working_memory``.
        budget: ``(min, max)`` tokens of prompt; writes past ``max`` are refused.
        max_state_bytes: Largest state, in UTF-8 bytes of the text the model reads.
        slot: Order among the layers' prompt items.
        name: The layer's name: the first label of its store namespace, its block's label and
            its tools' prefix.
    """

    def __init__(
        self,
        *,
        scope: Scope = "thread",
        schema: Any = None,
        template: str | None = None,
        read_only: bool = False,
        arrays: Literal["replace", "union"] | None = None,
        nulls: Literal["keep", "delete", "ignore"] = "keep",
        tools: Literal["noetic", "voltagent"] = "noetic",
        budget: tuple[int, int] | Budget = (200, 1500),
        max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
        slot: int = 100,
        name: str = DEFAULT_NAME,
    ) -> None:
        for option, value, allowed in (
            ("scope", scope, tuple(_SCOPES)),
            ("tools", tools, ("noetic", "voltagent")),
            ("arrays", arrays, (None, "replace", "union")),
            ("nulls", nulls, ("keep", "delete", "ignore")),
        ):
            if value not in allowed:
                raise InvalidInputError(f"{option} must be one of {allowed}, got {value!r}")
        if template is not None and (schema is not None or not isinstance(template, str)):
            raise InvalidInputError("template must be a str, and not given with a schema")
        if type(max_state_bytes) is not int or max_state_bytes < 1:
            raise InvalidInputError(f"max_state_bytes must be a positive int: {max_state_bytes!r}")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,48}", name):
            raise InvalidInputError(f"name must be 1-48 of [A-Za-z0-9_-], got {name!r}")
        self.name = name
        self.slot = slot
        self.budget = checked_budget(budget)
        self.scope: Literal["thread", "resource"] = _SCOPES[scope]  # type: ignore[assignment]
        self._violations = state_checker(schema)  # refuses a schema it cannot compile
        # States are checked against the schema as given: the layer keeps its own copy, so a
        # caller changing its dict afterwards cannot make ``schema`` show another one.
        self._schema: Any = _copy(dict(schema)) if isinstance(schema, Mapping) else schema
        self.template = template
        self.read_only = checked_bool(read_only, "read_only")
        self.arrays: Literal["replace", "union"] = arrays or (
            "union" if tools == "voltagent" else "replace"
        )
        self.nulls = nulls
        self.tool_flavor = tools
        self.max_state_bytes = max_state_bytes
        # The block's tag: <working_memory> for the default name, as noetic shows it.
        self.label = "working_memory" if name == DEFAULT_NAME else name
        self.tool_names = tool_names(self)
        # Fields every state holds: the update tool takes a partial patch, so it names them.
        self.required = required_fields(schema) if schema is not None else []
        self.tool_schemas = tool_schemas(self)
        # States this layer checked (clean, of its kind, within its schema) and the body of
        # their block, by their content: see known_body.
        self._bodies: OrderedDict[str | bytes, str] = OrderedDict()
        self._bodies_chars = 0
        self._bodies_lock = threading.Lock()

    @property
    def schema(self) -> Any:
        """The pydantic model class or JSON Schema dict states are checked against (a dict is
        the caller's own copy)."""
        return _copy(self._schema) if isinstance(self._schema, dict) else self._schema

    @property
    def format(self) -> Literal["markdown", "json"] | None:
        """``"json"`` with a schema, ``"markdown"`` with a template, None for free-form text."""
        if self._schema is not None:
            return "json"
        return "markdown" if self.template is not None else None

    @property
    def structured(self) -> bool:
        """Whether the state is a JSON object checked against ``schema`` (else text)."""
        return self._schema is not None

    def empty_state(self) -> State:
        """What ``clear()`` leaves: ``{}`` for structured state, ``""`` for text."""
        return {} if self.structured else ""

    def prompt_overhead(self, tokens: TokenCounter) -> int:
        """The guidelines shown after the block, counted as ``tokens`` counts a budget: the
        stack gives the layer room for them beyond ``budget.max`` (see
        :func:`~memstrata.stack.allocate_budgets`)."""
        return exact_count(tokens, f"\n{self.tool_names['guidelines']}")

    def content_key(self, state: Any) -> str | bytes | None:
        """What a state of this layer's kind is known by in :meth:`known_body`: a text as it
        is, a structured state as its JSON text (by content: 1, 1.0 and true differ, and so do
        two orders of the same keys). None for anything else, which is never known."""
        if self.structured:
            if type(state) is not dict:
                return None
            try:
                return orjson.dumps(state)
            except (TypeError, orjson.JSONEncodeError):
                return None
        return state if type(state) is str else None

    def known_body(self, key: str | bytes | None) -> str | None:
        """The body of the block of the state whose :meth:`content_key` is ``key``, if this
        layer checked a state with that content and kept it: such a state is clean of unsafe
        keys, of the layer's kind and within its schema, so a run opening it (the state the
        last run wrote, most often) takes it as it comes and shows the body kept, neither
        checked nor rendered again. Keyed by content, never by a store's version or an
        object: another program's write, another store, another user's state of other
        content, are each checked and rendered as their own."""
        if key is None:
            return None
        with self._bodies_lock:
            body = self._bodies.get(key)
            if body is not None:
                self._bodies.move_to_end(key)
            return body

    def _keep_body(self, key: str | bytes | None, body: str) -> None:
        """Keeps ``body`` as the block of the checked state of content ``key``."""
        if key is None:
            return
        size = len(key) + len(body)
        if size > _BODIES_MAX_CHARS // 8:
            return  # a huge state would push out every other for one hit
        with self._bodies_lock:
            bodies = self._bodies
            if key in bodies:
                bodies.move_to_end(key)
                return
            bodies[key] = body
            self._bodies_chars += size
            while len(bodies) > _BODIES_KEPT or self._bodies_chars > _BODIES_MAX_CHARS:
                old, old_body = bodies.popitem(last=False)
                self._bodies_chars -= len(old) + len(old_body)

    def initial_state(self) -> State:
        """The state before the first write: the ``template``, else :meth:`empty_state`."""
        return self.template if self.template is not None else self.empty_state()

    # Layer protocol ---------------------------------------------------------------------------

    def opening_reads(self, ctx: RunContext) -> list[Read]:
        """The stored records, read with the other layers' when the run opens."""
        return [GetMany(self.namespace_of(ctx), wm_stored.OPENING_KEYS)]

    def init(
        self, ctx: RunContext, opened: Mapping[Read, Answer] | None = None
    ) -> WorkingMemoryHandle:
        namespace = self.namespace_of(ctx)
        handle = WorkingMemoryHandle(self, ctx, namespace)
        rows = (opened or {}).get(GetMany(namespace, wm_stored.OPENING_KEYS))
        handle.load(rows if isinstance(rows, dict) else None)
        return handle

    def forget(self, store: Store, *, resource_id: str | None, thread_id: str | None) -> int:
        """Erases what runs with these ids keep: for a thread-scoped working memory, that
        conversation's state, or with ``resource_id`` alone every conversation of that user;
        for a resource-scoped one, with ``resource_id`` alone, the user's state. Records put
        aside go too; returns how many records went."""
        prefix: Namespace | None = None
        if self.scope == "resource":
            if resource_id is not None and thread_id is None:
                prefix = self._user(resource_id)
        elif resource_id is not None:
            user_threads = (self.name, _USER_THREAD, resource_id)
            prefix = user_threads if thread_id is None else (*user_threads, thread_id)
        elif thread_id is not None:
            prefix = (self.name, "thread", thread_id)
        return 0 if prefix is None else erase(store, prefix)

    def namespace_of(self, ctx: RunContext) -> Namespace:
        """Where a run's state is stored: per user under resource scope, per conversation
        (and its user, when the run names one) under thread scope (docs/working-memory.md).

        Raises:
            InvalidInputError: The run lacks the id the scope needs."""
        if self.scope == "resource":
            if not ctx.resource_id:
                raise InvalidInputError(
                    "working memory with scope 'resource' needs stack.run(resource_id=...)"
                )
            return self._user(ctx.resource_id)
        if not ctx.thread_id:
            raise InvalidInputError(
                "working memory with scope 'thread' needs stack.run(thread_id=...)"
            )
        if ctx.resource_id:
            # Thread ids are the caller's and often short ("1"): two users' conversations that
            # share one keep their own state, as they keep their own tool results.
            return (self.name, _USER_THREAD, ctx.resource_id, ctx.thread_id)
        return (self.name, "thread", ctx.thread_id)

    def _user(self, resource_id: str) -> Namespace:
        return (self.name, "resource", resource_id)

    def recall(self, handle: WorkingMemoryHandle, budget: int) -> list[Message]:
        return handle.prompt_items(budget)

    def observe(self, handle: WorkingMemoryHandle, message: Message) -> None:
        """Applies every legacy ``updateWorkingMemory`` call in a response, in order. A call
        that cannot be applied is dropped (prior state untouched); the others still apply, and
        the failures are reported together afterwards."""
        if self.read_only or self.name != DEFAULT_NAME:
            return
        failures = []
        calls = [call.arguments for call in tool_calls(message) if call.name == LEGACY_TOOL]
        for index, arguments in enumerate(calls):
            try:
                handle.apply_legacy(arguments, source="observe")
            except (
                InvalidInputError,
                ToolError,
                SchemaViolationError,
                BudgetExceededError,
                WriteConflictError,
            ) as exc:
                failures.append(f"call {index + 1}: {exc}")
        if failures:
            raise ToolError(
                f"{len(failures)} {LEGACY_TOOL} call(s) dropped: " + "; ".join(failures),
                code="invalid_arguments",
                details=failures,
            )

    def tools(self, handle: WorkingMemoryHandle) -> list[Tool]:
        return tools_for(self, handle)

    def on_spawn(self, handle: WorkingMemoryHandle, child: RunContext) -> WorkingMemoryHandle:
        namespace = self.namespace_of(child)
        if namespace != handle.namespace:
            return self.init(child)
        if self.scope == "thread":
            return WorkingMemoryHandle(self, child, namespace, saved=False)
        clone = WorkingMemoryHandle(self, child, namespace)
        clone._take(handle.snapshot, handle.version)
        return clone

    def close(self, handle: WorkingMemoryHandle, error: BaseException | None) -> None:
        """Nothing to flush: every accepted update is already committed."""


class WorkingMemoryHandle:
    """The working memory of one run (``run.layer("working-memory")``): noetic's
    ``ctx.memory['working-memory']``.

    ``saved=False`` keeps the state in memory only (a thread-scoped child's own state)."""

    def __init__(
        self, layer: WorkingMemory, ctx: RunContext, namespace: Namespace, *, saved: bool = True
    ) -> None:
        self.layer = layer
        self.ctx = ctx
        self.namespace = namespace
        self.saved = saved
        self._state: State = layer.initial_state()
        self._version = 0
        self._body: str | None = None  # the state's text in the block, made when first needed
        # The content key of the state, when it came checked from the store and its body is
        # not kept by the layer yet: the body made for the prompt is then kept under it.
        self._body_key: str | bytes | None = None
        # Legacy calls applied this run, by their canonical JSON, per path that applied them.
        # Plain dicts: a Counter's construction runs Python code, at every run's start.
        self._legacy: dict[str, dict[bytes, int]] = {"observe": {}, "call_tool": {}}
        # The run's writes one at a time: a model's parallel tool calls (a server running them
        # on threads or tasks) would otherwise each compute from the state one held and write
        # it at the version another had just written, replacing that write unseen. A TaskLock:
        # a write holds it across its store calls, which under an event loop suspend.
        self._writing = TaskLock()
        # A write's store call failed (a connection that ended mid-call) or was interrupted (a
        # cancelled task): it may have been saved all the same. The stored state is read again
        # before the next prompt and write.
        self._unsure = False

    @property
    def format(self) -> Literal["markdown", "json"] | None:
        """``"json"`` with a schema, ``"markdown"`` with a template, None for free-form text."""
        return self.layer.format

    @property
    def template(self) -> str | None:
        """The markdown the state started from, or None."""
        return self.layer.template

    @property
    def schema(self) -> Any:
        """The pydantic model class or JSON Schema dict the state is checked against, or
        None."""
        return self.layer.schema

    @property
    def snapshot(self) -> State:
        """A copy of the current state; changing it changes nothing stored."""
        return _copy(self._state)

    state = snapshot

    @property
    def version(self) -> int:
        """The state record's version in the store (0: never written)."""
        return self._version

    # Reading ----------------------------------------------------------------------------------

    def load(self, rows: Mapping[str, Item] | None = None) -> None:
        """Reads the stored state (folding rows of older memstrata into one record); ``rows``
        are the state's records as the run's opening read found them, used on the first try."""
        layer, store = self.layer, self.ctx.store
        for _ in range(MAX_WRITE_ATTEMPTS):
            stored = None
            try:
                stored = wm_stored.read(store, self.namespace, layer.initial_state(), rows)
                rows = None  # a second try reads again
                if stored.state is None:
                    self._take(layer.initial_state(), stored.version)
                    return
                key = None if stored.legacy else layer.content_key(stored.state)
                body = layer.known_body(key)
                if body is not None:
                    # Checked when this content was last seen: see WorkingMemory.known_body.
                    self._take(stored.state, stored.version, body, known=True)
                    return
                state = self._checked(stored.state)
            except (SchemaViolationError, InvalidInputError) as exc:
                if layer.read_only:
                    logger.warning(
                        "read-only working memory %s shows nothing: its stored state %s",
                        "/".join(self.namespace),
                        _reason(exc),
                    )
                    self._take(layer.empty_state(), stored.version if stored else 0)
                    return
                if self._quarantine(exc, stored.version if stored else None):
                    return
                continue
            version: int | None = stored.version
            if stored.legacy and not layer.read_only:
                version = wm_stored.fold_legacy_rows(store, self.namespace, stored, state)
            if version is not None:
                self._take(state, version)
                # Nothing stripped (the very same object back): the stored content is the
                # checked state, and its body may be kept under its key once made.
                if state is stored.state:
                    self._body_key = key
                return
        raise StorageRaceError(f"working memory {'/'.join(self.namespace)} kept changing")

    def _quarantine(self, reason: Exception, checked: int | None) -> bool:
        """Copies the stored rows aside, then starts over from the initial state if nobody
        wrote since the state record at version ``checked`` failed (None: the rows could not
        be read together); False, and nothing moved or reset, if someone did."""
        store, namespace = self.ctx.store, self.namespace
        record, version = self._stored_rows()
        if checked is not None and version != checked:
            return False  # written since it was checked: read again, never move a new state
        moved_at = time.time()
        key = f"{QUARANTINE_PREFIX}{moved_at:.6f}"
        record.setdefault("state", None)
        violations = getattr(reason, "violations", None) or [str(reason)]
        record.update(version=version, moved_at=moved_at, violations=violations)
        # Copy first, then start over: a crash between the two leaves a duplicate, not a loss.
        store.put(namespace, key, record)
        logger.warning(
            "working memory %s was moved aside to %r: its stored state %s",
            "/".join(namespace),
            key,
            _reason(reason),
        )
        initial = self.layer.initial_state()
        written = store.put_if_version(
            namespace, wm_stored.STATE_KEY, initial, expected_version=version
        )
        if written is None:
            return False
        wm_stored.delete_legacy_rows(store, namespace)
        self._take(initial, written.version)
        return True

    def _stored_rows(self) -> tuple[dict[str, Any], int]:
        """The state's rows by name, read together, and the state record's version. A row that
        is not JSON (another program wrote it) cannot be read as a value: the rows are then
        kept as their text, under ``unreadable``."""
        store, namespace = self.ctx.store, self.namespace
        try:
            rows = store.get_many(namespace, wm_stored.ALL_KEYS)
        except InvalidJSONError:
            texts: dict[str, str] = {}

            def keep(batch: list[EncodedItem]) -> None:
                for name, text, _expires in batch:
                    if name in wm_stored.ALL_KEYS:
                        texts[name] = (
                            text if isinstance(text, str) else text.decode("utf-8", "replace")
                        )

            store.encoded_each(namespace, keep)
            stamp = store.stamp(namespace, wm_stored.STATE_KEY)
            return {"unreadable": texts}, stamp[0] if stamp is not None else 0
        snapshot = rows.get(wm_stored.STATE_KEY)
        version = snapshot.version if snapshot is not None else 0
        return {name: row.value for name, row in rows.items()}, version

    def quarantined(self) -> list[dict[str, Any]]:
        """States moved aside because they failed the schema at load, oldest first."""
        items = self.ctx.store.list(self.namespace, limit=10_000)
        return [
            {"key": i.key, **i.value}
            for i in items
            if i.namespace == self.namespace and i.key.startswith(QUARANTINE_PREFIX)
        ]

    def render(self) -> str:
        """The block the model sees (without the guidelines); empty when there is no state."""
        body = self._rendered()
        return self._block(body) if body else ""

    def prompt_items(self, budget: int) -> list[Message]:
        """The block and the guidelines, cut to ``budget`` tokens if the block is over it
        (nothing, if even the notice saying so is). An empty memory shows its (empty) block
        with the guidelines, unless it is read-only."""
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise InvalidInputError(f"budget must be an int, got {budget!r}")
        if self._unsure:
            with self._writing:
                self._read_again_if_unsure()
        layer = self.layer
        body = self._rendered()
        if not body and layer.read_only:
            return []
        block = self._block(body)
        guidelines = f"\n{layer.tool_names['guidelines']}"
        limit = self._block_limit(budget)
        if limit <= 0:
            return []
        tokens = self._tokens_over(block, limit)
        if tokens is not None:
            block = self._cut(body, tokens, limit)
            if not block:
                return []
        return [{"content": f"{block}{guidelines}"}]

    def _block_limit(self, share: int) -> int:
        """The tokens the block may take: the layer's ``budget.max``, and within the run's
        share of the prompt what the guidelines shown after it leave. Writes and the prompt
        use the same limit, so a state a write accepted is shown whole."""
        # The block ends with its closing tag, so the two texts count apart at most what they
        # count together (a '>' may only merge with the newline that follows it).
        overhead = self.layer.prompt_overhead(self.ctx.tokens)
        return min(self.layer.budget.max, share - overhead)

    def _cut(self, body: str, tokens: int, limit: int) -> str:
        """The block with the end of its body cut so that it fits ``limit`` tokens, and a
        notice saying so; empty when even the notice alone does not fit. Only a block written
        under a larger budget gets here."""
        logger.warning(
            "working memory %s is %d tokens, over its prompt budget of %d: shown cut",
            "/".join(self.namespace),
            tokens,
            limit,
        )
        notice = WORKING_MEMORY_TRUNCATED.format(
            tokens=tokens, budget=limit, rewrite=self.layer.tool_names["rewrite_wire"]
        )
        keep = len(body) * limit // tokens
        while True:
            # Escaped again once cut: the line break before the notice could end a tag name
            # the cut left behind ("</working_memoryx" cut after "memory").
            kept = in_tagged_block(body[:keep], self.layer.label, json_text=self.layer.structured)
            block = self._block(f"{kept}\n{notice}" if keep else notice)
            if exact_count(self.ctx.tokens, block) <= limit:
                return block
            if keep == 0:
                return ""
            keep = keep * 9 // 10

    def _rendered(self) -> str:
        if self._body is None:
            self._body = self._body_of(self._state)
            if self._body_key is not None:
                self.layer._keep_body(self._body_key, self._body)
                self._body_key = None
        return self._body

    def _tokens_over(self, block: str, limit: int) -> int | None:
        """Exact tokens of ``block`` if over ``limit``; a structured one is counted by line."""
        split = json_lines if self.layer.structured else None
        return exact_count_over(self.ctx.tokens, block, limit, split)

    def _body_of(self, state: State) -> str:
        """The state as the model reads it (text as it is, structured state as indented JSON),
        with any tag of the block's label in it escaped: stored text cannot end the block."""
        return in_tagged_block(_body_of(state), self.layer.label, json_text=self.layer.structured)

    def _block(self, body: str) -> str:
        label = self.layer.label
        return f"<{label}>\n{body}\n</{label}>" if body else f"<{label}>\n</{label}>"

    # Writing ----------------------------------------------------------------------------------

    def update(self, patch: Any, mode: Mode = "append") -> State:
        """Merges (append) or writes (replace) ``patch`` and commits it; returns a copy of the
        new state.

        Raises:
            ReadOnlyError: The layer is read-only.
            SchemaViolationError: The merged state fails the schema (nothing is written).
            BudgetExceededError: The block would exceed the layer's budget (nothing written).
            LimitExceededError: The state would exceed ``max_state_bytes`` (nothing written).
            InvalidInputError: The patch has the wrong shape for this state, or bad data.
            WriteConflictError: A replace, and another writer changed the state since this run
                read it (nothing written; the run now holds the stored state).
        """
        self.apply(patch, mode)
        return self.snapshot

    def apply(self, patch: Any, mode: Mode = "append") -> None:
        """:meth:`update` without the copy of the new state it returns: a tool call answers
        with the version only, so the copy would be thrown away. Raises as :meth:`update`."""
        if mode not in ("append", "replace"):
            raise InvalidInputError(f"mode must be 'append' or 'replace', got {mode!r}")
        patch = self._coerce(patch)
        self._write(lambda state: self._combine(state, patch, mode), whole=mode == "replace")

    def clear(self) -> None:
        """Empties the state (a template does not come back; the model cleared it on purpose).

        Raises:
            WriteConflictError: Another writer changed the state since this run read it.
        """
        self._write(lambda _state: self.layer.empty_state(), whole=True)

    def apply_legacy(self, arguments: Any, *, source: Literal["observe", "call_tool"]) -> int:
        """Applies one legacy ``updateWorkingMemory`` call (its arguments as JSON text or a
        dict), unless the same call already came through the other path in this run (a
        server may both run the call and pass the response to ``observe``); returns the
        version after it."""
        if source not in self._legacy:
            raise InvalidInputError(f"source must be 'observe' or 'call_tool', got {source!r}")
        arguments = _json_object(arguments, f"{LEGACY_TOOL}'s arguments")
        try:
            key = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            codec.dumps(arguments)  # names what no store could hold: a lone surrogate, NaN
            raise
        with self._writing:
            other = self._legacy["call_tool" if source == "observe" else "observe"]
            if other.get(key):
                other[key] -= 1
                return self._version
            if self.layer.structured:
                self.apply(arguments)
            else:
                self.apply(arguments.get("content"), arguments.get("mode", "append"))
            applied = self._legacy[source]
            applied[key] = applied.get(key, 0) + 1
            return self._version

    def _write(self, change: Any, *, whole: bool = False) -> None:
        """Writes ``change(state)``: without reading, if the store still holds the state this
        run holds; else, after another writer got there first, merged into what they wrote
        inside one store transaction (which waits for no one and so cannot be starved).

        A ``whole`` change (a replace, a clear) ignores the state it is given, so merging it
        would drop the other writer's change unseen: it is refused instead, and the run takes
        the stored state for its writer to read and write again."""
        if self.layer.read_only:
            raise ReadOnlyError("working memory is read-only")
        with self._writing:
            self._read_again_if_unsure()
            try:
                self._write_held(change, whole)
            except (InvalidInputError, WriteConflictError):
                raise  # refused: nothing was sent, or the stored state was read again
            except BaseException:
                # A cancelled task or Ctrl-C too: raised once the store call ended, which may
                # have stored the write this run does not hold yet.
                self._unsure = True
                raise

    def _read_again_if_unsure(self) -> None:
        """Reads the stored state again after a write that may have been saved (see
        ``_unsure``), so that the model sees whether it was; while the store still fails, the
        run keeps the state it holds."""
        if not self._unsure:
            return
        try:
            self.load()
        except Exception as exc:
            logger.debug("working memory %s not read again: %r", "/".join(self.namespace), exc)
            return
        self._unsure = False

    def _write_held(self, change: Any, whole: bool) -> None:
        """:meth:`_write`, holding the run's write lock."""
        try:
            new, body = self._changed(self._state, change)
        except (SchemaViolationError, BudgetExceededError, LimitExceededError):
            # Checked against the state this run holds. An append merges into the stored
            # state, which another writer may have changed since: it is refused only against
            # that (below), never for a size or a violation the state would not have.
            if whole or not self.saved or self._holds_the_stored_state():
                raise
        else:
            if not self.saved:
                self._take(new, self._version, body)
                return
            item = self.ctx.store.put_if_version(
                self.namespace,
                wm_stored.STATE_KEY,
                new,
                expected_version=self._version,
                validated=True,
                encoded=body.encode() if self.layer.structured and body else None,
            )
            if item is not None:
                self._take(new, item.version, body)
                return
        if whole:
            self.load()
            raise WriteConflictError(
                f"working memory {'/'.join(self.namespace)} was changed by another writer since"
                f" this run read it (now version {self._version}): nothing was written",
                version=self._version,
            )
        written: list[tuple[State, str]] = []

        def merge(current: Any) -> State:
            try:
                base = self.layer.initial_state() if current is None else self._checked(current)
            except (SchemaViolationError, InvalidInputError) as exc:
                raise _StoredStateUnreadable from exc
            written.append(self._changed(base, change))
            return written[-1][0]

        for _ in range(MAX_WRITE_ATTEMPTS):
            try:
                item = self.ctx.store.update(self.namespace, wm_stored.STATE_KEY, merge)
            except _StoredStateUnreadable:
                self.load()  # moves the unreadable state aside; then merge into what is there
                continue
            new, body = written[-1]
            self._take(new, item.version, body)
            return
        raise StorageRaceError(f"working memory {'/'.join(self.namespace)} kept changing")

    def _holds_the_stored_state(self) -> bool:
        """Whether the stored state is still the one this run holds (read by its version)."""
        stamp = self.ctx.store.stamp(self.namespace, wm_stored.STATE_KEY)
        return (stamp[0] if stamp is not None else 0) == self._version

    def _changed(self, state: State, change: Any) -> tuple[State, str]:
        """``change(state)`` and the body of its block, if it is within every limit."""
        new = change(state)
        body = self._admitted(new)
        self._checked(new, strip=False)
        return new, body

    def _take(
        self, state: State, version: int, body: str | None = None, *, known: bool = False
    ) -> None:
        """Holds ``state`` at ``version``. ``body`` is its block's body when a write made it,
        after checking the state (a write's state is clean: a merge strips what it adds): the
        layer keeps it for the next run that reads this content, unless it is ``known``
        there already."""
        self._state, self._version, self._body = state, version, body
        self._body_key = None
        if body is not None and not known:
            self.layer._keep_body(self.layer.content_key(state), body)

    def _coerce(self, patch: Any) -> State:
        if self.layer.structured:
            return _json_object(patch, "the update (this working memory holds a JSON object)")
        if not isinstance(patch, str):
            raise InvalidInputError(
                "this working memory holds text; the update must be a string, "
                f"got {type(patch).__name__}"
            )
        return patch

    def _combine(self, base: State, patch: State, mode: Mode) -> State:
        if isinstance(patch, dict):
            if mode == "replace":
                return _copy(strip_unsafe_keys(patch))
            merged: State = deep_merge(
                base, patch, arrays=self.layer.arrays, nulls=self.layer.nulls
            )
            return merged
        if mode == "replace" or not isinstance(base, str) or not base.strip():
            return patch
        return f"{base.rstrip()}\n\n{patch}"

    def _checked(self, state: Any, *, strip: bool = True) -> State:
        """``state`` if it is of the layer's kind and passes its schema; ``strip`` removes
        unsafe keys from a state that came from outside (a merge result is clean already)."""
        kind = dict if self.layer.structured else str
        if not isinstance(state, kind):
            raise InvalidInputError(
                f"stored working memory is {type(state).__name__}, but the layer holds {kind}"
            )
        if self.layer.structured:
            if strip:
                state = strip_unsafe_keys(state)
            violations = self.layer._violations(state)
            if violations:
                missing = [f for f in self.layer.required if f not in state]
                send = f"; send {', '.join(missing)} with the update" if missing else ""
                raise SchemaViolationError(
                    "working memory would not match its schema: "
                    + "; ".join(violations[:5])
                    + send,
                    violations=violations,
                )
        checked: State = state
        return checked

    def _admitted(self, state: State) -> str:
        """The body of ``state``'s block, if the block is within the byte limit and the token
        budget; raises naming the limit otherwise."""
        layer = self.layer
        try:
            text = _body_of(state)
            # Before the escaping, which reads a text full of tag look-alikes slowly: a state
            # surely over the limit is refused unread.
            floor = tagged_block_floor(text)
            if floor > layer.max_state_bytes:
                raise self._over_bytes(floor, " or more")
            body = in_tagged_block(text, layer.label, json_text=layer.structured)
            size = len(body.encode("utf-8"))
        except (orjson.JSONEncodeError, UnicodeEncodeError):
            codec.dumps(state)  # names what no store could hold: deep nesting, a surrogate
            raise
        if size > layer.max_state_bytes:
            raise self._over_bytes(size)
        share = self.ctx.budgets.get(layer.name)
        limit = layer.budget.max if share is None else self._block_limit(share)
        tokens = self._tokens_over(self._block(body), limit)
        if tokens is not None and share is not None:
            empty = exact_count(self.ctx.tokens, self._block(""))
            if limit < empty:
                # No text fits: shortening it cannot help, only a larger share can.
                raise BudgetExceededError(
                    f"working memory has no room: this layer's share of {share} tokens of the "
                    "stack's total_budget leaves the block "
                    f"{max(limit, 0)} after the guidelines shown with it, fewer than the "
                    f"{empty} of an empty block; raise total_budget or this layer's budget.min",
                    tokens=tokens,
                    limit=max(limit, 0),
                )
        if tokens is not None:
            raise BudgetExceededError(
                f"working memory would be {tokens} tokens, over this layer's limit of "
                f"{limit}; {layer.tool_names['compact']}",
                tokens=tokens,
                limit=limit,
            )
        return body

    def _over_bytes(self, size: int, more: str = "") -> LimitExceededError:
        layer = self.layer
        return LimitExceededError(
            f"working memory would be {size:,} bytes{more}, over this layer's limit of "
            f"{layer.max_state_bytes:,} (max_state_bytes); {layer.tool_names['compact']}",
            setting="max_state_bytes",
            size=size,
            limit=layer.max_state_bytes,
        )


class _StoredStateUnreadable(Exception):
    """The stored state another writer left fails the kind or schema check."""


def _json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` (a mapping, or its JSON text) as a dict; raises naming ``what`` otherwise."""
    if isinstance(value, (str, bytes)):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None
        # orjson reads an integer past 64 bits as a rounded float: refused, as in a call's own
        # arguments, rather than stored as a number the model never sent.
        refuse_long_integers(value)
        value = parsed
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be an object, got {type(value).__name__}")
    return dict(value)


def _body_of(state: State) -> str:
    """The state as the model reads it: text as it is, structured state as indented JSON."""
    if isinstance(state, str):
        return state
    return orjson.dumps(state, option=orjson.OPT_INDENT_2).decode() if state else ""


def _copy(state: State) -> State:
    if isinstance(state, str):
        return state
    try:
        copied: State = orjson.loads(orjson.dumps(state))
    except orjson.JSONEncodeError:
        codec.dumps(state)  # names what cannot be copied as JSON: nesting past the limit
        raise
    return copied


def _reason(exc: Exception) -> str:
    """Why a stored state was set aside, for a log line: the violations echo stored values."""
    violations = getattr(exc, "violations", None)
    return redacted_for_log(
        "fails its schema: " + "; ".join(violations[:5]) if violations else f"is unreadable: {exc}"
    )


__all__ = ["WorkingMemory", "WorkingMemoryHandle"]
