"""ToolResults: large tool results leave the conversation for a file; the model can read them back.

Implements Layer 1 of seed 003. A tool result over ``threshold_tokens`` is written verbatim to
``<tool_calls_dir>/<call_id>.txt`` and replaced in the conversation by a short summary plus the
call_id; the model recovers the verbatim text with the ``read_tool_result`` tool, page by page.
:func:`prune_messages_sliding_window` is the sliding-window prune the context gate calls.

Usage inside a tool loop::

    stack = MemoryStack([ToolResults(tool_calls_dir=run_dir / "tool_calls")], store=...)
    with stack.run(thread_id="t1") as run:
        offload = run.layer("tool-results")
        text = my_tool(**args)                       # your own tool, any size
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": offload.offload(call.id, text)})

Decisions where the seed is silent:

* Identical payloads are stored once, unlike the seed (which keeps both copies): the bytes live
  in ``by-hash/<sha256>.txt`` and every ``<call_id>.txt`` holding them is a hard link to it (a
  copy where the file system has no hard links). Storing a call_id again with the same text is
  a no-op; with different text it is refused, so a stored result never changes under the model.
* Files are private (0600), directories the layer creates too (0700), and files are written
  atomically: tool results often carry data a model fetched on a user's behalf. A symlink, FIFO
  or directory planted under a call_id's name, or as ``by-hash``, is refused, never followed.
* With no summarizer, the summary is a deterministic extractive digest (size, line count, the
  top-level shape of JSON, head and tail lines) within ``summary_tokens``. A summarizer that
  fails or returns something other than text falls back to the digest, with a warning.
* Results are kept per thread: a run with a ``thread_id`` stores and reads under
  ``<tool_calls_dir>/threads/<sha256 of the thread id>/``, so on a stack serving many
  conversations one model cannot read another conversation's results by guessing a call_id
  (call_ids are short and often sequential). A run without a thread, and the layer used on its
  own, use ``tool_calls_dir`` itself. Sub-runs share their parent's results.
* ``read_tool_result`` pages by characters: ``offset`` is a character offset into the text and
  each page holds at most ``max_tokens`` tokens, cut at a line break when one is near the end.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from memstrata._core import prune_sliding_window
from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.prompts import (
    READ_TOOL_RESULT_DESCRIPTION,
    TOOL_RESULT_OFFLOADED,
    TOOL_RESULT_PRUNED,
)
from memstrata.safe_files import (
    check_file_id,
    is_regular_file,
    path_in,
    read_regular,
    real_subdirectory,
    write_atomic,
)
from memstrata.stack import Budget, Message, RunContext
from memstrata.tokens import EstimatingCounter, TokenCounter
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.tool_results")

Summarizer = Callable[[str], str]

DEFAULT_THRESHOLD_TOKENS = 2000
DEFAULT_KEEP_RECENT = 3
DEFAULT_SUMMARY_TOKENS = 300
DEFAULT_PAGE_TOKENS = 4000
MAX_PAGE_TOKENS = 32_000
_HASH_DIR = "by-hash"
_THREADS_DIR = "threads"
_LINE_CHARS = 160  # longest line the digest shows before cutting it


def prune_messages_sliding_window(
    messages: Sequence[Message],
    *,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    placeholder: str = TOOL_RESULT_PRUNED,
) -> tuple[list[Message], int]:
    """Rewrites older tool-role messages to ``[summarized: call_id=...]`` placeholders.

    The ``keep_recent`` latest tool messages stay verbatim; the input is not mutated. The Rust
    kernel :func:`memstrata.prune_sliding_window` does the work.

    Returns:
        The new message list and how many messages were replaced.
    """
    return prune_sliding_window(list(messages), keep_recent=keep_recent, placeholder=placeholder)


class ToolResults:
    """The tool-result offloading layer (also usable on its own, without a stack).

    Args:
        tool_calls_dir: Where verbatim results go; created on first use. None: a fresh private
            temporary directory per layer object.
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
        self._dir = Path(tool_calls_dir) if tool_calls_dir is not None else None
        # Set on the per-thread copies init() hands to runs: the subdirectory of _dir.
        self._scope: str | None = None
        self.threshold_tokens = threshold_tokens
        self.summarizer = summarizer
        self.summary_tokens = summary_tokens
        self.enabled = enabled
        self.tokens: TokenCounter = tokens if tokens is not None else EstimatingCounter()
        self._tokens_given = tokens is not None
        self.name = name
        self.slot = slot

    @property
    def tool_calls_dir(self) -> Path:
        """Where this object's results live: the configured directory, or for a run's handle
        its thread's subdirectory (created on the first write, never by a read)."""
        base = self._base_dir()
        return base if self._scope is None else base / _THREADS_DIR / self._scope

    def _base_dir(self) -> Path:
        """The configured directory, or the private temporary one made on first use (before any
        per-thread copy is taken, so every thread's copy shares it)."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="memstrata-tool-calls-"))
        return self._dir

    def for_thread(self, thread_id: str | None) -> ToolResults:
        """The layer as one conversation sees it: the same options, its own results.

        Args:
            thread_id: The conversation; None for the unscoped directory.
        """
        if thread_id is None:
            return self
        self._base_dir()
        # A shallow copy, made directly: copy.copy's generic protocol costs several times more,
        # and this runs at every run's start.
        scoped = object.__new__(type(self))
        scoped.__dict__.update(self.__dict__)
        scoped._scope = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return scoped

    # Layer protocol ---------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> ToolResults:
        # The stack's token counter replaces the default one, never one the caller chose.
        if not self._tokens_given:
            self.tokens = ctx.tokens
        return self.for_thread(ctx.thread_id)

    def recall(self, handle: ToolResults, budget: int) -> list[Message]:
        return []

    def observe(self, handle: ToolResults, message: Message) -> None:
        return None

    def tools(self, handle: ToolResults) -> list[Tool]:
        # The handle's tool: it reads the run's thread only.
        return [handle.tool()] if handle.enabled else []

    def on_spawn(self, handle: ToolResults, child: RunContext) -> ToolResults:
        return handle

    def close(self, handle: ToolResults, error: BaseException | None) -> None:
        """Nothing to flush: every result is on disk when ``offload`` returns."""

    # Offloading -------------------------------------------------------------------------------

    def offload(self, call_id: str, content: Any) -> str:
        """What the conversation should hold for this tool result.

        Results within ``threshold_tokens`` come back unchanged (as text). Larger ones are
        stored verbatim and replaced by a notice with the call_id and a summary.

        Args:
            call_id: The tool call's id (``tool_call_id``); see :func:`check_file_id`.
            content: The result: text, or JSON data (serialized as JSON text).

        Raises:
            InvalidInputError: A call_id that could leave the directory, content that is not
                text or JSON data, or a call_id already stored with different text.
        """
        text = _as_text(content)
        if not self.enabled:
            return text
        check_file_id(call_id)
        tokens = self.tokens.count(text)
        if tokens <= self.threshold_tokens:
            return text
        self.store(call_id, text)
        notice = TOOL_RESULT_OFFLOADED.format(call_id=call_id, chars=len(text), tokens=tokens)
        return f"{notice}\n{self.summarize(text)}"

    def offload_message(self, message: Message) -> Message:
        """A tool-role message with its content offloaded when over the threshold (a new dict;
        other messages are returned as they are)."""
        if message.get("role") != "tool" or "tool_call_id" not in message:
            return message
        content = self.offload(message["tool_call_id"], message.get("content", ""))
        return message if content is message.get("content") else {**message, "content": content}

    def store(self, call_id: str, text: str) -> Path:
        """Writes ``text`` as ``<call_id>.txt`` (deduplicated by content hash); returns the path."""
        directory = self._writable_dir()
        path = path_in(directory, call_id, ".txt")
        data = text.encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(data).hexdigest()
        if os.path.lexists(path):
            _require_regular(path)
            if _sha256_file(path) == digest:
                return path
            raise InvalidInputError(
                f"call_id {call_id!r} is already stored with different content; "
                "a stored tool result never changes"
            )
        blob = real_subdirectory(directory, _HASH_DIR) / f"{digest}.txt"
        if not is_regular_file(blob):
            write_atomic(blob, data)  # the rename replaces anything planted there
        _link_or_copy(blob, path)
        return path

    def _writable_dir(self) -> Path:
        """The results directory, creating a thread's subdirectories (private, never through a
        planted symlink)."""
        base = self._base_dir()
        if self._scope is None:
            return base
        return real_subdirectory(real_subdirectory(base, _THREADS_DIR), self._scope)

    def summarize(self, text: str) -> str:
        """The summary that stands in for ``text``: the summarizer's, else the digest."""
        if self.summarizer is not None:
            try:
                summary = self.summarizer(text)
                if not isinstance(summary, str):
                    raise TypeError(f"summarizer returned {type(summary).__name__}, not str")
                return self._trim(summary.strip())
            except Exception as exc:
                logger.warning(
                    "summarizer failed (%s: %s); using the digest", type(exc).__name__, exc
                )
        return digest(text, max_tokens=self.summary_tokens, tokens=self.tokens)

    def _trim(self, text: str) -> str:
        if self.tokens.count(text) <= self.summary_tokens:
            return text
        end = _fit_prefix(text, self.summary_tokens - 2, self.tokens)
        return text[:end].rstrip() + " …"

    # Reading back -----------------------------------------------------------------------------

    def read_tool_result(
        self, call_id: str, offset: int = 0, max_tokens: int = DEFAULT_PAGE_TOKENS
    ) -> dict[str, Any]:
        """The verbatim text of a stored result, one page of at most ``max_tokens`` tokens.

        Returns:
            ``{"call_id", "content", "offset", "next_offset", "total_chars"}``; ``next_offset``
            is None on the last page.

        Raises:
            InvalidInputError: A bad call_id, offset or max_tokens (named in the message).
            ToolError: No result is stored under this call_id (code ``not_found``).
        """
        path = path_in(self.tool_calls_dir, call_id, ".txt")
        if self._scope is not None:
            for directory in (path.parent.parent, path.parent):
                if os.path.islink(directory):
                    raise InvalidInputError(
                        f"{directory} is a symlink; refusing to read through it"
                    )
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
        try:
            text = read_regular(path).decode("utf-8", "surrogatepass")
        except FileNotFoundError:
            raise ToolError(
                f"no tool result is stored under call_id {call_id!r}", code="not_found"
            ) from None
        if offset > len(text):
            raise InvalidInputError(f"offset {offset} is past the end ({len(text)} chars)")
        rest = text[offset:]
        end = _fit_prefix(rest, max_tokens, self.tokens)
        if end < len(rest):
            # Prefer to end the page at a line break in its last fifth.
            cut = rest.rfind("\n", end - end // 5, end)
            if cut > 0:
                end = cut + 1
        page_end = offset + end
        return {
            "call_id": call_id,
            "content": rest[:end],
            "offset": offset,
            "next_offset": page_end if page_end < len(text) else None,
            "total_chars": len(text),
        }

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


# The digest -----------------------------------------------------------------------------------


def digest(
    text: str, *, max_tokens: int = DEFAULT_SUMMARY_TOKENS, tokens: TokenCounter | None = None
) -> str:
    """A deterministic extractive summary of ``text`` within ``max_tokens``.

    Size and line count; for JSON, its top-level shape (keys and the type of each value, or the
    length of an array and the keys of its first item); then as many head and tail lines as fit
    (long lines cut), the head first.
    """
    counter = tokens if tokens is not None else EstimatingCounter()
    lines = text.splitlines()
    header = [f"size: {len(text):,} chars, {len(lines):,} lines"]
    shape = _json_shape(text)
    if shape:
        header.append(f"json: {shape}")
    out = "\n".join(header)
    used = counter.count(out)
    if used >= max_tokens:
        return out[: _fit_prefix(out, max_tokens, counter)]
    head: list[str] = []
    tail: list[str] = []
    lo, hi = 0, len(lines) - 1
    take_head = True
    # Alternate two head lines for one tail line: the start usually says what the result is.
    turn = 0
    while lo <= hi:
        line = lines[lo] if take_head else lines[hi]
        shown = line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + " …"
        cost = counter.count(shown) + 1
        if used + cost + 4 > max_tokens:
            break
        used += cost
        if take_head:
            head.append(shown)
            lo += 1
        else:
            tail.append(shown)
            hi -= 1
        turn += 1
        take_head = turn % 3 != 2
    parts = [out]
    if head:
        parts.append("head:\n" + "\n".join(head))
    if lo <= hi:
        parts.append(f"… {hi - lo + 1:,} lines not shown …")
    if tail:
        parts.append("tail:\n" + "\n".join(reversed(tail)))
    return "\n".join(parts)


def _json_shape(text: str) -> str:
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return ""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ""
    if isinstance(value, dict):
        fields = [f"{k}: {_describe(v)}" for k, v in list(value.items())[:20]]
        more = f", … {len(value) - 20} more keys" if len(value) > 20 else ""
        return f"object with {len(value)} keys {{{', '.join(fields)}{more}}}"
    if isinstance(value, list):
        first = f"; first item: {_describe(value[0], keys=True)}" if value else ""
        return f"array of {len(value)} items{first}"
    return ""


def _describe(value: Any, *, keys: bool = False) -> str:
    if isinstance(value, dict):
        if keys:
            return "object {" + ", ".join(list(value)[:15]) + ("…" if len(value) > 15 else "") + "}"
        return f"object({len(value)} keys)"
    if isinstance(value, list):
        return f"array({len(value)})"
    if isinstance(value, str):
        return f"string({len(value)})"
    if isinstance(value, bool):
        return "bool"
    if value is None:
        return "null"
    return "number"


# Helpers --------------------------------------------------------------------------------------


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray)):
        raise InvalidInputError("tool result content must be text or JSON data, got bytes")
    try:
        return orjson.dumps(content).decode()
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidInputError(f"tool result content must be text or JSON data: {exc}") from None


def _fit_prefix(text: str, max_tokens: int, counter: TokenCounter) -> int:
    """The length of the longest prefix of ``text`` within ``max_tokens`` (binary search)."""
    if counter.count(text) <= max_tokens:
        return len(text)
    lo, hi = 0, min(len(text), max(max_tokens, 1) * 16)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _require_regular(path: Path) -> None:
    if not is_regular_file(path):
        raise InvalidInputError(
            f"{path.name} is a symlink or not a regular file; refusing to use it"
        )


def _link_or_copy(blob: Path, path: Path) -> None:
    try:
        os.link(blob, path)
    except FileExistsError:
        _require_regular(path)
        if _sha256_file(path) != _sha256_file(blob):
            raise InvalidInputError(
                f"{path.name} appeared concurrently with different content"
            ) from None
    except OSError:
        # No hard links here (some network or FUSE file systems): a private atomic copy.
        write_atomic(path, read_regular(blob))
