"""ContextGate: every call boundary is checked against the model's input window.

Implements Layer 2 of Modulatio's context engineering. :meth:`ContextGate.check_and_compress`
estimates the prompt
(padded by ``pad_pct``) and takes one of four paths:

* below ``soft_warn_at_pct`` of the window: pass, unchanged;
* in ``[soft_warn_at_pct, prune_at_pct)``: pass, with one WARNING through :mod:`logging` per
  run (not one per tool-loop iteration);
* at ``prune_at_pct`` or above: older tool results become ``[summarized: call_id=...]``
  placeholders (the ``keep_recent`` latest stay verbatim) and the prompt is estimated again;
  if it now fits under the window it passes, pruned;
* still at or over the window: a redacted checkpoint of the conversation as it came (before
  pruning) is written to ``<checkpoints_dir>/<call_id>.json`` (``<call_id>~2.json`` and so on
  when the name is taken: never over another run's) and :class:`RecoverableContextError` is
  raised with its path, so the caller can decompose the task instead of burning iterations on
  a sure failure.

Every message format is handled alike (:mod:`memstrata.messages` knows them): OpenAI chat
``role: "tool"`` and legacy ``role: "function"`` messages, Responses ``function_call_output``
items and Anthropic ``tool_result`` blocks are pruned, Responses items are counted as their
chat equivalents.

With a :class:`~memstrata.stack.MemoryStack`, pass ``gate=ContextGate(...)``: ``run.prepare()``
then ends at the gate, so every call boundary passes it. When the stack also has the
ToolResults layer, the run hands the gate that layer's ``keep`` (the gate never imports the
layer): every result the gate prunes is stored first, so every placeholder naming a call_id
can be read back with ``read_tool_result``. Without it, a pruned result is replaced by a
placeholder that names a call_id only if the result is an offload notice (its text is stored);
any other says plainly that the text is gone.

Decisions where Modulatio is silent:

* "Fits" means the padded count is strictly below ``max_input_tokens``; the refusal is "at
  or above 100% after compression", as Modulatio says. With the native estimator, a prompt
  estimated at half the window or more is counted exactly (per message, cached likewise), and
  every path is decided on that count: the estimate stays within a factor of 2 of the exact
  count, so only below half the window can its error not matter.
* Per-message token counts are cached by content, never by object identity. The gate keeps a
  snapshot of the last four lists it checked (a shallow copy of each message whose values are
  all text or None, the JSON text of any other) with their counts: a position whose content is
  unchanged keeps its count, compared in C (:func:`memstrata.messages.compare`). Any other
  message is looked up by its items when every value is a text, number, bool or None, else by
  its JSON text. A message or content list edited in place is counted again. The keys'
  characters are bounded (8 Mi), so a new large block every turn cannot pile up. A message
  nesting deeper than 254 levels is refused with :class:`InvalidInputError` naming its index.
* "pruned" is reported only when a result was replaced; at the prune line with nothing left
  to prune, a prompt that fits passes as "warn".
* The once-per-run warning is keyed by ``run_id`` (the stack passes one per run); without one,
  the gate itself is the run until :meth:`ContextGate.new_run`.
* Checkpoints are redacted (on by default) by :mod:`memstrata.redaction`: the bodies of every
  non-conversational role, tool block and tool item, and tool-call arguments, become
  ``[redacted: N chars]``; going beyond Modulatio, user, assistant, system and developer text
  and dictionary keys are swept for secret-shaped strings, in linear time.
  ``redaction_policy`` lists the channels that were redacted; ``redacted`` says whether the
  checkpoint went through redaction at all, so a swept conversation that held nothing to
  redact (an empty policy) is told apart from one written with redaction turned off.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, Literal

import orjson

from memstrata._bridge import blocking
from memstrata._checks import checked_bool
from memstrata.exceptions import InvalidInputError, MemstrataError, RecoverableContextError
from memstrata.messages import (
    EMPTY_SNAPSHOT,
    MAX_SLIDE,
    Snapshot,
    compare,
    countable,
    is_message,
    tool_results,
    with_tool_results,
)
from memstrata.model_windows import FALLBACK_MAX_INPUT_TOKENS, max_input_tokens_for
from memstrata.prompts import TOOL_RESULT_GONE, TOOL_RESULT_OFFLOADED, TOOL_RESULT_PRUNED
from memstrata.redaction import redact_messages
from memstrata.safe_files import file_name, open_dir, write_new
from memstrata.tokens import EstimatingCounter, ExactCounter, TokenCounter, checked_counter

logger = logging.getLogger("memstrata.context_gate")

Message = dict[str, Any]
# keep(call_id, body) -> the id the body is readable under, or None; see check_and_compress.
Keeper = Callable[[str, Any], "str | None"]
GateState = Literal["pass", "warn", "pruned", "refused", "disabled"]

_WARNED_RUNS_KEPT = 4096
# Checkpoints one call_id may have in one directory (<call_id>.json, <call_id>~2.json, ...).
_CHECKPOINTS_PER_CALL_ID = 1000
# Messages whose counts are cached by content, and the characters their keys may hold between
# them (a key holds a message's texts, or its JSON): a few conversations' worth, so that a new
# large layer block every turn cannot pile up.
_CACHE_LIMIT = 200_000
_CACHE_MAX_CHARS = 8 << 20
_ID = r"[A-Za-z0-9][A-Za-z0-9_.:-]*"
_PLACEHOLDER = re.compile(
    re.escape(TOOL_RESULT_PRUNED).replace(re.escape("{call_id}"), _ID) + r"\Z"
)
_NOTICE_ID = re.compile(
    re.escape(TOOL_RESULT_OFFLOADED[: TOOL_RESULT_OFFLOADED.index("{")]) + f"({_ID}),"
)
# Values a message's items key its count by. Not numbers nor booleans: 1, 1.0 and True are
# equal (and hash alike) in Python, but a prompt holds their JSON text, which counts apart.
_TEXTS = frozenset({str, type(None)})
# Message lists whose snapshot and counts the gate keeps (conversations checked in turn).
_LISTS_KEPT = 4


@dataclass(frozen=True, init=False)
class GateDecision:
    """What the gate did at one call boundary.

    Attributes:
        state: ``pass``, ``warn``, ``pruned`` (pruned, now fits) or ``disabled``. A refusal
            raises instead of returning.
        messages: The messages to send (the input list itself unless pruned).
        estimated_tokens: The padded count of ``messages`` (estimated, or exact near the
            window; see the module docstring).
        max_input_tokens: The window they were checked against.
        pruned: How many tool results were replaced by placeholders.
    """

    state: GateState
    messages: list[Message]
    estimated_tokens: int
    max_input_tokens: int
    pruned: int = 0

    def __init__(
        self,
        state: GateState,
        messages: list[Message],
        estimated_tokens: int,
        max_input_tokens: int,
        pruned: int = 0,
    ) -> None:
        # One update of the instance's dict (see memstrata.tools.Tool): one made every call.
        self.__dict__.update(
            state=state,
            messages=messages,
            estimated_tokens=estimated_tokens,
            max_input_tokens=max_input_tokens,
            pruned=pruned,
        )

    @property
    def fraction(self) -> float:
        return self.estimated_tokens / self.max_input_tokens


class ContextGate:
    """The context-window gate.

    Args:
        model: Model name: picks the window from the table in :mod:`memstrata.model_windows`
            when ``max_input_tokens`` is None, and goes into checkpoints.
        max_input_tokens: The window in tokens; None: from the model table, else 8192 (with a
            logged warning: a guessed window).
        soft_warn_at_pct: Fraction of the window from which a WARNING is logged (once per run).
        prune_at_pct: Fraction of the window from which old tool results are pruned.
        pad_pct: Padding added to every estimate (tokenizers differ across providers).
        keep_recent: Tool results kept verbatim when pruning.
        checkpoints_dir: Where refusal checkpoints go; None: ``./checkpoints``.
        checkpoint_redact_secrets: Redact tool bodies, tool-call arguments and secret-shaped
            strings in checkpoints.
        enabled: False turns every check into a pass-through.
        tokens: Token counter; the native estimator (for ``model``'s encoding) by default.
        cache: Cache per-message counts by content (see the module docstring).
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        max_input_tokens: int | None = None,
        soft_warn_at_pct: float = 0.70,
        prune_at_pct: float = 0.80,
        pad_pct: float = 0.05,
        keep_recent: int = 3,
        checkpoints_dir: str | os.PathLike[str] | None = None,
        checkpoint_redact_secrets: bool = True,
        enabled: bool = True,
        tokens: TokenCounter | None = None,
        cache: bool = True,
    ) -> None:
        if max_input_tokens is not None and (
            isinstance(max_input_tokens, bool)
            or not isinstance(max_input_tokens, int)
            or max_input_tokens < 1
        ):
            raise InvalidInputError(
                f"max_input_tokens must be a positive int or None, got {max_input_tokens!r}"
            )
        for option, value in (
            ("soft_warn_at_pct", soft_warn_at_pct),
            ("prune_at_pct", prune_at_pct),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise InvalidInputError(f"{option} must be in (0, 1], got {value!r}")
        if soft_warn_at_pct > prune_at_pct:
            raise InvalidInputError(
                f"soft_warn_at_pct ({soft_warn_at_pct}) must not exceed prune_at_pct "
                f"({prune_at_pct})"
            )
        if (
            isinstance(pad_pct, bool)
            or not isinstance(pad_pct, (int, float))
            or not 0 <= pad_pct < 1
        ):
            raise InvalidInputError(f"pad_pct must be in [0, 1), got {pad_pct!r}")
        if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
            raise InvalidInputError(f"keep_recent must be a non-negative int, got {keep_recent!r}")
        if model is not None and not isinstance(model, str):
            raise InvalidInputError(f"model must be a str or None, got {type(model).__name__}")
        if checkpoints_dir is not None and not isinstance(checkpoints_dir, (str, os.PathLike)):
            raise InvalidInputError(
                "checkpoints_dir must be a path (str or os.PathLike) or None, got "
                f"{type(checkpoints_dir).__name__}"
            )
        if tokens is not None:
            checked_counter(tokens)
        self.model = model
        if max_input_tokens is None:
            max_input_tokens = max_input_tokens_for(model, fallback=0)
            if not max_input_tokens:
                # A guessed window: a model with a larger one would have every long prompt
                # pruned and refused, one with a smaller one rejected by its provider.
                max_input_tokens = FALLBACK_MAX_INPUT_TOKENS
                logger.warning(
                    "ContextGate: %s, so it takes a window of %d tokens; give "
                    "max_input_tokens=, or register the model's window once with "
                    "memstrata.model_windows.register_model_window(name, tokens)",
                    f"the window of model {model!r} is not known"
                    if model
                    else "neither model nor max_input_tokens was given",
                    max_input_tokens,
                )
        self.max_input_tokens = max_input_tokens
        self.soft_warn_at_pct = float(soft_warn_at_pct)
        self.prune_at_pct = float(prune_at_pct)
        self.pad_pct = float(pad_pct)
        self.keep_recent = keep_recent
        self.checkpoints_dir = (
            Path(checkpoints_dir) if checkpoints_dir is not None else Path("checkpoints")
        )
        self.checkpoint_redact_secrets = checked_bool(
            checkpoint_redact_secrets, "checkpoint_redact_secrets"
        )
        self.enabled = checked_bool(enabled, "enabled")
        self.tokens: TokenCounter = tokens if tokens is not None else EstimatingCounter(model)
        self.cache = checked_bool(cache, "cache")
        # A message's content key -> (tokens, characters the key holds); see _content_key.
        self._counts: OrderedDict[Any, tuple[int, int]] = OrderedDict()
        self._counts_chars = 0
        # The last lists checked, newest first: a snapshot of each and its messages' counts.
        self._lists: list[tuple[Snapshot, list[int]]] = []
        self._lock = threading.Lock()
        self._warned: OrderedDict[str, None] = OrderedDict()
        self._default_run = 0
        self._priming = _priming_tokens(self.tokens)
        # Near the window, the native estimator's prompts are counted exactly by a gate
        # counting with an exact counter (its own per-message cache), made when first needed:
        # its vocabulary takes a moment to load.
        self._exact: ContextGate | None = None
        # Whether the last prompt checked was counted exactly: the next, most often the same
        # conversation grown by a message or two, then goes straight to the exact counts. It
        # decides what is counted first, never what fits.
        self._near = False

    # The gate ---------------------------------------------------------------------------------

    def check_and_compress(
        self,
        messages: Sequence[Message],
        call_id: str,
        *,
        run_id: str | None = None,
        keep: Keeper | None = None,
    ) -> list[Message]:
        """The messages to send at this call boundary: as given, or pruned to fit.

        Args:
            messages: OpenAI chat messages, Responses items or Anthropic messages, mixed freely.
            call_id: Names this call boundary (the checkpoint's file name).
            run_id: The run, for the once-per-run warning.
            keep: Called as ``keep(call_id, body)`` for each tool result about to be pruned;
                makes the body readable with ``read_tool_result`` and returns the id to name in
                the placeholder (None: it could not be kept). ``run.prepare()`` passes the
                ToolResults layer's. Without it, a result that is not an offload notice is
                replaced by a placeholder saying its text is gone, never by a pointer to
                nothing.

        Raises:
            RecoverableContextError: Even pruned, the prompt does not fit; the checkpoint path
                is on the error.
            InvalidInputError: ``messages`` is not a list of messages, a message nests too
                deep (named by its index), or ``call_id`` is not a safe file name (checked only
                when a checkpoint is written).
        """
        return self.evaluate(messages, call_id, run_id=run_id, keep=keep).messages

    def evaluate(
        self,
        messages: Sequence[Message],
        call_id: str,
        *,
        run_id: str | None = None,
        keep: Keeper | None = None,
    ) -> GateDecision:
        """Like :meth:`check_and_compress`, returning what was decided and the estimates."""
        given = _as_message_list(messages)
        if not isinstance(call_id, str):
            raise InvalidInputError(f"call_id must be a string, got {type(call_id).__name__}")
        if run_id is not None and not isinstance(run_id, str):
            raise InvalidInputError(f"run_id must be a str or None, got {type(run_id).__name__}")
        if keep is not None and not callable(keep):
            raise InvalidInputError(f"keep must be callable or None, got {keep!r}")
        if not self.enabled:
            return GateDecision("disabled", given, 0, self.max_input_tokens)
        limit = self.max_input_tokens
        counter = self._exact_gate() if self._near else self
        raw, counts = counter._raw_counts(given)
        if counter is self and 2 * self._pad(raw) >= limit and self._exact_gate() is not self:
            counter = self._exact_gate()
            raw, counts = counter._raw_counts(given)
        # Left below 40% of the window, not at half: a prompt whose estimate and exact count
        # sit on either side of half would otherwise be counted both ways at every call.
        self._near = counter is not self and 5 * self._pad(raw) >= 2 * limit
        estimate = self._pad(raw)
        if estimate < self.soft_warn_at_pct * limit:
            return GateDecision("pass", given, estimate, limit)
        if estimate < self.prune_at_pct * limit:
            self._warn_once(run_id, call_id, estimate)
            return GateDecision("warn", given, estimate, limit)
        pruned, count = self.prune(given, keep=keep)
        after = estimate
        if count:
            after = self._pad(counter._raw_after_prune(given, pruned, counts, raw))
        if after < limit:
            if not count:
                # At the prune line with nothing left to prune, and it fits: a warning.
                self._warn_once(run_id, call_id, estimate)
                return GateDecision("warn", given, estimate, limit)
            logger.info(
                "context gate: call %s at %d/%d tokens; pruned %d tool results to %d",
                call_id,
                estimate,
                limit,
                count,
                after,
            )
            return GateDecision("pruned", pruned, after, limit, count)
        # The checkpoint holds the conversation as it came, before pruning: the audit record
        # of what the task carried.
        path = self.write_checkpoint(given, call_id, after)
        raise RecoverableContextError(
            f"call {call_id} needs ~{after:,} tokens (padded {self.pad_pct:.0%}) after pruning "
            f"{count} tool results; the model accepts {limit:,}. Decompose the task; the "
            f"conversation was checkpointed to {path}",
            checkpoint_path=str(path),
            call_id=call_id,
            estimated_tokens=after,
            max_input_tokens=limit,
        )

    def prune(
        self, messages: Sequence[Message], *, keep: Keeper | None = None
    ) -> tuple[list[Message], int]:
        """Replaces every tool result but the ``keep_recent`` latest by a placeholder, in every
        message format (see :mod:`memstrata.messages`); returns the new list and how many
        results were replaced. Placeholders already there are left alone and not counted.

        A placeholder names a call_id only when the result can be read back: through ``keep``
        (see :meth:`check_and_compress`), or because it is an offload notice whose text is
        stored. Otherwise it says the text is gone.
        """
        given = _as_message_list(messages)
        if keep is not None and not callable(keep):
            raise InvalidInputError(f"keep must be callable or None, got {keep!r}")
        found = tool_results(given)
        bodies: dict[tuple[int, int | None], Any] = {}
        for result in found[: max(len(found) - self.keep_recent, 0)]:
            body = result.body
            if isinstance(body, str) and (body == TOOL_RESULT_GONE or _PLACEHOLDER.match(body)):
                continue
            if keep is not None:
                readable = keep(result.call_id, body)
            else:
                named = _NOTICE_ID.match(body) if isinstance(body, str) else None
                readable = named.group(1) if named is not None else None
            bodies[(result.position, result.block)] = (
                TOOL_RESULT_PRUNED.format(call_id=readable) if readable else TOOL_RESULT_GONE
            )
        return (with_tool_results(given, bodies) if bodies else given), len(bodies)

    def _exact_gate(self) -> ContextGate:
        """What counts a prompt near the window: the gate itself, unless it estimates (with
        the native estimator or a subclass of it, which budgets count exactly alike)."""
        if not isinstance(self.tokens, EstimatingCounter):
            return self
        with self._lock:
            if self._exact is None:
                self._exact = ContextGate(
                    max_input_tokens=self.max_input_tokens,
                    tokens=ExactCounter(self.tokens.encoding),
                    cache=self.cache,
                )
            return self._exact

    def estimate(self, messages: Sequence[Message]) -> int:
        """The padded token estimate of ``messages`` (per-message counts cached)."""
        return self._pad(self._raw_counts(_as_message_list(messages))[0])

    def _pad(self, raw: int) -> int:
        return math.ceil(raw * (1 + self.pad_pct))

    def _raw_counts(self, messages: list[Message]) -> tuple[int, list[int]]:
        """The unpadded total and each message's own tokens.

        The gate keeps a snapshot of the last few lists it checked, with their counts: the
        positions whose content is what it was (:func:`memstrata.messages.compare`, a
        comparison by content run in C, which also finds a window that slid) keep their
        counts, and only the others are counted, through the content-keyed cache
        (:meth:`_keyed_counts`). A list or dict edited in place between two calls is counted
        again.
        """
        if not messages or not self.cache:
            return self._keyed_counts(messages)
        n = len(messages)
        with self._lock:
            kept = self._lists
            previous = next((k for k in kept if _probe(k[0], messages)), None)
        old, old_counts = previous if previous is not None else (EMPTY_SNAPSHOT, [])
        # A window that slid (the conversation trimmed at its start) keeps its counts too.
        snapshot, changed, origin = compare(old, messages)
        if origin is not None:
            # -1 (no origin) reads the 0 put after the last count: one lookup per position, in C.
            old_counts = list(map([*old_counts, 0].__getitem__, origin))
        if previous is not None and not changed:
            counts = old_counts if len(old_counts) == n else old_counts[:n]
        else:
            counts = old_counts[:n]
            counts += [0] * (n - len(counts))
            _, fresh = self._keyed_counts([messages[i] for i in changed], changed)
            for i, tokens in zip(changed, fresh):
                counts[i] = tokens
        with self._lock:
            rest = [k for k in self._lists if k is not previous][: _LISTS_KEPT - 1]
            self._lists = [(snapshot, counts), *rest]
        return sum(counts) + self._priming, counts

    def _keyed_counts(
        self, messages: list[Message], positions: list[int] | None = None
    ) -> tuple[int, list[int]]:
        """Like :meth:`_raw_counts`, each message looked up in the cache by its content (see
        :func:`_content_key`); ``positions`` are the messages' indexes in the caller's list,
        for errors. Computing a key also checks the message (depth, JSON data)."""
        if not messages:
            return 0, []
        indexes = positions if positions is not None else range(len(messages))
        keys = list(map(_content_key, indexes, messages))
        if not self.cache:
            counts = [self._count(m, i) for i, m in zip(indexes, messages)]
            return sum(counts) + self._priming, counts
        entries = self._counts
        with self._lock:
            cached = list(map(entries.get, keys))
        counts = [0] * len(messages)
        for i, (key, entry) in enumerate(zip(keys, cached)):
            if entry is not None:
                counts[i] = entry[0]
                continue
            tokens = counts[i] = self._count(messages[i], indexes[i])
            if key is None:
                continue
            size = _key_size(key)
            with self._lock:
                if key not in entries:
                    entries[key] = (tokens, size)
                    self._counts_chars += size
                while entries and (
                    len(entries) > _CACHE_LIMIT or self._counts_chars > _CACHE_MAX_CHARS
                ):
                    self._counts_chars -= entries.popitem(last=False)[1][1]
        return sum(counts) + self._priming, counts

    def _count(self, message: Message, index: int) -> int:
        try:
            return self.tokens.count_messages([countable(message)]) - self._priming
        except MemstrataError as exc:
            # Counted alone, the message is $[0] to the counter: name its place in the list.
            raise _at_index(exc, index) from None

    def _raw_after_prune(
        self, given: list[Message], pruned: list[Message], counts: list[int], raw: int
    ) -> int:
        """The unpadded total of ``pruned``: ``raw`` minus each replaced message plus its new
        count."""
        changed = [i for i in range(len(given)) if pruned[i] is not given[i]]
        _, new_counts = self._keyed_counts([pruned[i] for i in changed], changed)
        for i, tokens in zip(changed, new_counts):
            raw += tokens - counts[i]
        return raw

    def new_run(self) -> None:
        """Starts a new run for callers that do not pass ``run_id``: the soft warning may fire
        once more."""
        self._default_run += 1

    def _warn_once(self, run_id: str | None, call_id: str, estimate: int) -> None:
        key = run_id if run_id is not None else f"\x00default-{self._default_run}"
        if key in self._warned:
            return
        self._warned[key] = None
        if len(self._warned) > _WARNED_RUNS_KEPT:
            self._warned.popitem(last=False)
        logger.warning(
            "context gate: call %s uses %d of %d input tokens (%.0f%%, soft warning at %.0f%%, "
            "pruning at %.0f%%)",
            call_id,
            estimate,
            self.max_input_tokens,
            100 * estimate / self.max_input_tokens,
            100 * self.soft_warn_at_pct,
            100 * self.prune_at_pct,
            # The same figures as fields of the record, for log pipelines that filter on them
            # (a JSON formatter writes them as keys) rather than parse the message.
            extra={
                "memstrata_event": "context_soft_warning",
                "run_id": run_id,
                "call_id": call_id,
                "input_tokens": estimate,
                "max_input_tokens": self.max_input_tokens,
                "soft_warn_at_pct": self.soft_warn_at_pct,
                "prune_at_pct": self.prune_at_pct,
            },
        )

    # Checkpoints ------------------------------------------------------------------------------

    def write_checkpoint(self, messages: Sequence[Message], call_id: str, estimated: int) -> Path:
        """Writes ``<checkpoints_dir>/<call_id>.json`` (mode 0600) in Modulatio's format, and
        returns its path.

        A checkpoint never replaces another: the call_id is the caller's, and the directory is
        shared by every run of every conversation, so two runs may use the same one (Modulatio
        keeps a directory per run). When the name is taken (by an earlier checkpoint of that
        call_id, or by anything planted there) the file is ``<call_id>~2.json``, then ``~3``,
        and so on: the error the gate raises names the file. Written whole through the
        directory's descriptor (:func:`~memstrata.safe_files.write_new`): a reader sees all of
        it or nothing.

        Raises:
            InvalidInputError: A bad call_id, or the file cannot be written.
        """
        names = (
            file_name(call_id, ".json" if k == 1 else f"~{k}.json")
            for k in range(1, _CHECKPOINTS_PER_CALL_ID + 1)
        )
        if self.checkpoint_redact_secrets:
            redacted, policy = redact_messages(messages)
        else:
            redacted, policy = list(messages), []
        record = {
            "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "call_id": call_id,
            "model": self.model,
            "estimated_tokens": estimated,
            "max_input_tokens": self.max_input_tokens,
            "redaction_policy": policy,
            "redacted": self.checkpoint_redact_secrets,
            "messages": redacted,
        }
        try:
            data = orjson.dumps(record, option=orjson.OPT_INDENT_2)
        except orjson.JSONEncodeError as exc:  # e.g. a lone surrogate in a key: not JSON text
            raise InvalidInputError(
                f"cannot checkpoint call {call_id!r}: the messages are not JSON text ({exc})"
            ) from None
        # Written and fsynced: from an async prepare, in a worker thread.
        name = blocking(_write_checkpoint, self.checkpoints_dir, names, data)
        if name is None:
            last = file_name(call_id, f"~{_CHECKPOINTS_PER_CALL_ID}.json")
            raise InvalidInputError(
                f"cannot checkpoint call {call_id!r}: {self.checkpoints_dir} already holds "
                f"{file_name(call_id, '.json')} to {last}; move old checkpoints out of it"
            )
        return self.checkpoints_dir / name


def _write_checkpoint(directory: Path, names: Iterable[str], data: bytes) -> str | None:
    """Writes ``data`` in ``directory`` under the first of ``names`` nothing is under; its
    name, or None when every one is taken."""
    with open_dir(directory, create=True) as opened:
        return write_new(opened, names, data)


def _at_index(exc: MemstrataError, index: int) -> MemstrataError:
    """``exc`` with the ``$[0]`` of a message counted alone replaced by ``$[index]``."""
    real = f"$[{index}]"
    exc.args = tuple(a.replace("$[0]", real, 1) if isinstance(a, str) else a for a in exc.args)
    path = getattr(exc, "path", None)
    if isinstance(path, str) and path.startswith("$[0]"):
        exc.path = real + path[len("$[0]") :]  # type: ignore[attr-defined]
    return exc


def _as_message_list(messages: Sequence[Message]) -> list[Message]:
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise InvalidInputError(f"messages must be a list of dicts, got {type(messages).__name__}")
    given = messages if isinstance(messages, list) else list(messages)
    if not _all_dicts_with_roles(given) and not all(map(is_message, given)):
        for index, message in enumerate(given):
            if not isinstance(message, dict):
                raise InvalidInputError(
                    f"messages[{index}] must be a dict, got {type(message).__name__}"
                )
            if not is_message(message):
                raise InvalidInputError(
                    f"messages[{index}] has neither a role nor a type: not a chat message, "
                    "a Responses item or an Anthropic message"
                )
    return given


def _all_dicts_with_roles(messages: list[Any]) -> bool:
    """Whether every item is a dict with a role (chat and Anthropic messages), checked in C;
    a list holding anything else (Responses items, mistakes) is checked one item at a time."""
    try:
        return all(map(dict.__contains__, messages, repeat("role")))
    except TypeError:  # an item that is not a dict
        return False


def _content_key(index: int, message: Message) -> Any:
    """What a message's count is cached under: its items when every value is a str or None
    (immutable: equal keys mean equal messages), else its JSON text. None for a message that
    is not JSON data (counted every time).

    Raises:
        InvalidInputError: The message nests deeper than JSON encoding allows (254 levels);
            the index names it. Counting it would recurse without bound.
    """
    if _TEXTS.issuperset(map(type, message.values())):
        return tuple(message.items())
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError as exc:
        if "ecursion" in str(exc):
            raise InvalidInputError(
                f"messages[{index}] nests deeper than 254 levels; flatten its content"
            ) from None
        return None
    except TypeError:
        return None


def _probe(snapshot: Snapshot, messages: list[Message]) -> bool:
    """Whether ``messages`` looks like the list ``snapshot`` was taken of (its first message
    and its last one in common are equal): picks which kept list to compare against. A wrong
    pick costs time, never a wrong count (:func:`compare` compares every position)."""
    tops = snapshot.tops
    last = min(len(tops), len(messages)) - 1
    if last < 0 or tops[0] != messages[0]:
        return False
    # The same list, or the same conversation with its window slid (see compare).
    return tops[last] == messages[last] or tops[-1] in messages[-MAX_SLIDE - 1 :]


def _key_size(key: Any) -> int:
    if isinstance(key, bytes):
        return len(key)
    return sum(len(v) for _, v in key if isinstance(v, str)) + 16


def _priming_tokens(counter: TokenCounter) -> int:
    """The tokens a counter adds once per conversation (3 under OpenAI's convention), measured
    so per-message counts can be cached and summed: ``2 * n([m]) - n([m, m])``."""
    sample = {"role": "user", "content": "x"}
    return max(2 * counter.count_messages([sample]) - counter.count_messages([sample, sample]), 0)
