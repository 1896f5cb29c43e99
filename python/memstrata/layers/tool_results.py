"""ToolResults: large tool results leave the conversation; the model can read them back.

Implements Layer 1 of Modulatio. A tool result over ``threshold_tokens`` is stored verbatim and
replaced in the conversation by a short summary plus the call_id; the model recovers the
verbatim text with the ``read_tool_result`` tool, page by page.
:func:`prune_messages_sliding_window` is Modulatio's sliding-window prune (OpenAI chat only; the
context gate prunes every format). How a result is kept, in a store or as files, is
``tool_result_storage``'s job; the digest that summarizes one, ``tool_result_digest``'s.

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
  directory, the layer keeps results in a private in-memory store.
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
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from memstrata._bridge import run_sync
from memstrata._checks import checked_bool, checked_scope_id
from memstrata._core import prune_sliding_window
from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.layers.tool_result_digest import DEFAULT_SUMMARY_TOKENS, _fit_prefix, digest
from memstrata.layers.tool_result_storage import _Backend, _FileBackend, _StoreBackend
from memstrata.messages import (
    EMPTY_SNAPSHOT,
    Snapshot,
    ToolResult,
    call_names,
    compare,
    tool_results,
    with_tool_results,
)
from memstrata.prompts import (
    READ_TOOL_RESULT_DESCRIPTION,
    TOOL_RESULT_GONE,
    TOOL_RESULT_OFFLOADED,
    TOOL_RESULT_PRUNED,
    quote_notices,
)
from memstrata.redaction import redacted_for_log
from memstrata.safe_files import MAX_FILE_ID, check_file_id
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import InMemoryStore, Store, open_store
from memstrata.stores.base import Answer, ChangeMark, Changes, ChangesSince, Read, validate_ttl
from memstrata.tokens import (
    EstimatingCounter,
    TokenCounter,
    checked_counter,
    exact_count,
    exact_count_over,
    same_counts,
)
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.tool_results")

Summarizer = Callable[[str], str]

DEFAULT_THRESHOLD_TOKENS = 2000
DEFAULT_KEEP_RECENT = 3
DEFAULT_PAGE_TOKENS = 4000
MAX_PAGE_TOKENS = 32_000
DEFAULT_TTL = 7 * 86_400.0
_NAMESPACE = "tool-results"
_NONE = "-"  # the scope label of an unset thread or resource
_THREADS_DIR = "threads"
_RESOURCES_DIR = "resources"
_EARLIER_KEPT = 32  # older ids a reused call_id lists
_SEEN_LIMIT = 50_000  # results whose offload decision is remembered
# Characters the remembered results' keys may hold between them: a key holds the result's text,
# so a long-running server must not keep every large result it ever saw alive.
_SEEN_MAX_CHARS = 32 << 20
_LISTS_KEPT = 64  # scopes whose last conversation the offload pass keeps a snapshot of
_READ_TOOL_NAMES = frozenset({"read_tool_result"})
_UNSEEN = "\x00unseen"
# The first line of a notice this layer writes, whole; a summary of at most summary_tokens
# follows it (plus a few tokens quote_notices may add).
_NOTICE_HEADER = re.compile(
    re.escape(TOOL_RESULT_OFFLOADED)
    .replace(re.escape("{call_id}"), r"(?P<id>[A-Za-z0-9][A-Za-z0-9_.:-]*)", 1)
    .replace(re.escape("{call_id}"), "(?P=id)", 1)
    .replace(re.escape("{chars}"), "[0-9]+")
    .replace(re.escape("{tokens}"), "[0-9]+")
    + r"(?:\n|\Z)"
)
_SUMMARY_SLACK = 16


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
            layer runs in a stack; used on its own, a private in-memory store.
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
        # What offload_messages and keep decided for a (scope, call_id, body), keyed by content:
        # a conversation is prepared again at every call of a tool loop, and each result is
        # counted and stored once. Shared by every run of the layer, hence the scope in the key.
        self._seen: OrderedDict[tuple[Any, ...], str | None] = OrderedDict()
        self._seen_lock = threading.Lock()
        # The characters the keys of _seen hold (a list: the runs' copies share it with _seen).
        self._seen_chars = [0]
        # Per scope, the last conversation offload_messages saw: its snapshot, the notices
        # it put at each position (position -> block -> notice) and the version of _seen they
        # came from. _version[0] grows whenever remembered notices are rewritten (_repoint).
        self._lists: OrderedDict[Any, tuple[Snapshot, dict[int, dict[int | None, str]], int]] = (
            OrderedDict()
        )
        self._version = [0]
        # Per scope, with results in a store: where the scope's call records stood in the
        # store's history when this object last looked, and what it wrote under each id since
        # (content hash, when). A decision in _seen names such an id; another server storing
        # other text under it (a reused call_id), a deletion or the TTL running out makes the
        # decision stale, and each run's opening looks for that (see _catch_up).
        self._followed: OrderedDict[
            tuple[str, str] | None, tuple[ChangeMark, dict[str, tuple[str, float]]]
        ] = OrderedDict()
        self._followed_ids = [0]  # ids in all of _followed (a list: the runs' copies share it)

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
            self._store = InMemoryStore()
        scope = self._scope or (_NONE, _NONE)
        return _StoreBackend(self._store, (_NAMESPACE, *scope), self.ttl)

    def _calls_namespace(self) -> tuple[str, ...]:
        """Where a store keeps this scope's call records (see ``_StoreBackend``)."""
        return (_NAMESPACE, *(self._scope or (_NONE, _NONE)), "calls")

    def _follow(self, backend: _Backend, writes: Sequence[tuple[str, str]]) -> None:
        """Notes that this object is about to write ``(id, content hash)`` pairs to the
        store: the scope's mark is taken before its first write, so whatever another server
        writes from then on shows at a later :meth:`_catch_up`. Past ``_SEEN_LIMIT`` ids
        followed in all, the least recently written scope is let go, with its decisions."""
        if not isinstance(backend, _StoreBackend):
            return
        scope = self._scope
        mark: ChangeMark | None = None
        dropped: list[tuple[str, str] | None] = []
        while True:
            with self._seen_lock:
                held = self._followed.get(scope)
                if held is None and mark is not None:
                    held = self._followed[scope] = (mark, {})
                if held is not None:
                    wrote, count, now = held[1], self._followed_ids, time.time()
                    for id_, digest_hex in writes:
                        # The most recent write last: a catch-up finds the oldest first.
                        count[0] -= wrote.pop(id_, None) is not None
                        wrote[id_] = (digest_hex, now)
                        count[0] += 1
                    self._followed.move_to_end(scope)
                    while count[0] > _SEEN_LIMIT and len(self._followed) > 1:
                        gone, (_, ids) = self._followed.popitem(last=False)
                        count[0] -= len(ids)
                        dropped.append(gone)
                    break
            mark = backend.store.change_mark(backend.calls)
        for gone in dropped:
            self._forget(gone, None)

    def _catch_up(self, opened: Mapping[Read, Answer] | None = None) -> None:
        """Forgets the decisions naming an id whose stored text may no longer be the one
        decided on: since this object last looked, another server stored other text under it
        (a reused call_id, on another server of the same conversation), it was deleted, or
        half the TTL passed since this object stored it (storing again renews the TTL, which
        the store does not report running out). Such results are decided, and stored, again
        at the next offload. ``opened`` holds the run's opening reads."""
        if self._dir is not None or self._store is None or not self.enabled:
            return
        scope = self._scope
        with self._seen_lock:
            held = self._followed.get(scope)
        if held is None:
            return  # nothing stored from here in this scope: no decision to check
        calls = self._calls_namespace()
        answer = (opened or {}).get(ChangesSince(calls, held[0]))
        changes = answer if isinstance(answer, Changes) else self._store.changes(calls, held[0])
        renew_before = time.time() - self.ttl / 2 if self.ttl is not None else None
        with self._seen_lock:
            if self._followed.get(scope) is not held:
                return  # caught up meanwhile, or let go with its decisions
            wrote = held[1]
            stale: set[str] = set()
            if changes.complete:
                stored = {item.key: _stored_hash(item.value) for item in changes.items}
                stale.update(
                    i for i, (digest_hex, _) in wrote.items() if stored.get(i) != digest_hex
                )
            else:
                changed = {item.key: _stored_hash(item.value) for item in changes.items}
                changed.update(dict.fromkeys(changes.removed))
                # Kept in ``wrote``: what this object stored there is still what a write of
                # its own in flight meanwhile would make it hold again.
                stale.update(i for i, h in changed.items() if i in wrote and wrote[i][0] != h)
            if renew_before is not None:
                # Oldest first (each write moves its id last): stored again once decided again.
                expired = []
                for id_, (_, at) in wrote.items():
                    if at >= renew_before:
                        break
                    expired.append(id_)
                for id_ in expired:
                    del wrote[id_]
                self._followed_ids[0] -= len(expired)
                stale.update(expired)
            self._followed[scope] = (changes.mark, wrote)
        if stale:
            self._forget(scope, stale)

    def _forget(self, scope: tuple[str, str] | None, ids: set[str] | None) -> None:
        """Drops ``scope``'s decisions naming one of ``ids`` (every one of the scope's, for
        None), and the conversation snapshots whose notices may name them."""
        # A decision names its call_id, or an id derived from it (derived_id).
        bases = {id_.rpartition(":")[0] for id_ in ids or () if ":" in id_}
        cut = MAX_FILE_ID - 13
        with self._seen_lock:
            for key in list(self._seen):
                if key[0] != scope:
                    continue
                call_id = key[1]
                if ids is None or call_id in ids or call_id[:cut] in bases:
                    self._seen_chars[0] -= len(key[2])
                    del self._seen[key]
            self._version[0] += 1  # every kept snapshot's notices are decided again

    # Layer protocol ---------------------------------------------------------------------------

    def opening_reads(self, ctx: RunContext) -> list[Read]:
        """What changed among the run's scope's call records since this object last looked,
        read with the other layers' when the run opens (nothing before its first store there,
        nor with results in files)."""
        if self._dir is not None or not self.enabled or self._store is not ctx.store:
            return []
        unset = ctx.thread_id is None and ctx.resource_id is None
        scope = None if unset else (_label(ctx.resource_id), _label(ctx.thread_id))
        with self._seen_lock:
            held = self._followed.get(scope)
        if held is None:
            return []
        return [ChangesSince((_NAMESPACE, *(scope or (_NONE, _NONE)), "calls"), held[0])]

    def init(self, ctx: RunContext, opened: Mapping[Read, Answer] | None = None) -> ToolResults:
        """The layer as the run's thread sees it (:meth:`for_thread`), counting with the
        stack's token counter and keeping results in the stack's store, unless the caller
        chose them, and caught up with what other servers stored in that scope (see
        :meth:`_catch_up`). The first stack to run the layer binds it to those; a run of a
        stack that counts or stores otherwise gets a view of its own, with its own
        decisions, so it never reuses the other stack's decisions nor writes to its store."""
        tokens = self.tokens if self._tokens_given else ctx.tokens
        store = self._store if self._store_given or self._dir is not None else ctx.store
        if not self._bound:
            self._bound = True
            self.tokens, self._store = tokens, store
        if same_counts(tokens, self.tokens) and store is self._store:
            scoped = self.for_thread(ctx.thread_id, ctx.resource_id)
            scoped._catch_up(opened)
            return scoped
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view.tokens, view._store = tokens, store
        view._seen, view._seen_lock, view._seen_chars = OrderedDict(), threading.Lock(), [0]
        view._lists, view._version = OrderedDict(), [0]
        view._followed, view._followed_ids = OrderedDict(), [0]
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
        notice = TOOL_RESULT_OFFLOADED.format(call_id=call_id, chars=len(text), tokens=tokens)
        # The summary quotes the tool's own text: it may not pass for a notice of ours.
        return f"{notice}\n{quote_notices(self.summarize(text))}"

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
        scope = self._scope
        with self._seen_lock:
            kept = self._lists.get(scope)
            version = self._version[0]
        if kept is not None and kept[2] == version:
            previous, notices = kept[0], kept[1]
        else:
            previous, notices = EMPTY_SNAPSHOT, {}
        try:
            snapshot, changed, origin = compare(previous, given, shallow=_holds_no_result)
        except (TypeError, ValueError):  # an item that is not a dict: the plain pass skips it
            return self._offload_all(given)
        if origin is not None and notices:  # a window that slid keeps its notices
            notices = {p: notices[q] for p, q in enumerate(origin) if q in notices}
        n = len(given)
        if any(p >= n for p in notices):  # a shorter list: its positions past the end are gone
            notices = {p: b for p, b in notices.items() if p < n}
        if changed:
            notices = dict(notices)
            for p in changed:
                notices.pop(p, None)
            found = tool_results([given[p] for p in changed])
            decided = self._decisions(given, found, positions=changed)
            for (p, block), notice in decided.items():
                notices.setdefault(p, {})[block] = notice
            with self._seen_lock:
                rewritten = self._version[0] != version
            if rewritten:
                # The notices kept for unchanged positions may name an id whose text this pass
                # moved (see _repoint); the next pass starts afresh (the version changed).
                return self._offload_all(given)
        with self._seen_lock:
            self._lists[scope] = (snapshot, notices, version)
            self._lists.move_to_end(scope)
            while len(self._lists) > _LISTS_KEPT:
                self._lists.popitem(last=False)
        if not notices:
            return given
        bodies = {(p, b): notice for p, blocks in notices.items() for b, notice in blocks.items()}
        return with_tool_results(given, bodies)

    def _offload_all(self, given: list[Message]) -> list[Message]:
        bodies = self._decisions(given, tool_results(given))
        return with_tool_results(given, bodies) if bodies else given

    def _decisions(
        self, given: list[Message], found: list[ToolResult], positions: list[int] | None = None
    ) -> dict[tuple[int, int | None], str]:
        """The notice for each result in ``found`` that is to be offloaded, by (position,
        block); ``positions`` maps the results' positions to ``given``'s."""
        bodies: dict[tuple[int, int | None], str] = {}
        names: dict[str, str] | None = None
        with self._seen_lock:
            version = self._version[0]
        keys: list[tuple[tuple[int, int | None], tuple[Any, ...]]] = []
        for result in found:
            position = positions[result.position] if positions is not None else result.position
            key = _seen_key(self._scope, result.call_id, result.body)
            if key is None:
                continue
            keys.append(((position, result.block), key))
            with self._seen_lock:
                decided = self._seen.get(key, _UNSEEN)
            if decided is _UNSEEN:
                if names is None:
                    names = call_names(given)
                if names.get(result.call_id) in _READ_TOOL_NAMES:
                    # A page the model asked for: offloading it would send the model back to
                    # read it again, for ever.
                    decided = None
                else:
                    decided = self._decide(position, result.call_id, result.body)
                self._remember(key, decided)
            if decided is not None:
                bodies[(position, result.block)] = decided
        with self._seen_lock:
            if self._version[0] != version:
                # A result stored in this pass moved the older text of its call_id under a new
                # id (see _repoint): a notice decided before it in the pass named the old one.
                for place, key in keys:
                    repointed = self._seen.get(key, _UNSEEN)
                    if place in bodies and isinstance(repointed, str):
                        bodies[place] = repointed
        return bodies

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

    def _remember(self, key: tuple[Any, ...], decided: str | None) -> None:
        with self._seen_lock:
            seen, chars = self._seen, self._seen_chars
            if key not in seen:
                chars[0] += len(key[2])
            seen[key] = decided
            seen.move_to_end(key)
            while len(seen) > 1 and (len(seen) > _SEEN_LIMIT or chars[0] > _SEEN_MAX_CHARS):
                chars[0] -= len(seen.popitem(last=False)[0][2])

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
        key = _seen_key(self._scope, call_id, body, kept=True)
        if key is not None:
            with self._seen_lock:
                known = self._seen.get(key, _UNSEEN)
            if known is not _UNSEEN:
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
            self._remember(key, readable)
        return readable

    def _own_notice(self, text: str) -> str | None:
        """The call_id ``text`` points to if it is a notice of this layer (its first line
        whole, then no more than a summary), else None: a tool's output that only opens like
        a notice (a copy of one, then anything) is a result of its own, offloaded and kept as
        any other, never taken for the result the copy names."""
        header = _NOTICE_HEADER.match(text)
        if header is None:
            return None
        rest = text[header.end() :]
        if self.tokens.count(rest) > self.summary_tokens + _SUMMARY_SLACK:
            return None
        return header.group("id")

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
        if current is None or current[0] == digest_hex:
            self._follow(backend, [(call_id, digest_hex)])
            backend.write(call_id, text, digest_hex, earlier=current[1] if current else [])
            return call_id
        older = derived_id(call_id, current[0])
        if not newer_wins:
            derived = derived_id(call_id, digest_hex)
            self._follow(backend, [(derived, digest_hex)])
            backend.write(derived, text, digest_hex, earlier=[])
            return derived
        self._follow(backend, [(older, current[0]), (call_id, digest_hex)])
        backend.alias(older, current[0])
        earlier = [older, *(e for e in current[1] if e != older)][:_EARLIER_KEPT]
        backend.write(call_id, text, digest_hex, earlier=earlier)
        self._repoint(call_id, current[0], older)
        return call_id

    def _repoint(self, call_id: str, digest_hex: str, older: str) -> None:
        """After a reused call_id moved its older text to ``older``: the remembered decisions
        for that text name ``older`` from now on, so a conversation holding both results
        points each message at its own."""
        with self._seen_lock:
            self._version[0] += 1
            for key, decided in list(self._seen.items()):
                scope, key_id, body, kept = key
                if scope != self._scope or key_id != call_id or decided is None:
                    continue
                data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
                if hashlib.sha256(data).hexdigest() != digest_hex:
                    continue
                if kept:
                    self._seen[key] = older
                else:
                    self._seen[key] = decided.replace(
                        f"call_id={call_id},", f"call_id={older},", 1
                    ).replace(f'(call_id="{call_id}")', f'(call_id="{older}")', 1)

    def summarize(self, text: str) -> str:
        """The summary that stands in for ``text``: the summarizer's, else the digest."""
        if not isinstance(text, str):
            raise InvalidInputError(f"text must be a str, got {type(text).__name__}")
        if self.summarizer is not None:
            try:
                summary = self.summarizer(text)
                if not isinstance(summary, str):
                    raise TypeError(f"summarizer returned {type(summary).__name__}, not str")
                return self._trim(summary.strip())
            except Exception as exc:
                logger.warning(
                    "summarizer failed (%s: %s); using the digest",
                    type(exc).__name__,
                    # Its error often quotes its request: a URL with a key in its query.
                    redacted_for_log(str(exc)),
                )
        return digest(text, max_tokens=self.summary_tokens, tokens=self.tokens)

    def _trim(self, text: str) -> str:
        if exact_count_over(self.tokens, text, self.summary_tokens, keep=False) is None:
            return text
        end = _fit_prefix(text, self.summary_tokens - 2, self.tokens)
        while True:
            trimmed = text[:end].rstrip() + " …"
            if exact_count_over(self.tokens, trimmed, self.summary_tokens, keep=False) is None:
                return trimmed
            if end == 0:
                return ""
            end = end * 9 // 10

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
        check_file_id(call_id)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a non-negative int, got {offset!r}")
        if (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 1 <= max_tokens <= MAX_PAGE_TOKENS
        ):
            raise InvalidInputError(
                f"max_tokens must be an int from 1 to {MAX_PAGE_TOKENS}, got {max_tokens!r}"
            )
        # A page holds at most max_tokens * 16 characters (see _fit_prefix), and one more
        # tells whether anything follows.
        found = self._backend().read(call_id, offset, max(max_tokens, 1) * 16 + 1)
        if found is None:
            raise ToolError(f"no tool result is stored under call_id {call_id!r}", code="not_found")
        rest, total, earlier = found
        if offset > total:
            raise InvalidInputError(f"offset {offset} is past the end ({total} chars)")
        end = _fit_prefix(rest, max_tokens, self.tokens)
        if end == 0 and rest:
            # An empty page would point back at the same offset: a model paging on would loop.
            need = exact_count(self.tokens, rest[0], keep=False)
            raise InvalidInputError(
                f"max_tokens {max_tokens} is too small for the text at offset {offset}: its "
                f"next character alone is {need} tokens"
            )
        if end < len(rest):
            # Prefer to end the page at a line break in its last fifth.
            cut = rest.rfind("\n", end - end // 5, end)
            if cut > 0:
                end = cut + 1
        page_end = offset + end
        page: dict[str, Any] = {
            "call_id": call_id,
            "content": rest[:end],
            "offset": offset,
            "next_offset": page_end if page_end < total else None,
            "total_chars": total,
        }
        if earlier:
            page["earlier"] = list(earlier)
        return page

    def tool(self) -> Tool:
        """The ``read_tool_result`` tool for the model."""

        def handler(args: dict[str, Any]) -> dict[str, Any]:
            try:
                return self.read_tool_result(
                    args["call_id"],
                    args.get("offset", 0),
                    args.get("max_tokens", DEFAULT_PAGE_TOKENS),
                )
            except InvalidInputError as exc:
                raise ToolError(str(exc), code="invalid_arguments") from None

        return Tool(
            name="read_tool_result",
            description=READ_TOOL_RESULT_DESCRIPTION,
            parameters={
                "type": "object",
                "properties": {
                    "call_id": {"type": "string", "minLength": 1, "maxLength": 128},
                    "offset": {"type": "integer", "minimum": 0},
                    "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_TOKENS},
                },
                "required": ["call_id"],
                "additionalProperties": False,
            },
            handler=handler,
        )


def derived_id(call_id: str, digest_hex: str) -> str:
    """The id an older result of a reused call_id stays readable under."""
    return f"{call_id[: MAX_FILE_ID - 13]}:{digest_hex[:12]}"


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


def _stored_hash(value: Any) -> str | None:
    """The content hash a stored call record points to (None for a record not of this layer)."""
    return value.get("sha256") if isinstance(value, dict) else None


def _holds_no_result(top: Message) -> bool:
    """Whether a message holds no tool result whatever its nested values (an assistant or
    system message): the offload pass compares it by its top level only."""
    role = top.get("role")
    return type(role) is str and role in ("assistant", "system")


def _seen_key(
    scope: tuple[str, str] | None, call_id: str, body: Any, *, kept: bool = False
) -> tuple[Any, ...] | None:
    """The content key of a decision: the body itself when it is text (its hash is cached on
    the str), else its JSON text; None when the body is not JSON data."""
    if type(body) is not str:
        try:
            body = orjson.dumps(body)
        except (TypeError, orjson.JSONEncodeError):
            return None
    return (scope, call_id, body, kept)


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray)):
        raise InvalidInputError("tool result content must be text or JSON data, got bytes")
    try:
        return orjson.dumps(content).decode()
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidInputError(f"tool result content must be text or JSON data: {exc}") from None
