"""ToolResults: large tool results leave the conversation; the model can read them back.

Implements Layer 1 of Modulatio. A tool result over ``threshold_tokens`` is stored verbatim and
replaced in the conversation by a short summary plus the call_id; the model recovers the
verbatim text with the ``read_tool_result`` tool, page by page.
:func:`prune_messages_sliding_window` is Modulatio's sliding-window prune (OpenAI chat only; the
context gate prunes every format). This module holds the layer: its options, its scopes, the
layer protocol, and what becomes of one result (offloaded, kept for a gate, stored under which
id). The other jobs live beside it, one module each:

* ``tool_result_offload``: the pass over a conversation, each result decided once;
* ``tool_result_decisions``: what was decided for each result, remembered for the next pass;
* ``tool_result_following``: forgetting the decisions other servers' writes made stale;
* ``tool_result_notice``: the notice that stands in for a result, and its summary;
* ``tool_result_digest``: the extractive digest used when no summarizer is given;
* ``tool_result_storage``: how a result is kept, in a store or as files;
* ``tool_result_reading``: the ``read_tool_result`` tool and its pages.

In a stack, nothing changes in the tool loop: ``run.prepare()`` offloads every tool result over
the threshold (OpenAI chat, legacy ``role: "function"``, Responses ``function_call_output``,
Anthropic ``tool_result`` blocks), once per result, and keeps the body of every result the
context gate prunes, so each ``[summarized: call_id=...]`` placeholder can be read back.
``offload()`` stays for callers that want the notice at once::

    stack = MemoryStack([ToolResults()], store="postgresql://...", gate=ContextGate(...))
    with stack.run(thread_id="t1") as run:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": my_tool(**args)})
        prompt = run.prepare(messages)    # large results already replaced by notices

Decisions where Modulatio is silent:

* Results live in the stack's store by default (``tool_calls_dir`` keeps them as files
  instead), so every server sharing the store, and a restarted one, reads them back. They are
  namespaced per resource and thread (a run with a resource but no thread keeps them per
  resource), stored once per content hash within that scope, and expire ``ttl`` seconds (7
  days by default) after they were last stored. Used on its own without a store or a
  directory, the layer keeps results in a private in-memory store, one for all its handles,
  which it goes on using (with a warning) if a stack runs it after it stored results there.
* Identical payloads are stored once, unlike Modulatio (which keeps both copies). With files,
  the bytes live in ``by-hash/<sha256>.txt`` and every ``<call_id>.txt`` holding them is a hard
  link to it (a copy where the file system has no hard links).
* A reused call_id (local servers often send ``call_0`` every turn): the newer result wins the
  call_id, and the older stays readable under ``<call_id>:<12 hex digits of its SHA-256>``,
  which ``read_tool_result`` lists under ``earlier``. Storing a call_id again with the same
  text is a no-op. When the gate prunes an old result whose call_id now holds a newer one, the
  old body is kept under its derived id and the placeholder names that id.
* Files are private (0600), directories the layer creates too (0700), and files are written
  atomically: tool results often carry data a model fetched on a user's behalf. A symlink, FIFO
  or directory planted under a call_id's name, or as ``by-hash``, is refused, never followed.
* With no summarizer, the summary is a deterministic extractive digest (size, line count, the
  top-level shape of JSON, head and tail lines) within ``summary_tokens``. A summarizer that
  fails or returns something other than text falls back to the digest, with a warning.
* Each result is decided (counted, stored, its notice written) once per process, and the
  decision reused while the same conversation is prepared again. With results in a store, a
  run's opening reads what changed among its scope's call records since (with the other
  layers' reads): a decision naming an id another server has since stored other text under
  (the same call_id reused on a server given the conversation's next turn), or deleted, is
  decided again, and so is one stored half the TTL ago, which storing again renews.
* A legacy ``role: "function"`` result carries no id: it is stored under ``fn-<hash>`` of its
  name and body (see :func:`memstrata.messages.legacy_call_id`).
* ``read_tool_result`` pages by characters: ``offset`` is a character offset into the text and
  each page holds at most ``max_tokens`` tokens, cut at a line break when one is near the end.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from memstrata._bridge import blocking, run_sync
from memstrata._checks import checked_bool, checked_scope_id
from memstrata._core import prune_sliding_window
from memstrata.exceptions import InvalidInputError
from memstrata.layers.tool_result_decisions import (
    UNSEEN,
    Decisions,
    decision_key,
    derived_id,
)
from memstrata.layers.tool_result_digest import DEFAULT_SUMMARY_TOKENS, digest
from memstrata.layers.tool_result_following import Following
from memstrata.layers.tool_result_notice import Summarizer, notice, notice_call_id, summary
from memstrata.layers.tool_result_offload import offload_pass
from memstrata.layers.tool_result_reading import (
    DEFAULT_PAGE_TOKENS,
    MAX_PAGE_TOKENS,
    read_page,
    read_tool,
)
from memstrata.layers.tool_result_storage import _Backend, _FileBackend, _StoreBackend
from memstrata.prompts import TOOL_RESULT_GONE, TOOL_RESULT_PRUNED
from memstrata.safe_files import check_file_id, open_dir, open_subdir, remove_tree
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import InMemoryStore, Store, erase, open_store
from memstrata.stores.base import Answer, Read, validate_ttl
from memstrata.tokens import (
    EstimatingCounter,
    TokenCounter,
    checked_counter,
    exact_count_over,
    same_counts,
)
from memstrata.tools import Tool

__all__ = [
    "DEFAULT_KEEP_RECENT",
    "DEFAULT_PAGE_TOKENS",
    "DEFAULT_SUMMARY_TOKENS",
    "DEFAULT_THRESHOLD_TOKENS",
    "DEFAULT_TTL",
    "MAX_PAGE_TOKENS",
    "Summarizer",
    "ToolResults",
    "derived_id",
    "digest",
    "prune_messages_sliding_window",
]

logger = logging.getLogger("memstrata.tool_results")

DEFAULT_THRESHOLD_TOKENS = 2000
DEFAULT_KEEP_RECENT = 3
DEFAULT_TTL = 7 * 86_400.0
_NAMESPACE = "tool-results"
_NONE = "-"  # the scope label of an unset thread or resource
_THREADS_DIR = "threads"
_RESOURCES_DIR = "resources"
_EARLIER_KEPT = 32  # older ids a reused call_id lists


def prune_messages_sliding_window(
    messages: Sequence[Message],
    *,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    placeholder: str = TOOL_RESULT_PRUNED,
) -> tuple[list[Message], int]:
    """Rewrites older tool-role messages to ``[summarized: call_id=...]`` placeholders.

    The ``keep_recent`` latest tool messages stay verbatim; the input is not mutated: a
    replaced message is a new dict, and every other message is the input's own object in the
    new list. The Rust kernel :func:`memstrata.prune_sliding_window` does the work. A message
    whose ``tool_call_id`` is not a call_id a result could be stored under (empty, or holding
    a bracket or a line break a model put there) gets a placeholder naming none, saying the
    text is gone: the id must not write a notice of its own into the conversation.

    Returns:
        The new message list and how many messages were replaced.
    """
    given = list(messages)
    pruned, count = prune_sliding_window(given, keep_recent=keep_recent, placeholder=placeholder)
    for i, (old, new) in enumerate(zip(given, pruned)):
        if new is not old and not _storable_id(old.get("tool_call_id")):
            pruned[i] = {**new, "content": TOOL_RESULT_GONE}
    return pruned, count


def _storable_id(call_id: Any) -> bool:
    try:
        check_file_id(call_id)
    except InvalidInputError:
        return False
    return True


class ToolResults:
    """The tool-result offloading layer (also usable on its own, without a stack).

    Args:
        tool_calls_dir: Keep results as files in this directory (created on first use) instead
            of in a store. None: in ``store``.
        store: Where results live when no directory is given: a
            :class:`~memstrata.stores.Store` or a store URL. None: the stack's store when the
            layer runs in a stack; used on its own, a private in-memory store (kept if a
            stack runs the layer after it stored results there).
        ttl: Seconds a stored result stays readable after it was last stored (store only);
            None keeps results until deleted.
        threshold_tokens: Results over this many tokens are offloaded.
        summarizer: Any ``str -> str`` callable (e.g. a call to your own LLM); None for the
            built-in extractive digest.
        summary_tokens: Budget of the digest (a summarizer's output is cut to it as well).
        enabled: False stores nothing and returns every result unchanged.
        tokens: Token counter; the stack's when used as a layer, else the native estimator.
        name: The layer's name.
        slot: Order among layers (this layer injects no prompt items).
    """

    budget = Budget(0, 0)

    def __init__(
        self,
        *,
        tool_calls_dir: str | os.PathLike[str] | None = None,
        store: Store | str | None = None,
        ttl: float | None = DEFAULT_TTL,
        threshold_tokens: int = DEFAULT_THRESHOLD_TOKENS,
        summarizer: Summarizer | None = None,
        summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
        enabled: bool = True,
        tokens: TokenCounter | None = None,
        name: str = "tool-results",
        slot: int = 900,
    ) -> None:
        for option, value in (
            ("threshold_tokens", threshold_tokens),
            ("summary_tokens", summary_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{option} must be a positive int, got {value!r}")
        if summarizer is not None and not callable(summarizer):
            raise InvalidInputError(f"summarizer must be callable, got {summarizer!r}")
        if store is not None and not isinstance(store, (Store, str)):
            raise InvalidInputError(
                f"store must be a Store, a store URL or None, got {type(store).__name__}"
            )
        if tool_calls_dir is not None and store is not None:
            raise InvalidInputError("give tool_calls_dir or store, not both")
        if tool_calls_dir is not None and not isinstance(tool_calls_dir, (str, os.PathLike)):
            raise InvalidInputError(
                "tool_calls_dir must be a path (str or os.PathLike) or None, got "
                f"{type(tool_calls_dir).__name__}"
            )
        if tokens is not None:
            checked_counter(tokens)
        self.ttl = validate_ttl(ttl)
        self._dir = Path(tool_calls_dir) if tool_calls_dir is not None else None
        self._store: Store | None = open_store(store) if isinstance(store, str) else store
        self._store_given = store is not None
        # The private store of a layer used on its own with neither a store nor a directory,
        # once made: one for the layer and every handle of it (a list they all share), and
        # kept when a stack runs the layer later, as results already live there.
        self._own_store: list[Store] = []
        # Set on the per-run copies init() hands to runs: the labels of the run's scope.
        self._scope: tuple[str, str] | None = None
        self.threshold_tokens = threshold_tokens
        self.summarizer = summarizer
        self.summary_tokens = summary_tokens
        self.enabled = checked_bool(enabled, "enabled")
        self.tokens: TokenCounter = tokens if tokens is not None else EstimatingCounter()
        self._tokens_given = tokens is not None
        self._bound = False  # whether a stack's run bound the layer to its counter and store
        self.name = name
        self.slot = slot
        # What offload_messages and keep decided for each result, and the last conversation
        # the offload pass saw per scope: a conversation is prepared again at every call of a
        # tool loop, and each result is counted and stored once. Shared by every run of the
        # layer (the runs' handles are shallow copies).
        self._decisions = Decisions()
        # With results in a store: what other servers wrote since, which makes decisions
        # stale (see _catch_up).
        self._following = Following(self._decisions)

    @property
    def tool_calls_dir(self) -> Path | None:
        """Where this object's result files live (None when results are kept in a store): the
        configured directory, or for a run's handle its scope's subdirectory
        (``resources/<resource hash>/threads/<thread hash>``, either part left out when the
        run has no resource or no thread), created on the first write, never by a read."""
        if self._dir is None:
            return None
        if self._scope is None:
            return self._dir
        resource, thread = self._scope
        # Scoped as the store scopes them: two users' conversations that share a thread_id
        # never read each other's results.
        base = self._dir if resource == _NONE else self._dir / _RESOURCES_DIR / resource
        return base / _THREADS_DIR / thread if thread != _NONE else base

    def for_thread(self, thread_id: str | None, resource_id: str | None = None) -> ToolResults:
        """The layer as one conversation sees it: the same options, its own results.

        Results are kept per resource and thread (a run with only one of them, per that one;
        with neither, in the layer's unscoped space), in a store and in files alike.
        """
        checked_scope_id("thread_id", thread_id)
        checked_scope_id("resource_id", resource_id)
        if thread_id is None and resource_id is None:
            return self
        # A shallow copy, made directly: copy.copy's generic protocol costs several times more,
        # and this runs at every run's start.
        scoped = object.__new__(type(self))
        scoped.__dict__.update(self.__dict__)
        scoped._scope = (_label(resource_id), _label(thread_id))
        return scoped

    def _backend(self) -> _Backend:
        if self._dir is not None:
            return _FileBackend(self.tool_calls_dir or self._dir, self._dir)
        if self._store is None:
            # On its own with neither a directory nor a store: results live with this object.
            if not self._own_store:
                self._own_store.append(InMemoryStore())
            self._store = self._own_store[0]
        scope = self._scope or (_NONE, _NONE)
        return _StoreBackend(self._store, (_NAMESPACE, *scope), self.ttl)

    def _store_for(self, stack_store: Store) -> Store | None:
        """Where the layer keeps results when a stack with ``stack_store`` runs it: the store
        (or directory: None) it was given, else its private store if it made one, else the
        stack's."""
        if self._store_given or self._dir is not None:
            return self._store
        if self._own_store:
            return self._own_store[0]
        return stack_store

    def _calls_namespace(self) -> tuple[str, ...]:
        """Where a store keeps this scope's call records (see ``_StoreBackend``)."""
        return (_NAMESPACE, *(self._scope or (_NONE, _NONE)), "calls")

    def _catch_up(self, opened: Mapping[Read, Answer] | None = None) -> None:
        """Forgets the decisions another server's writes, a deletion or the TTL made stale
        (see :meth:`Following.catch_up
        <memstrata.layers.tool_result_following.Following.catch_up>`); such results are
        decided, and stored, again at the next offload. ``opened`` holds the run's opening
        reads."""
        if self._dir is not None or self._store is None or not self.enabled:
            return
        self._following.catch_up(
            self._store, self._calls_namespace(), self._scope, self.ttl, opened
        )

    def forget(self, store: Store, *, resource_id: str | None, thread_id: str | None) -> int:
        """Erases the results kept for the runs of ``thread_id`` (with the ``resource_id``
        they named, None for none), or with ``resource_id`` alone, for every run of that user,
        whatever its thread; returns how many records (or files) went. What this object
        decided about them goes too. ``store`` holds the results unless the layer was given a
        store or a directory of its own."""
        checked_scope_id("thread_id", thread_id)
        checked_scope_id("resource_id", resource_id)
        resource = _label(resource_id)
        wanted: tuple[str, ...] = (resource,)
        if thread_id is not None:
            wanted = (resource, _label(thread_id))
        try:
            if self._dir is None:
                kept = self._store_for(store)
                return 0 if kept is None else erase(kept, (_NAMESPACE, *wanted))
            # As tool_calls_dir lays a scope's files out. An unlink per file: from an async
            # forget, in a worker thread.
            if thread_id is None:
                return blocking(_remove_below, self._dir, (_RESOURCES_DIR, resource))
            if resource_id is None:
                return blocking(_remove_below, self._dir, (_THREADS_DIR, wanted[1]))
            parts = (_RESOURCES_DIR, resource, _THREADS_DIR, wanted[1])
            return blocking(_remove_below, self._dir, parts)
        finally:
            # After the erasure, so a decision a run made meanwhile goes too: the next offload
            # decides, and stores, such a result again.
            self._following.let_go(wanted)
            self._decisions.forget_scopes(wanted)

    # Layer protocol ---------------------------------------------------------------------------

    def opening_reads(self, ctx: RunContext) -> list[Read]:
        """What changed among the run's scope's call records since this object last looked,
        read with the other layers' when the run opens (nothing before its first store there,
        nor with results in files)."""
        if self._dir is not None or not self.enabled or self._store is not ctx.store:
            return []
        unset = ctx.thread_id is None and ctx.resource_id is None
        scope = None if unset else (_label(ctx.resource_id), _label(ctx.thread_id))
        read = self._following.opening_read(
            scope, (_NAMESPACE, *(scope or (_NONE, _NONE)), "calls")
        )
        return [] if read is None else [read]

    def init(self, ctx: RunContext, opened: Mapping[Read, Answer] | None = None) -> ToolResults:
        """The layer as the run's thread sees it (:meth:`for_thread`), counting with the
        stack's token counter and keeping results in the stack's store, unless the caller
        chose them, and caught up with what other servers stored in that scope (see
        :meth:`_catch_up`). The first stack to run the layer binds it to those; a run of a
        stack that counts or stores otherwise gets a view of its own, with its own
        decisions, so it never reuses the other stack's decisions nor writes to its store."""
        tokens = self.tokens if self._tokens_given else ctx.tokens
        store = self._store_for(ctx.store)
        if not self._bound:
            self._bound = True
            if self._own_store and not self._store_given:
                logger.warning(
                    "ToolResults stored results on its own before a stack ran it: they, and "
                    "those it stores from now on, stay in its private in-memory store, not the "
                    "stack's; give it store= to choose"
                )
            self.tokens, self._store = tokens, store
        if same_counts(tokens, self.tokens) and store is self._store:
            scoped = self.for_thread(ctx.thread_id, ctx.resource_id)
            scoped._catch_up(opened)
            return scoped
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view.tokens, view._store = tokens, store
        view._decisions = Decisions()
        view._following = Following(view._decisions)
        return view.for_thread(ctx.thread_id, ctx.resource_id)

    def recall(self, handle: ToolResults, budget: int) -> list[Message]:
        return []

    def observe(self, handle: ToolResults, message: Message) -> None:
        return None

    def tools(self, handle: ToolResults) -> list[Tool]:
        # The handle's tool: it reads the run's scope only.
        return [handle.tool()] if handle.enabled else []

    def on_spawn(self, handle: ToolResults, child: RunContext) -> ToolResults:
        """The parent's handle for a child of the same thread and resource; for a child of
        another, the same layer scoped to the child's: a sub-agent serving another
        conversation or user reads and keeps only that one's results."""
        scoped = handle.for_thread(child.thread_id, child.resource_id)
        if scoped._scope == handle._scope:
            return handle
        scoped._catch_up()
        return scoped

    def close(self, handle: ToolResults, error: BaseException | None) -> None:
        """Nothing to flush: every result is stored when ``offload`` returns."""

    # Offloading -------------------------------------------------------------------------------

    def offload(self, call_id: str, content: Any) -> str:
        """What the conversation should hold for this tool result.

        Results within ``threshold_tokens`` come back unchanged (as text). Larger ones are
        stored verbatim and replaced by a notice with the call_id and a summary.

        A call_id already stored with different text (local servers reuse ``call_0``): the
        newer result is stored under the call_id, and the older stays readable under
        ``<call_id>:<first 12 hex digits of its SHA-256>``, which ``read_tool_result`` of the
        call_id lists under ``earlier``.

        Args:
            call_id: The tool call's id (``tool_call_id``); see :func:`check_file_id`.
            content: The result: text, or JSON data (serialized as JSON text).

        Raises:
            InvalidInputError: A call_id that could leave the directory, or content that is
                not text or JSON data.
        """
        text = _as_text(content)
        if not self.enabled:
            return text
        check_file_id(call_id)
        tokens = self._over_threshold(text)
        if tokens is None:
            return text
        self.store(call_id, text)
        return self._notice(call_id, text, tokens)

    async def aoffload(self, call_id: str, content: Any) -> str:
        """:meth:`offload` for a coroutine: inline on the event loop, awaiting the store only
        when it has to wait (see ``Run.aprepare``)."""
        return await run_sync(self.offload, call_id, content)

    async def aoffload_messages(self, messages: Sequence[Message]) -> list[Message]:
        """:meth:`offload_messages` for a coroutine, as :meth:`aoffload`."""
        return await run_sync(self.offload_messages, messages)

    async def aread_tool_result(
        self, call_id: str, offset: int = 0, max_tokens: int = DEFAULT_PAGE_TOKENS
    ) -> dict[str, Any]:
        """:meth:`read_tool_result` for a coroutine, as :meth:`aoffload`."""
        return await run_sync(self.read_tool_result, call_id, offset, max_tokens)

    def _over_threshold(self, text: str) -> int | None:
        """``text``'s tokens if it is over ``threshold_tokens`` (estimated when the estimate
        says so: offloading a result a little under the threshold loses nothing), None if it
        is within it, which only an exact count may say."""
        tokens = self.tokens.count(text)
        if tokens > self.threshold_tokens:
            return tokens
        return exact_count_over(self.tokens, text, self.threshold_tokens, keep=False)

    def _notice(self, call_id: str, text: str, tokens: int) -> str:
        return notice(call_id, text, tokens, self.summarize(text))

    def offload_message(self, message: Message) -> Message:
        """A message with its tool results offloaded when over the threshold (a new dict;
        other messages are returned as they are). Every format of :mod:`memstrata.messages`."""
        return self.offload_messages([message])[0]

    def offload_messages(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` with every tool result over the threshold that is not offloaded yet
        replaced by the notice :meth:`offload` gives (``run.prepare()`` calls this, so a tool
        loop need not). Each result is counted and stored once: later calls with the same
        result (same call_id, same body) reuse the decision. The input is not mutated.
        Results whose call_id cannot be stored are left as they are, with a warning, and so
        are the pages ``read_tool_result`` returned (the model asked for that text)."""
        given = messages if isinstance(messages, list) else _message_list(messages)
        if not self.enabled:
            return given
        return offload_pass(given, self._decisions, self._scope, self._decide)

    def _decide(self, index: int, call_id: str, body: Any) -> str | None:
        """The notice replacing ``body``, or None to leave it."""
        if isinstance(body, str) and self._own_notice(body) is not None:
            return None
        try:
            text = _as_text(body)
        except InvalidInputError as exc:
            raise InvalidInputError(f"messages[{index}]: {exc}") from None
        tokens = self._over_threshold(text)
        if tokens is None:
            return None
        try:
            check_file_id(call_id)
        except InvalidInputError as exc:
            logger.warning("messages[%d]: not offloaded: %s", index, exc)
            return None
        try:
            self.store(call_id, text)
        except InvalidInputError as exc:  # e.g. a lone surrogate a store cannot hold
            raise InvalidInputError(
                f"messages[{index}]: the tool result of call {call_id} cannot be offloaded: {exc}"
            ) from None
        return self._notice(call_id, text, tokens)

    def keep(self, call_id: str, body: Any) -> str | None:
        """Makes ``body`` readable with ``read_tool_result`` before a context gate replaces it
        by a placeholder; returns the id to name in the placeholder, or None when it cannot
        be kept (an unsafe call_id, a body that is not text or JSON data).

        A body that is this layer's own offload notice is already readable under the id the
        notice names. A call_id already holding different text keeps it (it is the result
        the model was pointed at) and the body goes under ``<call_id>:<hash>``.
        """
        if not self.enabled:
            return None
        key = decision_key(self._scope, call_id, body, kept=True)
        if key is not None:
            known = self._decisions.get(key)
            if known is not UNSEEN:
                return known
        try:
            check_file_id(call_id)
            text = _as_text(body)
        except InvalidInputError:
            return None
        named = self._own_notice(text)
        backend = self._backend()
        if named is not None and backend.lookup(named) is not None:
            readable: str | None = named
        else:
            readable = self._store_text(backend, call_id, text, newer_wins=False)
        if key is not None:
            self._decisions.remember(key, readable)
        return readable

    def _own_notice(self, text: str) -> str | None:
        """The call_id ``text`` points to if it is a notice of this layer (see
        :func:`~memstrata.layers.tool_result_notice.notice_call_id`), else None."""
        return notice_call_id(text, self.summary_tokens, self.tokens)

    # Storing ----------------------------------------------------------------------------------

    def store(self, call_id: str, text: str) -> str:
        """Stores ``text`` under ``call_id`` (deduplicated by content hash); the newer text
        wins over a different one already there (see :meth:`offload`). Returns the call_id."""
        check_file_id(call_id)
        if not isinstance(text, str):
            raise InvalidInputError(f"text must be a str, got {type(text).__name__}")
        result = self._store_text(self._backend(), call_id, text, newer_wins=True)
        return result

    def _store_text(self, backend: _Backend, call_id: str, text: str, *, newer_wins: bool) -> str:
        data = text.encode("utf-8", "surrogatepass")
        digest_hex = hashlib.sha256(data).hexdigest()
        current = backend.lookup(call_id)
        follow, scope = self._following.follow, self._scope
        if current is None or current[0] == digest_hex:
            follow(backend, scope, [(call_id, digest_hex)])
            backend.write(call_id, text, digest_hex, earlier=current[1] if current else [])
            return call_id
        older = derived_id(call_id, current[0])
        if not newer_wins:
            derived = derived_id(call_id, digest_hex)
            follow(backend, scope, [(derived, digest_hex)])
            backend.write(derived, text, digest_hex, earlier=[])
            return derived
        follow(backend, scope, [(older, current[0]), (call_id, digest_hex)])
        backend.alias(older, current[0])
        # The remembered decisions for the older text name the id it moved to from now on, so
        # a conversation holding both results points each message at its own. Before the
        # write that replaces it: the older text is readable there already, and that write
        # may be stored and still not return (a cancelled task, a connection lost after it).
        self._decisions.repoint(self._scope, call_id, current[0], older)
        earlier = [older, *(e for e in current[1] if e != older)][:_EARLIER_KEPT]
        backend.write(call_id, text, digest_hex, earlier=earlier)
        return call_id

    def summarize(self, text: str) -> str:
        """The summary that stands in for ``text``: the summarizer's, else the digest."""
        if not isinstance(text, str):
            raise InvalidInputError(f"text must be a str, got {type(text).__name__}")
        return summary(text, self.summarizer, self.summary_tokens, self.tokens)

    # Reading back -----------------------------------------------------------------------------

    def read_tool_result(
        self, call_id: str, offset: int = 0, max_tokens: int = DEFAULT_PAGE_TOKENS
    ) -> dict[str, Any]:
        """The verbatim text of a stored result, one page of at most ``max_tokens`` tokens.

        Returns:
            ``{"call_id", "content", "offset", "next_offset", "total_chars"}``; ``next_offset``
            is None on the last page. When the call_id was reused, ``earlier`` lists the ids
            its older results are readable under.

        Raises:
            InvalidInputError: A bad call_id, offset or max_tokens (named in the message),
                or max_tokens too small for the next character.
            ToolError: No result is stored under this call_id (code ``not_found``).
        """
        return read_page(self._backend, self.tokens, call_id, offset, max_tokens)

    def tool(self) -> Tool:
        """The ``read_tool_result`` tool for the model."""
        return read_tool(self.read_tool_result)


def _remove_below(base: Path, parts: tuple[str, ...]) -> int:
    """Removes ``base/<parts...>`` and everything below it, each level opened relative to the
    one above (see :func:`~memstrata.safe_files.remove_tree`); 0 when it is not there."""
    try:
        directory = open_dir(base)
    except FileNotFoundError:
        return 0
    try:
        for part in parts[:-1]:
            below = open_subdir(directory, part, create=False)
            directory.close()
            directory = below
        return remove_tree(directory, parts[-1])
    except FileNotFoundError:
        return 0
    finally:
        directory.close()


def _message_list(messages: Any) -> list[Message]:
    """``messages`` as a list, if it is a sequence of messages: a string would be taken one
    message per character, and a dict one per key."""
    if isinstance(messages, (str, bytes, bytearray, dict)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of dicts, got {type(messages).__name__}")
    return list(messages)


@functools.lru_cache(maxsize=4096)  # by the id's text: every run of a thread labels it again
def _label(scope_id: str | None) -> str:
    if scope_id is None:
        return _NONE
    return hashlib.sha256(scope_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray)):
        raise InvalidInputError("tool result content must be text or JSON data, got bytes")
    try:
        return orjson.dumps(content).decode()
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidInputError(f"tool result content must be text or JSON data: {exc}") from None
