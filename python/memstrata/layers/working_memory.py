"""WorkingMemory: the scratchpad the model reads every turn and updates with a tool.

Implements seed 000 (noetic: ``working-memory/update``, legacy ``updateWorkingMemory`` calls,
deep merge with prototype-key stripping, thread/resource scope, schema checked on the merged
state) and seed 002 (VoltAgent: markdown templates, append/replace modes, conversation/user
scope, ``get_working_memory``/``update_working_memory``/``clear_working_memory``).

Decisions where the seeds are silent or disagree:

* State kinds: free-form text (no schema, no template), markdown (``template``), structured
  (``schema``: a pydantic model or a JSON Schema dict; ``{"type": "object"}`` for structured
  state with no constraints).
* Append is the default everywhere, as both documents say (VoltAgent's code defaults its
  programmatic path to replace; we don't). Structured append deep-merges with
  ``arrays="replace"`` (seed 000) unless ``arrays="union"`` (seed 002); text append adds the new
  text after a blank line.
* Persisted state that fails the schema at load is moved aside under ``quarantine/<time>`` in
  the same namespace (retrievable with ``handle.quarantined()``), never silently dropped, and
  the layer starts empty with a logged warning.
* A write that would push the rendered block past ``budget.max`` tokens is refused, stating the
  size and the limit, so the model compacts instead of bloating every prompt. So is a state
  whose block would pass ``max_state_bytes`` (1 MiB of UTF-8 by default): the byte limit still
  holds when a caller sets a huge token budget.
* A state of 48 KB or more is stored as a snapshot and a journal of the patches since
  (:mod:`memstrata.layers.wm_journal`), so an update writes its patch, not the state.
* The layer keeps the last checked state of each scope it served (the most recent
  ``STATES_KEPT``): a run whose stored state still has the same stamp (``Store.stamp``) starts
  from it without reading, decoding or validating the state again, and one whose journal only
  grew since merges in just the new patches. Don't mutate the state a handle returns;
  ``handle.snapshot`` is a copy to change.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from memstrata._core import strip_unsafe_keys
from memstrata.exceptions import (
    BudgetExceededError,
    InvalidInputError,
    LimitExceededError,
    ReadOnlyError,
    SchemaViolationError,
    StorageRaceError,
    ToolError,
)
from memstrata.indented_json import render as render_json
from memstrata.indented_json import respliced
from memstrata.layers.wm_journal import (
    ARCHIVE_KEY,
    JOURNAL_KEY,
    JOURNAL_MIN_STATE_BYTES,
    MAX_JOURNAL_PATCHES,
    STATE_KEY,
    Options,
    Position,
    apply_patch,
    archive_fits,
    archive_value,
    head_stamp,
    journal_fits,
    journal_since,
    journal_value,
    position_of,
    replay,
)
from memstrata.layers.wm_journal import read as read_stored
from memstrata.prompts import (
    WORKING_MEMORY_CLEAR_DESCRIPTION,
    WORKING_MEMORY_GET_DESCRIPTION,
    WORKING_MEMORY_GUIDELINES_NOETIC,
    WORKING_MEMORY_GUIDELINES_READ_ONLY,
    WORKING_MEMORY_GUIDELINES_VOLTAGENT,
    WORKING_MEMORY_SET_DESCRIPTION,
    WORKING_MEMORY_UPDATE_DESCRIPTION,
    WORKING_MEMORY_UPDATE_WHAT_STRUCTURED,
    WORKING_MEMORY_UPDATE_WHAT_TEXT,
)
from memstrata.schema_check import state_checker
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import ConditionalWrite, Item, Namespace, codec
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.working_memory")

Scope = Literal["thread", "resource", "conversation", "user"]
Mode = Literal["append", "replace"]
State = str | dict[str, Any]

_SCOPE_ALIASES = {
    "thread": "thread",
    "conversation": "thread",
    "resource": "resource",
    "user": "resource",
}
QUARANTINE_PREFIX = "quarantine/"
LEGACY_TOOL = "updateWorkingMemory"
STATES_KEPT = 256
# An update that keeps losing the race to other writers gives up after this many attempts
# (each attempt reads only what they wrote, so this is never reached by plain contention).
MAX_WRITE_ATTEMPTS = 1000
DEFAULT_MAX_STATE_BYTES = 1 << 20
# How far the count of one spliced piece may be from its share of the block's count (measured:
# within 1 for the native estimator on JSON members; doubled), and how much such error a
# block's count may carry before it is counted in full again: 64 tokens, or 1% of the count
# for a large block (a 60k-token block is then counted in full every ~150 one-field updates
# rather than every ~16, and the budget check counts exactly whenever the error could matter).
SPLICE_ERROR_TOKENS = 2
MAX_COUNT_ERROR_TOKENS = 64
MAX_COUNT_ERROR_SHARE = 0.01


@dataclass(slots=True)  # not frozen, as Position: one is made on every update
class _Kept:
    """A checked state the layer keeps between runs, with its prompt item, the item's token
    count, and where it stands in the store."""

    store: Any
    state: State
    item: str | None
    tokens: tuple[str, int, int] | None
    position: Position


class WorkingMemory:
    """The working-memory layer.

    Args:
        scope: ``"thread"`` (one state per conversation) or ``"resource"`` (one per user,
            shared by their conversations); ``"conversation"``/``"user"`` are VoltAgent's names.
        schema: A pydantic model class or a JSON Schema dict: structured state, checked on the
            merged result of every update.
        template: Markdown the state starts from (markdown state).
        read_only: Blocks every write path; tools are not offered.
        arrays: ``"replace"`` (seed 000) or ``"union"`` (seed 002) for structured appends.
        nulls: ``"keep"``, ``"delete"`` or ``"ignore"`` null values in a patch.
        tools: ``"noetic"`` offers ``working-memory/update``; ``"voltagent"`` offers
            ``get_working_memory``, ``update_working_memory`` and ``clear_working_memory``.
        budget: ``(min, max)`` tokens of prompt; writes past ``max`` are refused.
        max_state_bytes: Largest state, in UTF-8 bytes of the block the model reads (the JSON
            or the text); writes past it are refused with
            :class:`~memstrata.exceptions.LimitExceededError`.
        slot: Order among the layers' prompt items.
        name: The layer's name, also the first label of its store namespace.
    """

    def __init__(
        self,
        *,
        scope: Scope = "thread",
        schema: Any = None,
        template: str | None = None,
        read_only: bool = False,
        arrays: Literal["replace", "union"] = "replace",
        nulls: Literal["keep", "delete", "ignore"] = "keep",
        tools: Literal["noetic", "voltagent"] = "noetic",
        budget: tuple[int, int] | Budget = (200, 1500),
        max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
        slot: int = 100,
        name: str = "working-memory",
    ) -> None:
        if scope not in _SCOPE_ALIASES:
            raise InvalidInputError(f"scope must be one of {sorted(_SCOPE_ALIASES)}, got {scope!r}")
        if tools not in ("noetic", "voltagent"):
            raise InvalidInputError(f"tools must be 'noetic' or 'voltagent', got {tools!r}")
        if arrays not in ("replace", "union"):
            raise InvalidInputError(f"arrays must be 'replace' or 'union', got {arrays!r}")
        if nulls not in ("keep", "delete", "ignore"):
            raise InvalidInputError(f"nulls must be 'keep', 'delete' or 'ignore', got {nulls!r}")
        if template is not None and not isinstance(template, str):
            raise InvalidInputError(f"template must be str, got {type(template).__name__}")
        if schema is not None and template is not None:
            raise InvalidInputError(
                "give a schema (structured state) or a template (markdown), not both"
            )
        if (
            isinstance(max_state_bytes, bool)
            or not isinstance(max_state_bytes, int)
            or max_state_bytes < 1
        ):
            raise InvalidInputError(
                f"max_state_bytes must be a positive int, got {max_state_bytes!r}"
            )
        self.name = name
        self.slot = slot
        self.budget = budget if isinstance(budget, Budget) else Budget(*budget)
        self.scope: Literal["thread", "resource"] = _SCOPE_ALIASES[scope]  # type: ignore[assignment]
        self.schema = schema
        self.template = template
        self.read_only = read_only
        self.arrays = arrays
        self.nulls = nulls
        self.tool_flavor = tools
        self.max_state_bytes = max_state_bytes
        # The whole-state check, and for a JSON Schema the compiled schema that can check
        # only what a merge changed.
        self._validator, self._state_schema = state_checker(schema)
        # What follows the block in the prompt item: the update guidelines for this flavour.
        # The item (block and tail) is kept as one text and spliced in place, so a turn makes
        # one large string rather than a block and then a copy of it with the tail.
        guidelines = (
            WORKING_MEMORY_GUIDELINES_VOLTAGENT
            if tools == "voltagent"
            else WORKING_MEMORY_GUIDELINES_NOETIC
        )
        self._tail = "\n" + (WORKING_MEMORY_GUIDELINES_READ_ONLY if read_only else guidelines)
        self._tail_count: tuple[Any, int] | None = None
        # namespace -> the checked state last seen there, most recently used last.
        self._states: OrderedDict[Namespace, _Kept] = OrderedDict()
        self._states_lock = threading.Lock()

    def _tail_tokens(self, tokens: Any) -> int:
        """Tokens of the tail (the guidelines), counted once per token counter."""
        counted = self._tail_count
        if counted is None or counted[0] is not tokens:
            counted = self._tail_count = (tokens, tokens.count(self._tail))
        result: int = counted[1]
        return result

    def _remember(self, handle: WorkingMemoryHandle) -> None:
        kept = handle._kept()
        with self._states_lock:
            self._states[handle.namespace] = kept
            self._states.move_to_end(handle.namespace)
            if len(self._states) > STATES_KEPT:
                self._states.popitem(last=False)

    def _remembered(self, store: Any, namespace: Namespace) -> _Kept | None:
        """The checked state last seen in ``namespace`` of ``store`` (current or not), or None."""
        with self._states_lock:
            kept = self._states.get(namespace)
        return kept if kept is not None and kept.store is store else None

    @property
    def format(self) -> Literal["markdown", "json"] | None:
        """``"json"`` with a schema, ``"markdown"`` with a template, None for free-form text."""
        if self.schema is not None:
            return "json"
        return "markdown" if self.template is not None else None

    @property
    def structured(self) -> bool:
        return self.schema is not None

    def empty_state(self) -> State:
        return {} if self.structured else ""

    # Layer protocol ---------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> WorkingMemoryHandle:
        scope_id = ctx.thread_id if self.scope == "thread" else ctx.resource_id
        if not scope_id:
            needed = "thread_id" if self.scope == "thread" else "resource_id"
            raise InvalidInputError(
                f"working memory with scope {self.scope!r} needs stack.run({needed}=...)"
            )
        handle = WorkingMemoryHandle(self, ctx, (self.name, self.scope, scope_id))
        handle.load()
        return handle

    def recall(self, handle: WorkingMemoryHandle, budget: int) -> list[Message]:
        item = handle._render_of(handle.state)
        if not item:
            return []
        if handle._noted is not item:
            # The item's count is kept up to date as updates splice it: hand it on with the
            # item, so a counter that takes notes (EstimatingCounter) need not read it again.
            counted = handle._item_tokens
            note = getattr(handle.ctx.tokens, "note", None)
            if note is not None and counted is not None and counted[0] is item:
                note(item, counted[1])
            handle._noted = item
        return [{"content": item}]

    def observe(self, handle: WorkingMemoryHandle, message: Message) -> None:
        """Applies every legacy ``updateWorkingMemory`` call in a response, in order. A call that
        cannot be applied is dropped (prior state untouched); the others still apply, and the
        failures are reported together afterwards."""
        if self.read_only:
            return
        failures = []
        for index, arguments in enumerate(_legacy_calls(message)):
            try:
                patch = (
                    orjson.loads(arguments) if isinstance(arguments, (str, bytes)) else arguments
                )
                handle.update(patch)
            except (orjson.JSONDecodeError, InvalidInputError, ToolError, TypeError) as exc:
                failures.append(f"call {index + 1}: {exc}")
        if failures:
            raise ToolError(
                f"{len(failures)} {LEGACY_TOOL} call(s) dropped: " + "; ".join(failures),
                code="invalid_arguments",
                details=failures,
            )

    def tools(self, handle: WorkingMemoryHandle) -> list[Tool]:
        if self.read_only:
            return []
        if self.tool_flavor == "voltagent":
            return _voltagent_tools(self, handle)
        return [_noetic_update_tool(self, handle)]

    def on_spawn(self, handle: WorkingMemoryHandle, child: RunContext) -> WorkingMemoryHandle:
        """Resource scope: the child starts from a deep clone of the parent's state. Thread
        scope: children do not inherit working memory."""
        if self.scope == "thread":
            return self.init(child)
        scope_id = child.resource_id or handle.namespace[2]
        clone = WorkingMemoryHandle(self, child, (self.name, self.scope, scope_id))
        clone.state = copy.deepcopy(handle.state)
        clone._position = handle._position
        return clone

    def close(self, handle: WorkingMemoryHandle, error: BaseException | None) -> None:
        """Nothing to flush: every accepted update is already committed."""


class WorkingMemoryHandle:
    """The working memory of one run (``run.layer("working-memory")``): the seed's
    ``ctx.memory['working-memory']``."""

    def __init__(self, layer: WorkingMemory, ctx: RunContext, namespace: Namespace) -> None:
        self.layer = layer
        self.ctx = ctx
        self.namespace = namespace
        self.state: State = layer.empty_state()
        # Where the state stands in the store: versions, the journal's patches.
        self._position = Position()
        # prepare() runs every turn; the prompt item only changes when the state object does.
        # It is the block and the layer's tail (guidelines) in one text: (state, item).
        self._rendered: tuple[State, str] | None = None
        # (old block, new block, pieces replaced) of the last block built by splicing, and
        # (block, its token count, how far that count may be off): an update's budget check
        # counts only the pieces that changed, and recounts in full now and then.
        self._spliced: tuple[str, str, list[tuple[str, str]]] | None = None
        self._item_tokens: tuple[str, int, int] | None = None
        # The item whose count was last handed to the token counter.
        self._noted: str | None = None

    # Introspection (VoltAgent's getWorkingMemoryFormat/Template/Schema) ------------------------

    @property
    def format(self) -> Literal["markdown", "json"] | None:
        return self.layer.format

    @property
    def template(self) -> str | None:
        return self.layer.template

    @property
    def schema(self) -> Any:
        return self.layer.schema

    @property
    def snapshot(self) -> State:
        """A copy of the current state; changing it changes nothing stored."""
        return copy.deepcopy(self.state)

    # Reading ----------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The working memory's version: how many writes it has taken (0: never written)."""
        return self._position.version

    def load(self) -> None:
        store = self.ctx.store
        kept = self.layer._remembered(store, self.namespace)
        stamp = head_stamp(store, self.namespace, kept.position.stamp if kept else None)
        if stamp is None:
            self._start_empty()
            return
        if kept is not None and kept.position.stamp == stamp:
            self._adopt(kept)
            return
        self._read(kept)

    def _start_empty(self) -> None:
        self.state = self._initial()
        self._position = Position()
        self._rendered = self._item_tokens = None

    def _kept(self) -> _Kept:
        """What the layer keeps of this handle's state for the next run."""
        rendered = self._rendered
        item = rendered[1] if rendered is not None and rendered[0] is self.state else None
        counted = self._item_tokens
        tokens = (
            counted if item is not None and counted is not None and counted[0] is item else None
        )
        return _Kept(self.ctx.store, self.state, item, tokens, self._position)

    def _adopt(self, kept: _Kept) -> None:
        self.state, self._position = kept.state, kept.position
        if kept.item is not None:
            self._rendered = (kept.state, kept.item)
            self._item_tokens = kept.tokens

    def _read(self, kept: _Kept | None) -> None:
        """Reads the stored state: from the state ``kept`` holds when the journal only grew
        since (only the journal is read, and its new patches merged in), else from the
        snapshot and every patch."""
        store = self.ctx.store
        try:
            if kept is not None:
                since = journal_since(store, self.namespace, kept.position)
                if since is not None:
                    position = position_of(None, *since, held=kept.position)
                    if self._catch_up(kept, position):
                        self._position = position
                        self.layer._remember(self)
                        return
            snapshot, journal, archive = read_stored(store, self.namespace)
            if snapshot is None and journal is None:
                self._start_empty()
                return
            position = position_of(snapshot, journal, archive)
            state = snapshot.value if snapshot is not None else self._initial()
            if position.options is not None:
                state = replay(state, position.all_patches(), position.options)
            self.state = self._checked(state)
            self._position = position
        except (SchemaViolationError, InvalidInputError, TypeError) as exc:
            self._quarantine(exc)
            return
        self.layer._remember(self)

    def _catch_up(self, kept: _Kept, position: Position) -> bool:
        """Merges into ``kept``'s state the patches written since, when that is all that
        changed; False when the snapshot moved on (or anything else did)."""
        held = kept.position
        held_patches, patches = held.all_patches(), position.all_patches()
        done = len(held_patches)
        if (
            held.snapshot_version != position.snapshot_version
            or (done and held.options != position.options)
            or patches[:done] != held_patches
        ):
            return False
        self._adopt(kept)
        state = kept.state
        for patch in patches[done:]:
            merged = self._combine(state, patch, "append", position.options)
            merged_from = (state, patch)
            state = self._checked(merged, strip=False, merged_from=merged_from)
            # Keeps the block (and its count) up to date by splicing, as an update does.
            self._count_item(self._render_of(state, merged_from))
        self.state = state
        return True

    def _quarantine(self, reason: Exception) -> None:
        moved_at = time.time()
        key = f"{QUARANTINE_PREFIX}{moved_at:.6f}"
        violations = getattr(reason, "violations", None) or [str(reason)]
        # Copy first, then start over: a crash between the two leaves a duplicate, never a loss.
        snapshot = self.ctx.store.get(self.namespace, STATE_KEY)
        journal = self.ctx.store.get(self.namespace, JOURNAL_KEY)
        archive = self.ctx.store.get(self.namespace, ARCHIVE_KEY)
        rows = (snapshot, journal, archive)
        previous = max((i.version for i in rows if i is not None), default=0)
        self.ctx.store.put(
            self.namespace,
            key,
            {
                "state": snapshot.value if snapshot is not None else None,
                "journal": journal.value if journal is not None else None,
                "archive": archive.value if archive is not None else None,
                "version": previous,
                "moved_at": moved_at,
                "violations": violations,
            },
        )
        logger.warning(
            "working memory %s failed its schema at load and was moved aside to %r: %s",
            "/".join(self.namespace),
            key,
            "; ".join(violations),
        )
        # The rows are reset in one write, and only if nobody wrote since they were read: a
        # write that raced this one stands, and is what the next run loads.
        self._start_empty()
        self._position = Position(
            previous,
            snapshot.version if snapshot is not None else 0,
            journal.version if journal is not None else 0,
            archive_version=archive.version if archive is not None else 0,
        )
        self._commit(self.layer.empty_state(), None)

    def quarantined(self) -> list[dict[str, Any]]:
        """States moved aside because they failed the schema at load, oldest first."""
        items = self.ctx.store.list(self.namespace, limit=10_000)
        return [{"key": i.key, **i.value} for i in items if i.key.startswith(QUARANTINE_PREFIX)]

    def render(self) -> str:
        """The ``<working_memory>`` block the model sees; empty when there is nothing to show."""
        item = self._render_of(self.state)
        return item[: len(item) - len(self.layer._tail)] if item else ""

    def _render_of(self, state: State, merged_from: tuple[State, State] | None = None) -> str:
        """The prompt item (block and tail) of ``state``; "" for an empty state."""
        # The budget check of an update renders the new state; the next prompt reuses that.
        rendered = self._rendered
        if rendered is not None and rendered[0] is state:
            return rendered[1]
        item = None
        if merged_from is not None and rendered is not None and rendered[0] is merged_from[0]:
            # A merge into the state last rendered: rebuild only the members it changed.
            base, patch = merged_from
            old_item = rendered[1]
            end = _CLOSE + self.layer._tail
            if old_item.startswith(_OPEN) and old_item.endswith(end):
                pieces: list[tuple[str, str]] = []
                # Spliced in place: the text around the JSON stays, no 200 KB copies of it.
                body = (len(_OPEN), len(old_item) - len(end))
                item = respliced(old_item, base, state, patch, pieces, within=body)
                if item is not None:
                    self._spliced = (old_item, item, pieces)
        if item is None:
            item = f"{_OPEN}{state if isinstance(state, str) else render_json(state)}{_CLOSE}"
            item = f"{item}{self.layer._tail}" if state else ""
        self._rendered = (state, item)
        return item

    def _rendered_json(self, state: State) -> bytes | None:
        """``state``'s JSON text (indented) from the item last rendered for it, or None."""
        rendered = self._rendered
        if not self.layer.structured or rendered is None or rendered[0] is not state:
            return None
        item = rendered[1]
        end = _CLOSE + self.layer._tail
        if not (item.startswith(_OPEN) and item.endswith(end)):
            return None  # "" for an empty state
        return item[len(_OPEN) : len(item) - len(end)].encode("utf-8")

    def _count_item(self, item: str) -> tuple[int, int]:
        """Tokens of the prompt item and how far that count may be off. After a splice, the
        last count plus the changed pieces' counts: each piece counted apart may differ from
        its count in place by a token or two at its edges, so the possible error is tracked
        and the item is counted in full once it has built up."""
        known, spliced = self._item_tokens, self._spliced
        if known is not None and known[0] is item:
            return known[1], known[2]
        if (
            known is not None
            and spliced is not None
            and spliced[0] is known[0]
            and spliced[1] is item
        ):
            count = self.ctx.tokens.count
            tokens = known[1] + sum(count(new) - count(old) for old, new in spliced[2])
            error = known[2] + SPLICE_ERROR_TOKENS * len(spliced[2])
            if error <= max(MAX_COUNT_ERROR_TOKENS, MAX_COUNT_ERROR_SHARE * tokens):
                self._item_tokens = (item, tokens, error)
                return tokens, error
        tokens = self.ctx.tokens.count(item)
        self._item_tokens = (item, tokens, 0)
        return tokens, 0

    def _count_block(self, item: str) -> int:
        """Tokens of the block in ``item`` for the budget check: the item's count less its
        tail's, unless that could pass the budget, when the block is counted exactly."""
        if not item:
            return 0
        tokens, error = self._count_item(item)
        tail = self.layer._tail
        estimate = tokens - self.layer._tail_tokens(self.ctx.tokens)
        # Counted apart, the block and the tail may differ from the item's count by a token
        # or two where they meet.
        if estimate + error + SPLICE_ERROR_TOKENS <= self.layer.budget.max:
            return estimate
        return self.ctx.tokens.count(item[: len(item) - len(tail)])

    # Writing ----------------------------------------------------------------------------------

    def update(self, patch: Any, mode: Mode = "append") -> State:
        """Merges (append) or writes (replace) ``patch`` and commits it; returns the new state.

        Raises:
            ReadOnlyError: The layer is read-only.
            SchemaViolationError: The merged state fails the schema (nothing is written).
            BudgetExceededError: The block would exceed the layer's max tokens (nothing written).
            LimitExceededError: The state would exceed ``max_state_bytes`` (nothing written).
            InvalidInputError: The patch has the wrong shape for this state, or bad data.
        """
        if self.layer.read_only:
            raise ReadOnlyError("working memory is read-only")
        if mode not in ("append", "replace"):
            raise InvalidInputError(f"mode must be 'append' or 'replace', got {mode!r}")
        patch = self._coerce_patch(patch)
        for _ in range(MAX_WRITE_ATTEMPTS):
            # The run holds the state it loaded, already checked: merge into it and write, if
            # nobody wrote since, without reading the stored value back.
            merged = self._combine(self.state, patch, mode)
            # An append changed only what the patch reached: the schema checks just that part.
            merged_from = (self.state, patch) if mode == "append" else None
            new_state = self._checked(merged, strip=False, budget=True, merged_from=merged_from)
            if self._commit(new_state, patch if mode == "append" else None):
                return self.state
            # Another writer got there first: catch up with what they wrote, merge again.
            self._read(self._kept())
        raise StorageRaceError(
            f"working memory {'/'.join(self.namespace)}: {MAX_WRITE_ATTEMPTS} attempts to "
            "write lost to other writers"
        )

    def clear(self) -> None:
        """Empties the state (a template does not come back; the model cleared it on purpose)."""
        if self.layer.read_only:
            raise ReadOnlyError("working memory is read-only")
        for _ in range(MAX_WRITE_ATTEMPTS):
            if self._commit(self.layer.empty_state(), None):
                return
            self._read(self._kept())
        raise StorageRaceError(
            f"working memory {'/'.join(self.namespace)}: {MAX_WRITE_ATTEMPTS} attempts to "
            "clear lost to other writers"
        )

    def _commit(self, new_state: State, patch: State | None) -> bool:
        """Writes ``new_state``, the merge of ``patch`` (None: a replace) into the state held,
        if the store is still where this handle last saw it; False, writing nothing, if not.

        A state under ``JOURNAL_MIN_STATE_BYTES`` that has no journal yet is written whole, in
        its one record. Otherwise an append goes into the journal as its patch, or, with the
        journal's patches, into the archive when the journal is full. The whole state is written
        (with the journal and the archive emptied, in the same transaction) for a replace, the
        first write, a change of merge options, or once the archive is full too. A journal or
        an archive, once made, stays: a record that came and went would restart its version,
        and a writer still holding the old one could then write over a state it never saw.
        """
        held = self._position
        options: Options = (self.layer.arrays, self.layer.nulls)
        store = self.ctx.store
        rendered = self._rendered
        state_bytes = len(rendered[1]) if rendered is not None and rendered[0] is new_state else 0
        if (
            patch is not None
            and held.journal_version
            and held.snapshot_version
            and (held.options == options or not (held.patches or held.archived))
        ):
            # The patch as merged: deep_merge strips unsafe keys from what it brings in, so
            # the stored patch merges to the same state on replay.
            clean = strip_unsafe_keys(patch) if isinstance(patch, dict) else patch
            text = orjson.dumps(clean)
            size = held.journal_bytes + len(text) + 1
            if len(held.patches) < MAX_JOURNAL_PATCHES and journal_fits(
                size, len(text), state_bytes
            ):
                patches, texts = (*held.patches, clean), (*held.texts, text)
                value, encoded = journal_value(
                    held.version + 1,
                    held.snapshot_version,
                    options,
                    patches,
                    texts,
                    held.archive_version,
                )
                item = store.put_if_version(
                    self.namespace,
                    JOURNAL_KEY,
                    value,
                    expected_version=held.journal_version,
                    validated=True,
                    encoded=encoded,
                )
                if item is None:
                    return False
                self._wrote_journal(
                    new_state,
                    item,
                    held.snapshot_version,
                    options,
                    patches,
                    texts,
                    size,
                    held.archive_version,
                    held.archived,
                    held.archived_text,
                )
                return True
            archived = (*held.archived, *held.patches, clean)
            if archive_fits(len(held.archived_text) + size, len(archived), state_bytes):
                return self._archive(new_state, options, archived, (*held.texts, text))
        return self._write_whole(new_state, options, state_bytes)

    def _archive(
        self,
        new_state: State,
        options: Options,
        archived: tuple[Any, ...],
        texts: tuple[bytes, ...],
    ) -> bool:
        """Writes ``new_state`` by moving the journal's patches and the new one (``texts``
        their JSON) into the archive, and emptying the journal, in one transaction."""
        held = self._position
        joined = b",".join(texts)
        archived_text = b",".join((held.archived_text, joined)) if held.archived_text else joined
        archive, archive_encoded = archive_value(archived, archived_text)
        archive_version = held.archive_version + 1
        value, encoded = journal_value(
            held.version + 1, held.snapshot_version, options, (), (), archive_version
        )
        written = self.ctx.store.put_many_if_versions(
            self.namespace,
            {
                ARCHIVE_KEY: ConditionalWrite(archive, held.archive_version, archive_encoded),
                JOURNAL_KEY: ConditionalWrite(value, held.journal_version, encoded),
            },
            validated=True,
        )
        if written is None:
            return False
        self._wrote_journal(
            new_state,
            written[1],
            held.snapshot_version,
            options,
            archive_version=written[0].version,
            archived=archived,
            archived_text=archived_text,
        )
        return True

    def _write_whole(self, new_state: State, options: Options, state_bytes: int) -> bool:
        """Writes ``new_state`` as the snapshot, emptying the journal and the archive (if any)
        in the same transaction; or alone, as the one record of a small state."""
        held = self._position
        store = self.ctx.store
        # The state came out of deep_merge / strip_unsafe_keys and the render: JSON data
        # already, so the store need not walk all of it again, and the block the budget check
        # rendered holds its JSON text, which the store can write as it is.
        encoded_state = self._rendered_json(new_state)
        if not held.journal_version and state_bytes < JOURNAL_MIN_STATE_BYTES:
            # A small state with no journal yet is written whole in its one record: below this
            # size a journal write costs as much as the state's, and the record is the state.
            item = store.put_if_version(
                self.namespace,
                STATE_KEY,
                new_state,
                expected_version=held.snapshot_version,
                validated=True,
                encoded=encoded_state,
            )
            if item is None:
                return False
            stamp = (STATE_KEY, item.version, item.created_at)
            self._wrote(new_state, Position(item.version, item.version, 0, stamp))
            return True
        archive_version = held.archive_version + 1 if held.archive_version else 0
        value, encoded = journal_value(
            held.version + 1, held.snapshot_version + 1, options, (), (), archive_version
        )
        writes = {
            STATE_KEY: ConditionalWrite(new_state, held.snapshot_version, encoded_state),
            JOURNAL_KEY: ConditionalWrite(value, held.journal_version, encoded),
        }
        if held.archive_version:
            empty, empty_encoded = archive_value((), b"")
            writes[ARCHIVE_KEY] = ConditionalWrite(empty, held.archive_version, empty_encoded)
        written = store.put_many_if_versions(self.namespace, writes, validated=True)
        if written is None:
            return False
        archive_version = written[2].version if held.archive_version else 0
        self._wrote_journal(
            new_state, written[1], written[0].version, options, archive_version=archive_version
        )
        return True

    def _wrote_journal(
        self,
        new_state: State,
        journal: Item,
        snapshot_version: int,
        options: Options,
        patches: tuple[Any, ...] = (),
        texts: tuple[bytes, ...] = (),
        journal_bytes: int = 0,
        archive_version: int = 0,
        archived: tuple[Any, ...] = (),
        archived_text: bytes = b"",
    ) -> None:
        """Takes ``new_state`` as written by a write that wrote ``journal`` (and the rows the
        other arguments describe)."""
        position = Position(
            self._position.version + 1,
            snapshot_version,
            journal.version,
            (JOURNAL_KEY, journal.version, journal.created_at),
            options,
            patches,
            texts,
            journal_bytes,
            archive_version,
            archived,
            archived_text,
        )
        self._wrote(new_state, position)

    def _wrote(self, new_state: State, position: Position) -> None:
        self._position = position
        self.state = new_state
        self.layer._remember(self)

    def _initial(self) -> State:
        return self.layer.template if self.layer.template is not None else self.layer.empty_state()

    def _coerce_patch(self, patch: Any) -> State:
        if self.layer.structured:
            if isinstance(patch, (str, bytes)):
                try:
                    patch = orjson.loads(patch)
                except orjson.JSONDecodeError as exc:
                    raise InvalidInputError(f"update is not valid JSON: {exc}") from None
            if not isinstance(patch, Mapping):
                raise InvalidInputError(
                    f"this working memory holds a JSON object; the update must be an object, "
                    f"got {type(patch).__name__}"
                )
            return dict(patch)
        if not isinstance(patch, str):
            raise InvalidInputError(
                "this working memory holds text; the update must be a string, "
                f"got {type(patch).__name__}"
            )
        return patch

    def _combine(
        self, base: State, patch: State, mode: Mode, options: Options | None = None
    ) -> State:
        """``patch`` merged into (append) or written over (replace) ``base``; ``options`` are
        the ``(arrays, nulls)`` a stored patch was made with, the layer's by default."""
        if mode == "replace":
            return dict(strip_unsafe_keys(patch)) if isinstance(patch, dict) else patch
        merged: State = apply_patch(base, patch, options or (self.layer.arrays, self.layer.nulls))
        return merged

    def _checked(
        self,
        state: Any,
        *,
        strip: bool = True,
        budget: bool = False,
        merged_from: tuple[State, State] | None = None,
    ) -> State:
        """Checks kind and schema, and for writes (``budget``) the size and the token budget.
        ``strip`` removes unsafe keys from a state that came from outside; a merge result is
        already clean (deep_merge strips everything it brings in, and the base it merged into
        was checked). ``merged_from`` is ``(base, patch)`` when ``state`` is their merge and
        ``base`` was checked: then only what the patch reached is checked against the schema."""
        if self.layer.structured:
            if not isinstance(state, dict):
                raise InvalidInputError(
                    f"stored working memory is {type(state).__name__}, but the layer is structured"
                )
            if strip:
                state = strip_unsafe_keys(state)
            compiled = self.layer._state_schema
            if merged_from is not None and compiled is not None:
                violations = compiled.violations_after_merge(merged_from[0], state, merged_from[1])
            else:
                violations = self.layer._validator(state)
            if violations:
                raise SchemaViolationError(
                    "working memory would not match its schema: " + "; ".join(violations[:5]),
                    violations=violations,
                )
        elif not isinstance(state, str):
            raise InvalidInputError(
                f"stored working memory is {type(state).__name__}, but the layer holds text"
            )
        if budget:
            try:
                # Kept: the next prepare() shows this item rather than render it again.
                item = self._render_of(state, merged_from)
                # isascii() reads a flag CPython keeps: no 200 KB encode for the usual block.
                tail = self.layer._tail
                size = (
                    len(item) - len(tail)
                    if item.isascii()
                    else len(item.encode("utf-8")) - len(tail.encode("utf-8"))
                )
                if not item:
                    size = 0
            except (orjson.JSONEncodeError, UnicodeEncodeError):
                codec.dumps(state)  # names what no store could hold: deep nesting, a surrogate
                raise
            if size > self.layer.max_state_bytes:
                raise LimitExceededError(
                    f"working memory would be {size:,} bytes, over this layer's limit of "
                    f"{self.layer.max_state_bytes:,} (max_state_bytes); compact it instead of "
                    "adding",
                    setting="max_state_bytes",
                    size=size,
                    limit=self.layer.max_state_bytes,
                )
            tokens = self._count_block(item)
            if tokens > self.layer.budget.max:
                raise BudgetExceededError(
                    f"working memory would be {tokens} tokens, over this layer's limit of "
                    f"{self.layer.budget.max}; compact it (mode 'replace' with a shorter state) "
                    "instead of adding",
                    tokens=tokens,
                    limit=self.layer.budget.max,
                )
        checked: State = state
        return checked


_OPEN = "<working_memory>\n"
_CLOSE = "\n</working_memory>"


def _legacy_calls(message: Message) -> list[Any]:
    """Arguments of every ``updateWorkingMemory`` call in a response, OpenAI or Anthropic style."""
    if not isinstance(message, Mapping):
        return []
    found: list[Any] = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and function.get("name") == LEGACY_TOOL:
            found.append(function.get("arguments"))
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping) and legacy.get("name") == LEGACY_TOOL:
        found.append(legacy.get("arguments"))
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") == "tool_use"
                and block.get("name") == LEGACY_TOOL
            ):
                found.append(block.get("input"))
    return found


def _patch_schema(layer: WorkingMemory) -> dict[str, Any]:
    """Parameters of the update tool: the schema's fields, all optional (a patch is partial)."""
    schema = layer.schema
    if schema is None:
        return {
            "type": "object",
            "properties": {
                "content": {
                    "type": "string",
                    "description": "Text to add (or to write, with mode 'replace').",
                },
                "mode": {"type": "string", "enum": ["append", "replace"]},
            },
            "required": ["content"],
            "additionalProperties": False,
        }
    full = schema if isinstance(schema, Mapping) else schema.model_json_schema()
    partial = {k: v for k, v in full.items() if k not in ("required", "title")}
    partial["type"] = "object"
    return partial


def _update_for_model(handle: WorkingMemoryHandle, content: Any, mode: Any) -> dict[str, Any]:
    """An update a tool call asked for, with the refusals the model must learn from (schema,
    budget) as tool errors carrying their reason code."""
    try:
        handle.update(content, mode)
    except SchemaViolationError as exc:
        raise ToolError(str(exc), code="schema_violation", details=exc.violations) from None
    except BudgetExceededError as exc:
        raise ToolError(str(exc), code="budget_exceeded") from None
    return {"ok": True, "version": handle.version}


def _noetic_update_tool(layer: WorkingMemory, handle: WorkingMemoryHandle) -> Tool:
    def update(args: dict[str, Any]) -> dict[str, Any]:
        if layer.structured:
            return _update_for_model(handle, args, "append")
        return _update_for_model(handle, args["content"], args.get("mode", "append"))

    what = (
        WORKING_MEMORY_UPDATE_WHAT_STRUCTURED
        if layer.structured
        else WORKING_MEMORY_UPDATE_WHAT_TEXT
    )
    return Tool(
        name="working-memory/update",
        description=WORKING_MEMORY_UPDATE_DESCRIPTION.format(what=what),
        parameters=_patch_schema(layer),
        handler=update,
        # A structured patch is checked after merging, against the full schema.
        validate=not layer.structured,
    )


def _voltagent_tools(layer: WorkingMemory, handle: WorkingMemoryHandle) -> list[Tool]:
    def get(_args: dict[str, Any]) -> dict[str, Any]:
        return {"content": handle.snapshot, "format": layer.format}

    def update(args: dict[str, Any]) -> dict[str, Any]:
        return _update_for_model(handle, args["content"], args.get("mode", "append"))

    def clear(_args: dict[str, Any]) -> dict[str, Any]:
        handle.clear()
        return {"ok": True}

    content_schema: dict[str, Any] = (
        {"type": ["object", "string"], "description": "Fields to merge (or a JSON string of them)."}
        if layer.structured
        else {"type": "string", "description": "Markdown or text to add."}
    )
    return [
        Tool(
            "get_working_memory",
            WORKING_MEMORY_GET_DESCRIPTION,
            {"type": "object", "properties": {}, "additionalProperties": False},
            get,
        ),
        Tool(
            "update_working_memory",
            WORKING_MEMORY_SET_DESCRIPTION,
            {
                "type": "object",
                "properties": {
                    "content": content_schema,
                    "mode": {"type": "string", "enum": ["append", "replace"]},
                },
                "required": ["content"],
                "additionalProperties": False,
            },
            update,
        ),
        Tool(
            "clear_working_memory",
            WORKING_MEMORY_CLEAR_DESCRIPTION,
            {"type": "object", "properties": {}, "additionalProperties": False},
            clear,
        ),
    ]
